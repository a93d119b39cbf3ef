// CPU tests of the shim's parts that need no GPU: resolving the real NCCL by path (the CUDA
// toolkit's libnccl.so.2 loads without a GPU), rejecting the shim itself and the vLLM front as
// "real NCCL", the side table's keys and creations, per-thread group state, and the NCCL
// bootstrap's argument checks.
#include <gtest/gtest.h>

#include <thread>

#include "shim/comm_table.h"
#include "shim/group.h"
#include "shim/real_nccl.h"
#include "tpcomm/nccl_bootstrap.h"

namespace tpcomm {
namespace shim {
namespace {

TEST(RealNccl, LoadsByPath) {
  RealNccl t;
  ASSERT_EQ(loadRealNccl(TPCOMM_TEST_REAL_NCCL, &t), Status::kOk) << lastErrorMessage();
  EXPECT_GE(t.version, 21000);
  EXPECT_NE(t.path.find("libnccl"), std::string::npos) << t.path;
  EXPECT_NE(t.how.find("TPCOMM_NCCL_LIBRARY"), std::string::npos);
  for (void* p : {(void*)t.commInitRank, (void*)t.commInitAll, (void*)t.commDestroy, (void*)t.commAbort,
                  (void*)t.groupStart, (void*)t.groupEnd, (void*)t.allReduce, (void*)t.getVersion, (void*)t.allGather,
                  (void*)t.commGetAsyncError, (void*)t.getErrorString, (void*)t.commCount, (void*)t.commUserRank,
                  (void*)t.commCuDevice, (void*)t.commSplit, (void*)t.commFinalize, (void*)t.commInitRankConfig})
    EXPECT_NE(p, nullptr);
  EXPECT_FALSE(isInShim(reinterpret_cast<void*>(t.allReduce)));
  int v = 0;
  ASSERT_EQ(t.getVersion(&v), ncclSuccess);
  EXPECT_EQ(v, t.version);
  NcclFunctions f = t.bootstrapFunctions();
  EXPECT_EQ(f.allGather, t.allGather);
  EXPECT_EQ(f.commAbort, t.commAbort);
}

TEST(RealNccl, RejectsTheShimItself) {
  RealNccl t;
  EXPECT_EQ(loadRealNccl(TPCOMM_TEST_SHIM_SO, &t), Status::kNotSupported);
  EXPECT_NE(std::string(lastErrorMessage()).find("not an NCCL library"), std::string::npos) << lastErrorMessage();
}

TEST(RealNccl, RejectsTheVllmFront) {
  // Its dependencies give ncclGetVersion from libnccl but ncclAllReduce from the shim.
  RealNccl t;
  EXPECT_EQ(loadRealNccl(TPCOMM_TEST_VLLM_FRONT_SO, &t), Status::kNotSupported);
  EXPECT_NE(std::string(lastErrorMessage()).find("ncclAllReduce"), std::string::npos) << lastErrorMessage();
}

TEST(RealNccl, MissingFile) {
  RealNccl t;
  EXPECT_EQ(loadRealNccl("/nonexistent/libnccl.so.2", &t), Status::kNotSupported);
  EXPECT_NE(std::string(lastErrorMessage()).find("dlopen"), std::string::npos);
}

TEST(CommTable, KeysAndCreations) {
  ncclUniqueId a{}, b{};
  b.internal[5] = 1;
  EXPECT_NE(keyOfUniqueId(a), keyOfUniqueId(b));
  EXPECT_EQ(keyOfUniqueId(b), keyOfUniqueId(b));
  EXPECT_NE(keyOfInitAll(1), keyOfInitAll(2));
  EXPECT_NE(keyOfSplit("k", 0), keyOfSplit("k", 1));
  EXPECT_NE(keyOfSplit("k", 0), keyOfSplit("j", 0));
  uint64_t first = nextCreation();
  uint64_t second = nextCreation();
  EXPECT_LT(first, second);

  CommTable& t = CommTable::instance();
  size_t before = t.size();
  auto mk = [](uintptr_t h, const std::string& key, uint64_t creation) {
    auto c = std::make_shared<ShimComm>();
    c->real = reinterpret_cast<ncclComm_t>(h);
    c->key = key;
    c->creation = creation;
    return c;
  };
  t.add(mk(0x1000, "k", 7));
  t.add(mk(0x2000, "k", 7));
  t.add(mk(0x3000, "k", 8));  // same communicator, another creation (another thread's rank)
  EXPECT_EQ(t.sameCreation("k", 7).size(), 2u);
  EXPECT_EQ(t.sameCreation("k", 8).size(), 1u);
  EXPECT_NE(t.find(reinterpret_cast<ncclComm_t>(0x2000)), nullptr);
  EXPECT_EQ(t.find(reinterpret_cast<ncclComm_t>(0x4000)), nullptr);
  EXPECT_NE(t.take(reinterpret_cast<ncclComm_t>(0x2000)), nullptr);
  EXPECT_EQ(t.take(reinterpret_cast<ncclComm_t>(0x2000)), nullptr);
  EXPECT_EQ(t.sameCreation("k", 7).size(), 1u);
  t.take(reinterpret_cast<ncclComm_t>(0x1000));
  t.take(reinterpret_cast<ncclComm_t>(0x3000));
  EXPECT_EQ(t.size(), before);
}

TEST(Group, NestingDefersToTheOutermostEnd) {
  EXPECT_EQ(groupDepth(), 0);
  EXPECT_EQ(groupCreation(), 0u);
  GroupWork w;
  EXPECT_FALSE(groupLeave(&w));  // unbalanced end: nothing to do
  groupEnter();
  uint64_t outer = groupCreation();
  EXPECT_NE(outer, 0u);
  groupEnter();
  EXPECT_EQ(groupCreation(), outer);  // inner groups belong to the outermost
  auto c = std::make_shared<ShimComm>();
  groupDefer({c, nullptr, nullptr, 4, DataType::kF32, ReduceOp::kSum, nullptr});
  groupDefer({c, nullptr, nullptr, 8, DataType::kBF16, ReduceOp::kMax, nullptr});
  groupWantSetup(c);
  groupWantSetup(c);
  EXPECT_FALSE(groupLeave(&w));
  EXPECT_TRUE(w.calls.empty());
  // Another thread has its own group state.
  std::thread([] { EXPECT_EQ(groupDepth(), 0); }).join();
  EXPECT_TRUE(groupLeave(&w));
  ASSERT_EQ(w.calls.size(), 2u);
  EXPECT_EQ(w.calls[0].count, 4u);  // call order kept
  EXPECT_EQ(w.calls[1].count, 8u);
  EXPECT_EQ(w.setups.size(), 1u);
  EXPECT_EQ(groupDepth(), 0);
  groupEnter();
  EXPECT_NE(groupCreation(), outer);  // a new outermost group, a new creation
  EXPECT_TRUE(groupLeave(&w));
  EXPECT_TRUE(w.calls.empty());
}

TEST(NcclBootstrap, RejectsBadArguments) {
  std::unique_ptr<Bootstrap> b;
  NcclFunctions none;
  EXPECT_EQ(makeNcclBootstrap(nullptr, none, 0, &b), Status::kInvalidArgument);
  EXPECT_EQ(makeNcclBootstrap(reinterpret_cast<ncclComm_t>(0x10), none, 0, &b), Status::kInvalidArgument);
  EXPECT_NE(std::string(lastErrorMessage()).find("function pointer"), std::string::npos);
  RealNccl t;
  ASSERT_EQ(loadRealNccl(TPCOMM_TEST_REAL_NCCL, &t), Status::kOk);
  EXPECT_EQ(makeNcclBootstrap(reinterpret_cast<ncclComm_t>(0x10), t.bootstrapFunctions(), -1, &b),
            Status::kInvalidArgument);
  EXPECT_EQ(makeNcclBootstrap(reinterpret_cast<ncclComm_t>(0x10), t.bootstrapFunctions(), 0, nullptr),
            Status::kInvalidArgument);
  EXPECT_EQ(b, nullptr);
  // Helpers are no-ops on other bootstraps.
  abandonNcclBootstrap(nullptr);
  EXPECT_FALSE(ncclBootstrapAborted(nullptr));
}

}  // namespace
}  // namespace shim
}  // namespace tpcomm
