// staged_host_ce.cu: the kernels of staged_host's copy-engine mode (TPCOMM_STAGED_COPY_ENGINES=1,
// experimental; staged_host.cc's runCopyEngines drives them). The copy engines move the bytes
// between device and pinned host memory (cudaMemcpyAsync); these kernels only hand slots over
// and compute, so no SM load or store crosses PCIe except the flags.
//
// Who writes what where, per chunk c (slot s = (seqBase + c) % S, seq = seqBase + c + 1, inbox
// i = c % 2), on four internal streams of the rank, so the copy engines move chunk c while the
// SMs quantize chunk c + 1 and sum chunk c - 1:
//   quantize: ceFlags waits every rank's consumed[r][s][*] >= seq - S (the slot's last readers
//             are done; r = me covers the device twin, which this rank's sum read) ->
//             compressed: ceQuantize writes the chunk's codes into twin slot s (dense:
//             staged_pieces.h) -> event `quantized`. (Plain: the wait runs on the publish stream.)
//   publish:  after `quantized`: cudaMemcpyAsync D2H of the chunk (plain) or of the codes and
//             scales in twin slot s (compressed) into host slot (me, s) -> ceFlags releases
//             ready[me][s][*] = seq. The copy completed before ceFlags starts (stream order), so
//             the release publishes data already in host memory; st.release.sys orders it for
//             the peers' acquires.
//   fetch:    after event reduced[i] (chunk c - 2's sum, the last reader of inbox i, is done) ->
//             ceFlags waits ready[r][s][*] >= seq for every r (r = me: this rank's twin and its
//             input chunk were read) -> cudaMemcpyAsync H2D of every peer's host slot into part
//             r of inbox i -> event `fetched`.
//   reduce:   after `fetched`: ceReduce / ceSum reads the two failure words, then only device
//             memory (input or twin for this rank, inbox i for the peers), sums in rank order in
//             fp32 and writes the output chunk -> ceFlags releases consumed[me][s][*] = seq ->
//             event reduced[i].
// The call's stream forks all four (event `fork`) and waits for each of them (events joined[]).
// Flags are staged_host's (per rank, slot and block, sequence numbers growing across calls), and
// a slot is released for all its blocks at once, so a call too long for this mode (more than
// kCeMaxChunks chunks: staged_host.cc runs the SM kernel) and the calls around it share slots,
// flags and sequence numbers. Not CUDA-graph capturable (the sequence numbers are taken on the
// host per call).
// Failures (staged_device.cuh). Every wait is bounded by TPCOMM_TIMEOUT_MS. Unlike a kernel, a
// stream cannot skip its copies once a wait failed: the rank that timed out goes on copying into
// slots its peers may still read, and those peers' waits (>=) can be satisfied by later sequence
// numbers. So a failed wait publishes its code (kTimeout, the peer, why the peer was late) in the
// segment's failure word (host memory, every rank's GPU and host see it) and then in its error
// word, before anything later on its stream runs; a flags kernel that finds this rank's error
// word set by anything else copies it into the failure word too (this rank stops guarding its
// slots). Every ceFlags kernel first records this rank's arrival word and reads both words; once
// either is set it neither releases nor waits (the failure word copied into this rank's error
// word). The reduce and sum kernels read both words first too and then write nothing, so an
// output is right or untouched whatever its chunk's copies in brought (the fetch's wait may have
// been skipped). A rank whose copy in raced an overwrite and whose reduce kernel started before
// the failure was published sees it at the consumed release that follows, so it fails the same
// call: every rank reports kTimeout on this call and every later one, and an output that raced is
// never reported as kOk. TPCOMM_CHECK_CALLS: the flags kernel that releases ready[me][s][*] first
// writes the call's signature beside each flag; the one that waits for every rank's ready flags
// compares every peer's signature with its own (a mismatch: kInvalidArgument naming the peer,
// published as above, and the reduce kernels then write nothing).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>

#include "algos/common/device_common.cuh"
#include "algos/common/launch.cuh"
#include "algos/compressed/quantize.h"
#include "algos/compressed/quantize_warp.cuh"
#include "algos/staged_host/staged_device.cuh"
#include "algos/staged_host/staged_host.h"
#include "algos/staged_host/staged_host_ce.h"
#include "algos/staged_host/staged_pieces.h"
#include "common/error.h"
#include "transports/host_staged.h"

namespace tpcomm {
namespace {

using dev::Codes;
using dev::kPerLane;
using dev::Pack;
using dev::PackOf;
using dev::Wire;

constexpr int kB = kQuantBlockElems;

// This rank stops guarding its slots (its streams go on copying): its error word, whatever set
// it, into the failure word, so every rank fails (first failure wins). One thread.
__device__ __forceinline__ void ceStop(const StagedDeviceLaunch& p) {
  const uint32_t mine = dev::loadVolatile(p.errorWord);
  if (mine != 0) atomicCAS_system(p.poison, 0u, mine);
}

// Optionally releases release[me][slot][*] = value (after this rank's earlier work on the stream,
// which completed before this kernel started; ready's with the call's signature beside it, checks
// on), then waits wait[r][slot][*] >= target for every rank r (ready's: then compares every peer's
// signature). One block; thread i takes flags i, i + blockDim.x, ...
__global__ void ceFlagsKernel(StagedDeviceLaunch p, uint64_t* release, uint64_t value, const uint64_t* wait,
                              uint64_t target, int slot) {
  const int B = p.blocks, n = p.nRanks;
  const size_t perRank = static_cast<size_t>(p.nSlots) * B;
  __shared__ int failed;
  if (threadIdx.x == 0) {  // a failed wait anywhere ends the protocol (the opening comment)
    dev::stagedArrive(p);
    failed = dev::stagedFailed(p);
    if (failed) ceStop(p);
  }
  __syncthreads();
  if (failed) return;
  if (release) {
    __threadfence_system();
    for (int b = threadIdx.x; b < B; b += blockDim.x) {
      const size_t i = p.rank * perRank + static_cast<size_t>(slot) * B + b;
      if (release == p.ready) dev::stagedSignaturePublish(p, i, value);
      dev::storeReleaseSys(release + i, value);
    }
  }
  if (!wait) return;
  const uint64_t deadline = dev::globalTimerNs() + p.timeoutNs;
  for (int k = threadIdx.x; k < n * B; k += blockDim.x) {
    const int r = k / B, b = k % B;
    const size_t i = r * perRank + static_cast<size_t>(slot) * B + b;
    if (!dev::stagedWait(p, wait + i, target, deadline, r) ||
        (wait == p.ready && r != p.rank && !dev::stagedSignatureCheck(p, i, target, r))) {
      ceStop(p);  // done before this kernel ends
      return;
    }
  }
}

// Opening of the reduce and sum kernels, whole block: false once any rank failed (this chunk's
// copies in may then hold anything: the fetch's wait may have been skipped).
__device__ __forceinline__ bool ceMayWrite(const StagedDeviceLaunch& p) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = dev::stagedFailed(p);
  __syncthreads();
  return !failed;
}

// Plain reduce of elements [c0, c0 + len): this rank's from the input, peer r's from inbox r.
template <typename T, int Op, bool kVec>
__global__ void __launch_bounds__(kThreads)
    ceReduceKernel(StagedDeviceLaunch p, const char* inbox, size_t c0, size_t len) {
  if (!ceMayWrite(p)) return;
  constexpr int kEpp = PackOf<T>::kElems;
  const T* src = static_cast<const T*>(p.send) + c0;
  T* dst = static_cast<T*>(p.recv) + c0;
  auto from = [&](int r) { return r == p.rank ? src : reinterpret_cast<const T*>(inbox + r * p.chunkBytes); };
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  size_t vend = 0;  // elements [0, vend) in 16-byte packs (inbox chunks start at multiples of 4096)
  if constexpr (kVec) {
    vend = len / kEpp * kEpp;
    for (size_t i = (blockIdx.x * static_cast<size_t>(kThreads) + threadIdx.x) * kEpp; i < vend; i += stride * kEpp) {
      float acc[kEpp];
      PackOf<T>::toFloatsForReduce(*reinterpret_cast<const Pack*>(from(0) + i), acc);
      for (int r = 1; r < p.nRanks; ++r)
        PackOf<T>::template accumulate<Op>(acc, *reinterpret_cast<const Pack*>(from(r) + i));
      *reinterpret_cast<Pack*>(dst + i) = PackOf<T>::fromFloats(acc);
    }
  }
  for (size_t i = vend + blockIdx.x * static_cast<size_t>(kThreads) + threadIdx.x; i < len; i += stride) {
    float acc = __fadd_rn(dev::Elem<T>::toFloat(from(0)[i]), 0.0f);
    for (int r = 1; r < p.nRanks; ++r) acc = dev::combine<Op>(acc, __fadd_rn(dev::Elem<T>::toFloat(from(r)[i]), 0.0f));
    dst[i] = dev::Elem<T>::fromFloat(acc);
  }
}

// The compressed kernels' view of a slot (or of inbox r): the dense layout of staged_pieces.h,
// codes then scales, for this chunk's len elements. The grid's warps take the chunk's
// quantization blocks in turn (forWarpBlocks), so every block works however short the chunk.
__device__ __forceinline__ Wire denseWire(const char* base, size_t len) {
  return dev::wireAt(const_cast<char*>(base), stagedDenseCodeBytes(len));
}
__device__ __forceinline__ int gridWarp() {
  return static_cast<int>(blockIdx.x) * kWarpsPerBlock + static_cast<int>(threadIdx.x) / 32;
}

// The chunk's codes into twin slot `slot`, dense (the SM publisher's arithmetic).
template <typename T, int F>
__global__ void __launch_bounds__(kThreads) ceQuantizeKernel(StagedDeviceLaunch p, size_t c0, size_t len, int slot) {
  const T* src = static_cast<const T*>(p.send) + c0;
  const Wire to = denseWire(p.twin + static_cast<size_t>(slot) * p.chunkBytes, len);
  dev::forWarpBlocks(0, len, gridWarp(), gridDim.x * kWarpsPerBlock, [&](size_t k, int m) {
    float x[kPerLane];
    dev::loadBlock(src + k, m, x);
    dev::storeCodes(dev::quantizeGroup<F>(x), m, to, k, k / kB);
  });
}

// Compressed reduce: this rank's codes from twin slot `slot`, peer r's from inbox r (a copy of
// its host slot), summed in rank order, quantized once, written read back (the SM reducer's
// arithmetic: the same bits).
template <typename T, int F>
__global__ void __launch_bounds__(kThreads)
    ceSumKernel(StagedDeviceLaunch p, const char* inbox, size_t c0, size_t len, int slot) {
  if (!ceMayWrite(p)) return;
  T* dst = static_cast<T*>(p.recv) + c0;
  const Wire own = denseWire(p.twin + static_cast<size_t>(slot) * p.chunkBytes, len);
  auto wireOf = [&](int r) { return denseWire(inbox + r * p.chunkBytes, len); };
  dev::forWarpBlocks(0, len, gridWarp(), gridDim.x * kWarpsPerBlock, [&](size_t k, int m) {
    float acc[kPerLane];
    const size_t s = k / kB;
    dev::sumCodes<F>([&] { return dev::loadCodes<false>(own, k, s, m); }, m, p.nRanks, p.rank,
                     [&](int r) -> Codes { return dev::loadCodes<false>(wireOf(r), k, s, m); }, acc);
    float back[kPerLane];
    dev::decodeCodes<F>(dev::quantizeGroup<F>(acc), m, back);
    dev::storeBlock(dst + k, m, back);
  });
}

// Blocks for the compressed kernels: one per kWarpsPerBlock x kWarpElems elements, at most one per SM
// (at least 2 x p.blocks). They are arithmetic-bound (two decodes, a quantize and a decode per
// element in the sum): on 32 of an H200's 132 SMs a 4 MiB chunk of codes would take an estimated
// ~80 us (quantize_gpu_bench's whole-GPU rate, scaled), about its copy time on a 55 GB/s link,
// and then the kernels, not the link, would set the pace. Not measured apart. sms: the device's,
// read at create (CopyEngineResources::sms).
LaunchShape compressedShape(const StagedDeviceLaunch& p, size_t len, int sms) {
  const size_t cap = std::max<size_t>(2 * static_cast<size_t>(p.blocks), static_cast<size_t>(sms));
  return LaunchShape{gridFor(len, static_cast<size_t>(kWarpsPerBlock) * dev::kWarpElems, cap)};
}

constexpr auto kReduceKernel = [](auto t, auto op, auto v) {
  return ceReduceKernel<typename decltype(t)::type, decltype(op)::value, decltype(v)::value != 0>;
};
constexpr auto kQuantizeKernel = [](auto t, auto fm) {
  return ceQuantizeKernel<typename decltype(t)::type, decltype(fm)::value>;
};
constexpr auto kSumKernel = [](auto t, auto fm) {
  return ceSumKernel<typename decltype(t)::type, decltype(fm)::value>;
};

Status launchCeFlags(const StagedDeviceLaunch& p, uint64_t* release, uint64_t value, const uint64_t* wait,
                     uint64_t target, int slot, cudaStream_t stream) {
  const unsigned threads = static_cast<unsigned>(p.nRanks * p.blocks < 1024 ? p.nRanks * p.blocks : 1024);
  return dev::launch("staged_host copy-engine flags kernel", ceFlagsKernel, LaunchShape{1, threads}, stream, p, release,
                     value, wait, target, slot);
}

Status launchCeReduce(const StagedDeviceLaunch& p, const char* inbox, size_t c0, size_t len, cudaStream_t stream) {
  const size_t es = dataTypeSize(static_cast<DataType>(p.dtype));
  const bool vec = (reinterpret_cast<uintptr_t>(p.send) + c0 * es) % dev::kPackBytes == 0 &&
                   (reinterpret_cast<uintptr_t>(p.recv) + c0 * es) % dev::kPackBytes == 0;
  return dev::dispatchKernel(p.dtype, p.op, vec, [&](auto t, auto op, auto v) {
    return dev::launch("staged_host copy-engine reduce kernel", kReduceKernel(t, op, v), stagedShape(p), stream, p,
                       inbox, c0, len);
  });
}

Status launchCeQuantize(const StagedDeviceLaunch& p, size_t c0, size_t len, int slot, int sms, cudaStream_t stream) {
  return dev::dispatchCompressed(p.dtype, p.format, [&](auto t, auto fm) {
    return dev::launch("staged_host copy-engine quantize kernel", kQuantizeKernel(t, fm), compressedShape(p, len, sms),
                       stream, p, c0, len, slot);
  });
}

Status launchCeSum(const StagedDeviceLaunch& p, const char* inbox, size_t c0, size_t len, int slot, int sms,
                   cudaStream_t stream) {
  return dev::dispatchCompressed(p.dtype, p.format, [&](auto t, auto fm) {
    return dev::launch("staged_host copy-engine sum kernel", kSumKernel(t, fm), compressedShape(p, len, sms), stream, p,
                       inbox, c0, len, slot);
  });
}

}  // namespace

// The schedule in the opening comment, for count elements of es bytes in chunks of chunkElems
// (staged_host.cc: stagedCeChunkElems, at most what a slot holds; every rank the same).
namespace {

Status enqueueChunks(HostStagedTransport& t, const HostStagedTransport::CopyEngineResources* ce,
                     const StagedDeviceLaunch& p, size_t es, bool compressed, size_t chunkElems) {
  const int me = p.rank, n = p.nRanks;
  const size_t chunks = (p.count + chunkElems - 1) / chunkElems;
  for (size_t c = 0; c < chunks; ++c) {
    const uint64_t seq = p.seqBase + c + 1;
    const int slot = static_cast<int>((p.seqBase + c) % p.nSlots);
    const size_t c0 = c * chunkElems, len = p.count - c0 < chunkElems ? p.count - c0 : chunkElems;
    const size_t bytes = compressed ? stagedDenseBytes(len, kB) : len * es;  // compressed: codes and scales
    const int half = static_cast<int>(c % 2);
    char* inbox = ce->inbox + static_cast<size_t>(half) * n * p.chunkBytes;
    // Quantize (compressed; plain: on the publish stream): the slot free everywhere, the codes.
    cudaStream_t q = compressed ? ce->quantize : ce->publish;
    if (seq > static_cast<uint64_t>(p.nSlots))
      TPCOMM_TRY(launchCeFlags(p, nullptr, 0, p.consumed, seq - p.nSlots, slot, q));
    if (compressed) {
      TPCOMM_TRY(launchCeQuantize(p, c0, len, slot, ce->sms, q));
      TPCOMM_CUDA_TRY(cudaEventRecord(ce->quantized, q));
      TPCOMM_CUDA_TRY(cudaStreamWaitEvent(ce->publish, ce->quantized, 0));
    }
    // Publish: this rank's bytes into its host slot, ready.
    const void* from = compressed ? static_cast<const void*>(p.twin + static_cast<size_t>(slot) * p.chunkBytes)
                                  : static_cast<const void*>(static_cast<const char*>(p.send) + c0 * es);
    TPCOMM_CUDA_TRY(cudaMemcpyAsync(t.slot(me, slot), from, bytes, cudaMemcpyDefault, ce->publish));
    TPCOMM_TRY(launchCeFlags(p, p.ready, seq, nullptr, 0, slot, ce->publish));
    // Fetch: inbox `half` free (chunk c - 2's reduce done; the latest record of that event, made
    // two chunks or one call ago), every rank's slot ready, the peers' slots into the inbox.
    TPCOMM_CUDA_TRY(cudaStreamWaitEvent(ce->fetch, ce->reduced[half], 0));
    TPCOMM_TRY(launchCeFlags(p, nullptr, 0, p.ready, seq, slot, ce->fetch));
    for (int r = 0; r < n; ++r)
      if (r != me)
        TPCOMM_CUDA_TRY(
            cudaMemcpyAsync(inbox + r * p.chunkBytes, t.slot(r, slot), bytes, cudaMemcpyHostToDevice, ce->fetch));
    TPCOMM_CUDA_TRY(cudaEventRecord(ce->fetched, ce->fetch));
    // Reduce: after the copies in, the sum, consumed (its kernel reads the poison word first).
    TPCOMM_CUDA_TRY(cudaStreamWaitEvent(ce->reduce, ce->fetched, 0));
    TPCOMM_TRY(compressed ? launchCeSum(p, inbox, c0, len, slot, ce->sms, ce->reduce)
                          : launchCeReduce(p, inbox, c0, len, ce->reduce));
    TPCOMM_TRY(launchCeFlags(p, p.consumed, seq, nullptr, 0, slot, ce->reduce));
    TPCOMM_CUDA_TRY(cudaEventRecord(ce->reduced[half], ce->reduce));
  }
  return Status::kOk;
}

std::atomic<uint64_t> gCeCalls{0};

}  // namespace

uint64_t stagedCopyEngineCalls() { return gCeCalls.load(std::memory_order_relaxed); }

// Forks the four streams from `stream`, enqueues every chunk, and joins each of them back, also
// after a failed enqueue (an event record or wait that failed may have left a stream's work
// unordered with the others), so `stream` never runs ahead of work that still reads or writes
// the buffers; the first error is returned.
Status runStagedCopyEngines(HostStagedTransport& t, const StagedDeviceLaunch& p, size_t es, bool compressed,
                            size_t chunkElems, cudaStream_t stream) {
  const HostStagedTransport::CopyEngineResources* ce = t.copyEngines();
  if (!ce) return TPCOMM_ERROR(kInternal, "staged_host: copy-engine mode without its streams and inbox");
  const cudaStream_t streams[4] = {ce->quantize, ce->publish, ce->fetch, ce->reduce};
  TPCOMM_CUDA_TRY(cudaEventRecord(ce->fork, stream));
  for (cudaStream_t st : streams) TPCOMM_CUDA_TRY(cudaStreamWaitEvent(st, ce->fork, 0));
  Status s = enqueueChunks(t, ce, p, es, compressed, chunkElems);
  for (int i = 0; i < 4; ++i) {
    cudaError_t e = cudaEventRecord(ce->joined[i], streams[i]);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream, ce->joined[i], 0);
    if (e != cudaSuccess) {
      // The call's stream cannot be ordered after this stream: wait for it here instead.
      cudaGetLastError();
      const cudaError_t w = cudaStreamSynchronize(streams[i]);
      if (s == Status::kOk)
        s = TPCOMM_ERROR(kCudaError, "staged_host copy-engine join: %s%s%s", cudaGetErrorString(e),
                         w == cudaSuccess ? "" : "; synchronizing the stream: ", w == cudaSuccess ? "" : cudaGetErrorString(w));
    }
  }
  if (s == Status::kOk) gCeCalls.fetch_add(1, std::memory_order_relaxed);
  return s;
}

Status preloadStagedCe() {
  cudaError_t e = dev::preload(ceFlagsKernel);
  if (e == cudaSuccess)
    e = dev::forEachKernelVariant([](auto t, auto op, auto v) { return dev::preload(kReduceKernel(t, op, v)); });
  if (e == cudaSuccess)
    e = dev::forEachCompressedVariant([](auto t, auto fm) {
      const cudaError_t r = dev::preload(kQuantizeKernel(t, fm));
      return r != cudaSuccess ? r : dev::preload(kSumKernel(t, fm));
    });
  return dev::toStatus(e, "loading the staged_host copy-engine kernels");
}

}  // namespace tpcomm
