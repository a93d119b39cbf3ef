// multicast: one NVSwitch multicast object per communicator (cuMulticastCreate), with one
// physical allocation per rank bound into it. Every rank maps the same memory twice:
//   unicast (UC)   its own allocation, ordinary loads and stores;
//   multicast (MC) the object: multimem.ld_reduce at an offset returns the reduction of that
//                  offset over every rank's allocation (the switch reduces), multimem.st and
//                  multimem.red write every rank's allocation at once.
// twoshot_multicast (src/algos/twoshot_multicast*) is the schedule that runs over it.
//
// UNTESTED ON HARDWARE. The machines this project runs on keep multicast off (a program using
// it can take a shared host's GPUs out of service). It is built and reachable only behind the
// gate of docs/multicast.md, checked three times: Communicator::create agrees the gate on every rank
// before calling create(); create() returns before anything else when Topology::multicastUsable()
// is false; and the environment switches (NCCL_NVLS_ENABLE=0, TPCOMM_MULTICAST=0) are read
// again immediately before each multicast driver call. Driver symbols are resolved at run time
// through cudaGetDriverEntryPoint(ByVersion): libtpcomm does not link libcuda, so it still
// loads on machines without a GPU driver.
//
// Handle sharing (docs/multicast.md): rank 0 creates the object. Threads of one process
// (createGroup) share the handle value directly. Across processes rank 0 exports it as a POSIX
// file descriptor (cuMemExportToShareableHandle) and the others take a duplicate with
// pidfd_open + pidfd_getfd (Linux >= 5.6, and ptrace permission over rank 0: same user, and
// Yama ptrace_scope 0 or a common ancestor); where that is refused, the transport reports
// kNotSupported on every rank and the selector uses the other algorithms.
//
// Layout of every rank's allocation (MulticastLayout; identical on every rank):
//   counters [block] u64  barrier counters, incremented on every rank by multimem.red
//   epochs   [block] u64  barrier rounds done by each block (this rank only, never via MC)
//   data     dataBytes    one chunk of the message: inputs copied in, results stored by MC
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tpcomm/status.h"
#include "transports/transport_env.h"

#ifdef __CUDACC__
#define TPCOMM_MC_HD __host__ __device__
#else
#define TPCOMM_MC_HD
#endif

namespace tpcomm {

struct MulticastDriver;  // the resolved driver functions (multicast.cc)

/// Most ranks one multicast object serves here (an NVSwitch domain of one node).
constexpr int kMaxMulticastRanks = 16;

struct MulticastLayout {
  int maxBlocks = 0;  ///< counter / epoch slots
  size_t countersOffset = 0, epochsOffset = 0, dataOffset = 0;
  size_t dataBytes = 0;   ///< bytes of one chunk (a multiple of 16 * ranks)
  size_t totalBytes = 0;  ///< rounded up to `granularity`

  static MulticastLayout make(int nRanks, int maxBlocks, size_t dataBytes, size_t granularity);
  TPCOMM_MC_HD size_t counterOffset(int block) const { return countersOffset + sizeof(uint64_t) * block; }
  TPCOMM_MC_HD size_t epochOffset(int block) const { return epochsOffset + sizeof(uint64_t) * block; }
};

/// Resolves one CUDA driver symbol by name ("cuMulticastCreate"), nullptr when unavailable.
using MulticastSymbolLoader = void* (*)(const char* symbol);
/// Replaces the resolver (tests link a stub here to prove which paths reach the driver);
/// nullptr restores the default, cudaGetDriverEntryPoint(ByVersion).
void setMulticastSymbolLoader(MulticastSymbolLoader loader);

class MulticastTransport {
 public:
  /// Collective over env.bootstrap, except that it returns kNotSupported at once, touching
  /// neither the driver nor the bootstrap, when env.topo.multicastUsable() is false: callers
  /// must agree the gate on every rank first (Communicator::create does). Any later failure is
  /// agreed inside, so every rank returns the same Status class.
  /// What each rank asks for; rank 0's values are used everywhere.
  struct Sizes {
    int maxBlocks = 0;     ///< barrier counters: the largest grid
    size_t dataBytes = 0;  ///< one chunk of a message
  };
  static Status create(const TransportEnv& env, const Sizes& sizes, std::unique_ptr<MulticastTransport>* out);
  ~MulticastTransport();
  MulticastTransport(const MulticastTransport&) = delete;
  MulticastTransport& operator=(const MulticastTransport&) = delete;

  const MulticastLayout& layout() const { return layout_; }
  int rank() const { return rank_; }
  int nRanks() const { return nRanks_; }
  /// This rank's allocation (unicast view).
  char* unicast() const { return reinterpret_cast<char*>(ucAddr_); }
  /// The multicast view of the same offsets (multimem.* instructions only).
  char* multicast() const { return reinterpret_cast<char*>(mcAddr_); }

 private:
  MulticastTransport() = default;
  MulticastLayout layout_;
  int rank_ = 0, nRanks_ = 1, device_ = -1;
  // Driver handles, kept as plain integers so this header needs no cuda.h.
  uint64_t mcHandle_ = 0, memHandle_ = 0;
  uintptr_t ucAddr_ = 0, mcAddr_ = 0;
  bool haveMc_ = false, haveMem_ = false, bound_ = false, ucMapped_ = false, mcMapped_ = false;
  bool ucReserved_ = false, mcReserved_ = false;
  std::unique_ptr<MulticastDriver> driver_;
  friend struct MulticastSetup;
};

}  // namespace tpcomm
