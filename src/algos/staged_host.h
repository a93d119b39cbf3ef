// staged_host: every collective through host memory (the host_staged transport). The path for
// GPUs without P2P and for CPU ranks.
//
// Host ranks, threads of one process: zero-copy. Ranks swap (send, recv) pointers (one
// barrier), rank r reduces slice r of every rank's send buffer (rank order 0..n-1, fp32
// accumulation) and stores it into slice r of every rank's recv, then a barrier. Per rank and
// message byte: one read, one write, the least possible; two barriers per call.
// Host ranks, separate processes: recv buffers are private, so results travel through the
// shared segment. A three-stage pipeline over chunks with one barrier per round: copy in the
// slices the peers reduce, reduce my slice (my own input read in place) into recv and the
// shared result, copy the peers' slices out of the shared result (allReduceProcesses in the
// .cc explains why one barrier per round is enough).
// Outputs of 8 MiB and more are written with non-temporal stores (no read-for-ownership).
// GPU ranks: one kernel per call (staged_host_kernel.cu), no host thread involved; see there.
#pragma once

#include <cstdint>

#include "collectives/algorithm.h"

namespace tpcomm {

class HostStagedTransport;

class StagedHostAlgorithm : public Algorithm {
 public:
  explicit StagedHostAlgorithm(CommContext* ctx) : ctx_(ctx) {}
  const char* name() const override { return "staged_host"; }
  bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const override;
  double costUs(const Topology& topo, const AlgoQuery& q) const override;
  Status run(const CollArgs& args) override;
  bool available() const override;

 private:
  Status runHostThreads(const CollArgs& a);
  Status runHostProcesses(const CollArgs& a);
  Status runDevice(const CollArgs& a);
  CommContext* ctx_;
};

/// Parameters of one GPU staged all-reduce (staged_host_kernel.cu).
struct StagedDeviceLaunch {
  const void* send;
  void* recv;
  size_t count;
  int dtype;  // DataType
  int op;     // ReduceOp
  int rank, nRanks;
  char* slots;  // rank 0's slot 0; rank r slot s at slots + (r*nSlots + s)*chunkBytes
  int nSlots;
  size_t chunkBytes;
  int blocks;           // per role
  uint64_t* ready;      // [rank][slot][block]
  uint64_t* consumed;   // [rank][slot][block]
  uint64_t seqBase;     // chunk c has sequence seqBase + c + 1
  uint32_t* errorWord;  // device view of the communicator's async error word
  uint64_t timeoutNs;
};
/// Enqueues the kernel on `stream` (defined only in CUDA builds).
Status launchStagedDevice(const StagedDeviceLaunch& p, cudaStream_t stream);
/// Loads every variant of the staged kernel into the current device's context (dev::preload).
Status preloadStagedDeviceKernels();

}  // namespace tpcomm
