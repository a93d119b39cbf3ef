// doctor_report.cc: see doctor_report.h. Decisions come from src/topology/diagnose.h and the
// real selector (makeAlgorithms(nullptr) + describeSelection), so the doctor shows what a
// communicator over these GPUs would do, not a second opinion.
#include "doctor_report.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "collectives/algo_override.h"
#include "collectives/cost_model.h"
#include "collectives/registry.h"
#include "collectives/selector.h"
#include "collectives/tuning_load.h"
#include "common/params.h"
#include "topology/diagnose.h"
#include "tpcomm/version.h"

namespace tpcomm {
namespace {

void add(std::string* out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void add(std::string* out, const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  *out += buf;
}

std::string versionText(int v) {
  if (v <= 0) return "?";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// Why the probe found no GPU, in a user's words: a missing driver is the usual case on a machine
// without a GPU, and CUDA's own text for it ("CUDA driver version is insufficient for CUDA
// runtime version") reads like a version problem.
std::string noGpuReason(const MachineProbe& m) {
  if (m.gpuError.find("without CUDA") != std::string::npos) return m.gpuError;
  if (m.cudaDriverApi <= 0 && m.driverVersion.empty())
    return "no NVIDIA GPU or driver found (libcuda.so.1 could not be loaded; CUDA said: " +
           (m.gpuError.empty() ? std::string("no devices") : m.gpuError) + ")";
  if (m.cudaDriverApi > 0 && m.cudaRuntime > m.cudaDriverApi)
    return "the NVIDIA driver (CUDA " + versionText(m.cudaDriverApi) + ") is older than this build's CUDA runtime (" +
           versionText(m.cudaRuntime) + "): update the driver; CUDA said: " + m.gpuError;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return "an NVIDIA driver is present but no GPU is visible to this process" +
         (visible ? " (CUDA_VISIBLE_DEVICES='" + std::string(visible) + "')" : std::string()) +
         (m.gpuError.empty() ? std::string() : "; CUDA said: " + m.gpuError);
}

const char* kExternalEnv[] = {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
                              "CUDA_VISIBLE_DEVICES", "NCCL_P2P_DISABLE"};

}  // namespace

namespace {

// What is wrong with TPCOMM_ALGO ("" when it parses), parsing it once into *ovr.
std::string algoProblem(AlgoOverride* ovr) {
  return parseAlgoOverride(paramString(ParamId::kAlgo), algorithmNames(), ovr) == Status::kOk ? "" : lastErrorMessage();
}

// Every parameter's problem ("" when accepted), in table order.
std::vector<std::string> problemsByParam(const std::string& algoWhy) {
  std::vector<std::string> out;
  for (int id = 0; id < static_cast<int>(ParamId::kCount); ++id)
    out.push_back(static_cast<ParamId>(id) == ParamId::kAlgo ? algoWhy : paramProblem(static_cast<ParamId>(id)));
  return out;
}

}  // namespace

std::vector<std::string> rejectedValues() {
  AlgoOverride ovr;
  std::vector<std::string> out;
  for (const std::string& why : problemsByParam(algoProblem(&ovr)))
    if (!why.empty()) out.push_back(why);
  return out;
}

std::string paramsTable(int* rejectedCount) {
  std::string out =
      "tpcomm parameters (environment TPCOMM_<NAME>; parsed by value, 0 means off; set but empty means the "
      "default).\nA rejected value makes Communicator::create fail; everything else that reads it uses the "
      "default, shown as in force:\n";
  AlgoOverride ovr;
  const std::vector<std::string> why = problemsByParam(algoProblem(&ovr));
  int rejected = 0;
  for (const ParamInfo& p : params()) {
    const std::string& bad = why[static_cast<size_t>(&p - params().data())];
    const std::string range = paramRangeText(p);
    const std::string inForce = !bad.empty() ? p.defaultValue : p.value;
    const char* src = !p.fromEnv ? "" : bad.empty() ? " (env)" : " (default)";
    add(&out, "  TPCOMM_%-20s default %-10s in force %-10s%-10s %s%s%s\n", p.name,
        p.defaultValue[0] ? p.defaultValue : "\"\"", inForce.empty() ? "\"\"" : inForce.c_str(), src, p.help,
        range.empty() ? "" : "; accepted: ", range.c_str());
    if (!bad.empty()) {
      add(&out, "      REJECTED %s\n", bad.c_str());
      ++rejected;
    }
  }
  if (rejected) add(&out, "%d rejected value(s): Communicator::create fails until each is fixed or unset\n", rejected);
  if (rejectedCount) *rejectedCount = rejected;
  return out;
}

DoctorReport buildDoctorReport(const MachineProbe& m, const ProbeSource& src, const std::vector<int>& gpusIn) {
  DoctorReport r;
  nlohmann::json j;
  std::string& o = r.text;
  add(&o, "tpcomm-doctor %s\n", TPCOMM_VERSION_STRING);
  add(&o, "driver %s, CUDA driver API %s, runtime %s; NVML: %s\n", m.driverVersion.empty() ? "unknown" : m.driverVersion.c_str(),
      versionText(m.cudaDriverApi).c_str(), versionText(m.cudaRuntime).c_str(), m.nvmlLoaded ? "loaded" : m.nvmlWhy.c_str());
  if (!src.how.empty())
    add(&o, "probe: %s in %.1f ms%s%s\n", src.how.c_str(), src.ms, src.cacheNote.empty() ? "" : " (cache: ",
        src.cacheNote.empty() ? "" : (src.cacheNote + ")").c_str());
  add(&o, "IOMMU: %s (%s)\n", iommuModeName(m.iommu.mode), m.iommu.evidence.c_str());

  std::vector<int> gpus = gpusIn;
  if (gpus.empty())
    for (int i = 0; i < m.nGpus(); ++i) gpus.push_back(i);

  std::vector<Algorithm*> algos;
  auto owned = makeAlgorithms(nullptr);
  algos = rawList(owned);
  AlgoOverride ovr;
  // Values Communicator::create refuses (common/params.h): TPCOMM_TIMEOUT_MS=abc,
  // TPCOMM_DEBUG=garbage, a size out of range, an unknown algorithm in TPCOMM_ALGO.
  const std::vector<std::string> paramWhy = problemsByParam(algoProblem(&ovr));
  for (const std::string& why : paramWhy)
    if (!why.empty()) r.problems.push_back(why + ": Communicator::create refuses it; unset it for the default");

  Topology topo;
  TuningState tune;
  if (m.gpus.empty()) {
    add(&o, "\nno GPUs: %s\n", noGpuReason(m).c_str());
    add(&o,
        "what works without a GPU: host ranks (device -1, host buffers): every collective through shared host\n"
        "memory (staged_host), from C++, the C API and Python; allreduce_perf -t N or mpirun with host ranks;\n"
        "tpcomm-doctor --tune --host; the Qwen decoder on the CPU (qwen_tp --device cpu)\n");
    topo = Topology::host(2, true);
    tune = readTuning(topo);
    add(&o, "tuning file: %s: %s\n", tune.path.empty() ? "-" : tune.path.c_str(), tune.state.c_str());
    add(&o, "all-reduce algorithm per size for 2 host ranks in one process (f32):\n");
    j["selection"] = describeSelection(algos, topo, ovr, DataType::kF32, false, tune.table.get());
    o += j["selection"].get<std::string>();
  } else {
    topo = machineTopology(m, gpus);
    add(&o, "\ndevices:\n");
    for (int g : gpus) {
      const GpuFacts& f = m.gpus[g];
      // sysfs numa_node is -1 where the firmware gives none (VMs, one-socket boxes).
      const std::string numa = f.numaNode() >= 0 ? std::to_string(f.numaNode()) : "unknown";
      add(&o, "  GPU%d %s  cc %d.%d  %d SMs  bus %s  NUMA %s  PCIe gen%d x%d  uuid %s\n", f.index, f.name.c_str(), f.ccMajor,
          f.ccMinor, f.smCount, f.busId.c_str(), numa.c_str(), f.pcieGen(), f.pcieWidth(), f.uuid.c_str());
      add(&o, "       multicast: %s\n", multicastLine(f.multicastSupported).c_str());
      for (const PciBridge& b : f.pci.bridges) add(&o, "       bridge %s ACS %s\n", b.busId.c_str(), b.acs.describe().c_str());
    }
    add(&o, "\nlinks (nvidia-smi topo -m style; ok = P2P data-verified by a kernel store and a copy-engine copy,\n"
            "BAD = the check failed, - = not verified):\n       ");
    for (int b : gpus) add(&o, " %-10s", ("GPU" + std::to_string(m.gpus[b].index)).c_str());
    o += "\n";
    for (int a : gpus) {
      add(&o, "  GPU%-2d", m.gpus[a].index);
      for (int b : gpus) add(&o, " %-10s", linkCell(m, a, b).c_str());
      o += "\n";
    }
    add(&o, "  legend: NV# = # NVLinks, NVS# = # links into an NVSwitch, PIX/PXB = one/several PCIe switches,\n"
            "          PHB = same host bridge, NODE = same NUMA node, SYS = across CPU sockets\n");
    add(&o, "\npairs:%s\n", gpus.size() < 2 ? " none (one GPU)" : "");
    for (size_t ra = 0; ra < gpus.size(); ++ra)
      for (size_t rb = 0; rb < gpus.size(); ++rb) {
        const int a = gpus[ra], b = gpus[rb];
        if (a == b) continue;
        const PairFacts& p = m.pairs[a][b];
        const PeerLink& l = topo.links[ra][rb];
        add(&o, "  %d->%d: %s%s, peer access %s, perf rank %d, atomics %s, kernel check %s, copy check %s", m.gpus[a].index,
            m.gpus[b].index, linkKindName(l.kind), l.nvlinks ? (" x" + std::to_string(l.nvlinks)).c_str() : "",
            p.canAccessPeer ? "yes" : "no", p.perfRank, p.atomics ? "native" : "no", p2pCheckName(p.kernelCheck),
            p2pCheckName(p.copyCheck));
        if (m.measured) add(&o, ", copy %.1f GB/s, SM stores %.1f GB/s, flag round trip %.2f us", p.ceGBs, p.smGBs, p.rttUs);
        o += "\n";
        std::string problem = pairProblem(m, a, b, m.gpus[a].index, m.gpus[b].index);
        if (!problem.empty()) {
          add(&o, "        %s\n", problem.c_str());
          if (pairBroken(m, a, b)) r.problems.push_back(problem);
        }
      }
    if (!m.checkError.empty()) r.problems.push_back("P2P check process: " + m.checkError);
  }

  // Transports.
  add(&o, "\ntransports:\n");
  nlohmann::json jt = nlohmann::json::array();
  auto transport = [&](const char* name, bool up, const std::string& why) {
    add(&o, "  %-12s %s%s\n", name, up ? "usable" : "not usable: ", up ? "" : why.c_str());
    jt.push_back({{"name", name}, {"usable", up}, {"why", up ? "" : why}});
  };
  transport("host_staged", topo.singleNode(), "ranks span several nodes");
  std::string p2pWhy = topo.allGpu() ? "" : "host ranks";
  for (int a = 0; a < topo.nRanks() && p2pWhy.empty(); ++a)
    for (int b = 0; b < topo.nRanks() && p2pWhy.empty(); ++b)
      if (a != b && !topo.links[a][b].p2pVerified) p2pWhy = topo.links[a][b].why.empty() ? "P2P not verified" : topo.links[a][b].why;
  if (topo.nRanks() < 2 && topo.allGpu()) p2pWhy = "one GPU";
  transport("cuda_p2p", p2pWhy.empty(), p2pWhy);
  bool ncclBuilt = false;
  for (const std::string& n : algorithmNames()) ncclBuilt = ncclBuilt || n == "ring_nccl";
  std::string ncclWhy = !ncclBuilt ? "tpcomm was built without NCCL"
                        : paramInt(ParamId::kNccl) == 0 ? "off (TPCOMM_NCCL=0)"
                        : !topo.allGpu() ? "host ranks" : "";
  transport("nccl", ncclWhy.empty(), ncclWhy);
  std::string mcWhy;
  bool mc = topo.allGpu() && topo.multicastUsable(&mcWhy);
  transport("multicast", mc, topo.allGpu() ? mcWhy : "host ranks");

  // Algorithms at a 1 MiB bf16 all-reduce (the mid-size an engine sees in decode+prefill).
  add(&o, "\nalgorithms (all-reduce, %d ranks, %s 1 MiB, eager):\n", topo.nRanks(), topo.allGpu() ? "bf16" : "f32");
  nlohmann::json ja = nlohmann::json::array();
  AlgoQuery q;
  q.kind = CollKind::kAllReduce;
  q.dtype = topo.allGpu() ? DataType::kBF16 : DataType::kF32;
  q.op = ReduceOp::kSum;
  q.bytes = 1u << 20;
  for (Algorithm* a : algos) {
    std::string why;
    bool ok = a->supports(topo, q, &why);
    if (ok && ovr.excludes(a->name())) {
      ok = false;
      why = "excluded by TPCOMM_ALGO";
    }
    add(&o, "  %-16s %s%s\n", a->name(), ok ? "usable" : "not usable: ", ok ? "" : why.c_str());
    ja.push_back({{"name", a->name()}, {"usable", ok}, {"why", why}});
  }
  if (!m.gpus.empty()) {
    const std::string costs = costModelSource(topo);
    add(&o, "\ncosts: %s\n", costs.c_str());
    j["costs"] = costs;
    tune = readTuning(topo);
    add(&o, "tuning file: %s: %s\n", tune.path.empty() ? "-" : tune.path.c_str(), tune.state.c_str());
    add(&o, "all-reduce algorithm per size (bf16, eager, %d ranks):\n", topo.nRanks());
    std::string sel = describeSelection(algos, topo, ovr, DataType::kBF16, false, tune.table.get());
    o += sel;
    add(&o, "under CUDA graph capture (the tuning file holds eager times):\n");
    std::string selG = describeSelection(algos, topo, ovr, DataType::kBF16, true, tune.table.get());
    o += selG;
    j["selection"] = sel;
    j["selection_graph"] = selG;
  }
  {
    // The deterministic mode (docs/determinism.md): which algorithm each size would get with
    // only the contract's algorithms allowed, and whether every size can be served.
    AlgoOverride det = ovr;
    det.deterministicOnly = true;
    const DataType dt = m.gpus.empty() ? DataType::kF32 : DataType::kBF16;
    int unserved = 0;
    for (bool capturing : {false, true}) {
      if (m.gpus.empty() && capturing) continue;  // host ranks have no graphs
      for (size_t bytes = 1024; bytes <= (size_t{1} << 30); bytes *= 4)
        if (selectAlgorithms(algos, topo, {CollKind::kAllReduce, dt, ReduceOp::kSum, bytes, capturing}, det, true,
                             tune.table.get())
                .empty())
          ++unserved;
    }
    add(&o, "\ndeterministic mode (TPCOMM_DETERMINISTIC=1): %s\n",
        unserved == 0 ? (m.gpus.empty() ? "serves every size" : "serves every size, eager and in CUDA graphs")
                      : "cannot serve every size here (the sizes marked 'no algorithm' below fail)");
    std::string detSel = describeSelection(algos, topo, det, dt, false, tune.table.get());
    o += detSel;
    if (!m.gpus.empty()) {
      add(&o, "under CUDA graph capture:\n");
      o += describeSelection(algos, topo, det, dt, true, tune.table.get());
    }
    j["deterministic_serves_every_size"] = unserved == 0;
    j["selection_deterministic"] = detSel;
  }

  // Parameters in force.
  add(&o, "\nparameters in force (tpcomm-doctor --params lists all):\n");
  nlohmann::json jp = nlohmann::json::object();
  bool any = false;
  nlohmann::json jr = nlohmann::json::object();
  for (const ParamInfo& p : params()) {
    const ParamId id = static_cast<ParamId>(&p - params().data());
    const std::string& why = paramWhy[static_cast<size_t>(id)];
    jp[std::string("TPCOMM_") + p.name] = why.empty() ? p.value : p.defaultValue;
    if (!why.empty()) jr[std::string("TPCOMM_") + p.name] = {{"value", p.value}, {"why", why}};
    if (!p.fromEnv) continue;
    if (why.empty())
      add(&o, "  TPCOMM_%s=%s\n", p.name, p.value.c_str());
    else
      add(&o, "  TPCOMM_%s=%s REJECTED (in force: the default %s; create refuses it)\n", p.name, p.value.c_str(),
          p.defaultValue[0] ? p.defaultValue : "\"\"");
    any = true;
  }
  j["params_rejected"] = jr;
  for (const char* e : kExternalEnv) {
    const char* v = std::getenv(e);
    if (!v) continue;
    add(&o, "  %s=%s\n", e, v);
    jp[e] = v;
    any = true;
  }
  if (!any) o += "  (all defaults)\n";

  r.exitCode = r.problems.empty() ? 0 : 2;
  if (r.problems.empty()) {
    add(&o, "\nstatus: OK%s\n", m.gpus.empty() ? " (no GPUs; host path only)" : "");
  } else {
    add(&o, "\nstatus: %zu problem(s):\n", r.problems.size());
    for (const std::string& p : r.problems) add(&o, "  %s\n", p.c_str());
  }

  nlohmann::json jm = nlohmann::json::parse(m.toJson(), nullptr, false);
  j["version"] = TPCOMM_VERSION_STRING;
  j["machine"] = jm;
  j["source"] = {{"how", src.how}, {"ms", src.ms}, {"cache_path", src.cachePath}, {"cache_note", src.cacheNote}};
  j["topology"] = nlohmann::json::parse(topo.toJson(), nullptr, false);
  j["transports"] = jt;
  j["tuning"] = {{"path", tune.path}, {"state", tune.state}, {"warning", tune.warning}, {"measured", tune.table != nullptr}};
  j["algorithms"] = ja;
  j["params"] = jp;
  j["problems"] = r.problems;
  j["exit_code"] = r.exitCode;
  nlohmann::json mcj = nlohmann::json::array();
  for (int g : gpus) mcj.push_back(multicastLine(m.gpus[g].multicastSupported));
  j["multicast"] = mcj;
  r.json = j.dump(1);
  return r;
}

}  // namespace tpcomm
