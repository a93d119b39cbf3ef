// diagnose.h: turns probed facts (machine_probe.h) into decisions and words. Which link kind a
// pair gets (NVLink count from NVML, NVSwitch when the links end in a switch, PCIe P2P only when
// the data check passed, otherwise PCIe = host-staged), and, for a pair that is not usable, the
// cause and the remedy: "P2P 0->1 corrupts data: IOMMU in translated mode; boot with iommu=pt or
// disable ACS on bridge 0000:00:01.0 (setpci -s 0000:00:01.0 ECAP_ACS+0x6.w=0000)". Pure.
#pragma once

#include <string>
#include <vector>

#include "topology/machine_probe.h"
#include "topology/topology.h"

namespace tpcomm {

/// The link a -> b as the selector should see it (one direction; probe.cc symmetrizes).
PeerLink decideLink(const MachineProbe& m, int a, int b);

/// Empty when P2P a -> b is verified and usable; otherwise one line saying what is wrong, why,
/// and what to do, naming GPUs by `labelA`/`labelB` (default: their probe indices).
std::string pairProblem(const MachineProbe& m, int a, int b, int labelA = -1, int labelB = -1);

/// The likely cause(s) of a failed P2P check between a and b and the remedies: "IOMMU in
/// translated mode; boot with iommu=pt or disable ACS on bridge ... (setpci ...)".
std::string p2pCauseAndRemedy(const MachineProbe& m, int a, int b);

/// A pair whose check ran and failed, or a check process that failed: tpcomm-doctor exits
/// non-zero when this is true for any pair.
bool pairBroken(const MachineProbe& m, int a, int b);

/// "supported by the device, disabled by NCCL_NVLS_ENABLE=0", "not supported by the device", ...
std::string multicastLine(bool deviceSupports);

/// The Topology of a one-process communicator over the probe's GPUs `gpus` (all when empty),
/// in that order: what Communicator::createGroup would see. Env gates are read live.
Topology machineTopology(const MachineProbe& m, const std::vector<int>& gpus = {});

/// nvidia-smi topo -m style cell for a -> b: "X", "NV18", "NVS4", "PIX", "SYS", ... plus
/// " ok" / " BAD" / " -" for the data check.
std::string linkCell(const MachineProbe& m, int a, int b);

}  // namespace tpcomm
