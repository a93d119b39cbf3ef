// The NVSwitch multicast gate (docs/multicast.md: the gate; transports/multicast.h), proven without a GPU.
// Multicast can take a shared machine's GPUs out of service, so on every machine we have it
// must stay off. For each way the gate can be closed (a row of kClosed: NCCL_NVLS_ENABLE=0,
// TPCOMM_MULTICAST=0, two ranks, a link that is not NVSwitch, a device without the attribute,
// ...) this checks that
//   - Topology::multicastUsable() is false;
//   - the selector never offers twoshot_multicast, for any dtype, op, size or capture mode,
//     not even when TPCOMM_ALGO names it;
//   - MulticastTransport::create() refuses before any driver call: a stub symbol loader is
//     linked in place of cudaGetDriverEntryPoint and must never be asked for a symbol.
// Positive controls show these checks can fail: with the gate open (only on a fixture, and only
// with stub or fake driver functions: nothing here can reach a real driver) the algorithm is
// offered and the stub is consulted. A fake driver that flips TPCOMM_MULTICAST=0 mid-set-up
// proves the switches are re-read right before cuMulticastCreate.
// Never unset NCCL_NVLS_ENABLE or TPCOMM_MULTICAST here: controls that need the gate open skip
// when the environment closes it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#if __has_include(<cuda.h>)
#include <cuda.h>
#define TPCOMM_TEST_HAVE_CUDA_H 1
#endif

#include "algos/multicast/twoshot_multicast.h"
#include "collectives/algo_override.h"
#include "collectives/registry.h"
#include "collectives/selector.h"
#include "common/params.h"
#include "topology/topology.h"
#include "transports/multicast.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

const MulticastTransport::Sizes kSizes{128, 32u << 20};  // the defaults of TPCOMM_TWOSHOT_*

// --- stub driver: counts lookups, provides nothing ---
std::atomic<int> gLookups{0};
void* countingNullLoader(const char*) {
  ++gLookups;
  return nullptr;
}

// Installs a symbol loader for one scope and restores the default afterwards.
class ScopedLoader {
 public:
  explicit ScopedLoader(MulticastSymbolLoader l) {
    gLookups = 0;
    setMulticastSymbolLoader(l);
  }
  ~ScopedLoader() { setMulticastSymbolLoader(nullptr); }
};

// n GPUs on one NVSwitch, every device reporting multicast, the probe allowing it: the gate is
// open on this topology unless the environment closes it.
Topology capable(int n) {
  Topology t = Topology::uniform(n, LinkKind::kNvswitch, 18, false);
  for (RankDevice& r : t.ranks) r.multicastSupported = true;
  t.multicastAllowedByEnv = true;
  return t;
}

bool gateClosedByEnvironment() { return multicastDisabledByEnv(nullptr); }

struct ClosedRow {
  const char* name;
  std::function<Topology()> topo;
  const char* envVar;  // set to "0" for the row (nullptr: none)
};

const std::vector<ClosedRow>& closedRows() {
  static const std::vector<ClosedRow> rows = {
      {"NCCL_NVLS_ENABLE=0", [] { return capable(8); }, "NCCL_NVLS_ENABLE"},
      {"TPCOMM_MULTICAST=0", [] { return capable(8); }, "TPCOMM_MULTICAST"},
      {"NCCL_NVLS_ENABLE=0 on 4 ranks", [] { return capable(4); }, "NCCL_NVLS_ENABLE"},
      {"two ranks", [] { return capable(2); }, nullptr},
      {"one rank", [] { return capable(1); }, nullptr},
      {"one pair on direct NVLink, not the switch",
       [] {
         Topology t = capable(8);
         t.links[2][5].kind = t.links[5][2].kind = LinkKind::kNvlink;
         return t;
       },
       nullptr},
      {"all pairs on an NVLink mesh",
       [] {
         Topology t = capable(8);
         for (int a = 0; a < 8; ++a)
           for (int b = 0; b < 8; ++b)
             if (a != b) t.links[a][b].kind = LinkKind::kNvlink;
         return t;
       },
       nullptr},
      {"a device lacks CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED",
       [] {
         Topology t = capable(8);
         t.ranks[6].multicastSupported = false;
         return t;
       },
       nullptr},
      {"the probe saw the gate closed",
       [] {
         Topology t = capable(8);
         t.multicastAllowedByEnv = false;
         t.multicastWhyNot = "disabled by NCCL_NVLS_ENABLE=0";
         return t;
       },
       nullptr},
      {"ranks on two nodes",
       [] {
         Topology t = capable(8);
         for (int r = 4; r < 8; ++r) t.ranks[r].hostId = 1;
         return t;
       },
       nullptr},
      {"PCIe P2P only",
       [] {
         Topology t = Topology::uniform(4, LinkKind::kPcieP2p);
         for (RankDevice& r : t.ranks) r.multicastSupported = true;
         t.multicastAllowedByEnv = true;
         return t;
       },
       nullptr},
  };
  return rows;
}

// Every candidate for every dtype x op x size x capture mode, with and without an override
// that names twoshot_multicast.
std::vector<std::string> everyCandidate(const Topology& topo) {
  auto algos = makeAlgorithms(nullptr);
  std::vector<Algorithm*> list = rawList(algos);
  std::vector<std::string> names;
  AlgoOverride none, forced;
  EXPECT_EQ(parseAlgoOverride("twoshot_multicast", algorithmNames(), &forced), Status::kOk) << lastErrorMessage();
  for (const AlgoOverride* ovr : {&none, &forced})
    for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16})
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin})
        for (bool capturing : {false, true})
          for (size_t bytes = 2; bytes <= (1ull << 32); bytes *= 8)
            for (const Candidate& c :
                 selectAlgorithms(list, topo, {CollKind::kAllReduce, dt, op, bytes, capturing}, *ovr))
              names.push_back(c.algo->name());
  return names;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  for (const std::string& x : v)
    if (x == s) return true;
  return false;
}

TEST(MulticastGate, RegistryHasTheAlgorithm) {
  // Otherwise every "never offered" check below would pass vacuously.
  EXPECT_TRUE(contains(algorithmNames(), "twoshot_multicast"));
}

TEST(MulticastGate, ClosedGateKeepsEverythingOff) {
  for (const ClosedRow& row : closedRows()) {
    SCOPED_TRACE(row.name);
    std::unique_ptr<test::ScopedEnv> env;
    if (row.envVar) env = std::make_unique<test::ScopedEnv>(row.envVar, "0");
    Topology topo = row.topo();
    ASSERT_EQ(topo.validate(), Status::kOk) << lastErrorMessage();

    std::string why;
    EXPECT_FALSE(topo.multicastUsable(&why));
    EXPECT_FALSE(why.empty());

    EXPECT_FALSE(contains(everyCandidate(topo), "twoshot_multicast"));
    const std::unique_ptr<Algorithm> algo = makeAlgorithm("twoshot_multicast", nullptr);
    EXPECT_FALSE(algo->supports(topo, {CollKind::kAllReduce, DataType::kBF16, ReduceOp::kSum, 1 << 20, false}, nullptr));

    // The transport: no driver symbol is looked up, the bootstrap (null) is never touched.
    ScopedLoader stub(countingNullLoader);
    TransportEnv tenv{0, topo.nRanks(), 0, nullptr, topo, 10000};
    std::unique_ptr<MulticastTransport> t;
    EXPECT_EQ(MulticastTransport::create(tenv, kSizes, &t), Status::kNotSupported);
    EXPECT_EQ(t, nullptr);
    EXPECT_EQ(gLookups.load(), 0) << "a driver symbol was looked up with the gate closed";
    EXPECT_NE(std::string(lastErrorMessage()).find("gate closed"), std::string::npos) << lastErrorMessage();
  }
}

TEST(MulticastGate, OnlyThePtxReductionsAreOffered) {
  EXPECT_TRUE(multicastReducible(DataType::kBF16, ReduceOp::kSum));
  EXPECT_TRUE(multicastReducible(DataType::kF16, ReduceOp::kMax));
  EXPECT_TRUE(multicastReducible(DataType::kBF16, ReduceOp::kMin));
  EXPECT_TRUE(multicastReducible(DataType::kF32, ReduceOp::kSum));
  EXPECT_FALSE(multicastReducible(DataType::kF32, ReduceOp::kMax));  // no f32 max/min in multimem
  EXPECT_FALSE(multicastReducible(DataType::kF32, ReduceOp::kMin));
}

// --- positive controls: the gate open on a fixture ---

TEST(MulticastGate, ControlOpenGateOffersTheAlgorithm) {
  if (gateClosedByEnvironment())
    GTEST_SKIP() << "the environment closes the multicast gate (as it should on shared machines)";
  Topology topo = capable(8);
  ASSERT_TRUE(topo.multicastUsable(nullptr));
  auto algos = makeAlgorithms(nullptr);
  std::vector<Candidate> c = selectAlgorithms(
      rawList(algos), topo, {CollKind::kAllReduce, DataType::kBF16, ReduceOp::kSum, 64u << 20, false}, {});
  bool found = false;
  for (const Candidate& x : c) found = found || std::string(x.algo->name()) == "twoshot_multicast";
  EXPECT_TRUE(found);
  const std::unique_ptr<Algorithm> algo = makeAlgorithm("twoshot_multicast", nullptr);
  std::string why;
  EXPECT_FALSE(algo->supports(topo, {CollKind::kAllReduce, DataType::kF32, ReduceOp::kMax, 1024, false}, &why));
  EXPECT_FALSE(algo->supports(topo, {CollKind::kReduceScatter, DataType::kBF16, ReduceOp::kSum, 1024, false}, &why));
  Topology old = capable(8);
  old.ranks[3].ccMajor = 8;
  EXPECT_FALSE(algo->supports(old, {CollKind::kAllReduce, DataType::kBF16, ReduceOp::kSum, 1024, false}, &why));
}

TEST(MulticastGate, ControlOpenGateConsultsTheStubAndEveryRankAgrees) {
  if (gateClosedByEnvironment()) GTEST_SKIP() << "the environment closes the multicast gate";
  // 8 thread ranks on the fixture; the stub provides no symbol, so every rank fails in step 1
  // and the agreement makes them all return kNotSupported (none waits for a step the others
  // skipped).
  ScopedLoader stub(countingNullLoader);
  const int n = 8;
  auto group = ThreadGroup::create(n);
  std::vector<Status> status(n, Status::kOk);
  std::vector<std::string> message(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bs;
      ASSERT_EQ(makeThreadBootstrap(group, r, &bs), Status::kOk);
      const Topology topo = capable(n);
      TransportEnv env{r, n, r, bs.get(), topo, 10000};
      std::unique_ptr<MulticastTransport> t;
      status[r] = MulticastTransport::create(env, kSizes, &t);
      message[r] = lastErrorMessage();
    });
  for (auto& t : threads) t.join();
  if (message[0].find("built without CUDA") != std::string::npos) GTEST_SKIP() << "library built without CUDA";
  EXPECT_GT(gLookups.load(), 0) << "the open gate did not reach the (stub) driver";
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(status[r], Status::kNotSupported) << "rank " << r;
    EXPECT_NE(message[r].find("driver check failed"), std::string::npos) << message[r];
  }
}

#ifdef TPCOMM_TEST_HAVE_CUDA_H
// --- fake driver: defence in depth right before cuMulticastCreate ---

std::atomic<int> gCreateCalls{0}, gOtherCalls{0};
bool gFlipDuringSetup = false;

template <typename Fn>
struct Refuse;
template <typename... A>
struct Refuse<CUresult (*)(A...)> {
  static CUresult call(A...) {
    ++gOtherCalls;
    return CUDA_ERROR_NOT_SUPPORTED;
  }
};
#define TPCOMM_REFUSE(fn) \
  if (n == #fn) return reinterpret_cast<void*>(&Refuse<decltype(&::fn)>::call)

void* fakeLoader(const char* symbol) {
  ++gLookups;
  const std::string n(symbol);
  if (n == "cuGetErrorString")
    return reinterpret_cast<void*>(+[](CUresult, const char** s) -> CUresult {
      *s = "fake driver";
      return CUDA_SUCCESS;
    });
  if (n == "cuDeviceGet")
    return reinterpret_cast<void*>(+[](CUdevice* d, int ordinal) -> CUresult {
      *d = ordinal;
      return CUDA_SUCCESS;
    });
  if (n == "cuDeviceGetAttribute")
    return reinterpret_cast<void*>(+[](int* v, CUdevice_attribute, CUdevice) -> CUresult {
      *v = 1;
      return CUDA_SUCCESS;
    });
  if (n == "cuMemGetAllocationGranularity")
    return reinterpret_cast<void*>(
        +[](size_t* g, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) -> CUresult {
          *g = 2u << 20;
          return CUDA_SUCCESS;
        });
  if (n == "cuMulticastGetGranularity")
    return reinterpret_cast<void*>(
        +[](size_t* g, const CUmulticastObjectProp*, CUmulticastGranularity_flags) -> CUresult {
          *g = 2u << 20;
          // Someone switches multicast off between the gate check and the create.
          if (gFlipDuringSetup) {
            setenv("TPCOMM_MULTICAST", "0", 1);
            reloadParams();
          }
          return CUDA_SUCCESS;
        });
  if (n == "cuMulticastCreate")
    return reinterpret_cast<void*>(+[](CUmemGenericAllocationHandle*, const CUmulticastObjectProp*) -> CUresult {
      ++gCreateCalls;
      return CUDA_ERROR_NOT_SUPPORTED;
    });
  TPCOMM_REFUSE(cuMulticastAddDevice);
  TPCOMM_REFUSE(cuMulticastBindMem);
  TPCOMM_REFUSE(cuMulticastUnbind);
  TPCOMM_REFUSE(cuMemCreate);
  TPCOMM_REFUSE(cuMemRelease);
  TPCOMM_REFUSE(cuMemExportToShareableHandle);
  TPCOMM_REFUSE(cuMemImportFromShareableHandle);
  TPCOMM_REFUSE(cuMemAddressReserve);
  TPCOMM_REFUSE(cuMemAddressFree);
  TPCOMM_REFUSE(cuMemMap);
  TPCOMM_REFUSE(cuMemUnmap);
  TPCOMM_REFUSE(cuMemSetAccess);
  return nullptr;
}
#undef TPCOMM_REFUSE

// Rank 0 of n whose peers report exactly what it reports (one thread drives the whole set-up).
class MirrorBootstrap : public Bootstrap {
 public:
  explicit MirrorBootstrap(int n) : n_(n) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  Status allGather(const void* mine, void* all, size_t bytes) override {
    for (int r = 0; r < n_; ++r) std::memcpy(static_cast<char*>(all) + r * bytes, mine, bytes);
    return Status::kOk;
  }
  Status barrier() override { return Status::kOk; }

 private:
  int n_;
};

Status createWithFakeDriver(bool flip) {
  gCreateCalls = 0;
  gOtherCalls = 0;
  gFlipDuringSetup = flip;
  ScopedLoader fake(fakeLoader);
  MirrorBootstrap bs(8);
  const Topology topo = capable(8);
  TransportEnv env{0, 8, 0, &bs, topo, 10000};
  std::unique_ptr<MulticastTransport> t;
  Status s = MulticastTransport::create(env, kSizes, &t);
  EXPECT_EQ(t, nullptr);
  return s;
}

TEST(MulticastGate, EnvironmentIsReadAgainRightBeforeCuMulticastCreate) {
  if (gateClosedByEnvironment()) GTEST_SKIP() << "the environment closes the multicast gate";
  // Restores TPCOMM_MULTICAST to what it was (unset or non-zero) after the flip.
  const char* before = std::getenv("TPCOMM_MULTICAST");
  test::ScopedEnv restore("TPCOMM_MULTICAST", before);

  // Control: nothing flips, so the fake cuMulticastCreate is reached (and refuses).
  Status s = createWithFakeDriver(false);
  if (std::string(lastErrorMessage()).find("built without CUDA") != std::string::npos)
    GTEST_SKIP() << "library built without CUDA";
  EXPECT_EQ(s, Status::kNotSupported) << lastErrorMessage();
  EXPECT_EQ(gCreateCalls.load(), 1) << lastErrorMessage();

  // TPCOMM_MULTICAST=0 appears after the gate was checked: cuMulticastCreate must not run.
  s = createWithFakeDriver(true);
  EXPECT_EQ(s, Status::kNotSupported);
  EXPECT_EQ(gCreateCalls.load(), 0) << "cuMulticastCreate called after TPCOMM_MULTICAST=0";
  EXPECT_EQ(gOtherCalls.load(), 0);
  EXPECT_NE(std::string(lastErrorMessage()).find("not calling cuMulticastCreate"), std::string::npos)
      << lastErrorMessage();
  EXPECT_TRUE(multicastDisabledByEnv(nullptr));
}
#endif  // TPCOMM_TEST_HAVE_CUDA_H

}  // namespace
}  // namespace tpcomm
