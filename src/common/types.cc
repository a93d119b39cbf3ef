// The functions declared in include/tpcomm/types.h.
#include "tpcomm/types.h"

#include <cstring>

namespace tpcomm {

size_t dataTypeSize(DataType t) {
  switch (t) {
    case DataType::kF32:
      return 4;
    case DataType::kF16:
      return 2;
    case DataType::kBF16:
      return 2;
  }
  return 0;
}

const char* dataTypeName(DataType t) {
  switch (t) {
    case DataType::kF32:
      return "f32";
    case DataType::kF16:
      return "f16";
    case DataType::kBF16:
      return "bf16";
  }
  return "invalid";
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "invalid";
}

const char* compressionName(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kFp8:
      return "fp8";
    case Compression::kInt8:
      return "int8";
  }
  return "invalid";
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
