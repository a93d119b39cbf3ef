// Alpha-beta constants of the P2P algorithms, per link kind. The NVLink row is calibrated on
// 2x H200 NV18 (bench/results/h200x2.md); the PCIe row is an estimate until measured on such a
// machine. alpha: the fixed cost of a call beyond the kernel launch the caller pays anyway
// (barrier round trips, polling); GBps: sustained rate of the bytes each rank pushes.
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
  if (k == LinkKind::kNvlink || k == LinkKind::kNvswitch) return {3.0, 200.0, 4.5, 300.0, 7.0, 380.0};
  return {6.0, 12.0, 8.0, 20.0, 12.0, 22.0};  // PCIe P2P
}

}  // namespace tpcomm
