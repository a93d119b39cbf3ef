// The host collectives across processes (the shared-memory path of the host_staged transport),
// run under `mpiexec -n 2` and `-n 4 --oversubscribe` (see tests/mpi/CMakeLists.txt). Every rank
// checks every element of its own outputs bitwise against the exact result of integer inputs,
// in place and out of place, for f32/f16/bf16 x sum/max/min and counts that span many staging
// chunks. Two communicators: the default staging geometry and a tiny one (4 KiB x 2 slots) so
// that even small messages are cut into many chunks. Exit status: 0 only if every rank passed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tpcomm/mpi_bootstrap.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

using test::countWrong;
using test::expectedValue;
using test::fillInput;
using test::inputValue;
using test::makeBuffer;

// Counts in elements: odd ones, fewer than ranks, and (for the tiny geometry: 8 KiB of staging
// per rank) many chunks; 300007 f32 spans more than one chunk of the default geometry too.
const size_t kCounts[] = {1, 3, 7, 1023, 2048, 5003, 300007};

struct Geometry {
  const char* name;
  const char* chunkBytes;  // nullptr: the default
  const char* slots;
};
const Geometry kGeometries[] = {{"default staging", nullptr, nullptr}, {"4K x 2 staging", "4096", "2"}};

class MpiCollectives : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(makeMpiBootstrap(MPI_COMM_WORLD, &bootstrap_), Status::kOk) << lastErrorMessage();
  }
  static void TearDownTestSuite() { bootstrap_.reset(); }

  // Creates a host communicator with the given staging geometry (params are read at create).
  std::unique_ptr<Communicator> make(const Geometry& g) {
    test::ScopedEnv chunk("TPCOMM_STAGED_CHUNK_BYTES", g.chunkBytes);
    test::ScopedEnv slots("TPCOMM_STAGED_SLOTS", g.slots);
    std::unique_ptr<Communicator> comm;
    Status s = Communicator::create(*bootstrap_, -1, Config{}, &comm);
    EXPECT_EQ(s, Status::kOk) << lastErrorMessage();
    return comm;
  }

  static std::unique_ptr<Bootstrap> bootstrap_;
};
std::unique_ptr<Bootstrap> MpiCollectives::bootstrap_;

std::string label(const char* kind, DataType dt, const char* op, size_t count, bool inPlace, const Geometry& g,
                  int me) {
  return std::string(kind) + " " + dataTypeName(dt) + " " + op + " count " + std::to_string(count) +
         (inPlace ? " in place, " : " out of place, ") + g.name + ", rank " + std::to_string(me);
}

TEST_F(MpiCollectives, AllReduce) {
  for (const Geometry& g : kGeometries) {
    auto comm = make(g);
    ASSERT_NE(comm, nullptr);
    const int n = comm->size(), me = comm->rank();
    for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16})
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin})
        for (size_t count : kCounts)
          for (bool inPlace : {false, true}) {
            std::string what = label("allReduce", dt, reduceOpName(op), count, inPlace, g, me);
            std::vector<char> send = makeBuffer(count, dt), recv = makeBuffer(count, dt);
            fillInput(send.data(), count, dt, me);
            if (inPlace) recv = send;
            Status s = comm->allReduce(inPlace ? recv.data() : send.data(), recv.data(), count, dt, op, nullptr);
            ASSERT_EQ(s, Status::kOk) << what << ": " << lastErrorMessage();
            EXPECT_STREQ(comm->lastAlgorithm(), "staged_host") << what;
            std::string first;
            EXPECT_EQ(countWrong(
                          recv.data(), count, dt, [&](size_t i) { return expectedValue(n, i, op); }, &first),
                      0u)
                << what << ": first " << first;
            if (!inPlace)
              EXPECT_EQ(countWrong(
                            send.data(), count, dt, [&](size_t i) { return inputValue(me, i); }, &first),
                        0u)
                  << what << ": send modified, " << first;
          }
    EXPECT_EQ(comm->destroy(), Status::kOk) << lastErrorMessage();
  }
}

TEST_F(MpiCollectives, ReduceScatter) {
  for (const Geometry& g : kGeometries) {
    auto comm = make(g);
    ASSERT_NE(comm, nullptr);
    const int n = comm->size(), me = comm->rank();
    for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16})
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin})
        for (size_t count : kCounts)
          for (bool inPlace : {false, true}) {
            std::string what = label("reduceScatter", dt, reduceOpName(op), count, inPlace, g, me);
            const size_t es = dataTypeSize(dt);
            std::vector<char> send = makeBuffer(n * count, dt), recv = makeBuffer(count, dt);
            fillInput(send.data(), n * count, dt, me);
            char* out = inPlace ? send.data() + me * count * es : recv.data();
            Status s = comm->reduceScatter(send.data(), out, count, dt, op, nullptr);
            ASSERT_EQ(s, Status::kOk) << what << ": " << lastErrorMessage();
            std::string first;
            EXPECT_EQ(countWrong(
                          out, count, dt, [&](size_t i) { return expectedValue(n, me * count + i, op); }, &first),
                      0u)
                << what << ": first " << first;
            if (!inPlace)
              EXPECT_EQ(countWrong(
                            send.data(), n * count, dt, [&](size_t i) { return inputValue(me, i); }, &first),
                        0u)
                  << what << ": send modified, " << first;
          }
    EXPECT_EQ(comm->destroy(), Status::kOk) << lastErrorMessage();
  }
}

TEST_F(MpiCollectives, AllGather) {
  for (const Geometry& g : kGeometries) {
    auto comm = make(g);
    ASSERT_NE(comm, nullptr);
    const int n = comm->size(), me = comm->rank();
    for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16})
      for (size_t count : kCounts)
        for (bool inPlace : {false, true}) {
          std::string what = label("allGather", dt, "-", count, inPlace, g, me);
          const size_t es = dataTypeSize(dt);
          std::vector<char> send = makeBuffer(count, dt), recv = makeBuffer(n * count, dt);
          char* in = inPlace ? recv.data() + me * count * es : send.data();
          fillInput(in, count, dt, me);
          Status s = comm->allGather(in, recv.data(), count, dt, nullptr);
          ASSERT_EQ(s, Status::kOk) << what << ": " << lastErrorMessage();
          std::string first;
          EXPECT_EQ(countWrong(
                        recv.data(), n * count, dt,
                        [&](size_t j) { return inputValue(static_cast<int>(j / count), j % count); }, &first),
                    0u)
              << what << ": first " << first;
        }
    EXPECT_EQ(comm->destroy(), Status::kOk) << lastErrorMessage();
  }
}

// Settings that size the scratch peers address, or the choices ranks must make alike, must be the
// same on every rank: the last rank sets one of them alone and create fails on every rank, naming
// it (a rank with a larger TPCOMM_LL_MAX_BYTES than its peers would store past their buffers).
// The communicator created afterwards, with equal settings, works.
TEST_F(MpiCollectives, CreateRefusesSharedSettingsThatDifferBetweenRanks) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* const kSettings[][2] = {{"TPCOMM_LL_MAX_BYTES", "1048576"},
                                      {"TPCOMM_LAMPORT_MAX_BYTES", "1048576"},
                                      {"TPCOMM_STAGED_SLOTS", "3"},
                                      {"TPCOMM_P2P_BLOCKS", "16"},
                                      {"TPCOMM_STAGED_CE_SPLIT", "1"}};  // chunk boundaries and sequence numbers
  for (const auto& kv : kSettings) {
    SCOPED_TRACE(std::string(kv[0]) + " on rank " + std::to_string(size - 1) + " only");
    test::ScopedEnv differs(kv[0], rank == size - 1 ? kv[1] : nullptr);
    std::unique_ptr<Communicator> comm;
    EXPECT_EQ(Communicator::create(*bootstrap_, -1, Config{}, &comm), Status::kInvalidArgument);
    EXPECT_EQ(comm, nullptr);
    EXPECT_NE(std::string(lastErrorMessage()).find(kv[0]), std::string::npos) << lastErrorMessage();
  }
  auto comm = make(kGeometries[0]);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->destroy(), Status::kOk) << lastErrorMessage();
}

TEST_F(MpiCollectives, SharedSegmentIsUnlinked) {
  // The POSIX shm segment is unlinked once every rank mapped it: nothing named tpcomm-* of
  // rank 0's pid may remain in /dev/shm while a communicator lives.
  auto comm = make(kGeometries[1]);
  ASSERT_NE(comm, nullptr);
  int pid0 = static_cast<int>(getpid());
  MPI_Bcast(&pid0, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string prefix = "/dev/shm/tpcomm-" + std::to_string(pid0) + "-";
  FILE* ls = popen(("ls " + prefix + "* 2>/dev/null").c_str(), "r");
  ASSERT_NE(ls, nullptr);
  char line[256];
  std::string leftovers;
  while (fgets(line, sizeof(line), ls)) leftovers += line;
  pclose(ls);
  EXPECT_EQ(leftovers, "") << "shared memory left linked";
  EXPECT_EQ(comm->destroy(), Status::kOk);
}


// A segment left by a rank 0 that died between shm_open and shm_unlink is
// removed by the next create in processes mode (rank 0 cleans this user's tpcomm segments whose
// pid is gone before it makes its own), not only by `tpcomm-doctor --clean`.
TEST_F(MpiCollectives, CreateRemovesStaleSegmentsOfDeadProcesses) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string stale;
  if (rank == 0) {
    int pid = 4194303;  // above any pid_max but the largest: no such process
    while (pid > 1 && !(kill(pid, 0) != 0 && errno == ESRCH)) --pid;
    stale = "/tpcomm-" + std::to_string(pid) + "-0-5ta1e000";
    int fd = shm_open(stale.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    ASSERT_GE(fd, 0) << "shm_open " << stale;
    ASSERT_EQ(ftruncate(fd, 4096), 0);
    close(fd);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  auto comm = make(kGeometries[1]);
  ASSERT_NE(comm, nullptr);
  if (rank == 0) {
    struct stat st;
    const bool left = stat(("/dev/shm" + stale).c_str(), &st) == 0;
    if (left) shm_unlink(stale.c_str());
    EXPECT_FALSE(left) << "create left the dead process's segment /dev/shm" << stale;
  }
  EXPECT_EQ(comm->destroy(), Status::kOk);
}

}  // namespace
}  // namespace tpcomm

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ::testing::InitGoogleTest(&argc, argv);
  // Only rank 0 prints the progress lines; every rank prints its failures.
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    struct FailurePrinter : ::testing::EmptyTestEventListener {
      int rank;
      explicit FailurePrinter(int r) : rank(r) {}
      void OnTestPartResult(const ::testing::TestPartResult& r) override {
        if (r.failed())
          std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank, r.file_name() ? r.file_name() : "?", r.line_number(),
                       r.summary());
      }
    };
    listeners.Append(new FailurePrinter(rank));
  }
  int local = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("tpcomm mpi test: %d ranks, %s\n", size, any ? "FAILED on some rank" : "passed on every rank");
  MPI_Finalize();
  return any ? 1 : 0;
}
