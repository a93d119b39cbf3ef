// tuning_file.h: measured all-reduce times, written by `tpcomm-doctor --tune` and read at
// Communicator::create (tuning_load.h), so the selector orders candidates by what this machine
// measured rather than by the cost model (docs/selection.md, "Measured choices").
//
// One JSON file per user beside the topology cache: <topoCacheDir()>/tune.json. The file is
// keyed by the tpcomm version and the NVIDIA driver that measured it (both change speeds); each
// table inside by the fingerprint of the ranks it measured (topologyFingerprint). The file is
// untrusted input: size-capped, every field type- and range-checked, unknown algorithm names,
// non-positive or non-finite times and duplicate rows refuse the whole file (never half of it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "algos/common/coll_args.h"
#include "topology/topology.h"
#include "tpcomm/status.h"

namespace tpcomm {

/// One measured message size: per algorithm, the median time of a warm eager all-reduce (sum).
struct TuningRow {
  int dtypeBits = 16;                                   ///< 16: f16 and bf16 (measured in bf16); 32: f32
  uint64_t bytes = 0;                                   ///< message size measured
  std::vector<std::pair<std::string, double>> timesUs;  ///< algorithm name -> microseconds

  /// The time of `algo`, or a negative value when it was not measured at this size.
  double timeOf(const std::string& algo) const;
};

/// The rows measured on one topology (one rank count, one set of GPUs and links).
struct TuningTable {
  std::string fingerprint;  ///< topologyFingerprint() of the ranks measured
  int ranks = 0;
  bool hostRanks = false;
  std::vector<TuningRow> rows;

  /// The row a call of `bytes` of `dtype` uses: the same dtype class, the measured size nearest
  /// on a log scale (a tie goes to the smaller), and only within a factor of 2 of the smallest
  /// and largest size measured. null: no row covers it (the cost model decides).
  const TuningRow* rowFor(DataType dtype, uint64_t bytes) const;
  /// The measured time of `algo` for `q`, or a negative value. Only eager all-reduces were
  /// measured: a capturing call or another collective gets no time (the model decides).
  double measuredUs(const AlgoQuery& q, const std::string& algo) const;
};

struct TuningFile {
  static constexpr int kFormatVersion = 1;
  std::string tpcommVersion;  ///< TPCOMM_VERSION_STRING of the doctor that measured
  std::string driver;         ///< NVIDIA kernel module version ("" without a driver)
  std::string created;        ///< when (informational)
  std::vector<TuningTable> tables;

  /// The table of `fingerprint`, or null.
  const TuningTable* find(const std::string& fingerprint) const;
  std::string toJson() const;
  /// Parses toJson's format. Every algorithm name must be in `knownAlgos`. kInvalidArgument
  /// naming the field or row on anything else (never an exception).
  static Status fromJson(const std::string& text, const std::vector<std::string>& knownAlgos, TuningFile* out);
};

/// Limits on what a tuning file may hold: far above a full sweep (28 sizes x 2 dtype classes x
/// a few rank counts), far below what could cost a create noticeable time or memory.
constexpr size_t kTuningFileMaxBytes = 4u << 20;
constexpr size_t kTuningMaxTables = 64;
constexpr size_t kTuningMaxRows = 1024;
constexpr double kTuningMaxUs = 1e9;

/// <dir>/tune.json.
std::string tuningFilePath(const std::string& cacheDir);

/// 16 hex digits naming a communicator's topology: rank count, each rank's GPU (UUID, name,
/// compute capability, SMs) or "host", and every pair's link kind, NVLink count and P2P
/// verification. Not the process layout (threads or processes run the same paths) nor the bus
/// ids (a UUID names the GPU). Every rank computes the same value from the agreed topology.
std::string topologyFingerprint(const Topology& topo);

/// Reads `path` (regular files of at most kTuningFileMaxBytes, opened non-blocking) and checks
/// its keys against `tpcommVersion` and `driver`. kOk: `out` is usable. kNotSupported: no file.
/// kInvalidArgument: unusable; `why` says why (truncated, wrong types, unknown algorithm, stale
/// version or driver, ...).
Status loadTuningFile(const std::string& path, const std::string& tpcommVersion, const std::string& driver,
                      const std::vector<std::string>& knownAlgos, TuningFile* out, std::string* why);

/// Writes atomically (a private temp file, then rename), creating the directory (mode 0700).
Status storeTuningFile(const std::string& path, const TuningFile& file);

}  // namespace tpcomm
