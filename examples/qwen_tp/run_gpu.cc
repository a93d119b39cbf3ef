// run_gpu.cc: qwen_tp on GPUs. One process for all GPUs (createGroup, one thread per GPU) or,
// under mpirun, one process per GPU (MPI bootstrap). With simulated acceptance, a plain greedy
// run first makes the reference continuation (and is the "MTP off" measurement); then the
// speculative run. Rank 0 streams the text (with a tokenizer), prints llama.cpp-style timing
// lines and writes Prometheus text to --metrics-file.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "gpu_kernels.h"
#include "gpu_model.h"
#include "logits_dump.h"
#include "rank_gate.h"
#include "run.h"
#include "speculative.h"
#include "tpcomm/tpcomm.h"
#ifdef QWEN_TP_HAVE_MPI
#include "tpcomm/mpi_bootstrap.h"
#endif

namespace qwen {
namespace {

using Shared = RunSetup;

bool sharedDeviceAllowed() {
  const char* v = std::getenv("TPCOMM_ALLOW_SHARED_DEVICE");
  return v && std::string(v) == "1";
}

// What one rank measured; rank 0 reports it.
struct RankResult {
  std::vector<int32_t> out;
  GenerateStats plain, spec;
  double coldPrefillSeconds = 0;  // the first prefill of the process (lazy loading, cuBLAS heuristics)
  bool needPlain = false;
  // profile (decode step from its CUDA graph)
  double stepMs = 0, stepB2bMs = 0, stepNoArMs = 0, verifyMs = 0, verifyNoArMs = 0, gemmMs = 0, draftMs = 0, chainMs = 0;
  size_t gemmBytes = 0;
  int chunkRows = 0;  // the prefill chunk whose GEMMs were timed alone (0: none)
  double chunkGemmMs = 0, chunkGemmFlop = 0;
  // The prompt's prefill attention alone: each chunk the prefill kernel ran, at its position.
  double prefillAttnMs = 0, prefillAttnFlop = 0;
  int prefillAttnChunks = 0;
  GraphNodes stepNodes, draftNodes;  // what the decode step's and the draft step's graphs launch
  // Device memory in use before the model's init: the CUDA context (at tp > 1 with the
  // communicator's buffers), which the memory line sets apart from what the model allocates.
  size_t inUseBeforeInit = 0;
};

GpuModelOptions modelOptions(const Shared& sh) {
  const Flags& f = sh.flags;
  GpuModelOptions o;
  o.maxTokensPerCall = std::max(f.ubatch, f.draftNMax + 1);
  o.ctxSize = f.ctxSize > 0 ? f.ctxSize : static_cast<int>(sh.prompt.size()) + f.nPredict + f.draftNMax + 16;
  o.seed = f.seed;
  o.checkpoint = sh.ckpt.get();
  // staged_host is not CUDA-graph capturable: under capture tpcomm would pick a P2P algorithm
  // instead, so a staged_host run decodes eagerly to measure what it names.
  o.useGraphs = !f.noGraphs && f.allreduce != "staged_host";
  o.fusedNorm = f.fusedNorm;
  o.customGemv = smallGemm(f) == "custom";
  o.streamGemv = smallGemm(f) == "stream";
  // With the stream, the fused step (the norms and SwiGLU inside the streams, the same bits as
  // attn's step): 1.9% faster than attn at qwen3-8b 512, 0.5% at qwen3-32b 512 on one H200
  // (docs/decode_kernels.md); at tp > 1 it runs as attn. QWEN_DECODE still overrides it.
  if (o.streamGemv) o.decode = GpuModelOptions::DecodeKernels::kFusedGemv;
  o.pdl = f.pdl;
  o.prefillAttention = f.prefillAttn;
  o.prefillOverlap = f.prefillOverlap;
  o.fusedKernels = f.fusedKernels;
  return o;
}

// Run: plain greedy (the reference, and the "MTP off" numbers) and/or MTP speculation. A first,
// short generation of the same prompt warms everything up (its prefill is the cold time); the
// measured runs' prefills are warm calls of the same shape.
bool runDecode(const Shared& sh, int rank, GpuModel& model, RankResult* r, std::string* err) {
  const Flags& f = sh.flags;
  GenerateOptions g;
  g.nPredict = f.nPredict;
  TextStreamer text(rank == 0 ? sh.tok.get() : nullptr);
  r->needPlain = needsPlainRun(f);
  if (!f.teacherForced) {  // a teacher-forced run goes over a text longer than the KV cache, in windows
    GenerateOptions w = g;
    w.nPredict = std::min(f.nPredict, 4);
    std::vector<int32_t> o;
    GenerateStats st;
    if (!generate(model, sh.prompt, w, &o, &st, err)) return false;
    r->coldPrefillSeconds = st.prefillSeconds;
    // The speculative run's graphs (verify and MTP calls of 1..n-max+1 tokens) captured now,
    // untimed: the timed runs below replay warm graphs.
    w.draftNMax = f.draftNMax;
    w.draftPMin = f.draftPMin;
    w.simAcceptance = f.simAcceptance;
    if (!warmSpeculation(model, w, static_cast<int>(sh.prompt.size()), err)) return false;
  }
  if (!runPlainAndSpeculative(model, sh, &text, &r->out, &r->plain, &r->spec, err)) return false;
  return true;
}

// Profile: a decode step (and a verify step) replayed from its graph, with and without the
// all-reduces (the all-reduce share; without them the layer epilogue is the addRmsNorm kernel
// alone, so with the fused norm the share is the fused call's time beyond that kernel's), and the
// step's weight GEMMs alone in one graph.
bool profileStep(const Shared& sh, GpuModel& model, RankResult* r, std::string* err) {
  const Flags& f = sh.flags;
  const int pos = static_cast<int>(sh.prompt.size());
  const int nv = f.draftNMax + 1;
  const bool verify = nv > 1 && nv <= GpuModel::kGraphMaxTokens;
  if (!model.timeTargetStep(1, pos, 50, &r->stepMs, err)) return false;
  if (!model.graphNodes(GpuModel::StepGraph::kTarget, 1, &r->stepNodes, err)) return false;
  // One rank: the step with the host's launch off the critical path (at TP > 1 the ranks' hosts
  // would not meet per step).
  if (f.tp == 1 && !model.timeTargetStepBackToBack(pos, 20, 10, &r->stepB2bMs, err)) return false;
  if (verify && !model.timeTargetStep(nv, pos, 50, &r->verifyMs, err)) return false;
  // One chained draft: what each of a round's drafts after the first costs (the draft's share).
  if (f.draftNMax > 0 && model.hasMtp() &&
      (!model.timeDraftStep(pos, 50, &r->draftMs, err) ||
       !model.graphNodes(GpuModel::StepGraph::kDraft, 1, &r->draftNodes, err)))
    return false;
  // Drafts 2..n-max as generate() makes them when it keeps them all (no p-min, no simulation):
  // one mtpChainRun graph (chains longer than a graph run step by step: not timed).
  GenerateOptions g;
  g.draftPMin = f.draftPMin;
  g.simAcceptance = f.simAcceptance;
  const bool chained = f.draftNMax > 1 && f.draftNMax - 1 <= GpuModel::kGraphMaxTokens && chainsDraftsInOneCall(g);
  if (chained && model.hasMtp() && !model.timeDraftChain(pos, f.draftNMax - 1, 50, &r->chainMs, err)) return false;
  model.setSkipAllReduce(true);
  if (!model.timeTargetStep(1, pos, 50, &r->stepNoArMs, err)) return false;
  if (verify && !model.timeTargetStep(nv, pos, 50, &r->verifyNoArMs, err)) return false;
  model.setSkipAllReduce(false);
  if (!model.timeStepGemms(1, 20, &r->gemmMs, &r->gemmBytes, err)) return false;
  // The prefill's weight GEMMs at its chunk size: their share of a chunk and their TFLOP/s.
  const int chunk = std::min(f.ubatch, pos);
  if (chunk <= GpuModel::kGraphMaxTokens) return true;
  r->chunkRows = chunk;
  if (!model.timeChunkGemms(chunk, 10, &r->chunkGemmMs, &r->chunkGemmFlop, err)) return false;
  // The prefill's attention alone, chunk by chunk as the prompt ran (cuDNN's is not timed).
  if (std::strcmp(model.prefillKernel(), "fa3") != 0 && std::strcmp(model.prefillKernel(), "fa2") != 0) return true;
  for (int c = 0; c < pos; c += chunk) {
    const int n = std::min(chunk, pos - c);
    if (n <= GpuModel::kGraphMaxTokens) break;  // a short last chunk runs the decode kernels
    double ms = 0, flop = 0;
    if (!model.timeChunkAttention(n, c, 3, &ms, &flop, err)) return false;
    r->prefillAttnMs += ms, r->prefillAttnFlop += flop, ++r->prefillAttnChunks;
  }
  return true;
}

// Device copy rate (read + write bytes per second) of 1 GiB copies, for the roofline.
double deviceCopyBandwidth() {
  void *a = nullptr, *b = nullptr;
  const size_t bytes = 1u << 30;
  double bw = 0;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess &&
      cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e0);
    for (int i = 0; i < 10; ++i) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    if (cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms > 0) bw = 2.0 * 10 * bytes / (ms * 1e-3);
  }
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return bw;
}

// "N kernels, M copies[, K memsets][, J other nodes] (fused kernels|--no-fused-kernels)".
std::string describeNodes(const GraphNodes& g, bool fused) {
  std::string s = std::to_string(g.kernels) + " kernels, " + std::to_string(g.copies) + " copies";
  if (g.memsets) s += ", " + std::to_string(g.memsets) + " memsets";
  if (g.other) s += ", " + std::to_string(g.other) + " other nodes";
  return s + (fused ? " (fused kernels)" : " (--no-fused-kernels)");
}

// What timeStepGemms ran: the fused step's GEMVs for the layers (gemv / fused decode kernels),
// else gemm() (--gemv); the lm_head always through gemm().
std::string gemmLabel(const Flags& f, const GpuModel& model) {
  const std::string d = model.decodeKernels();
  const std::string g = model.smallGemv();
  const std::string head = g == "custom" ? "custom GEMV" : g == "stream" ? "streamed GEMV" : g;
  if (d == "gemv" || d == "fused") return (g == "stream" ? "streamed fused GEMVs, lm_head " : "fused GEMVs, lm_head ") + head;
  return head;
}

// Report (rank 0): configuration, llama.cpp-style timings, memory, roofline, profile, output.
bool report(const Shared& sh, const GpuModel& model, const GpuModelOptions& o, const RankResult& r, std::string* err) {
  const Flags& f = sh.flags;
  const double bw = deviceCopyBandwidth();
  size_t freeB = 0, totalB = 0;
  cudaMemGetInfo(&freeB, &totalB);
  const int P = static_cast<int>(sh.prompt.size());
  const std::string smallGemms =
      std::strcmp(model.smallGemv(), "custom") == 0   ? "custom GEMV (--gemv custom)"
      : std::strcmp(model.smallGemv(), "stream") == 0 ? "streamed GEMV (--gemv stream; PDL-launched in the fused step: " +
                                                            model.streamPdlProducts() + ")"
                                                      : "cuBLAS";
  std::printf(
      "qwen_tp: model %s, TP=%d, allreduce %s (last algorithm: %s), layer epilogue %s (%s), prompt %d, "
      "n-predict %d, ctx-size %d, ubatch %d, prefill attention %s%s, %s, GEMMs of <= 8 tokens: %s, PDL %s, "
      "decode kernels %s, weight GEMMs %s, L2 prefetch of the next weights in decode graphs %s, o_proj rows into "
      "L2 by the decode attention %s\n",
      sh.cfg.name.c_str(), f.tp, f.allreduce.c_str(), model.lastAlgorithm().c_str(),
      f.fusedNorm ? "fused all-reduce + residual + RMSNorm" : "all-reduce, then residual + RMSNorm kernel",
      model.lastNormAlgorithm().c_str(), P, f.nPredict, o.ctxSize, o.maxTokensPerCall,
      std::strcmp(model.prefillKernel(), "cudnn") == 0 ? "cuDNN fused attention (calls > 16 tokens)"
      : std::strcmp(model.prefillKernel(), "fa3") == 0 ? "tensor-core FA3 kernel, wgmma + TMA (calls > 16 tokens)"
      : model.prefillAttention()                     ? "tensor-core FA2 kernel (calls > 16 tokens)"
                                                     : "decode kernel for every call",
      o.prefillOverlap && f.tp > 1 ? ", prefill all-reduces overlapped (two row halves)" : "",
      o.useGraphs ? "decode in CUDA graphs" : "eager decode (no CUDA graphs)",
      smallGemms.c_str(), o.pdl ? "on" : "off", model.decodeKernels(),
      model.gemmLibrary().c_str(),
      model.l2PrefetchBytes() ? (std::to_string(model.l2PrefetchBytes() >> 20) + " MB (QWEN_PREFETCH)").c_str() : "off",
      model.attnPrefetchBytes() ? (std::to_string(model.attnPrefetchBytes() >> 20) + " MB while the KV is at most " +
                                   std::to_string(model.attnPrefetchKvMax() >> 20) + " MB (QWEN_ATTN_PREFETCH)")
                                      .c_str()
                                : "off");
  std::printf("prefill cold (first call of the process): %.2f ms / %d tokens (%.2f tokens per second); the timed runs "
              "below are warm\n",
              r.coldPrefillSeconds * 1e3, P, r.coldPrefillSeconds > 0 ? P / r.coldPrefillSeconds : 0);
  if (r.needPlain) std::printf("--- plain greedy ---\n%s", formatTimings(r.plain).c_str());
  if (f.draftNMax > 0)
    std::printf("--- draft-mtp n-max %d n-min %d p-min %.2f ---\n%s%s", f.draftNMax, f.draftNMin, f.draftPMin,
                describeSimulation(f).c_str(), formatTimings(r.spec).c_str());
  const double wb = static_cast<double>(model.weightBytes()), kv = static_cast<double>(model.kvCacheBytes()),
               all = static_cast<double>(model.allocatedBytes());
  std::printf(
      "memory rank 0: weights %.2f GB, KV cache %.2f GB (%d positions), scratch + cuBLAS workspace %.2f GB "
      "(sized by the %d-token chunk); %.2f GB allocated by the model, %.2f GB in use on the device, %.2f GB of it "
      "before the model's init (the CUDA context)\n",
      wb / 1e9, kv / 1e9, o.ctxSize, (all - wb - kv) / 1e9, o.maxTokensPerCall, all / 1e9, (totalB - freeB) / 1e9,
      r.inUseBeforeInit / 1e9);
  // Roofline: the bytes a plain decode step reads at the prompt's end, over the copy rate.
  const double stepBytes = static_cast<double>(model.decodeStepBytes(P));
  const double roofMs = bw > 0 ? stepBytes / bw * 1e3 : 0;
  std::printf(
      "HBM copy %.0f GB/s; a decode step at position %d reads %.2f GB (layers' weights, lm_head shard, one "
      "embedding row, KV slots 0..%d) -> roofline %.3f ms/token\n",
      bw / 1e9, P, stepBytes / 1e9, P, roofMs);
  if (r.stepMs > 0)
    std::printf(
        "decode step %.3f ms (%.1f%% of roofline), without all-reduce %.3f ms -> all-reduce share %.1f%%; "
        "its graph: %s\n",
        r.stepMs, roofMs / r.stepMs * 100, r.stepNoArMs, (r.stepMs - r.stepNoArMs) / r.stepMs * 100,
        describeNodes(r.stepNodes, o.fusedKernels).c_str());
  if (r.stepB2bMs > 0)
    std::printf("decode step, 20 graph launches back to back: %.3f ms a step (%.1f%% of roofline); the one-step "
                "timing's extra %.3f ms is the host's launch and the graph's start and end\n",
                r.stepB2bMs, roofMs / r.stepB2bMs * 100, r.stepMs - r.stepB2bMs);
  if (r.gemmMs > 0)
    std::printf(
        "decode step's weight GEMMs alone (one graph, %s): %.3f ms for %.2f GB = %.0f GB/s (%.1f%% of the copy "
        "rate); everything else in the step: %.3f ms\n",
        gemmLabel(f, model).c_str(), r.gemmMs, r.gemmBytes / 1e9, r.gemmBytes / (r.gemmMs * 1e-3) / 1e9,
        bw > 0 ? r.gemmBytes / (r.gemmMs * 1e-3) / bw * 100 : 0, r.stepMs - r.gemmMs);
  if (r.chunkGemmMs > 0)
    std::printf(
        "prefill chunk's weight GEMMs alone (%d rows, every layer's qkv, o, gate/up and down in one graph): %.3f ms "
        "= %.0f TFLOP/s; x %.2f chunks of the prompt = %.1f ms of its prefill\n",
        r.chunkRows, r.chunkGemmMs, r.chunkGemmFlop / (r.chunkGemmMs * 1e-3) / 1e12,
        static_cast<double>(P) / r.chunkRows, r.chunkGemmMs * P / r.chunkRows);
  if (r.prefillAttnMs > 0)
    std::printf("prefill attention alone (%s, the prompt's %d chunks each at its position, every layer): %.1f ms = %.0f "
                "TFLOP/s causal\n",
                model.prefillKernel(), r.prefillAttnChunks, r.prefillAttnMs,
                r.prefillAttnFlop / (r.prefillAttnMs * 1e-3) / 1e12);
  if (r.verifyMs > 0)
    std::printf("verify step (%d tokens) %.3f ms, without all-reduce %.3f ms -> all-reduce share %.1f%%\n",
                f.draftNMax + 1, r.verifyMs, r.verifyNoArMs, (r.verifyMs - r.verifyNoArMs) / r.verifyMs * 100);
  if (r.draftMs > 0 && r.stepMs > 0) {
    // A round: the MTP catch-up over the accepted pairs (its first draft; about one draft step),
    // drafts 2..N (one chained graph when N > 1), the verify.
    const int N = f.draftNMax;
    const double drafting = r.draftMs + (r.chainMs > 0 ? r.chainMs : (N - 1) * r.draftMs),
                 round = drafting + r.verifyMs;
    std::printf("draft step (one chained MTP draft, from its graph: %s) %.3f ms = %.1f%% of a decode step",
                describeNodes(r.draftNodes, o.fusedKernels).c_str(), r.draftMs, r.draftMs / r.stepMs * 100);
    if (r.chainMs > 0)
      std::printf("; drafts 2..%d in one graph %.3f ms (%.3f ms each, %d single steps: %.3f ms)", N, r.chainMs,
                  r.chainMs / (N - 1), N - 1, (N - 1) * r.draftMs);
    std::printf(
        "; a round of n-max %d (drafts + the verify) costs at least %.3f ms = %.2f decode steps, %.0f%% of it "
        "drafting\n",
        N, round, round / r.stepMs, round > 0 ? drafting / round * 100 : 0);
  }
  if (!reportOutput(f, r.out, err, &r.spec)) return false;
  std::ofstream m(f.metricsFile);
  m << formatPrometheus(f.draftNMax > 0 ? r.spec : r.plain, o.ctxSize);
  return true;
}

// Everything one rank does: build the model, (--dump-logits: the prompt teacher-forced, in calls
// of kLogitsRows tokens so every row's logits are kept, each rank filling its vocab columns of
// `dump`), run, profile; rank 0 reports.
// `agreeInit` (called once, with whether this rank's init succeeded; true when every rank's
// did): no rank starts a collective before every rank's init is done (rank_gate.h says why).
// `gate` (ranks as threads of this process; null for MPI): every new CUDA graph waits for every
// rank's before its first launch, and a collective's error says where each rank's host was.
bool runRank(const Shared& sh, int rank, int device, tpcomm::Communicator* comm, LogitsTable* dump,
             const std::function<bool(bool)>& agreeInit, RankGate* gate, std::string* err) {
  TpShape shape;
  const bool shaped = makeTpShape(sh.cfg, sh.flags.tp, rank, &shape, err);
  GpuModel model(sh.cfg, shape, device, comm);
  if (gate && sh.flags.tp > 1) model.setRankGate(gate, rank);
  const GpuModelOptions o = modelOptions(sh);
  size_t freeBefore = 0, totalBefore = 0;
  if (cudaSetDevice(device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess ||
      cudaMemGetInfo(&freeBefore, &totalBefore) != cudaSuccess)
    freeBefore = totalBefore = 0;  // init reports the device's error
  const bool ready = shaped && model.init(o, err);
  if (!agreeInit(ready)) {
    if (ready) *err = "another rank's init failed";
    return false;
  }
  if (dump) {
    auto rows = [&model](int n, std::vector<float>* out, std::string* e) { return model.lastLogits(n, out, e); };
    if (!collectTeacherForcedLogits(model, GpuModel::kLogitsRows, shape.vocabBegin(), shape.vocab, rows, dump, err))
      return false;
  }
  RankResult r;
  r.inUseBeforeInit = totalBefore - freeBefore;
  if (!runDecode(sh, rank, model, &r, err)) return false;
  if (sh.flags.profile && o.useGraphs && !sh.flags.teacherForced &&
      !profileStep(sh, model, &r, err))  // replays the graphs
    return false;
  if (rank == 0 && !report(sh, model, o, r, err)) return false;
  return true;
}

tpcomm::Config commConfig(const Flags& f) {
  tpcomm::Config c;
  if (f.allreduce == "nccl")
    c.algo = "ring_nccl";
  else if (f.allreduce == "staged_host")
    c.algo = "staged_host";
  tpcomm::parseCompression(f.allreduceCompression.c_str(), &c.compression);  // checked by parseFlags
  return c;
}

}  // namespace
}  // namespace qwen

namespace qwen {

int runOnGpu(RunSetup& sh, int argc, char** argv) {
  std::string err;
  bool ok = true;
  const Flags& f = sh.flags;
  if (f.mpi) {
#ifdef QWEN_TP_HAVE_MPI
    MPI_Init(&argc, &argv);
    std::unique_ptr<tpcomm::Bootstrap> boot;
    std::unique_ptr<tpcomm::Communicator> comm;
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    tpcomm::Status s = tpcomm::makeMpiBootstrap(MPI_COMM_WORLD, &boot);
    int rank = boot ? boot->rank() : 0;
    if (s == tpcomm::Status::kOk && boot->size() != f.tp) {
      err = "--tp " + std::to_string(f.tp) + " but mpirun started " + std::to_string(boot->size()) + " ranks";
      ok = false;
    }
    if (ok && s == tpcomm::Status::kOk)
      s = tpcomm::Communicator::create(*boot, rank % std::max(ndev, 1), commConfig(f), &comm);
    if (s != tpcomm::Status::kOk) ok = false, err = std::string("tpcomm: ") + tpcomm::lastErrorMessage();
    // Every rank takes part in the init agreement once, a rank that failed above too (it says
    // false), so none waits in it for a rank that is gone.
    auto agree = [](bool mine) {
      int in = mine ? 1 : 0, all = 0;
      return MPI_Allreduce(&in, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) == MPI_SUCCESS && all == 1;
    };
    if (ok)
      ok = runRank(sh, rank, rank % std::max(ndev, 1), f.tp > 1 ? comm.get() : nullptr, nullptr, agree, nullptr,
                   &err);
    else
      agree(false);
    if (!ok) std::fprintf(stderr, "qwen_tp rank %d: %s\n", rank, err.c_str());
    if (comm) comm->destroy();
    boot.reset();
    MPI_Finalize();
    return ok ? 0 : 1;
#else
    return std::fprintf(stderr, "qwen_tp: built without MPI\n"), 2;
#endif
  }
  // One GPU per rank; with fewer GPUs than --tp, TPCOMM_ALLOW_SHARED_DEVICE=1 (tpcomm's switch
  // for one-GPU tests) puts the ranks on the GPUs in turn: the tokens are TP=tp's, the speed not.
  // Ranks sharing a GPU share its module loads: under CUDA's lazy loading one rank's first launch
  // of a kernel (cuBLAS's, the decoder's) waits for the device to go idle while the other rank's
  // all-reduce spins on it (docs/p2p.md). So load every module up front, before CUDA starts.
  if (sharedDeviceAllowed()) setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1)
    return std::fprintf(stderr, "qwen_tp: no CUDA device visible (--device cpu runs the CPU reference)\n"), 1;
  bool loadingKnown = false;
  if (ndev < f.tp && sharedDeviceAllowed() && gpu::lazyModuleLoading(&loadingKnown))
    std::fprintf(stderr,
                 "qwen_tp: warning: %d ranks share %d GPU(s) under lazy CUDA module loading (CUDA_MODULE_LOADING=%s): "
                 "a rank's first launch of a kernel may wait for the device while another rank's all-reduce spins, "
                 "ending in a kTimeout; set CUDA_MODULE_LOADING=EAGER\n",
                 f.tp, ndev, std::getenv("CUDA_MODULE_LOADING") ? std::getenv("CUDA_MODULE_LOADING") : "unset");
  if (ndev < f.tp && !sharedDeviceAllowed())
    return std::fprintf(
               stderr,
               "qwen_tp: --tp %d needs %d GPUs, this process sees %d (TPCOMM_ALLOW_SHARED_DEVICE=1 runs several "
               "ranks on one GPU: the same tokens, not tensor-parallel speed)\n",
               f.tp, f.tp, ndev),
           1;
  std::vector<int> devices;
  for (int i = 0; i < f.tp; ++i) devices.push_back(i % ndev);
  if (ndev < f.tp) {
    // Every rank's all-reduce kernel must be resident at once (tpcomm's create checks it): the
    // GPU's SMs are shared out among the ranks on it (two per H200: 64 two-shot blocks each, not
    // the default 128), at one 512-thread block per SM.
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const int perGpu = (f.tp + ndev - 1) / ndev, grid = std::max(1, std::min(64, sms / perGpu));
    setenv("TPCOMM_TWOSHOT_BLOCKS", std::to_string(grid).c_str(), 0);
    setenv("TPCOMM_P2P_BLOCKS", std::to_string(std::min(32, grid)).c_str(), 0);
    setenv("TPCOMM_STAGED_BLOCKS", std::to_string(std::max(1, std::min(16, grid / 2))).c_str(), 0);
    // And no programmatic dependent launch: a kernel launched early behind one rank's spinning
    // all-reduce would hold the SMs the other rank's all-reduce needs (modelOptions: pdl off).
    setenv("TPCOMM_PDL", "0", 1);
    sh.flags.pdl = false;
    std::fprintf(stderr,
                 "qwen_tp: %d ranks share %d GPU(s) (TPCOMM_ALLOW_SHARED_DEVICE=1, TPCOMM_TWOSHOT_BLOCKS=%s, PDL off): "
                 "timings are not TP=%d's\n",
                 f.tp, ndev, std::getenv("TPCOMM_TWOSHOT_BLOCKS"), f.tp);
  }
  std::vector<std::unique_ptr<tpcomm::Communicator>> comms;
  if (f.tp > 1) {
    tpcomm::Status s = tpcomm::Communicator::createGroup(devices, commConfig(f), &comms);
    if (s != tpcomm::Status::kOk)
      return std::fprintf(stderr, "qwen_tp: tpcomm createGroup: %s\n", tpcomm::lastErrorMessage()), 1;
  }
  std::vector<std::string> errors(f.tp);
  std::vector<char> oks(f.tp, 0);
  std::vector<std::thread> threads;
  LogitsTable dump;
  LogitsTable* dumpPtr = f.dumpLogits.empty() ? nullptr : &dump;
  if (dumpPtr) dump.reset(sh.prompt, sh.cfg.vocabSize);
  RankGate gate(f.tp);
  for (int r = 0; r < f.tp; ++r)
    threads.emplace_back([&, r] {
      oks[r] = runRank(
          sh, r, devices[r], f.tp > 1 ? comms[r].get() : nullptr, dumpPtr,
          [&gate](bool mine) { return gate.pass(mine); }, &gate, &errors[r]);
      if (!oks[r]) gate.leave(r);  // a peer waiting at the graph gate stops at once
    });
  for (auto& t : threads) t.join();
  int rc = 0;
  for (int r = 0; r < f.tp; ++r)
    if (!oks[r]) std::fprintf(stderr, "qwen_tp rank %d: %s\n", r, errors[r].c_str()), rc = 1;
  if (rc == 0 && dumpPtr) {
    if (!writeLogitsFile(f.dumpLogits, dump, &err)) return std::fprintf(stderr, "qwen_tp: %s\n", err.c_str()), 1;
    std::printf("dump-logits: %zu positions x %d vocab (fp32, teacher-forced prompt) -> %s\n", sh.prompt.size(),
                sh.cfg.vocabSize, f.dumpLogits.c_str());
  }
  for (auto& c : comms) c->destroy();
  return rc;
}

}  // namespace qwen
