// json_limits.h: bounds checked on untrusted JSON text (config.json, safetensors headers, the
// sharded index) before it is parsed: its size and its nesting depth. nlohmann::json parses
// deep input iteratively, but dump() and other recursive walks of a 100000-deep value overflow
// the stack; a model file never nests more than a few levels. Error messages name the limit,
// never echo the input.
#pragma once

#include <cstddef>
#include <string>

namespace qwen {

/// True when text [b, e) is at most maxBytes long and no '[' / '{' outside a string nests deeper
/// than maxDepth; else false with the reason in *why.
inline bool jsonWithinLimits(const char* b, const char* e, size_t maxBytes, int maxDepth, std::string* why) {
  const size_t n = static_cast<size_t>(e - b);
  if (n > maxBytes) {
    *why = std::to_string(n) + " bytes of JSON exceed the limit of " + std::to_string(maxBytes);
    return false;
  }
  int depth = 0;
  bool inString = false;
  for (const char* p = b; p < e; ++p) {
    const char ch = *p;
    if (inString) {
      if (ch == '\\')
        ++p;  // skip the escaped character
      else if (ch == '"')
        inString = false;
    } else if (ch == '"') {
      inString = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > maxDepth) {
        *why = "JSON nested deeper than " + std::to_string(maxDepth) + " levels";
        return false;
      }
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return true;
}

/// Limits for config.json (Hugging Face configs are a few KB, a few levels deep).
constexpr size_t kMaxConfigJsonBytes = 1u << 20;
constexpr int kMaxConfigJsonDepth = 32;
/// Limits for a safetensors header (tensor entries nest 3 levels) and the sharded index.
constexpr int kMaxSafetensorsJsonDepth = 16;
constexpr size_t kMaxIndexJsonBytes = 64u << 20;

}  // namespace qwen
