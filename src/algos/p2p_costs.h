// Alpha-beta constants of the P2P algorithms, per link kind. The NVLink row is fitted to
// allreduce_perf on 2x H200 NV18, bf16, CUDA graphs (bench/results/h200x2.md): alpha is the
// per-call time at tiny sizes, GBps the rate of the bytes each rank pushes ((n-1) x message for
// the one-shots, 2(n-1)/n x message for two-shot). The PCIe row is an estimate until measured.
#pragma once

#include "topology/topology.h"

namespace tpcomm {

struct P2pCostModel {
  double lamportAlphaUs, lamportGBps;
  double oneshotAlphaUs, pushGBps;
  double twoshotAlphaUs, twoshotGBps;
};

inline P2pCostModel p2pCostModel(const Topology& topo) {
  LinkKind k = topo.weakestLink();
  if (k == LinkKind::kNvlink || k == LinkKind::kNvswitch) return {2.7, 250.0, 5.6, 205.0, 13.0, 320.0};
  return {6.0, 12.0, 8.0, 20.0, 12.0, 22.0};  // PCIe P2P
}

}  // namespace tpcomm
