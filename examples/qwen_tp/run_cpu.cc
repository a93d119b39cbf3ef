// run_cpu.cc: qwen_tp --device cpu. The fp32 CPU reference decoder (cpu_model.h), tensor
// parallel over f.tp host ranks (threads, tpcomm host communicators: cpu_group.h), the same
// decoding loop as the GPU (speculative.h: plain greedy or MTP speculation, n-min/p-min,
// simulated acceptance). Weights: the checkpoint, or the seeded synthetic ones rounded to bf16
// (what the GPU decoder holds for the same --seed). Written for reading, not speed: for the tiny
// preset and small checkpoints.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "cpu_group.h"
#include "cpu_model.h"
#include "logits_dump.h"
#include "run.h"
#include "weights.h"

namespace qwen {

int runOnCpu(const RunSetup& s) {
  const Flags& f = s.flags;
  const ModelConfig& cfg = s.cfg;
  std::string err;
  double params = 0;
  for (const TensorSpec& t : modelTensorSpecs(cfg)) {
    double n = 1;
    for (int64_t d : t.shape) n *= static_cast<double>(d);
    params += n;
  }
  constexpr double kMaxBytes = 16e9;
  if (params * 4 > kMaxBytes) {
    std::fprintf(stderr,
                 "qwen_tp --device cpu: %s has %.2fG parameters, %.1f GB in fp32: more than the CPU reference's "
                 "limit of %.0f GB (use --model-preset tiny, a small checkpoint, or --device cuda)\n",
                 cfg.name.c_str(), params / 1e9, params * 4 / 1e9, kMaxBytes / 1e9);
    return 1;
  }
  HostWeights w;
  if (s.ckpt) {
    if (!loadHostWeights(cfg, *s.ckpt, &w, &err)) return std::fprintf(stderr, "qwen_tp: %s\n", err.c_str()), 1;
  } else {
    makeSyntheticHostWeights(cfg, f.seed, /*roundBf16=*/true, &w);
  }
  tpcomm::Compression compression = tpcomm::Compression::kNone;
  tpcomm::parseCompression(f.allreduceCompression.c_str(), &compression);  // checked by parseFlags
  const int P = static_cast<int>(s.prompt.size());
  const int ctx = f.ctxSize > 0 ? f.ctxSize : P + f.nPredict + f.draftNMax + 16;
  if (!checkCtxSize(cfg, ctx, &err)) return std::fprintf(stderr, "qwen_tp: %s\n", err.c_str()), 1;
  if (f.tp > 1)
    for (int r = 0; r < f.tp; ++r) {
      TpShape shape;
      if (!makeTpShape(cfg, f.tp, r, &shape, &err)) return std::fprintf(stderr, "qwen_tp: --tp: %s\n", err.c_str()), 1;
    }
  std::printf(
      "qwen_tp --device cpu: model %s, TP=%d (host ranks as threads, tpcomm host communicators), fp32 CPU "
      "reference, layer epilogue %s, prompt %d tokens, n-predict %d, ctx-size %d, ubatch %d\n",
      cfg.name.c_str(), f.tp,
      f.fusedNorm && f.tp > 1 ? "fused all-reduce + residual + RMSNorm" : "all-reduce, then residual + RMSNorm", P,
      f.nPredict, ctx, f.ubatch);
  for (const std::string& n : f.notes) std::printf("note: %s\n", n.c_str());
  std::fflush(stdout);

  const bool needPlain = needsPlainRun(f);
  std::vector<int32_t> out;
  GenerateStats plain, spec;
  std::mutex mu;
  LogitsTable dump;  // every rank fills its vocab columns (--dump-logits)
  dump.reset(s.prompt, cfg.vocabSize);
  const bool ok = runCpuTpGroup(
      f.tp,
      [&](int rank, tpcomm::Communicator* comm, std::string* e) {
        TpShape shape;
        if (!makeTpShape(cfg, f.tp, rank, &shape, e)) return false;
        CpuModel model(cfg, shape, &w, comm, ctx, f.fusedNorm);
        model.setMaxTokensPerCall(f.ubatch);
        if (!f.dumpLogits.empty()) {
          auto rows = [&model, &shape](int n, std::vector<float>* o, std::string*) {
            const std::vector<float>& l = model.lastLogits();
            o->assign(l.end() - static_cast<ptrdiff_t>(n) * shape.vocab, l.end());
            return true;
          };
          if (!collectTeacherForcedLogits(model, f.ubatch, shape.vocabBegin(), shape.vocab, rows, &dump, e))
            return false;
        }
        TextStreamer text(rank == 0 ? s.tok.get() : nullptr);
        std::vector<int32_t> myOut;
        GenerateStats myPlain, mySpec;
        if (!runPlainAndSpeculative(model, s, &text, &myOut, &myPlain, &mySpec, e)) return false;
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) out = myOut, plain = myPlain, spec = mySpec;
        return true;
      },
      &err, hostRankConfig(compression));
  if (!ok) return std::fprintf(stderr, "qwen_tp --device cpu: %s\n", err.c_str()), 1;
  if (!f.dumpLogits.empty()) {
    if (!writeLogitsFile(f.dumpLogits, dump, &err)) return std::fprintf(stderr, "qwen_tp: %s\n", err.c_str()), 1;
    std::printf("dump-logits: %d positions x %d vocab (fp32, teacher-forced prompt) -> %s\n", P, cfg.vocabSize,
                f.dumpLogits.c_str());
  }
  if (needPlain) std::printf("--- plain greedy ---\n%s", formatTimings(plain).c_str());
  if (f.draftNMax > 0)
    std::printf("--- draft-mtp n-max %d n-min %d p-min %.2f ---\n%s%s", f.draftNMax, f.draftNMin, f.draftPMin,
                describeSimulation(f).c_str(), formatTimings(spec).c_str());
  if (!reportOutput(f, out, &err, &spec)) return std::fprintf(stderr, "qwen_tp: %s\n", err.c_str()), 1;
  std::ofstream m(f.metricsFile);
  m << formatPrometheus(f.draftNMax > 0 ? spec : plain, ctx);
  return 0;
}

}  // namespace qwen
