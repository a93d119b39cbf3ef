/* tpcomm_c.h: tpcomm's C API, NCCL-shaped, for any language (Python's ctypes layer uses it).
 * Opaque handles, plain integer status codes, no C++ types: the ABI stays stable while the C++
 * library changes. Ranks meet through the socket bootstrap (tpcomm/socket_bootstrap.h): one
 * process calls tpcommGetUniqueId and hands the id to every rank, which calls
 * tpcommCommInitRank. Every wait is bounded by TPCOMM_TIMEOUT_MS (or the config's timeoutMs).
 *
 * Thread safety: calls on one communicator must not overlap; distinct communicators may be used
 * from distinct threads. tpcommGetLastError is per thread.
 * Versioning: TPCOMM_C_API_VERSION grows when functions or config fields are added (never
 * removed or reordered); tpcommGetVersion reports the library's. */
#ifndef TPCOMM_TPCOMM_C_H_
#define TPCOMM_TPCOMM_C_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Version of this header's API. The library's: tpcommGetVersion. */
#define TPCOMM_C_API_VERSION 3

/** Status codes (plain ints; the values equal tpcomm::Status's). */
typedef int tpcommResult_t;
#define tpcommSuccess 0
#define tpcommInvalidArgument 1 /**< a caller-supplied argument is wrong; the message names it */
#define tpcommNotSupported 2    /**< e.g. a GPU rank in a host-only build */
#define tpcommCudaError 3
#define tpcommSystemError 4 /**< an OS call failed (socket, shm, ...) */
#define tpcommTimeout 5     /**< a peer did not arrive within the timeout; the message names it */
#define tpcommRemoteError 6 /**< another rank failed, refused us, or went away */
#define tpcommInternalError 7
#define tpcommNumResults 8

/** Element types (values equal tpcomm::DataType's). 16-bit types accumulate in fp32. */
typedef int tpcommDataType_t;
#define tpcommFloat32 0
#define tpcommFloat16 1
#define tpcommBfloat16 2

/** Reduction operators (values equal tpcomm::ReduceOp's). */
typedef int tpcommRedOp_t;
#define tpcommSum 0
#define tpcommMax 1
#define tpcommMin 2

/** A rank's communicator (opaque). */
typedef struct tpcommComm* tpcommComm_t;

/** A CUDA stream (cudaStream_t is the same type); NULL for host ranks. */
typedef struct CUstream_st* tpcommStream_t;

/** Rendezvous id: address, port and random secret. Plain bytes: copy it to the other ranks. */
#define TPCOMM_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[TPCOMM_UNIQUE_ID_BYTES];
} tpcommUniqueId;

/** Communicator settings that can grow without breaking the ABI (as ncclConfig_t): start from
 * TPCOMM_CONFIG_INITIALIZER so size, magic and version are set; the library reads only the
 * fields that a caller's `size` covers whole, and defaults the rest (a size that ends inside a
 * field leaves that field at its default). */
typedef struct {
  size_t size;          /**< sizeof(tpcommConfig_t) of the caller's header */
  unsigned int magic;   /**< TPCOMM_CONFIG_MAGIC */
  unsigned int version; /**< TPCOMM_C_API_VERSION of the caller's header */
  int timeoutMs;        /**< bound on every wait for a peer (ms); 0: TPCOMM_TIMEOUT_MS */
  int useNccl;          /**< GPU ranks: 1 lets tpcomm create an NCCL communicator for ring_nccl; 0: never */
  const char* algo;     /**< selection override, TPCOMM_ALGO's syntax; NULL or "": TPCOMM_ALGO */
  /** Since API version 2. Compressed all-reduce: "none", "fp8" or "int8" (docs/compression.md);
   * NULL or "": TPCOMM_COMPRESSION. Must be the same on every rank. */
  const char* compression;
} tpcommConfig_t;
#define TPCOMM_CONFIG_MAGIC 0x7c0c0f19u
#define TPCOMM_CONFIG_INITIALIZER \
  { sizeof(tpcommConfig_t), TPCOMM_CONFIG_MAGIC, TPCOMM_C_API_VERSION, 0, 1, NULL, NULL }

/** The library's version as major * 10000 + minor * 100 + patch (e.g. 0.1.0 -> 100), and its C
 * API version into *apiVersion when not NULL. */
tpcommResult_t tpcommGetVersion(int* version, int* apiVersion);

/** Makes a new unique id (TPCOMM_SOCKET_IFNAME / TPCOMM_SOCKET_FAMILY choose the address). The
 * process that runs rank 0 must be on this host. */
tpcommResult_t tpcommGetUniqueId(tpcommUniqueId* uniqueId);

/** The same for an explicit numeric address ("127.0.0.1", "::1"), e.g. loopback for one host. */
tpcommResult_t tpcommGetUniqueIdForAddress(tpcommUniqueId* uniqueId, const char* address);

/** Creates rank `rank` of `nranks` (collective over the ranks sharing `uniqueId`). `device`: the
 * CUDA device this rank drives, or -1 for a host rank (host buffers, NULL stream, synchronous
 * calls). On failure *comm is NULL and tpcommGetLastError says why (a timeout names the ranks
 * that did not arrive). */
tpcommResult_t tpcommCommInitRank(tpcommComm_t* comm, int nranks, tpcommUniqueId uniqueId, int rank, int device);

/** tpcommCommInitRank with settings; config NULL: defaults. */
tpcommResult_t tpcommCommInitRankConfig(tpcommComm_t* comm, int nranks, tpcommUniqueId uniqueId, int rank, int device,
                                        const tpcommConfig_t* config);

/** recvbuff[i] = op over ranks of sendbuff[i], i < count; sendbuff == recvbuff is in place.
 * Stream-ordered on GPU ranks, synchronous on host ranks. */
tpcommResult_t tpcommAllReduce(const void* sendbuff, void* recvbuff, size_t count, tpcommDataType_t datatype,
                               tpcommRedOp_t op, tpcommComm_t comm, tpcommStream_t stream);

/** Since API version 3. tpcommAllReduce with this call's compression instead of the
 * communicator's (config->compression): "none", "fp8" or "int8"; NULL or "" means the
 * communicator's. Every rank must pass the same value for the same call (a mismatch fails the
 * call; docs/compression.md). Only bf16/f16/f32 sums are compressed. */
tpcommResult_t tpcommAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count, tpcommDataType_t datatype,
                                         tpcommRedOp_t op, const char* compression, tpcommComm_t comm,
                                         tpcommStream_t stream);

/** A decoder layer's epilogue: x = sum over ranks of `in`; residual += x; out = rmsnorm(residual)
 * * weight, per row (rows x hidden elements, weight: hidden). See Communicator::
 * allReduceResidualRmsNorm in tpcomm/communicator.h for aliasing rules and exactness. */
tpcommResult_t tpcommAllReduceResidualRmsNorm(const void* in, void* residual, const void* weight, float eps, void* out,
                                              size_t rows, size_t hidden, tpcommDataType_t datatype, tpcommComm_t comm,
                                              tpcommStream_t stream);

/** recvbuff[i] = op over ranks of sendbuff[rank * recvcount + i], i < recvcount; sendbuff holds
 * nranks * recvcount elements. */
tpcommResult_t tpcommReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, tpcommDataType_t datatype,
                                   tpcommRedOp_t op, tpcommComm_t comm, tpcommStream_t stream);

/** recvbuff[r * sendcount + i] = sendbuff of rank r [i]; recvbuff holds nranks * sendcount. */
tpcommResult_t tpcommAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, tpcommDataType_t datatype,
                               tpcommComm_t comm, tpcommStream_t stream);

/** Name of the algorithm that ran the last collective ("staged_host", "oneshot_p2p", ...), or
 * "none"; "invalid" for a NULL comm. Valid until the next call on comm. */
const char* tpcommCommLastAlgorithm(tpcommComm_t comm);

/** Rank, size and device of a communicator. */
tpcommResult_t tpcommCommUserRank(tpcommComm_t comm, int* rank);
tpcommResult_t tpcommCommCount(tpcommComm_t comm, int* count);
tpcommResult_t tpcommCommDevice(tpcommComm_t comm, int* device);

/** An asynchronous failure of an earlier collective (GPU ranks: e.g. tpcommTimeout when a peer
 * did not arrive), as ncclCommGetAsyncError. *asyncError is tpcommSuccess when none happened. */
tpcommResult_t tpcommCommGetAsyncError(tpcommComm_t comm, tpcommResult_t* asyncError);

/** Tears the communicator down and frees it (collective: waits, bounded, for the peers so none
 * still reads this rank's buffers). comm must not be used afterwards. NULL: no-op. While another
 * thread is inside a call on comm it is refused (tpcommInvalidArgument) and comm stays valid. */
tpcommResult_t tpcommCommDestroy(tpcommComm_t comm);

/** Frees the communicator without waiting for any peer (local, not collective): for a job whose
 * peers failed or exited. Peers still in a collective with it fail (bounded) instead of
 * hanging. comm must not be used afterwards. NULL: no-op. */
tpcommResult_t tpcommCommAbort(tpcommComm_t comm);

/** Short text for a status code ("tpcommTimeout: a peer did not arrive ..."). Never NULL. */
const char* tpcommGetErrorString(tpcommResult_t result);

/** The message of the last failing tpcomm call on this thread (empty after a success), naming
 * the argument, rank or OS call at fault. comm is accepted for NCCL's shape and may be NULL.
 * Never NULL; valid until the next tpcomm call on this thread. */
const char* tpcommGetLastError(tpcommComm_t comm);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TPCOMM_TPCOMM_C_H_ */
