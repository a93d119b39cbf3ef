/* fake_nccl.h: what a test reads from libfake_nccl.so.2, the NCCL test double (docs/shim.md, "The
 * NCCL test double"). The double exports the NCCL functions the shim and tpcomm's NCCL transport
 * resolve, with the ABI of the <nccl.h> tpcomm builds against, and these few of its own:
 *   - a call log: every NCCL call that does something (inits, splits, teardown, groups,
 *     collectives) with its arguments, the communicator's rank and size, and its result, in call
 *     order; also appended, one line per call, to the file named by FAKE_NCCL_LOG;
 *   - error injection: the next calls of one function fail with a given result, doing nothing;
 *   - an asynchronous error for ncclCommGetAsyncError to report on one communicator.
 * Communicators are ranks of one "world", a shared-memory segment named by the unique id, so ranks
 * may be threads of one process or processes of one host, any number of them on one device or on
 * the host. Collectives are computed on the host, in rank order, synchronously.
 */
#ifndef TPCOMM_TESTS_SHIM_FAKE_NCCL_H_
#define TPCOMM_TESTS_SHIM_FAKE_NCCL_H_

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** One call the double received. Fields a call does not have are -1 (ints) or 0 (the rest). */
typedef struct fakeNcclCall {
  uint64_t seq;      /**< order of the call in this process, from 1 */
  char fn[32];       /**< "ncclAllReduce", "ncclCommInitRank", ... */
  ncclComm_t comm;   /**< the communicator the call was made on (inits, splits: the new one) */
  uint64_t world;    /**< the same on every rank of one communicator (a hash of its unique id) */
  int rank, nranks;  /**< of `comm` */
  int device;        /**< of `comm`: the CUDA device, or what it was given on the host */
  size_t count;      /**< as the call took it (reduce-scatter: recvcount, all-gather: sendcount) */
  int dtype, op;     /**< ncclDataType_t, ncclRedOp_t */
  int root;          /**< broadcast, reduce */
  int color, key;    /**< ncclCommSplit */
  ncclComm_t parent; /**< ncclCommSplit: the communicator it split */
  int blocking;      /**< inits and splits: the config's blocking flag (1 without a config) */
  const void* sendbuff;
  void* recvbuff;
  cudaStream_t stream;
  int inGroup; /**< made between ncclGroupStart and the outermost ncclGroupEnd */
  ncclResult_t result;
} fakeNcclCall;

/** 1: this is the double (a test asserts it talks to the double, not to a real NCCL). */
int fakeNcclIsFake(void);
/** 1 when collectives run on host memory only (no CUDA device is visible to the double). */
int fakeNcclHostOnly(void);

/** Calls logged in this process so far. */
size_t fakeNcclLogCount(void);
/** Copies entry `index` (0-based) to `out`: 0, or -1 when there is none. */
int fakeNcclLogGet(size_t index, fakeNcclCall* out);
/** Forgets the entries (the sequence numbers go on). */
void fakeNcclLogClear(void);

/** The next `times` calls of `fn` (e.g. "ncclAllReduce"), on any communicator, from any thread,
 * return `result` at once without doing anything; they are logged with that result. times 0
 * cancels. */
void fakeNcclInjectError(const char* fn, ncclResult_t result, int times);
/** ncclCommGetAsyncError reports `result` on `comm` from now on (ncclSuccess clears it).
 * ncclInvalidArgument when `comm` is not a live communicator of the double. */
ncclResult_t fakeNcclSetAsyncError(ncclComm_t comm, ncclResult_t result);

#ifdef __cplusplus
}

#include <vector>

/** The entries logged from index `from` on. */
inline std::vector<fakeNcclCall> fakeNcclLogSince(size_t from) {
  std::vector<fakeNcclCall> out;
  fakeNcclCall c;
  for (size_t i = from; fakeNcclLogGet(i, &c) == 0; ++i) out.push_back(c);
  return out;
}
#endif

#endif /* TPCOMM_TESTS_SHIM_FAKE_NCCL_H_ */
