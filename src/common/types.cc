// The functions declared in include/tpcomm/types.h.
#include "tpcomm/types.h"

#include <cstring>

#include "common/enum_names.h"

namespace tpcomm {

size_t dataTypeSize(DataType t) {
  const int i = static_cast<int>(t);
  return i == 0 ? 4 : i == 1 || i == 2 ? 2 : 0;  // f32; f16, bf16; outside the enum
}

// Names in each enum's value order (include/tpcomm/types.h).
const char* dataTypeName(DataType t) {
  static const char* const kNames[] = {"f32", "f16", "bf16"};
  return enumName(t, kNames, "invalid");
}

const char* reduceOpName(ReduceOp op) {
  static const char* const kNames[] = {"sum", "max", "min"};
  return enumName(op, kNames, "invalid");
}

const char* compressionName(Compression c) {
  static const char* const kNames[] = {"none", "fp8", "int8"};
  return enumName(c, kNames, "invalid");
}

bool parseCompression(const char* text, Compression* out) {
  if (!text) return false;
  Compression c;
  if (std::strcmp(text, "none") == 0)
    c = Compression::kNone;
  else if (std::strcmp(text, "fp8") == 0 || std::strcmp(text, "fp8_e4m3") == 0)
    c = Compression::kFp8;
  else if (std::strcmp(text, "int8") == 0)
    c = Compression::kInt8;
  else
    return false;
  *out = c;
  return true;
}

}  // namespace tpcomm
