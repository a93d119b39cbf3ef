// Bad input through the public API returns kInvalidArgument with a message naming the argument,
// never a crash, an exception or a hang; the communicator stays usable afterwards. Misuse after
// destroy() is caught too. To cover another bad call, add a row to the table in BadCalls.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tpcomm/socket_bootstrap.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

void expectInvalid(Status s, const std::string& mustMention, const std::string& what) {
  EXPECT_EQ(s, Status::kInvalidArgument) << what << ": got " << statusName(s);
  std::string msg = lastErrorMessage();
  EXPECT_NE(msg.find(mustMention), std::string::npos)
      << what << ": message does not name '" << mustMention << "': " << msg;
}

struct BadCall {
  const char* what;
  const char* mustMention;
  std::function<Status(Communicator&)> call;
};

TEST(BadInput, BadCallsAreRejectedAndTheCommunicatorStaysUsable) {
  // Two ranks so the per-rank overflow (count * nRanks * elemSize) differs from the plain one.
  const int n = 2;
  test::runHostRanks(n, Config{}, [&](int me, Communicator& comm) {
    std::vector<float> a(64, 1.0f), b(64 * n, 0.0f);
    float* send = a.data();
    float* recv = b.data();
    const DataType f32 = DataType::kF32;
    const ReduceOp sum = ReduceOp::kSum;
    const DataType badType = static_cast<DataType>(7);
    const ReduceOp badOp = static_cast<ReduceOp>(9);
    // Largest count whose all-reduce byte size fits, and one whose per-rank total does not.
    const size_t overflowAll = SIZE_MAX / 4 + 1;
    const size_t overflowPerRank = SIZE_MAX / 4 / n + 1;
    // 16 bytes below the top of the address space: a few elements fit, 64 do not.
    float* nearTop = reinterpret_cast<float*>(UINTPTR_MAX - 15);
    cudaStream_t bogusStream = reinterpret_cast<cudaStream_t>(uintptr_t{0x10});
    const BadCall calls[] = {
        {"allReduce null send", "send",
         [&](Communicator& c) { return c.allReduce(nullptr, recv, 4, f32, sum, nullptr); }},
        // Partial overlaps: a rank would read what the call already wrote.
        {"allReduce send and recv overlapping by one element", "overlap",
         [&](Communicator& c) { return c.allReduce(recv, recv + 1, 8, f32, sum, nullptr); }},
        {"reduceScatter recv inside send but not at this rank's piece", "overlap",
         [&](Communicator& c) { return c.reduceScatter(recv, recv + 1, 4, f32, sum, nullptr); }},
        {"allGather send inside recv but not at this rank's piece", "overlap",
         [&](Communicator& c) { return c.allGather(recv + 1, recv, 4, f32, nullptr); }},
        // Buffers whose end lies past the top of the address space (issue 34 item 4): the
        // overlap check must not compute pointer + bytes: it wraps, calls them apart, and the call crashes.
        {"allReduce send past the top of the address space", "send",
         [&](Communicator& c) { return c.allReduce(nearTop, recv, 64, f32, sum, nullptr); }},
        {"allReduce recv past the top of the address space", "recv",
         [&](Communicator& c) { return c.allReduce(send, nearTop, 64, f32, sum, nullptr); }},
        {"allReduce both past the top of the address space", "address space",
         [&](Communicator& c) { return c.allReduce(nearTop, nearTop + 1, 8, f32, sum, nullptr); }},
        {"reduceScatter send (count x ranks) past the top", "send",
         [&](Communicator& c) { return c.reduceScatter(nearTop - 4, recv, 4, f32, sum, nullptr); }},
        {"allGather recv (count x ranks) past the top", "recv",
         [&](Communicator& c) { return c.allGather(send, nearTop - 4, 4, f32, nullptr); }},
        {"allReduceResidualRmsNorm out past the top of the address space", "out [",
         [&](Communicator& c) {
           return c.allReduceResidualRmsNorm(send, recv, a.data(), 1e-6f, nearTop, 2, 8, f32, nullptr);
         }},
        {"allReduce null recv", "recv",
         [&](Communicator& c) { return c.allReduce(send, nullptr, 4, f32, sum, nullptr); }},
        {"allReduce zero count", "count",
         [&](Communicator& c) { return c.allReduce(send, recv, 0, f32, sum, nullptr); }},
        {"allReduce overflowing count", "count",
         [&](Communicator& c) { return c.allReduce(send, recv, overflowAll, f32, sum, nullptr); }},
        {"allReduce overflowing f16 count", "count",
         [&](Communicator& c) { return c.allReduce(send, recv, SIZE_MAX / 2 + 1, DataType::kF16, sum, nullptr); }},
        {"allReduce SIZE_MAX count", "count",
         [&](Communicator& c) { return c.allReduce(send, recv, SIZE_MAX, f32, sum, nullptr); }},
        {"allReduce unknown dtype", "dtype",
         [&](Communicator& c) { return c.allReduce(send, recv, 4, badType, sum, nullptr); }},
        {"allReduce negative dtype", "dtype",
         [&](Communicator& c) { return c.allReduce(send, recv, 4, static_cast<DataType>(-1), sum, nullptr); }},
        {"allReduce unknown op", "op",
         [&](Communicator& c) { return c.allReduce(send, recv, 4, f32, badOp, nullptr); }},
        {"allReduce stream on a host comm", "stream",
         [&](Communicator& c) { return c.allReduce(send, recv, 4, f32, sum, bogusStream); }},
        {"reduceScatter null send", "send",
         [&](Communicator& c) { return c.reduceScatter(nullptr, recv, 4, f32, sum, nullptr); }},
        {"reduceScatter null recv", "recv",
         [&](Communicator& c) { return c.reduceScatter(send, nullptr, 4, f32, sum, nullptr); }},
        {"reduceScatter zero count", "count",
         [&](Communicator& c) { return c.reduceScatter(send, recv, 0, f32, sum, nullptr); }},
        {"reduceScatter count * ranks overflows", "count",
         [&](Communicator& c) { return c.reduceScatter(send, recv, overflowPerRank, f32, sum, nullptr); }},
        {"reduceScatter unknown dtype", "dtype",
         [&](Communicator& c) { return c.reduceScatter(send, recv, 4, badType, sum, nullptr); }},
        {"reduceScatter unknown op", "op",
         [&](Communicator& c) { return c.reduceScatter(send, recv, 4, f32, badOp, nullptr); }},
        {"reduceScatter stream on a host comm", "stream",
         [&](Communicator& c) { return c.reduceScatter(send, recv, 4, f32, sum, bogusStream); }},
        {"allGather null send", "send", [&](Communicator& c) { return c.allGather(nullptr, recv, 4, f32, nullptr); }},
        {"allGather null recv", "recv", [&](Communicator& c) { return c.allGather(send, nullptr, 4, f32, nullptr); }},
        {"allGather zero count", "count", [&](Communicator& c) { return c.allGather(send, recv, 0, f32, nullptr); }},
        {"allGather count * ranks overflows", "count",
         [&](Communicator& c) { return c.allGather(send, recv, overflowPerRank, f32, nullptr); }},
        {"allGather unknown dtype", "dtype",
         [&](Communicator& c) { return c.allGather(send, recv, 4, badType, nullptr); }},
        {"allGather stream on a host comm", "stream",
         [&](Communicator& c) { return c.allGather(send, recv, 4, f32, bogusStream); }},
    };
    for (const BadCall& bc : calls)
      expectInvalid(bc.call(comm), bc.mustMention, std::string(bc.what) + " (rank " + std::to_string(me) + ")");

    // Still usable, and success clears the message.
    ASSERT_EQ(comm.allReduce(send, recv, 64, f32, sum, nullptr), Status::kOk) << lastErrorMessage();
    EXPECT_STREQ(lastErrorMessage(), "");
    for (int i = 0; i < 64; ++i) ASSERT_EQ(recv[i], static_cast<float>(n));
    EXPECT_EQ(comm.checkError(), Status::kOk);
  });
}

TEST(BadInput, MisuseAfterDestroy) {
  auto group = ThreadGroup::create(1);
  std::unique_ptr<Bootstrap> bs;
  ASSERT_EQ(makeThreadBootstrap(group, 0, &bs), Status::kOk);
  std::unique_ptr<Communicator> comm;
  ASSERT_EQ(Communicator::create(*bs, -1, Config{}, &comm), Status::kOk) << lastErrorMessage();
  float x[4] = {1, 2, 3, 4}, y[4];
  ASSERT_EQ(comm->allReduce(x, y, 4, DataType::kF32, ReduceOp::kSum, nullptr), Status::kOk);
  ASSERT_EQ(comm->destroy(), Status::kOk) << lastErrorMessage();
  expectInvalid(comm->allReduce(x, y, 4, DataType::kF32, ReduceOp::kSum, nullptr), "destroyed",
                "allReduce after destroy");
  expectInvalid(comm->reduceScatter(x, y, 4, DataType::kF32, ReduceOp::kSum, nullptr), "destroyed",
                "reduceScatter after destroy");
  expectInvalid(comm->allGather(x, y, 4, DataType::kF32, nullptr), "destroyed", "allGather after destroy");
  expectInvalid(comm->checkError(), "destroyed", "checkError after destroy");
  expectInvalid(comm->destroy(), "destroy", "destroy twice");
  EXPECT_NE(comm->lastAlgorithm(), nullptr);
  comm.reset();  // the destructor after destroy() is fine
}

TEST(BadInput, CreateArguments) {
  auto group = ThreadGroup::create(1);
  std::unique_ptr<Bootstrap> bs;
  ASSERT_EQ(makeThreadBootstrap(group, 0, &bs), Status::kOk);
  std::unique_ptr<Communicator> comm;
  expectInvalid(Communicator::create(*bs, -2, Config{}, &comm), "device -2", "create with device -2");
  EXPECT_EQ(comm, nullptr);
  expectInvalid(Communicator::create(*bs, -1, Config{}, nullptr), "out", "create with out null");
  Config negativeTimeout;
  negativeTimeout.timeoutMs = -1;
  expectInvalid(Communicator::create(*bs, -1, negativeTimeout, &comm), "timeoutMs", "create with timeoutMs -1");
  Config negativeSetup;
  negativeSetup.setupTimeoutMs = -1;
  expectInvalid(Communicator::create(*bs, -1, negativeSetup, &comm), "setupTimeoutMs", "create with setupTimeoutMs -1");
  Config ncclOnHost;
  int notAComm = 0;
  ncclOnHost.ncclComm = &notAComm;
  expectInvalid(Communicator::create(*bs, -1, ncclOnHost, &comm), "ncclComm",
                "create with an NCCL comm on a host rank");
  Config badAlgo;
  badAlgo.algo = "0-64K:nosuch";
  expectInvalid(Communicator::create(*bs, -1, badAlgo, &comm), "nosuch", "create with a bad config.algo");
  EXPECT_EQ(comm, nullptr);
  {
    test::ScopedEnv env("TPCOMM_ALGO", "64K-0:staged_host");
    expectInvalid(Communicator::create(*bs, -1, Config{}, &comm), "64K-0", "create with a bad TPCOMM_ALGO");
  }
  // The same bootstrap still creates a communicator once the arguments are right.
  ASSERT_EQ(Communicator::create(*bs, -1, Config{}, &comm), Status::kOk) << lastErrorMessage();
  EXPECT_EQ(comm->destroy(), Status::kOk);
}

TEST(BadInput, OneRankWithABadOverrideFailsEveryRank) {
  std::vector<Status> status;
  std::vector<std::string> messages;
  test::createOnThreads(
      2,
      [](int r) {
        Config cfg;
        if (r == 1) cfg.algo = "abc";
        return cfg;
      },
      &status, &messages);
  EXPECT_EQ(status[0], Status::kInvalidArgument) << messages[0];
  EXPECT_NE(messages[0].find("another rank"), std::string::npos) << messages[0];
  EXPECT_EQ(status[1], Status::kInvalidArgument) << messages[1];
  EXPECT_NE(messages[1].find("abc"), std::string::npos) << messages[1];
}

// The message carries no status name, so a caller printing both (the README's
// "allReduce: %s: %s", statusName(s), lastErrorMessage()) shows the status once.
TEST(BadInput, MessageCarriesTheStatusOnce) {
  test::runHostRanks(1, Config{}, [&](int, Communicator& comm) {
    float x = 0;
    Status s = comm.allReduce(&x, &x, 0, DataType::kF32, ReduceOp::kSum, nullptr);
    ASSERT_EQ(s, Status::kInvalidArgument);
    const std::string line = std::string(statusName(s)) + ": " + lastErrorMessage();
    EXPECT_EQ(line.find("kInvalidArgument"), line.rfind("kInvalidArgument")) << line;
    EXPECT_EQ(std::string(lastErrorMessage()).rfind("allReduce: ", 0), 0u) << lastErrorMessage();
  });
  test::ScopedEnv env("TPCOMM_TIMEOUT_MS", "abc");
  std::vector<Status> status;
  std::vector<std::string> messages;
  test::createOnThreads(
      2, [](int) { return Config{}; }, &status, &messages);
  for (const std::string& m : messages) EXPECT_EQ(m.find("kInvalidArgument"), std::string::npos) << m;
}

// One rule for every TPCOMM_ variable (common/params.h): a value tpcomm cannot
// use fails create on every rank, naming the variable, the value and what is accepted. Before,
// TPCOMM_STAGED_CHUNK_BYTES=5000 passed create and then every call failed with kNotSupported
// (a chunk size that is not a multiple of 4096), and numbers out of range were replaced by the default with a warning.
TEST(BadInput, RejectedEnvironmentValueFailsCreateOnEveryRank) {
  for (const test::RejectedValue& row : test::rejectedValues()) {
    SCOPED_TRACE(std::string(row.env) + "=" + row.value);
    test::ScopedEnv env(row.env, row.value);
    test::expectCreateOnThreads(2, Status::kInvalidArgument,
                                {std::string(row.env) + "='" + row.value + "'", row.accepted});
  }
  // Set but empty: the default, so create succeeds.
  for (const char* env : {"TPCOMM_COMPRESSION", "TPCOMM_STAGED_CHUNK_BYTES", "TPCOMM_TIMEOUT_MS", "TPCOMM_ALGO"}) {
    SCOPED_TRACE(std::string(env) + "=''");
    test::ScopedEnv empty(env, "");
    test::expectCreateOnThreads(2, Status::kOk);
  }
}

// An explicit argument wins over the environment: create does not read a variable that code set
// (Config::timeoutMs, Config::compression), so a bad value there does not fail it.
TEST(BadInput, ExplicitConfigWinsOverARejectedEnvironmentValue) {
  test::ScopedEnv timeout("TPCOMM_TIMEOUT_MS", "abc");
  std::vector<Status> status;
  std::vector<std::string> messages;
  test::createOnThreads(
      2,
      [](int) {
        Config c;
        c.timeoutMs = 5000;
        return c;
      },
      &status, &messages);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(status[r], Status::kOk) << messages[r];
}

// Valid but different selection overrides would make ranks run different algorithms (a hang or
// wrong data): create fails on every rank and says which rank differs.
TEST(BadInput, RanksWithDifferentOverridesFailEveryRank) {
  std::vector<Status> status;
  std::vector<std::string> messages;
  test::createOnThreads(
      2,
      [](int r) {
        Config cfg;
        cfg.algo = r == 0 ? "staged_host" : "";
        return cfg;
      },
      &status, &messages);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(status[r], Status::kInvalidArgument) << messages[r];
    EXPECT_NE(messages[r].find("rank 1 differs from rank 0"), std::string::npos) << messages[r];
  }
}

TEST(BadInput, CreateGroupArguments) {
  std::vector<std::unique_ptr<Communicator>> comms;
  expectInvalid(Communicator::createGroup({}, Config{}, &comms), "devices", "createGroup with no devices");
  expectInvalid(Communicator::createGroup({0, 0}, Config{}, &comms), "device 0 appears twice",
                "createGroup with a duplicate");
  expectInvalid(Communicator::createGroup({1, 2, 1}, Config{}, &comms), "device 1 appears twice",
                "createGroup with a duplicate");
  expectInvalid(Communicator::createGroup({0, -1}, Config{}, &comms), "devices[1] = -1",
                "createGroup with a negative device");
  expectInvalid(Communicator::createGroup({0}, Config{}, nullptr), "out", "createGroup with out null");
  EXPECT_TRUE(comms.empty());
}

TEST(BadInput, BootstrapArguments) {
  EXPECT_EQ(ThreadGroup::create(0), nullptr);
  EXPECT_EQ(ThreadGroup::create(-3), nullptr);
  std::unique_ptr<Bootstrap> bs;
  expectInvalid(makeThreadBootstrap(nullptr, 0, &bs), "group", "makeThreadBootstrap with a null group");
  auto group = ThreadGroup::create(2);
  expectInvalid(makeThreadBootstrap(group, 2, &bs), "rank 2", "makeThreadBootstrap with rank 2 of 2");
  expectInvalid(makeThreadBootstrap(group, -1, &bs), "rank -1", "makeThreadBootstrap with rank -1");
  expectInvalid(makeThreadBootstrap(group, 0, nullptr), "out", "makeThreadBootstrap with out null");
  // An absurd rank count is refused at once, not allocated (2^31 - 1 socket ranks would take 19 s and
  // 8 GB of file-descriptor table before timing out).
  EXPECT_EQ(ThreadGroup::create(1 << 20), nullptr);
  SocketUniqueId id;
  ASSERT_EQ(makeSocketUniqueIdForAddress("127.0.0.1", &id), Status::kOk);
  const auto t0 = std::chrono::steady_clock::now();
  expectInvalid(makeSocketBootstrap(id, 2147483646, 2147483647, 300, &bs), "size 2147483647",
                "makeSocketBootstrap with 2^31 - 1 ranks");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  // bytesPerRank x ranks must fit a size_t (the table is that long); refused before any wait.
  ASSERT_EQ(makeThreadBootstrap(group, 0, &bs), Status::kOk);
  char one = 0;
  expectInvalid(bs->allGather(&one, &one, SIZE_MAX / 2 + 1), "overflows", "allGather whose table overflows");
}

// A forced algorithm host ranks cannot run: the calls fall back, and create
// says so on stderr (it used to run staged_host silently).
TEST(BadInput, ForcedAlgorithmThatCannotRunIsReported) {
  Config cfg;
  cfg.algo = "0-inf:ring_nccl";
  testing::internal::CaptureStderr();
  test::runHostRanks(2, cfg, [&](int, Communicator& comm) {
    std::vector<float> a(16, 1.0f), b(16, 0.0f);
    EXPECT_EQ(comm.allReduce(a.data(), b.data(), 16, DataType::kF32, ReduceOp::kSum, nullptr), Status::kOk);
    EXPECT_STREQ(comm.lastAlgorithm(), "staged_host");
  });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("forces ring_nccl, which this communicator cannot run (host ranks)"), std::string::npos) << err;
}

// The public residual + norm alone (tpcomm/rmsnorm.h): argument checks before any CUDA call.
TEST(BadInput, ResidualRmsNormArguments) {
  std::vector<float> x(8), res(8), w(4), out(8);
  expectInvalid(residualRmsNorm(nullptr, res.data(), w.data(), 1e-6f, out.data(), 2, 4, DataType::kF32, nullptr), "x",
                "residualRmsNorm null x");
  expectInvalid(residualRmsNorm(x.data(), res.data(), w.data(), 1e-6f, out.data(), 0, 4, DataType::kF32, nullptr),
                "rows", "residualRmsNorm zero rows");
  expectInvalid(residualRmsNorm(x.data(), res.data(), w.data(), -1.0f, out.data(), 2, 4, DataType::kF32, nullptr),
                "eps", "residualRmsNorm negative eps");
  expectInvalid(residualRmsNorm(x.data(), x.data(), w.data(), 1e-6f, out.data(), 2, 4, DataType::kF32, nullptr),
                "residualInOut", "residualRmsNorm residual aliasing x");
  float* nearTop = reinterpret_cast<float*>(UINTPTR_MAX - 15);
  expectInvalid(residualRmsNorm(nearTop, res.data(), w.data(), 1e-6f, out.data(), 2, 4, DataType::kF32, nullptr), "x [",
                "residualRmsNorm x past the top of the address space");
  expectInvalid(residualRmsNorm(x.data(), res.data(), w.data(), 1e-6f, nearTop, 2, 4, DataType::kF32, nullptr), "out [",
                "residualRmsNorm out past the top of the address space");
}

TEST(BadInput, NamesOfEnums) {
  EXPECT_STREQ(dataTypeName(static_cast<DataType>(7)), "invalid");
  EXPECT_STREQ(reduceOpName(static_cast<ReduceOp>(7)), "invalid");
  EXPECT_EQ(dataTypeSize(static_cast<DataType>(7)), 0u);
  EXPECT_EQ(dataTypeSize(DataType::kF32), 4u);
  EXPECT_EQ(dataTypeSize(DataType::kF16), 2u);
  EXPECT_EQ(dataTypeSize(DataType::kBF16), 2u);
  for (int s = 0; s <= static_cast<int>(Status::kInternal); ++s) EXPECT_STRNE(statusName(static_cast<Status>(s)), "");
  EXPECT_NE(statusName(static_cast<Status>(99)), nullptr);
}

}  // namespace
}  // namespace tpcomm
