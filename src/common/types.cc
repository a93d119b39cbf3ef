// The functions declared in include/tpcomm/types.h.
#include "tpcomm/types.h"

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

}  // namespace tpcomm
