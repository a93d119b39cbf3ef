// What the algorithms ask of the cuda_p2p transport and where it puts it, on the CPU: every
// region the registry's algorithms declare (Algorithm::needs()) gets its own channel of flags,
// epochs and signatures and its own bytes, inside the buffer and apart from every other; requests
// under one key share one region. And "adding an algorithm" (docs/architecture.md) done from the
// test tree: tests/algos/scratch_test_p2p, registered by one line (ScopedTestAlgorithm), gets a
// region of its own, is known to TPCOMM_ALGO, and runs through create on host ranks (where its
// transport is down, so the call falls back), with no edit in src/transports or src/collectives.
// Its kernel runs in tests/gpu/scratch_algo_gpu_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "algos/common/algo_context.h"
#include "algos/p2p/ll_p2p.h"
#include "algos/scratch_test_p2p/scratch_test_p2p.h"
#include "collectives/algo_override.h"
#include "collectives/bring_up.h"
#include "collectives/registry.h"
#include "transports/cuda_p2p.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

// A context as create fills it for the sizes (no transport: needs() comes before them).
std::unique_ptr<AlgoContext> contextFor(int nRanks) {
  auto c = std::make_unique<AlgoContext>();
  c->nRanks = nRanks;
  c->launch.p2pBlocks = static_cast<int>(paramInt(ParamId::kP2pBlocks));
  c->launch.twoshotBlocks = static_cast<int>(paramInt(ParamId::kTwoshotBlocks));
  return c;
}

// The plan create would make for the registry's list.
P2pPlan planOfRegistry(const AlgoContext& c) {
  P2pPlan plan;
  EXPECT_EQ(planP2pBuffer(c.nRanks, allNeeds(makeAlgorithms(&c), c.nRanks).p2p, &plan), Status::kOk)
      << lastErrorMessage();
  return plan;
}

// [begin, end) byte ranges that must not overlap, with a name for the message.
struct Span {
  std::string what;
  size_t begin, end;
};

void expectApart(std::vector<Span> spans, size_t total) {
  for (const Span& s : spans) EXPECT_LE(s.begin, s.end) << s.what;
  spans.erase(std::remove_if(spans.begin(), spans.end(), [](const Span& s) { return s.begin >= s.end; }),
              spans.end());  // empty: nothing to overlap
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_LE(spans[i].end, total) << spans[i].what << " past the buffer";
    if (i > 0) EXPECT_LE(spans[i - 1].end, spans[i].begin) << spans[i - 1].what << " overlaps " << spans[i].what;
  }
}

// Every area of the buffer: the three tables, each region's local words and buffers, the poison
// and arrival words.
void expectLayoutSound(const P2pPlan& plan) {
  const P2pLayout& l = plan.layout;
  const size_t slots = static_cast<size_t>(l.channels) * l.nRanks * l.maxBlocks;
  std::vector<Span> spans = {
      {"flags", l.flagsOffset, l.flagsOffset + 8 * slots},
      {"epochs", l.epochsOffset, l.epochsOffset + 8 * static_cast<size_t>(l.channels) * l.maxBlocks},
      {"poison", l.poisonOffset, l.poisonOffset + 4},
      {"arrival", l.arrivalOffset, l.arrivalOffset + 8},
      {"signatures", l.signaturesOffset, l.signaturesOffset + 8 * slots * 3}};
  ASSERT_EQ(plan.keys.size(), plan.regions.size());
  EXPECT_EQ(static_cast<size_t>(l.channels), plan.regions.size());
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    const P2pRegion& r = plan.regions[i];
    EXPECT_EQ(r.channel, static_cast<int>(i)) << plan.keys[i];
    EXPECT_EQ(r.offset % 4096, 0u) << plan.keys[i];
    EXPECT_EQ(r.bufferBytes, r.slotBytes * l.nRanks + r.sharedBytes) << plan.keys[i];
    spans.push_back({plan.keys[i], r.offset, r.offset + r.buffers * r.bufferBytes});
    if (i + 1 < plan.regions.size())  // local words: up to the next region's (the last: the poison)
      spans.push_back({plan.keys[i] + " words", r.wordsOffset, plan.regions[i + 1].wordsOffset});
    else
      spans.push_back({plan.keys[i] + " words", r.wordsOffset, l.poisonOffset});
    EXPECT_GE(r.wordsOffset, spans[1].end) << plan.keys[i] << "'s words overlap the epochs";
  }
  expectApart(spans, l.totalBytes);
}

TEST(P2pScratch, EveryRegistryRegionHasItsOwnPlace) {
  for (int n : {2, 3, 4, 8, 16}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const P2pPlan plan = planOfRegistry(*contextFor(n));
    // One region per key: the compressed two-shot forms ask under twoshot_p2p's.
    EXPECT_EQ(plan.keys, (std::vector<std::string>{"lamport_p2p", "ll_p2p", "oneshot_p2p", "twoshot_p2p"}));
    expectLayoutSound(plan);
    ASSERT_NE(plan.find("lamport_p2p"), nullptr);
    EXPECT_EQ(plan.find("lamport_p2p")->buffers, 3);
    // Its three local words (the bytes each buffer carried) are the only ones asked for.
    EXPECT_EQ(plan.layout.poisonOffset - plan.find("lamport_p2p")->wordsOffset, 3 * sizeof(uint64_t));
  }
}

TEST(P2pScratch, TestAlgorithmRegisteredFromTheTestTreeGetsItsOwnRegion) {
  const auto ctx = contextFor(4);
  const AlgoContext& c = *ctx;
  const P2pPlan before = planOfRegistry(c);
  {
    ScopedTestAlgorithm registered(&makeScratchTestP2p);  // the one registration line
    const std::vector<std::string> names = algorithmNames();
    EXPECT_EQ(names.back(), "scratch_test_p2p");
    const P2pPlan plan = planOfRegistry(c);
    expectLayoutSound(plan);
    const P2pRegion* mine = plan.find("scratch_test_p2p");
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(mine->slotBytes, kScratchTestBytes);
    EXPECT_EQ(mine->buffers, 2);
    EXPECT_EQ(mine->channel, static_cast<int>(before.regions.size()));
    EXPECT_GE(plan.layout.totalBytes, before.layout.totalBytes + 2 * 4 * kScratchTestBytes);
    // Every other algorithm's region keeps its channel and sizes (only where it starts may move).
    for (size_t i = 0; i < before.keys.size(); ++i) {
      const P2pRegion* r = plan.find(before.keys[i]);
      ASSERT_NE(r, nullptr) << before.keys[i];
      EXPECT_EQ(r->channel, before.regions[i].channel);
      EXPECT_EQ(r->bufferBytes, before.regions[i].bufferBytes);
      EXPECT_EQ(r->buffers, before.regions[i].buffers);
    }
  }
  EXPECT_EQ(planOfRegistry(c).find("scratch_test_p2p"), nullptr) << "registered past its scope";
}

TEST(P2pScratch, TheOverrideKnowsTheTestAlgorithmOnlyWhileItIsRegistered) {
  AlgoOverride ovr;
  EXPECT_EQ(parseAlgoOverride("scratch_test_p2p", algorithmNames(), &ovr), Status::kInvalidArgument);
  ScopedTestAlgorithm registered(&makeScratchTestP2p);
  EXPECT_EQ(parseAlgoOverride("scratch_test_p2p", algorithmNames(), &ovr), Status::kOk) << lastErrorMessage();
}

// Create with the test algorithm registered and forced: host ranks have no cuda_p2p transport,
// so it is unavailable and each call falls back to the next candidate by cost, with the right sums.
TEST(P2pScratch, HostRanksCreateAndFallBackWithTheTestAlgorithmForced) {
  ScopedTestAlgorithm registered(&makeScratchTestP2p);
  Config cfg;
  cfg.algo = "scratch_test_p2p";
  const size_t count = 1000;
  test::runHostRanks(2, cfg, [&](int rank, Communicator& comm) {
    std::vector<char> in = test::makeBuffer(count, DataType::kF32), out = test::makeBuffer(count, DataType::kF32);
    test::fillInput(in.data(), count, DataType::kF32, rank);
    ASSERT_EQ(comm.allReduce(in.data(), out.data(), count, DataType::kF32, ReduceOp::kSum, nullptr), Status::kOk)
        << lastErrorMessage();
    EXPECT_STRNE(comm.lastAlgorithm(), "scratch_test_p2p");
    std::string first;
    EXPECT_EQ(test::countWrong(
                  out.data(), count, DataType::kF32,
                  [&](size_t i) { return test::expectedValue(2, i, ReduceOp::kSum); }, &first),
              0u)
        << first;
  });
}

TEST(P2pScratch, RequestsUnderOneKeyMustAgreeAndGridsStayInRange) {
  P2pScratchRequest a;
  a.key = "x";
  a.blocks = 8;
  a.slotBytes = 256;
  a.buffers = 2;
  P2pScratchRequest b = a;
  P2pPlan plan;
  EXPECT_EQ(planP2pBuffer(2, {a, b}, &plan), Status::kOk);  // equal: one region
  EXPECT_EQ(plan.regions.size(), 1u);
  b.slotBytes = 512;
  EXPECT_EQ(planP2pBuffer(2, {a, b}, &plan), Status::kInvalidArgument);
  EXPECT_NE(std::string(lastErrorMessage()).find("'x'"), std::string::npos) << lastErrorMessage();
  for (int blocks : {0, 1025}) {
    P2pScratchRequest c = a;
    c.blocks = blocks;
    EXPECT_EQ(planP2pBuffer(2, {c}, &plan), Status::kInvalidArgument) << blocks;
  }
}

// ll_p2p's region: each of its two buffers holds every rank's slot, and a slot holds the largest
// piece (at most ceil(TPCOMM_LL_MAX_BYTES / n) bytes) as 16-byte lines of 8 payload bytes.
TEST(P2pScratch, LlSlotsHoldTheLargestPiece) {
  for (int n : {2, 3, 4, 7, 8, 16})
    for (size_t ll : {size_t{16}, size_t{1000}, size_t{524288}, size_t{524288} + 7, size_t{3} << 20}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " llBytes=" + std::to_string(ll));
      const P2pScratchRequest r = llScratch(n, 128, ll);
      const size_t piece = (ll + n - 1) / n, lines = (piece + 7) / 8;
      EXPECT_GE(r.slotBytes, lines * 16);
      EXPECT_EQ(r.slotBytes % 16, 0u);
      EXPECT_EQ(r.buffers, 2);
    }
  EXPECT_EQ(llScratch(2, 128, 0).slotBytes, 0u);
}

}  // namespace
}  // namespace tpcomm
