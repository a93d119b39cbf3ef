// tpcomm's C API (include/tpcomm/tpcomm_c.h) over the public C++ API only (include/tpcomm/*.h):
// a tpcommComm owns its socket bootstrap and its Communicator. No exception crosses the
// boundary (every entry point catches, e.g. std::bad_alloc -> tpcommInternalError) and every
// failure leaves a message in this thread's last-error text: the C layer's own checks write it
// here, the C++ library's failures are copied from tpcomm::lastErrorMessage().
#include "tpcomm/tpcomm_c.h"

#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "tpcomm/communicator.h"
#include "tpcomm/socket_bootstrap.h"
#include "tpcomm/status.h"
#include "tpcomm/types.h"
#include "tpcomm/version.h"

static_assert(sizeof(tpcommUniqueId) == sizeof(tpcomm::SocketUniqueId), "unique id sizes differ");
static_assert(tpcommTimeout == static_cast<int>(tpcomm::Status::kTimeout), "status values differ");
static_assert(tpcommInternalError == static_cast<int>(tpcomm::Status::kInternal), "status values differ");
static_assert(tpcommBfloat16 == static_cast<int>(tpcomm::DataType::kBF16), "dtype values differ");
static_assert(tpcommMin == static_cast<int>(tpcomm::ReduceOp::kMin), "op values differ");

struct tpcommComm {
  std::unique_ptr<tpcomm::Bootstrap> bootstrap;  // outlives comm (declared first, destroyed last)
  std::unique_ptr<tpcomm::Communicator> comm;
  std::string algo;  // the config's override, owned here
};

namespace {

// Plain array, no destructor: safe to write during exit-time teardown (see src/common/error.cc).
thread_local char tError[2048 + 64];

tpcommResult_t fail(tpcommResult_t r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
tpcommResult_t fail(tpcommResult_t r, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  std::snprintf(tError, sizeof(tError), "%s", msg);
  return r;
}

// The result of a C++ call, with its message copied into this thread's C-API error text.
tpcommResult_t fromCpp(tpcomm::Status s) {
  if (s == tpcomm::Status::kOk) {
    tError[0] = '\0';
    return tpcommSuccess;
  }
  std::snprintf(tError, sizeof(tError), "%s", tpcomm::lastErrorMessage());
  return static_cast<tpcommResult_t>(s);
}

tpcommResult_t internal(const char* where, const char* what) {
  return fail(tpcommInternalError, "%s: unexpected C++ exception: %s", where, what);
}

#define TPCOMM_C_GUARD(where, body)                             \
  try {                                                         \
    body                                                        \
  } catch (const std::bad_alloc&) {                             \
    return fail(tpcommSystemError, "%s: out of memory", where); \
  } catch (const std::exception& e) {                           \
    return internal(where, e.what());                           \
  } catch (...) {                                               \
    return internal(where, "unknown");                          \
  }

tpcommResult_t checkComm(tpcommComm_t comm, const char* where) {
  if (!comm) return fail(tpcommInvalidArgument, "%s: comm is NULL", where);
  if (!comm->comm) return fail(tpcommInvalidArgument, "%s: comm is not initialized", where);
  return tpcommSuccess;
}

tpcommResult_t checkDtype(tpcommDataType_t t, const char* where) {
  if (t < tpcommFloat32 || t > tpcommBfloat16)
    return fail(tpcommInvalidArgument,
                "%s: datatype %d: expected tpcommFloat32 (0), tpcommFloat16 (1) or tpcommBfloat16 (2)", where, t);
  return tpcommSuccess;
}

tpcommResult_t checkOp(tpcommRedOp_t op, const char* where) {
  if (op < tpcommSum || op > tpcommMin)
    return fail(tpcommInvalidArgument, "%s: op %d: expected tpcommSum (0), tpcommMax (1) or tpcommMin (2)", where, op);
  return tpcommSuccess;
}

// The arguments every collective shares: comm, datatype, and *op when the collective has one.
tpcommResult_t checkCall(tpcommComm_t comm, tpcommDataType_t datatype, const tpcommRedOp_t* op, const char* where) {
  if (tpcommResult_t r = checkComm(comm, where)) return r;
  if (tpcommResult_t r = checkDtype(datatype, where)) return r;
  return op ? checkOp(*op, where) : tpcommSuccess;
}

// Rank, size or device of a communicator into *out.
tpcommResult_t queryInt(tpcommComm_t comm, int* out, const char* where, const char* arg,
                        int (tpcomm::Communicator::*get)() const) {
  if (tpcommResult_t r = checkComm(comm, where)) return r;
  if (!out) return fail(tpcommInvalidArgument, "%s: %s is NULL", where, arg);
  *out = (comm->comm.get()->*get)();
  return tpcommSuccess;
}

// Destroy (collective) or abort (local), then free the handle (kept when destroy is refused
// because another thread is inside a call on it). NULL: no-op.
tpcommResult_t tearDown(tpcommComm_t comm, bool abort, const char* where) {
  std::unique_ptr<tpcommComm> owned(comm);
  TPCOMM_C_GUARD(where, {
    tpcommResult_t r = tpcommSuccess;
    if (abort) {
      // Local: the socket bootstrap is abandoned first (every later exchange fails at once and the
      // peers see our connections close, so none waits out its timeout on us), then
      // Communicator::abort() stops this rank's kernels and frees what is local without a peer.
      if (owned) tpcomm::abandonSocketBootstrap(owned->bootstrap.get());
      if (owned && owned->comm) r = fromCpp(owned->comm->abort());
      if (r == tpcommTimeout) {  // another thread's call on it never returned: it may still use the handle
        owned.release();
        return r;
      }
    } else if (owned && owned->comm) {
      r = fromCpp(owned->comm->destroy());
      // Refused while another thread is inside a call on it: that call still uses the handle.
      if (r == tpcommInvalidArgument) {
        owned.release();
        return r;
      }
    }
    if (owned) {
      owned->comm.reset();
      owned->bootstrap.reset();
    }
    if (r == tpcommSuccess) tError[0] = '\0';
    return r;  // the handle is freed either way
  })
}

// Copies the fields of the caller's config that its `size` covers whole; the others keep their
// defaults. A size that ends inside a field (an older or hand-made struct) must not yield half a
// pointer: the caller's bytes there are another field of its layout, or padding.
void takeCoveredFields(const tpcommConfig_t* config, tpcommConfig_t* cfg) {
  const size_t size = config->size;
  const char* from = reinterpret_cast<const char*>(config);
  auto take = [&](size_t offset, void* field, size_t bytes) {
    if (bytes <= size && offset <= size - bytes) std::memcpy(field, from + offset, bytes);
  };
  take(offsetof(tpcommConfig_t, version), &cfg->version, sizeof(cfg->version));
  take(offsetof(tpcommConfig_t, timeoutMs), &cfg->timeoutMs, sizeof(cfg->timeoutMs));
  take(offsetof(tpcommConfig_t, useNccl), &cfg->useNccl, sizeof(cfg->useNccl));
  take(offsetof(tpcommConfig_t, algo), &cfg->algo, sizeof(cfg->algo));
  take(offsetof(tpcommConfig_t, compression), &cfg->compression, sizeof(cfg->compression));
}

}  // namespace

extern "C" {

tpcommResult_t tpcommGetVersion(int* version, int* apiVersion) {
  if (!version) return fail(tpcommInvalidArgument, "tpcommGetVersion: version is NULL");
  *version = TPCOMM_VERSION_MAJOR * 10000 + TPCOMM_VERSION_MINOR * 100 + TPCOMM_VERSION_PATCH;
  if (apiVersion) *apiVersion = TPCOMM_C_API_VERSION;
  tError[0] = '\0';
  return tpcommSuccess;
}

tpcommResult_t tpcommGetUniqueId(tpcommUniqueId* uniqueId) {
  if (!uniqueId) return fail(tpcommInvalidArgument, "tpcommGetUniqueId: uniqueId is NULL");
  TPCOMM_C_GUARD("tpcommGetUniqueId", {
    tpcomm::SocketUniqueId id;
    tpcomm::Status s = tpcomm::makeSocketUniqueId(&id);
    if (s == tpcomm::Status::kOk) std::memcpy(uniqueId->internal, id.bytes, sizeof(id.bytes));
    return fromCpp(s);
  })
}

tpcommResult_t tpcommGetUniqueIdForAddress(tpcommUniqueId* uniqueId, const char* address) {
  if (!uniqueId) return fail(tpcommInvalidArgument, "tpcommGetUniqueIdForAddress: uniqueId is NULL");
  if (!address) return fail(tpcommInvalidArgument, "tpcommGetUniqueIdForAddress: address is NULL");
  TPCOMM_C_GUARD("tpcommGetUniqueIdForAddress", {
    tpcomm::SocketUniqueId id;
    tpcomm::Status s = tpcomm::makeSocketUniqueIdForAddress(address, &id);
    if (s == tpcomm::Status::kOk) std::memcpy(uniqueId->internal, id.bytes, sizeof(id.bytes));
    return fromCpp(s);
  })
}

tpcommResult_t tpcommCommInitRankConfig(tpcommComm_t* comm, int nranks, tpcommUniqueId uniqueId, int rank, int device,
                                        const tpcommConfig_t* config) {
  const char* where = "tpcommCommInitRank";
  if (!comm) return fail(tpcommInvalidArgument, "%s: comm is NULL", where);
  *comm = nullptr;
  if (nranks < 1 || nranks > (1 << 16))
    return fail(tpcommInvalidArgument, "%s: nranks %d: expected 1..65536", where, nranks);
  if (rank < 0 || rank >= nranks)
    return fail(tpcommInvalidArgument, "%s: rank %d out of range [0, %d)", where, rank, nranks);
  if (device < -1)
    return fail(tpcommInvalidArgument, "%s: device %d: expected a CUDA device index >= 0, or -1 for a host rank", where,
                device);
  tpcommConfig_t cfg = TPCOMM_CONFIG_INITIALIZER;
  if (config) {
    // size first: it says whether magic and version are there to read.
    if (config->size < offsetof(tpcommConfig_t, timeoutMs) || config->size > (1u << 16))
      return fail(tpcommInvalidArgument,
                  "%s: config->size %zu: expected the sizeof(tpcommConfig_t) of the caller's header (%zu here; at "
                  "least %zu); start the config from TPCOMM_CONFIG_INITIALIZER",
                  where, config->size, sizeof(tpcommConfig_t), offsetof(tpcommConfig_t, timeoutMs));
    if (config->magic != TPCOMM_CONFIG_MAGIC)
      return fail(tpcommInvalidArgument, "%s: config->magic 0x%x: start the config from TPCOMM_CONFIG_INITIALIZER",
                  where, config->magic);
    takeCoveredFields(config, &cfg);
    if (cfg.timeoutMs < 0)
      return fail(tpcommInvalidArgument, "%s: config->timeoutMs %d: expected >= 0 (0: TPCOMM_TIMEOUT_MS)", where,
                  cfg.timeoutMs);
  }
  tpcomm::Compression compression = tpcomm::Compression::kNone;
  if (cfg.compression && cfg.compression[0] && !tpcomm::parseCompression(cfg.compression, &compression))
    return fail(tpcommInvalidArgument, "%s: config->compression '%s': expected \"none\", \"fp8\" or \"int8\"", where,
                cfg.compression);
  TPCOMM_C_GUARD(where, {
    std::unique_ptr<tpcommComm> c(new tpcommComm());
    tpcomm::SocketUniqueId id;
    std::memcpy(id.bytes, uniqueId.internal, sizeof(id.bytes));
    tpcomm::Status s = tpcomm::makeSocketBootstrap(id, rank, nranks, cfg.timeoutMs, &c->bootstrap);
    if (s != tpcomm::Status::kOk) return fromCpp(s);
    tpcomm::Config cc;
    cc.timeoutMs = cfg.timeoutMs;
    cc.useNccl = cfg.useNccl != 0;
    if (cfg.algo) cc.algo = cfg.algo;
    cc.compression = compression;
    s = tpcomm::Communicator::create(*c->bootstrap, device, cc, &c->comm);
    if (s != tpcomm::Status::kOk) {
      tpcommResult_t r = fromCpp(s);
      // Our peers may still be inside create's exchanges: make them fail now, not at their timeout.
      tpcomm::abandonSocketBootstrap(c->bootstrap.get());
      return r;
    }
    *comm = c.release();
    return fromCpp(s);
  })
}

tpcommResult_t tpcommCommInitRank(tpcommComm_t* comm, int nranks, tpcommUniqueId uniqueId, int rank, int device) {
  return tpcommCommInitRankConfig(comm, nranks, uniqueId, rank, device, nullptr);
}

tpcommResult_t tpcommAllReduce(const void* sendbuff, void* recvbuff, size_t count, tpcommDataType_t datatype,
                               tpcommRedOp_t op, tpcommComm_t comm, tpcommStream_t stream) {
  const char* where = "tpcommAllReduce";
  if (tpcommResult_t r = checkCall(comm, datatype, &op, where)) return r;
  TPCOMM_C_GUARD(where, {
    return fromCpp(comm->comm->allReduce(sendbuff, recvbuff, count, static_cast<tpcomm::DataType>(datatype),
                                         static_cast<tpcomm::ReduceOp>(op), stream));
  })
}

tpcommResult_t tpcommAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count, tpcommDataType_t datatype,
                                         tpcommRedOp_t op, const char* compression, tpcommComm_t comm,
                                         tpcommStream_t stream) {
  const char* where = "tpcommAllReduceCompressed";
  if (!compression || !compression[0]) return tpcommAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
  if (tpcommResult_t r = checkCall(comm, datatype, &op, where)) return r;
  tpcomm::Compression c = tpcomm::Compression::kNone;
  if (!tpcomm::parseCompression(compression, &c))
    return fail(tpcommInvalidArgument, "%s: compression '%s': expected \"none\", \"fp8\" or \"int8\" (or NULL)", where,
                compression);
  TPCOMM_C_GUARD(where, {
    return fromCpp(comm->comm->allReduce(sendbuff, recvbuff, count, static_cast<tpcomm::DataType>(datatype),
                                         static_cast<tpcomm::ReduceOp>(op), stream, c));
  })
}

tpcommResult_t tpcommAllReduceResidualRmsNorm(const void* in, void* residual, const void* weight, float eps, void* out,
                                              size_t rows, size_t hidden, tpcommDataType_t datatype, tpcommComm_t comm,
                                              tpcommStream_t stream) {
  const char* where = "tpcommAllReduceResidualRmsNorm";
  if (tpcommResult_t r = checkCall(comm, datatype, nullptr, where)) return r;
  TPCOMM_C_GUARD(where, {
    return fromCpp(comm->comm->allReduceResidualRmsNorm(in, residual, weight, eps, out, rows, hidden,
                                                        static_cast<tpcomm::DataType>(datatype), stream));
  })
}

tpcommResult_t tpcommReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, tpcommDataType_t datatype,
                                   tpcommRedOp_t op, tpcommComm_t comm, tpcommStream_t stream) {
  const char* where = "tpcommReduceScatter";
  if (tpcommResult_t r = checkCall(comm, datatype, &op, where)) return r;
  TPCOMM_C_GUARD(where, {
    return fromCpp(comm->comm->reduceScatter(sendbuff, recvbuff, recvcount, static_cast<tpcomm::DataType>(datatype),
                                             static_cast<tpcomm::ReduceOp>(op), stream));
  })
}

tpcommResult_t tpcommAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, tpcommDataType_t datatype,
                               tpcommComm_t comm, tpcommStream_t stream) {
  const char* where = "tpcommAllGather";
  if (tpcommResult_t r = checkCall(comm, datatype, nullptr, where)) return r;
  TPCOMM_C_GUARD(where, {
    return fromCpp(
        comm->comm->allGather(sendbuff, recvbuff, sendcount, static_cast<tpcomm::DataType>(datatype), stream));
  })
}

const char* tpcommCommLastAlgorithm(tpcommComm_t comm) {
  if (!comm || !comm->comm) return "invalid";
  return comm->comm->lastAlgorithm();
}

tpcommResult_t tpcommCommUserRank(tpcommComm_t comm, int* rank) {
  return queryInt(comm, rank, "tpcommCommUserRank", "rank", &tpcomm::Communicator::rank);
}

tpcommResult_t tpcommCommCount(tpcommComm_t comm, int* count) {
  return queryInt(comm, count, "tpcommCommCount", "count", &tpcomm::Communicator::size);
}

tpcommResult_t tpcommCommDevice(tpcommComm_t comm, int* device) {
  return queryInt(comm, device, "tpcommCommDevice", "device", &tpcomm::Communicator::device);
}

tpcommResult_t tpcommCommGetAsyncError(tpcommComm_t comm, tpcommResult_t* asyncError) {
  if (tpcommResult_t r = checkComm(comm, "tpcommCommGetAsyncError")) return r;
  if (!asyncError) return fail(tpcommInvalidArgument, "tpcommCommGetAsyncError: asyncError is NULL");
  TPCOMM_C_GUARD("tpcommCommGetAsyncError", {
    tpcomm::Status s = comm->comm->checkError();
    *asyncError = fromCpp(s);  // the message of the failure stays readable via tpcommGetLastError
    return tpcommSuccess;
  })
}

tpcommResult_t tpcommCommDestroy(tpcommComm_t comm) { return tearDown(comm, false, "tpcommCommDestroy"); }

tpcommResult_t tpcommCommAbort(tpcommComm_t comm) { return tearDown(comm, true, "tpcommCommAbort"); }

const char* tpcommGetErrorString(tpcommResult_t result) {
  switch (result) {
    case tpcommSuccess:
      return "tpcommSuccess: no error";
    case tpcommInvalidArgument:
      return "tpcommInvalidArgument: invalid argument";
    case tpcommNotSupported:
      return "tpcommNotSupported: not supported by this build or setup";
    case tpcommCudaError:
      return "tpcommCudaError: a CUDA call failed";
    case tpcommSystemError:
      return "tpcommSystemError: a system call failed";
    case tpcommTimeout:
      return "tpcommTimeout: a peer did not arrive within the timeout";
    case tpcommRemoteError:
      return "tpcommRemoteError: another rank failed or went away";
    case tpcommInternalError:
      return "tpcommInternalError: internal error (please report it)";
    default:
      return "unknown tpcomm result code";
  }
}

const char* tpcommGetLastError(tpcommComm_t /*comm*/) { return tError; }

}  // extern "C"
