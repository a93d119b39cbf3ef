// tuning_load.cc: see tuning_load.h.
#include "collectives/tuning_load.h"

#include <cstdio>
#include <vector>

#include "collectives/registry.h"
#include "common/error.h"
#include "common/log.h"
#include "common/params.h"
#include "topology/sysfs_pci.h"
#include "topology/topo_cache.h"
#include "tpcomm/version.h"

namespace tpcomm {

namespace {

// A digest of the table a rank would use (0: none), to compare across ranks.
uint64_t digestOf(const TuningTable* t) {
  if (!t) return 0;
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  };
  mix(t->fingerprint);
  char buf[64];
  for (const TuningRow& r : t->rows) {
    std::snprintf(buf, sizeof(buf), "|%d,%llu", r.dtypeBits, static_cast<unsigned long long>(r.bytes));
    mix(buf);
    for (const auto& [name, us] : r.timesUs) {
      std::snprintf(buf, sizeof(buf), ":%.17g", us);
      mix(name + buf);
    }
  }
  return h | 1;  // never 0
}

}  // namespace

TuningState readTuning(const Topology& topo) {
  TuningState s;
  if (paramInt(ParamId::kTune) == 0) {
    s.state = "off (TPCOMM_TUNE=0): every choice modelled";
    return s;
  }
  const std::string dir = topoCacheDir();
  if (dir.empty()) {
    s.state = "no cache directory (neither XDG_CACHE_HOME nor HOME set): every choice modelled";
    return s;
  }
  s.path = tuningFilePath(dir);
  if (topo.nRanks() < 2) {
    s.state = "not used for one rank";
    return s;
  }
  TuningFile file;
  std::string why;
  Status st =
      loadTuningFile(s.path, TPCOMM_VERSION_STRING, SysfsReader("/").driverVersion(), algorithmNames(), &file, &why);
  if (st == Status::kNotSupported) {
    s.state = "none yet (tpcomm-doctor --tune writes it): every choice modelled";
    return s;
  }
  if (st != Status::kOk) {
    s.warning = why;
  } else {
    const std::string fp = topologyFingerprint(topo);
    const TuningTable* t = file.find(fp);
    if (!t) {
      std::string have;
      for (const TuningTable& x : file.tables)
        have += (have.empty() ? "" : ", ") + x.fingerprint + " (" + std::to_string(x.ranks) + " ranks)";
      s.warning = "stale: no table for this topology (fingerprint " + fp + ", " + std::to_string(topo.nRanks()) +
                  " ranks); it holds " + (have.empty() ? std::string("none") : have);
    } else {
      s.table = std::make_shared<const TuningTable>(*t);
      s.state = "measured: " + std::to_string(t->rows.size()) + " sizes for " + std::to_string(t->ranks) +
                " ranks (fingerprint " + fp + "); the model where no row covers a call";
      return s;
    }
  }
  s.state = "ignored (" + s.warning + "): every choice modelled";
  return s;
}

Status loadTuning(Bootstrap& bs, const Topology& topo, TuningState* out) {
  TuningState s = readTuning(topo);
  const uint64_t mine = digestOf(s.table.get());
  std::vector<uint64_t> all(static_cast<size_t>(bs.size()));
  TPCOMM_TRY(bs.allGather(&mine, all.data(), sizeof(mine)));
  for (uint64_t d : all)
    if (d != mine) {
      s.table.reset();
      s.warning = "ranks read different tuning tables (another node's file, or one rewritten meanwhile)";
      s.state = "ignored (" + s.warning + "): every choice modelled";
      break;
    }
  if (bs.rank() == 0 && !s.warning.empty())
    TPCOMM_WARN(kTune, "tuning file %s ignored: %s; selection uses the cost model (re-run tpcomm-doctor --tune)",
                s.path.c_str(), s.warning.c_str());
  *out = std::move(s);
  return Status::kOk;
}

}  // namespace tpcomm
