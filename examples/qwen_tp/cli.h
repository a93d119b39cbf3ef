// cli.h: the qwen_tp command line (flags as llama.cpp's), shared by the CPU and GPU runs: flag
// parsing with bounds, the model and tokenizer to load, the prompt (text through the tokenizer,
// token ids, or a synthetic one), and streamed text output. No CUDA here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "safetensors.h"
#include "speculative.h"
#include "tokenizer.h"

namespace qwen {

struct Flags {
  std::string device = "cuda";  ///< cuda | cpu (the fp32 CPU reference, ranks as threads)
  std::string preset = "tiny", modelDir, allreduce = "auto", allreduceCompression = "none", metricsFile = "qwen_tp_metrics.prom";
  std::string gemv = "auto";  ///< --gemv auto|cublas|custom|stream (smallGemm)
  std::string promptText;      ///< --prompt
  std::string promptTextFile;  ///< --prompt-file (text)
  std::string promptIds;       ///< --prompt-ids a,b,c or @FILE
  std::string tokenizer;       ///< --tokenizer (default: tokenizer.json beside config.json)
  std::string dumpLogits;      ///< --dump-logits FILE: the prompt's teacher-forced logits (logits_dump.h)
  std::string outputIds;       ///< --output-ids FILE: every generated id, space-separated
  int promptTokens = 32, nPredict = 32, ctxSize = 0, tp = 1, ubatch = 2048;
  int draftNMax = 0, draftNMin = 0;  ///< --spec-draft-n-max (default 3 with --spec-type), --spec-draft-n-min
  double draftPMin = 0;              ///< --spec-draft-p-min (0: off; llama.cpp's default is 0.75)
  double simAcceptance = -1;         ///< resolved per-token probability (< 0: no simulation)
  double simDraftAcceptance = -1;    ///< --sim-draft-acceptance R as given (< 0: not given)
  uint64_t seed = 1;                 ///< synthetic weights, simulated acceptance and sampling
  double temp = 0;                   ///< --temp (0: greedy; llama.cpp's default is 0.8)
  int topK = 40;                     ///< --top-k (0: off)
  double topP = 0.95;                ///< --top-p (1: off)
  bool teacherForced = false;        ///< --teacher-forced: acceptance over the prompt text (teacher_forced.h)
  int tfWindow = 1024, tfContext = 64;  ///< --tf-window, --tf-context
  std::string traceOut;                 ///< --trace-out FILE: the speculative run's rounds
  std::string replayTrace;              ///< --replay-trace FILE: replay a recorded run's rounds
  bool mpi = false, noGraphs = false, profile = true, fusedNorm = true, pdl = true, prefillAttn = true;
  bool prefillOverlap = false;  ///< --prefill-overlap (GpuModelOptions::prefillOverlap; GPU, tp > 1)
  bool fusedKernels = true;     ///< false: --no-fused-kernels (GpuModelOptions::fusedKernels)
  bool help = false;
  std::vector<std::string> notes;  ///< deprecation notes to print
};

void printUsage();

/// Parses argv. False with a message naming the flag and what it expects.
bool parseFlags(int argc, char** argv, Flags* f, std::string* err);

/// What --gemv picks for the GEMMs of <= 8 tokens: "cublas", "custom" or "stream". auto is the
/// stream without speculation and cuBLAS with it: cuBLAS gives a token the same bits in calls of
/// 1..8 tokens (gemv_bench's "cub n-bits"), so a verify call reproduces the one-token steps, while
/// the stream serves one-token calls only (2+ tokens cost it 1.5-3x) and its bits differ from
/// cuBLAS's.
std::string smallGemm(const Flags& f);

/// One line saying which simulation runs and what it means (llama.cpp's ratio, per-token
/// probability, expected mean length), or "" without simulation.
std::string describeSimulation(const Flags& f);

/// What every run needs before it starts ranks: config, checkpoint, tokenizer, prompt.
struct RunSetup {
  Flags flags;
  ModelConfig cfg;
  std::unique_ptr<SafetensorsModel> ckpt;
  std::unique_ptr<Tokenizer> tok;  ///< null when none was given or found
  std::vector<int32_t> prompt;
  std::vector<RoundRecord> replay;  ///< --replay-trace's rounds
};

/// Loads the config (preset or --model-dir), the checkpoint, the tokenizer (--tokenizer, else
/// DIR/tokenizer.json when present; required for --prompt / --prompt-file) and makes the prompt.
bool prepareRun(RunSetup* s, std::string* err);

/// Streams generated tokens as text to stdout (rank 0): complete UTF-8 characters as they come.
class TextStreamer {
 public:
  explicit TextStreamer(const Tokenizer* tok) : tok_(tok), dec_(tok ? new StreamDecoder(*tok) : nullptr) {}
  /// The callback for GenerateOptions::onTokens; prints nothing without a tokenizer.
  void push(const int32_t* ids, int n);
  /// Prints what is left and a newline.
  void finish();

 private:
  const Tokenizer* tok_;
  std::unique_ptr<StreamDecoder> dec_;
  bool started_ = false;
};

/// Prints the "output:" line (the first 64 generated ids) and, with --output-ids, writes them all
/// to that file (one line, space-separated, so `--prompt-ids @FILE` reads it back); with
/// --trace-out and `spec`, writes its rounds there. False with a message when a file cannot be
/// written.
bool reportOutput(const Flags& f, const std::vector<int32_t>& out, std::string* err,
                  const GenerateStats* spec = nullptr);

/// True when a run needs the plain greedy pass: no speculation, or the reference continuation
/// of simulated acceptance (then it is also the "MTP off" measurement).
inline bool needsPlainRun(const Flags& f) {
  return !f.teacherForced && (f.draftNMax == 0 || f.simAcceptance >= 0 || !f.replayTrace.empty());
}

/// One rank's measured runs on engine `e`: plain greedy when needsPlainRun(), then MTP
/// speculation when --spec-type is given (checked equal to the plain output under simulation
/// and replay); with --temp > 0 both sample. --teacher-forced: the measurement over the prompt
/// instead (into spec->teacherForced; nothing generated).
/// `text` (may be null) streams the run whose output is reported; *out is that output.
bool runPlainAndSpeculative(DecoderEngine& e, const RunSetup& s, TextStreamer* text, std::vector<int32_t>* out,
                            GenerateStats* plain, GenerateStats* spec, std::string* err);

}  // namespace qwen
