#include "common/error.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

#include "tpcomm/types.h"

namespace tpcomm {
namespace {
thread_local std::string tLastError;
}

Status setError(Status s, const char* file, int line, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  tLastError = std::string(statusName(s)) + ": " + msg;
  if (s != Status::kNotSupported) {
    if (logEnabled(LogLevel::kWarn, kAllSubsys))
      logMessage(LogLevel::kWarn, kAllSubsys, file, line, "%s", tLastError.c_str());
  } else if (logEnabled(LogLevel::kTrace, kColl)) {
    logMessage(LogLevel::kTrace, kColl, file, line, "%s", tLastError.c_str());
  }
  return s;
}

void clearError() { tLastError.clear(); }

const char* lastErrorMessage() { return tLastError.c_str(); }

const char* statusName(Status s) {
  switch (s) {
    case Status::kOk:
      return "kOk";
    case Status::kInvalidArgument:
      return "kInvalidArgument";
    case Status::kNotSupported:
      return "kNotSupported";
    case Status::kCudaError:
      return "kCudaError";
    case Status::kSystemError:
      return "kSystemError";
    case Status::kTimeout:
      return "kTimeout";
    case Status::kRemoteError:
      return "kRemoteError";
    case Status::kInternal:
      return "kInternal";
  }
  return "kUnknownStatus";
}

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
