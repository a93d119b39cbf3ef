// The socket bootstrap against hostile processes on its port (issue 34 item 7), loopback only.
//   - A process that squats the port before rank 0 binds it: the ranks that connect to it must
//     never send it the job's secret, and must refuse its answers (it cannot prove it knows the
//     secret). The defect: a rank whose first message carries the secret in clear.
//   - A flood of connections that send nothing, against a rank 0 with few file descriptors: the
//     real ranks must still get in, and rank 0 must wait in poll, not spin. The defect: a rank 0
//     that accepts until its descriptors run out, then spins at 100% CPU on accept's EMFILE with
//     the real ranks locked out until the timeout.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tpcomm/socket_bootstrap.h"
#include "tpcomm/tpcomm.h"

namespace tpcomm {
namespace {

using Clock = std::chrono::steady_clock;

sockaddr_in loopback(uint16_t portNetworkOrder) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = portNetworkOrder;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}
uint16_t portOf(const SocketUniqueId& id) {
  uint16_t p;
  std::memcpy(&p, id.bytes + 6, 2);  // layout: src/bootstrap/socket_io.h
  return p;
}
const unsigned char* secretOf(const SocketUniqueId& id) { return id.bytes + 32; }

// Reads what arrives on fd for up to `ms`, appending it to *got.
void drain(int fd, int ms, std::string* got) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  char buf[4096];
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    got->append(buf, static_cast<size_t>(n));
  }
}

TEST(SocketBootstrapFault, ASquatterOnThePortNeverSeesTheSecret) {
  SocketUniqueId id;
  ASSERT_EQ(makeSocketUniqueIdForAddress("127.0.0.1", &id), Status::kOk);
  int squat = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(squat, 0);
  int one = 1;
  ::setsockopt(squat, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = loopback(portOf(id));
  ASSERT_EQ(::bind(squat, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(squat, 8), 0);
  Status rankResult = Status::kOk;
  std::string rankMsg;
  std::thread rank1([&] {
    std::unique_ptr<Bootstrap> bs;
    rankResult = makeSocketBootstrap(id, 1, 2, 1500, &bs);
    rankMsg = lastErrorMessage();
  });
  int c = ::accept(squat, nullptr, nullptr);
  ASSERT_GE(c, 0);
  // The squatter plays rank 0 as far as it can without the secret: it sends what a rank 0 sends
  // first (a challenge: the wire magic and version, then a nonce), reads everything the rank
  // sends back, then sends a verdict of success with a made-up proof, then reads again.
  std::string got;
  unsigned char challenge[40] = {0x57, 0x43, 0x50, 0x54, 2, 0, 0, 0};  // "TPCW", version 2
  for (int i = 8; i < 40; ++i) challenge[i] = static_cast<unsigned char>(i * 37);
  (void)!::send(c, challenge, sizeof(challenge), MSG_NOSIGNAL);
  drain(c, 300, &got);
  std::vector<unsigned char> verdict(512, 0);
  std::memcpy(verdict.data(), challenge, 4);  // magic, then status 0 and junk
  (void)!::send(c, verdict.data(), verdict.size(), MSG_NOSIGNAL);
  drain(c, 300, &got);
  rank1.join();
  ::close(c);
  ::close(squat);
  const std::string secret(reinterpret_cast<const char*>(secretOf(id)), 32);
  EXPECT_EQ(got.find(secret), std::string::npos) << "the rank sent the job's secret to a process squatting the port";
  for (size_t k = 0; k + 8 <= 32; k += 8)  // nor any 8-byte piece of it
    EXPECT_EQ(got.find(secret.substr(k, 8)), std::string::npos) << "secret bytes " << k << ".." << k + 8;
  EXPECT_NE(rankResult, Status::kOk) << "the rank accepted a squatter as its rank 0";
  EXPECT_NE(rankMsg.find("rank 0"), std::string::npos) << rankMsg;
}

// Rank 0 in a child process with 64 file descriptors; 300 connections that never send a byte;
// then ranks 1 and 2 join. Everyone must get through, and rank 0's CPU time over the rendezvous
// must stay well below its wall time.
TEST(SocketBootstrapFault, AConnectionFloodNeitherLocksOutTheRanksNorSpinsRankZero) {
  SocketUniqueId id;
  ASSERT_EQ(makeSocketUniqueIdForAddress("127.0.0.1", &id), Status::kOk);
  constexpr int kTimeoutMs = 6000;
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  char logPath[] = "/tmp/tpcomm_flood_XXXXXX";
  const int logFd = ::mkstemp(logPath);
  ASSERT_GE(logFd, 0);
  fflush(nullptr);
  pid_t root = ::fork();
  if (root == 0) {
    ::dup2(logFd, 2);  // rank 0's warnings, for the parent to read
    setenv("TPCOMM_DEBUG", "WARN", 1);
    rlimit lim{64, 64};
    setrlimit(RLIMIT_NOFILE, &lim);
    auto t0 = Clock::now();
    rusage r0{}, r1{};
    getrusage(RUSAGE_SELF, &r0);
    std::unique_ptr<Bootstrap> bs;
    Status s = makeSocketBootstrap(id, 0, 3, kTimeoutMs, &bs);
    getrusage(RUSAGE_SELF, &r1);
    auto us = [](const timeval& t) { return t.tv_sec * 1e6 + t.tv_usec; };
    double cpu = us(r1.ru_utime) - us(r0.ru_utime) + us(r1.ru_stime) - us(r0.ru_stime);
    double wall = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    char line[256];
    int n = std::snprintf(line, sizeof(line), "%d %.0f %.0f %.150s", static_cast<int>(s), cpu, wall,
                          s == Status::kOk ? "" : lastErrorMessage());
    (void)!::write(report[1], line, static_cast<size_t>(n));
    _exit(0);
  }
  ::close(report[1]);
  // The flood: connect as soon as rank 0 listens, send nothing, hold every connection open.
  std::vector<int> flood;
  sockaddr_in a = loopback(portOf(id));
  const auto floodEnd = Clock::now() + std::chrono::seconds(3);
  while (flood.size() < 300 && Clock::now() < floodEnd) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {  // established once writable with no error (a full backlog: not yet)
      pollfd p{fd, POLLOUT, 0};
      socklen_t len = sizeof(err);
      if (::poll(&p, 1, 100) <= 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = ETIMEDOUT;
    }
    if (err == 0) {
      flood.push_back(fd);
    } else {
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ASSERT_GE(flood.size(), 100u) << "the flood could not even start";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 sees the flood first
  Status got[2];
  std::string msg[2];
  std::vector<std::thread> ranks;
  for (int r = 1; r <= 2; ++r)
    ranks.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bs;
      got[r - 1] = makeSocketBootstrap(id, r, 3, kTimeoutMs, &bs);
      msg[r - 1] = lastErrorMessage();
    });
  for (auto& t : ranks) t.join();
  char line[256] = {};
  ssize_t n = ::read(report[0], line, sizeof(line) - 1);
  int st = 0;
  ::waitpid(root, &st, 0);
  for (int fd : flood) ::close(fd);
  ::close(report[0]);
  ASSERT_GT(n, 0) << "rank 0 reported nothing";
  int rootStatus = -1;
  double cpu = 0, wall = 1;
  char rootMsg[160] = {};
  std::sscanf(line, "%d %lf %lf %159[^\n]", &rootStatus, &cpu, &wall, rootMsg);
  EXPECT_EQ(rootStatus, 0) << "rank 0: " << rootMsg;
  for (int r = 0; r < 2; ++r) EXPECT_EQ(got[r], Status::kOk) << "rank " << r + 1 << ": " << msg[r];
  EXPECT_LT(cpu, 0.5 * wall) << "rank 0 spent " << cpu / 1000 << " ms of CPU in " << wall / 1000 << " ms";
  // The bound on waiting connections kept rank 0 below its descriptor limit: accept never failed
  // (the fallback for that, dropping the oldest and resting, is not what let the ranks in).
  std::string log(1 << 16, '\0');
  const ssize_t logBytes = ::pread(logFd, &log[0], log.size(), 0);
  log.resize(logBytes > 0 ? static_cast<size_t>(logBytes) : 0);
  ::close(logFd);
  ::unlink(logPath);
  EXPECT_EQ(log.find("accept:"), std::string::npos) << "rank 0 ran out of descriptors: " << log;
  std::printf("flood of %zu connections: rank 0 used %.0f ms of CPU in %.0f ms\n", flood.size(), cpu / 1000,
              wall / 1000);
}

}  // namespace
}  // namespace tpcomm
