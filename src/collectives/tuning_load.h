// tuning_load.h: which measured table (tuning_file.h) a communicator's selector uses, decided
// at create and agreed over every rank: ranks that ordered candidates differently would run
// different algorithms and wait for each other until the timeout.
#pragma once

#include <memory>
#include <string>

#include "collectives/tuning_file.h"
#include "tpcomm/bootstrap.h"

namespace tpcomm {

/// What a communicator (or the doctor) takes from the tuning file, and why.
struct TuningState {
  std::shared_ptr<const TuningTable> table;  ///< null: every choice is modelled
  std::string path;                          ///< the tuning file ("" without a cache directory)
  std::string state;                         ///< one line for the INFO table and the doctor
  std::string warning;                       ///< why a file that exists is ignored ("" if not)
};

/// This process's view, no peers: TPCOMM_TUNE, the file at tuningFilePath(topoCacheDir()), its
/// keys (tpcomm version, NVIDIA driver) and the table of topologyFingerprint(topo). Logs nothing.
TuningState readTuning(const Topology& topo);

/// readTuning on every rank, then agreed: when ranks hold different tables (another node's
/// file, a file rewritten between two reads), every rank drops its table. Rank 0 logs one WARN
/// naming the file and why, when a file exists but is ignored. Collective over `bs`.
Status loadTuning(Bootstrap& bs, const Topology& topo, TuningState* out);

}  // namespace tpcomm
