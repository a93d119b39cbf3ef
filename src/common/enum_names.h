// enum_names.h: an enum value's name from one table in value order, and a stated name for a
// value outside it (an enum cast from a caller's integer).
#pragma once

#include <cstddef>
#include <cstring>

namespace tpcomm {

template <typename E, size_t N>
const char* enumName(E value, const char* const (&names)[N], const char* otherwise) {
  const long long i = static_cast<long long>(value);
  return i >= 0 && static_cast<size_t>(i) < N ? names[i] : otherwise;
}

/// The value named `text` in `names`; false (out untouched) for any other text.
template <typename E, size_t N>
bool enumFromName(const char* text, const char* const (&names)[N], E* out) {
  for (size_t i = 0; i < N; ++i)
    if (std::strcmp(text, names[i]) == 0) {
      *out = static_cast<E>(i);
      return true;
    }
  return false;
}

}  // namespace tpcomm
