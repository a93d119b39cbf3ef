// twoshot_multicast: all-reduce as reduce-scatter then all-gather through an NVSwitch multicast
// object (TensorRT-LLM's MultiShot with NVLS; NCCL's NVLS algorithm, RSxLD_AGxST done by the
// switch: multimem.ld_reduce then multimem.st). Kernel and memory ordering:
// twoshot_multicast_kernel.cu; transport and gate: transports/multicast.h.
//
// UNTESTED ON HARDWARE: no machine this project runs on may enable multicast. supports() is
// false unless Topology::multicastUsable() (so the selector never offers it with the gate
// closed), run() re-reads the environment switches, and the transport exists only where every
// rank's gate was open at creation. Cost constants are estimates, not measurements.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/algorithm.h"
#include "tpcomm/types.h"
#include "transports/multicast.h"

namespace tpcomm {

/// Whether multimem.ld_reduce can reduce this type with this op: add for f32/f16/bf16 (16-bit
/// types accumulated in fp32 by .acc::f32); max/min for f16/bf16 only (PTX has no f32 max/min).
bool multicastReducible(DataType dtype, ReduceOp op);

struct MulticastLaunch {
  const void* send;
  void* recv;
  size_t count;
  int dtype;  // DataType
  int op;     // ReduceOp
  int rank, nRanks;
  int blocks;
  char* uc;  // this rank's allocation (unicast view)
  char* mc;  // the multicast view of the same offsets
  MulticastLayout layout;
  uint32_t* errorWord;
  uint64_t timeoutNs;
};

/// Blocks for a call of `count` elements of `elemBytes` (the same on every rank).
int multicastBlocks(size_t count, size_t elemBytes, int nRanks, const MulticastLayout& l, int maxBlocks);
/// Launches the kernel (twoshot_multicast_kernel.cu); kNotSupported for an op multimem cannot
/// reduce or a GPU older than sm_90.
Status launchTwoshotMulticast(const MulticastLaunch& p, cudaStream_t stream);
/// Loads every instantiation launchTwoshotMulticast can pick into the current device's context
/// (dev::preload in p2p_common.cuh: lazy loading may wait for the device to go idle at a first launch).
Status preloadTwoshotMulticastKernels();

class TwoshotMulticastAlgorithm : public Algorithm {
 public:
  explicit TwoshotMulticastAlgorithm(CommContext* ctx);
  const char* name() const override { return "twoshot_multicast"; }
  bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const override;
  double costUs(const Topology& topo, const AlgoQuery& q) const override;
  Status run(const CollArgs& args) override;
  bool available() const override;

 private:
  CommContext* ctx_;
  int maxBlocks_;
};

}  // namespace tpcomm
