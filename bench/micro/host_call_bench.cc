// host_call_bench.cc: Google Benchmark cases for what one eager all-reduce costs on the host,
// piece by piece, on a machine without a GPU. For small messages in eager mode
// this host cost is a large part of the call's time, so it is measured here and kept small.
//
// Cases (bench/results/ci-vm-2core.md#host-cost-of-one-call-benchmicro has the table and what each excludes):
//   ArgChecks        what Communicator::allReduce checks before any peer is involved: the
//                    entry (clearError, use after destroy, the asynchronous error word),
//                    validateCall, checkOverlap, collArgs.
//   SelectUncached   selectForShape over the real registry on a 2-GPU NVLink topology: what a
//                    call shape costs the first time (later calls hit the cache).
//   EagerCallStubbedLaunch  the whole host side of one GPU-rank allReduce: the checks above, then
//                    runCollective (cached selection, the candidate walk) into an algorithm whose
//                    run() does P2pAlgorithm::run's host work (size check, kernel parameters from a
//                    cached base) and hands the parameters to a stub instead of cudaLaunchKernelEx.
//                    Not included: the CUDA runtime calls (DeviceGuard's cudaGetDevice, the launch
//                    itself, the stream-order event recorded after the call), which need a GPU.
//   HostRankAllReduce  the public API end to end on a one-rank host communicator (copy_local).
//   HostReduce       hostReduce (staged_host's reduction on host ranks): sum of n ranks' buffers.
//   Quantize         hostQuantize (the compressed all-reduce's encoder on host ranks).
//
// Uses tpcomm's internals (src/), like the tests; not installed.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "algos/common/launch_params.h"
#include "algos/compressed/quantize_host.h"
#include "algos/host/host_reduce.h"
#include "algos/p2p/p2p_launch.h"
#include "collectives/call_checks.h"
#include "collectives/communicator_impl.h"
#include "collectives/registry.h"
#include "collectives/selector.h"
#include "tpcomm/tpcomm.h"

namespace tpcomm {
namespace {

// --- a GPU-rank communicator whose kernels are not launched ---

// Keeps the parameters a launch would pass, so the compiler cannot drop their construction.
P2pLaunch gSink;

// One registry algorithm (selection-only: supports, costs, name from the real class) whose run()
// does P2pAlgorithm::run's host work and stops where cudaLaunchKernelEx would be called.
class StubLaunch final : public Algorithm {
 public:
  explicit StubLaunch(std::unique_ptr<Algorithm> real) : real_(std::move(real)) {
    base_ = P2pLaunch{};
    base_.rank = 0;
    base_.nRanks = 2;
    static char peerBuffers[2][64];
    for (int r = 0; r < 2; ++r) base_.peers[r] = peerBuffers[r];
    base_.layout.nRanks = 2;  // a plan's worth of fields; the stub never addresses the buffer
    base_.layout.maxBlocks = 128;
    base_.layout.channels = 4;
    base_.timeoutNs = 10000ull * 1000000ull;
  }
  const char* name() const override { return real_->name(); }
  const char* fusedName() const override { return real_->fusedName(); }
  const char* transport() const override { return real_->transport(); }
  bool supports(const Topology& t, const AlgoQuery& q, std::string* why) const override {
    return real_->supports(t, q, why);
  }
  bool available() const override { return true; }
  bool launchesOnly() const override { return real_->launchesOnly(); }
  bool deterministic() const override { return real_->deterministic(); }
  Compression compression() const override { return real_->compression(); }
  Status run(const CollArgs& a) override {
    if (a.bytes() > (size_t{2} << 20)) return Status::kNotSupported;  // checkSize against a cached cap
    P2pLaunch p = base_;                                              // launchParams: cached base + the call
    p.send = a.send;
    p.recv = a.recv;
    p.count = a.count;
    p.dtype = static_cast<int>(a.dtype);
    p.op = static_cast<int>(a.op);
    p.blocks = 32;
    p.kind = static_cast<int>(a.kind);
    p.signature = 0;
    benchmark::DoNotOptimize(p2pVectorizable(p.send, p.recv));  // the launcher's dispatch input
    std::memcpy(&gSink, &p, sizeof(p));                         // kernel parameters passed by value
    benchmark::ClobberMemory();
    return Status::kOk;
  }

 private:
  std::unique_ptr<Algorithm> real_;
  P2pLaunch base_;
};

uint32_t gNoError = 0;

struct StubComm {
  Communicator::Impl impl;
  StubComm() {
    AlgoContext& c = *impl.ctx;
    c.rank = 0;
    c.nRanks = 2;
    c.device = 0;
    c.topo = Topology::uniform(2, LinkKind::kNvlink, 18);
    c.asyncError.word = &gNoError;
    impl.orderStreams = false;  // the order event is a CUDA call, outside what these cases time
    for (auto& a : makeAlgorithms(nullptr)) impl.algos.push_back(std::make_unique<StubLaunch>(std::move(a)));
    impl.algoList = rawList(impl.algos);
  }
  ~StubComm() { impl.ctx->asyncError = AsyncError{}; }  // not the library's to free
};

// Communicator::allReduce's opening (communicator.cc: enter, runAllReduce) without DeviceGuard.
inline Status checkedArgs(Communicator::Impl& impl, const void* send, void* recv, size_t count, DataType dt,
                          cudaStream_t stream, CollArgs* a) {
  clearError();
  if (impl.destroyed) return Status::kInvalidArgument;
  if (*impl.ctx->asyncError.word != 0) return Status::kRemoteError;
  TPCOMM_TRY(validateCall("allReduce", send, recv, count, dt, ReduceOp::kSum, impl.ctx->nRanks, false));
  const size_t bytes = count * dataTypeSize(dt);
  TPCOMM_TRY(checkOverlap("allReduce", send, bytes, recv, bytes, send == recv));
  *a = collArgs(CollKind::kAllReduce, send, recv, count, dt, ReduceOp::kSum, stream);
  a->compression = -1;
  return Status::kOk;
}

cudaStream_t fakeStream() { return reinterpret_cast<cudaStream_t>(uintptr_t{0x1000}); }  // never dereferenced

void ArgChecks(benchmark::State& state) {
  StubComm comm;
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> buf(bytes + 64);
  CollArgs a;
  for (auto _ : state) {
    Status s = checkedArgs(comm.impl, buf.data(), buf.data(), bytes / 2, DataType::kBF16, fakeStream(), &a);
    benchmark::DoNotOptimize(s);
    benchmark::DoNotOptimize(a);
  }
}
BENCHMARK(ArgChecks)->Arg(8)->Arg(8192)->Arg(262144);

void SelectUncached(benchmark::State& state) {
  StubComm comm;
  AlgoQuery q{CollKind::kAllReduce, DataType::kBF16, ReduceOp::kSum, static_cast<size_t>(state.range(0)), false};
  for (auto _ : state) {
    ShapeSelection sel = selectForShape(comm.impl.algoList, comm.impl.ctx->topo, q, comm.impl.override, nullptr);
    benchmark::DoNotOptimize(sel.eager.data());
  }
}
BENCHMARK(SelectUncached)->Arg(8)->Arg(8192)->Arg(262144);

void EagerCallStubbedLaunch(benchmark::State& state) {
  StubComm comm;
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> send(bytes + 64), recv(bytes + 64);
  const bool inPlace = state.range(1) != 0;
  void* out = inPlace ? send.data() : recv.data();
  CollArgs a;
  Status s = Status::kOk;
  for (auto _ : state) {
    s = checkedArgs(comm.impl, send.data(), out, bytes / 2, DataType::kBF16, fakeStream(), &a);
    if (s == Status::kOk) s = runCollective(comm.impl, a, nullptr, "allReduce");
    benchmark::DoNotOptimize(s);
  }
  if (s != Status::kOk) state.SkipWithError((std::string("allReduce failed: ") + lastErrorMessage()).c_str());
  state.SetLabel(comm.impl.lastAlgorithm);
}
BENCHMARK(EagerCallStubbedLaunch)
    ->Args({8, 1})
    ->Args({8192, 1})
    ->Args({8192, 0})
    ->Args({262144, 1})
    ->Args({2097152, 1});

void HostRankAllReduce(benchmark::State& state) {
  auto group = ThreadGroup::create(1);
  std::unique_ptr<Bootstrap> bs;
  std::unique_ptr<Communicator> comm;
  if (makeThreadBootstrap(group, 0, &bs) != Status::kOk ||
      Communicator::create(*bs, -1, Config{}, &comm) != Status::kOk) {
    state.SkipWithError(lastErrorMessage());
    return;
  }
  const size_t count = static_cast<size_t>(state.range(0)) / 4;
  std::vector<float> send(count, 1.0f), recv(count);
  Status s = Status::kOk;
  for (auto _ : state) {
    s = comm->allReduce(send.data(), recv.data(), count, DataType::kF32, ReduceOp::kSum, nullptr);
    benchmark::DoNotOptimize(s);
  }
  if (s != Status::kOk) state.SkipWithError(lastErrorMessage());
  state.SetLabel(comm->lastAlgorithm());
  comm->destroy();
}
BENCHMARK(HostRankAllReduce)->Arg(8)->Arg(8192);

// --- the host reduction and the quantizer (per byte of one rank's input) ---

void HostReduce(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const size_t count = static_cast<size_t>(state.range(1));
  const DataType dt = state.range(2) ? DataType::kBF16 : DataType::kF32;
  const size_t bytes = count * dataTypeSize(dt);
  std::vector<std::vector<char>> in(n, std::vector<char>(bytes));
  std::vector<const void*> srcs(n);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) storeFromFloat(in[r].data(), i, dt, static_cast<float>((i + r) % 17) - 8.0f);
    srcs[r] = in[r].data();
  }
  std::vector<char> out(bytes);
  for (auto _ : state) {
    hostReduce(out.data(), srcs.data(), n, count, dt, ReduceOp::kSum);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.SetLabel(dt == DataType::kBF16 ? "bf16" : "f32");
}
BENCHMARK(HostReduce)->Args({2, 4096, 1})->Args({4, 4096, 1})->Args({4, 1 << 20, 1})->Args({4, 1 << 20, 0});

void Quantize(benchmark::State& state) {
  const QuantFormat f = state.range(0) ? QuantFormat::kInt8 : QuantFormat::kFp8E4m3;
  const size_t count = static_cast<size_t>(state.range(1));
  std::vector<char> x(count * 2);
  for (size_t i = 0; i < count; ++i)
    storeFromFloat(x.data(), i, DataType::kBF16, static_cast<float>(static_cast<int>(i * 37 % 201) - 100) / 7.0f);
  std::vector<uint8_t> codes(count);
  std::vector<float> scales((count + kQuantBlockElems - 1) / kQuantBlockElems);
  for (auto _ : state) {
    hostQuantize(f, x.data(), DataType::kBF16, count, codes.data(), scales.data());
    benchmark::DoNotOptimize(codes.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(count * 2));
  state.SetLabel(f == QuantFormat::kInt8 ? "int8, bf16 in" : "fp8 e4m3, bf16 in");
}
BENCHMARK(Quantize)->Args({1, 4096})->Args({0, 4096})->Args({1, 1 << 20})->Args({0, 1 << 20});

}  // namespace
}  // namespace tpcomm

BENCHMARK_MAIN();
