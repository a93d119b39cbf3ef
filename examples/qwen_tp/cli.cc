// cli.cc: qwen_tp's flags, prompt and text output (see cli.h).
#include "cli.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "teacher_forced.h"
#include "tpcomm/types.h"

namespace qwen {
namespace {

bool fail(std::string* err, const std::string& msg) {
  *err = msg;
  return false;
}

bool parseInt(const char* flag, const char* v, long long lo, long long hi, int* out, std::string* err) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    return fail(err, std::string(flag) + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                         "], got \"" + v + "\"");
  *out = static_cast<int>(x);
  return true;
}

bool parseProb(const char* flag, const char* v, double* out, std::string* err) {
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (errno || end == v || *end || !(x >= 0 && x <= 1))
    return fail(err, std::string(flag) + ": expected a number in [0, 1], got \"" + v + "\"");
  *out = x;
  return true;
}

bool readFile(const std::string& path, const char* flag, std::string* text, std::string* err) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(err, std::string(flag) + " " + path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  *text = ss.str();
  if (text->size() > (64u << 20)) return fail(err, std::string(flag) + " " + path + ": larger than 64 MB");
  return true;
}

// Writes bytes to stdout with each invalid UTF-8 byte as U+FFFD (as Hugging Face's decode does).
void writeLossy(std::string bytes) {
  size_t bad = 0;
  while (!isValidUtf8(bytes, &bad)) {
    std::fwrite(bytes.data(), 1, bad, stdout);
    std::fputs("\xEF\xBF\xBD", stdout);
    bytes.erase(0, bad + 1);
  }
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
}

bool fileExists(const std::string& path) { return static_cast<bool>(std::ifstream(path)); }

}  // namespace

void printUsage() {
  std::printf(
      "usage: qwen_tp [options]\n"
      "  --device cuda|cpu       cuda (default): the GPU decoder; cpu: the fp32 CPU reference, TP over host ranks\n"
      "                          (threads with tpcomm host communicators); small models only (tiny, test checkpoints)\n"
      "  --model-preset NAME     tiny | qwen3-0.6b | qwen3-8b | qwen3-32b (synthetic weights, seeded)\n"
      "  --model-dir DIR         Hugging Face directory (config.json + safetensors [+ tokenizer.json])\n"
      "  --tokenizer F           tokenizer.json (default: DIR/tokenizer.json when present)\n"
      "  --prompt TEXT           prompt text (needs a tokenizer); generated text is streamed to stdout\n"
      "  --prompt-file F         prompt text from a file\n"
      "  --prompt-ids a,b,c      prompt token ids (or @FILE: ids separated by spaces, commas or newlines)\n"
      "  --prompt-tokens N       synthetic prompt of N token ids (default 32; without --prompt*)\n"
      "  --n-predict N           tokens to generate (default 32)\n"
      "  --ctx-size N            KV cache positions, up to max_position_embeddings (default prompt + n-predict + 16)\n"
      "  --ubatch-size N         prefill chunk: tokens per forward call (default 2048); longer prompts go in chunks\n"
      "  --tp N                  tensor-parallel ranks (GPUs 0..N-1 or N CPU threads; under --mpi: world size)\n"
      "  --mpi                   one process per GPU (run under mpirun; GPU only)\n"
      "  --spec-type draft-mtp   MTP speculative decoding\n"
      "  --spec-draft-n-max N    most drafts per step (default 3)\n"
      "  --spec-draft-n-min N    drafts shorter than N are dropped (that step decodes one token; default 0)\n"
      "  --spec-draft-p-min P    stop drafting when the draft's top probability is below P (default 0: off;\n"
      "                          llama.cpp's default is 0.75)\n"
      "  --sim-draft-acceptance R  simulate drafts so that llama.cpp's accepted/drafted is about R at n-max\n"
      "  --sim-token-acceptance P  simulate drafts: each draft token right with probability P\n"
      "  --sim-acceptance P      deprecated alias of --sim-token-acceptance\n"
      "  --allreduce auto|nccl|staged_host   tpcomm algorithm choice (auto = tpcomm's selector; GPU)\n"
      "  --allreduce-compression none|fp8|int8  compressed all-reduce (tpcomm Config::compression;\n"
      "                                      docs/compression.md): fewer bytes, not exact; --device cpu\n"
      "                                      runs staged_host+fp8|int8 on its host ranks\n"
      "  --metrics-file F        Prometheus text output (default qwen_tp_metrics.prom)\n"
      "  --output-ids F          write every generated id to F (space-separated; the output: line shows 64)\n"
      "  --dump-logits F         first run the prompt teacher-forced and write every position's full-vocab logits\n"
      "                          (fp32, header: positions, vocab, ids; logits_dump.h), then run as usual\n"
      "  --no-fused-norm         all-reduce, then a separate residual + RMSNorm (default: one\n"
      "                          Communicator::allReduceResidualRmsNorm call after o_proj and down_proj)\n"
      "  --gemv auto|cublas|custom|stream\n"
      "                          GPU GEMMs of <= 8 tokens: cuBLAS, the example's tensor-core GEMV, or one-token\n"
      "                          calls as a warp-per-row stream of the weights and the rest on cuBLAS; auto\n"
      "                          (default): stream without speculation, cuBLAS with it (same bits at 1..8 tokens)\n"
      "  --no-pdl                launch the decoder's own kernels without programmatic dependent launch\n"
      "  --no-fused-kernels      GPU: the separate kernels the fused ones replace (embedding + norm, MTP\n"
      "                          prologue, argmax + pick, MTP hidden copy); same results, more launches\n"
      "  --prefill-overlap       GPU, --tp > 1: prefill chunks in two row halves, each half's all-reduce on a\n"
      "                          second stream behind the other half's GEMMs (default off)\n"
      "  --temp T                sample at temperature T (default 0: greedy); with --spec-type, speculative sampling\n"
      "                          (drafts accepted with probability min(1, p/q), else resampled from max(0, p - q))\n"
      "  --top-k K  --top-p P    before the temperature, as llama.cpp: keep the K largest logits (default 40, 0: "
      "off),\n"
      "                          then the smallest set with softmax mass P (default 0.95, 1: off)\n"
      "  --seed S                seeds the synthetic weights, simulated acceptance and sampling (default 1)\n"
      "  --teacher-forced        with --spec-type: no generation; over the prompt text, at every position, how many "
      "of\n"
      "                          a chain of n-max drafts equal the target's greedy tokens (stats at n-max 1..N)\n"
      "  --tf-window N  --tf-context N  the text in windows of N tokens (default 1024), each with N tokens of context\n"
      "                          before its first evaluated position (default 64)\n"
      "  --trace-out F           write the speculative run's rounds (drafted accepted, one a line) to F\n"
      "  --replay-trace F        make drafts right or wrong round by round as trace F says (cycling), on any model\n"
      "  --no-graphs  --no-profile\n");
}

bool parseFlags(int argc, char** argv, Flags* f, std::string* err) {
  std::string specType;
  double simToken = -1;
  bool nMaxGiven = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = nullptr;
    auto val = [&]() {
      if (i + 1 >= argc) return fail(err, a + " needs a value");
      v = argv[++i];
      return true;
    };
    constexpr long long kBig = 1 << 30;
    static const char* const kValueFlags[] = {"--device",
                                              "--model-preset",
                                              "--model-dir",
                                              "--tokenizer",
                                              "--prompt",
                                              "--prompt-file",
                                              "--prompt-ids",
                                              "--prompt-tokens",
                                              "--n-predict",
                                              "--ctx-size",
                                              "--ubatch-size",
                                              "--tp",
                                              "--spec-type",
                                              "--spec-draft-n-max",
                                              "--spec-draft-n-min",
                                              "--spec-draft-p-min",
                                              "--sim-draft-acceptance",
                                              "--sim-token-acceptance",
                                              "--sim-acceptance",
                                              "--allreduce",
                                              "--allreduce-compression",
                                              "--metrics-file",
                                              "--dump-logits",
                                              "--output-ids",
                                              "--gemv",
                                              "--seed",
                                              "--temp",
                                              "--top-k",
                                              "--top-p",
                                              "--tf-window",
                                              "--tf-context",
                                              "--trace-out",
                                              "--replay-trace"};
    bool takesValue = false;
    for (const char* k : kValueFlags) takesValue = takesValue || a == k;
    if (a == "-h" || a == "--help")
      f->help = true;
    else if (a == "--mpi")
      f->mpi = true;
    else if (a == "--no-graphs")
      f->noGraphs = true;
    else if (a == "--no-profile")
      f->profile = false;
    else if (a == "--no-fused-norm")
      f->fusedNorm = false;
    else if (a == "--no-pdl")
      f->pdl = false;
    else if (a == "--no-fused-kernels")
      f->fusedKernels = false;
    else if (a == "--no-prefill-attn")
      f->prefillAttn = false;
    else if (a == "--prefill-overlap")
      f->prefillOverlap = true;
    else if (a == "--teacher-forced")
      f->teacherForced = true;
    else if (!takesValue)
      return fail(err, "unknown flag " + a + " (--help lists them)");
    else if (!val())
      return false;
    else if (a == "--device")
      f->device = v;
    else if (a == "--model-preset")
      f->preset = v;
    else if (a == "--model-dir")
      f->modelDir = v;
    else if (a == "--tokenizer")
      f->tokenizer = v;
    else if (a == "--prompt")
      f->promptText = v;
    else if (a == "--prompt-file")
      f->promptTextFile = v;
    else if (a == "--prompt-ids")
      f->promptIds = v;
    else if (a == "--prompt-tokens") {
      if (!parseInt("--prompt-tokens", v, 1, kBig, &f->promptTokens, err)) return false;
    } else if (a == "--n-predict") {
      if (!parseInt("--n-predict", v, 1, kBig, &f->nPredict, err)) return false;
    } else if (a == "--ctx-size") {
      if (!parseInt("--ctx-size", v, 0, kBig, &f->ctxSize, err)) return false;
    } else if (a == "--ubatch-size") {
      if (!parseInt("--ubatch-size", v, 1, kBig, &f->ubatch, err)) return false;
    } else if (a == "--tp") {
      if (!parseInt("--tp", v, 1, 1024, &f->tp, err)) return false;
    } else if (a == "--spec-type")
      specType = v;
    else if (a == "--spec-draft-n-max") {
      if (!parseInt("--spec-draft-n-max", v, 1, 64, &f->draftNMax, err)) return false;
      nMaxGiven = true;
    } else if (a == "--spec-draft-n-min") {
      if (!parseInt("--spec-draft-n-min", v, 0, 64, &f->draftNMin, err)) return false;
    } else if (a == "--spec-draft-p-min") {
      if (!parseProb("--spec-draft-p-min", v, &f->draftPMin, err)) return false;
    } else if (a == "--sim-draft-acceptance") {
      if (!parseProb(a.c_str(), v, &f->simDraftAcceptance, err)) return false;
    } else if (a == "--sim-token-acceptance" || a == "--sim-acceptance") {
      if (!parseProb(a.c_str(), v, &simToken, err)) return false;
      if (a == "--sim-acceptance")
        f->notes.push_back(
            "--sim-acceptance is deprecated: it is --sim-token-acceptance (a per-token probability, "
            "not llama.cpp's accepted/drafted; for that use --sim-draft-acceptance)");
    } else if (a == "--allreduce")
      f->allreduce = v;
    else if (a == "--allreduce-compression")
      f->allreduceCompression = v;
    else if (a == "--metrics-file")
      f->metricsFile = v;
    else if (a == "--dump-logits")
      f->dumpLogits = v;
    else if (a == "--output-ids")
      f->outputIds = v;
    else if (a == "--gemv")
      f->gemv = v;
    else if (a == "--temp") {
      char* end = nullptr;
      errno = 0;
      f->temp = std::strtod(v, &end);
      if (errno || end == v || *end || !(f->temp >= 0 && f->temp <= 100))
        return fail(err, std::string("--temp: expected a number in [0, 100], got \"") + v + "\"");
    } else if (a == "--top-k") {
      if (!parseInt("--top-k", v, 0, kBig, &f->topK, err)) return false;
    } else if (a == "--top-p") {
      if (!parseProb("--top-p", v, &f->topP, err)) return false;
      if (f->topP <= 0) return fail(err, "--top-p: expected a number in (0, 1], got 0");
    } else if (a == "--tf-window") {
      if (!parseInt("--tf-window", v, 2, kBig, &f->tfWindow, err)) return false;
    } else if (a == "--tf-context") {
      if (!parseInt("--tf-context", v, 1, kBig, &f->tfContext, err)) return false;
    } else if (a == "--trace-out")
      f->traceOut = v;
    else if (a == "--replay-trace")
      f->replayTrace = v;
    else if (a == "--seed") {
      char* end = nullptr;
      errno = 0;
      f->seed = std::strtoull(v, &end, 10);
      if (errno || end == v || *end)
        return fail(err, std::string("--seed: expected a non-negative integer, got \"") + v + "\"");
    } else
      return fail(err, "unknown flag " + a + " (--help lists them)");
  }
  if (f->help) return true;
  if (f->device != "cuda" && f->device != "cpu")
    return fail(err, "--device must be cuda or cpu (got \"" + f->device + "\")");
  if (!specType.empty() && specType != "draft-mtp") return fail(err, "--spec-type: only draft-mtp is supported");
  if (specType.empty()) {
    if (nMaxGiven || f->draftNMin > 0 || f->draftPMin > 0 || simToken >= 0 || f->simDraftAcceptance >= 0 ||
        f->teacherForced || !f->traceOut.empty() || !f->replayTrace.empty())
      return fail(
          err, "--spec-draft-*, --sim-*, --teacher-forced, --trace-out and --replay-trace need --spec-type draft-mtp");
    f->draftNMax = 0;
  } else if (!nMaxGiven) {
    f->draftNMax = std::max(3, f->draftNMin);
  }
  if (f->draftNMin > f->draftNMax && f->draftNMax > 0)
    return fail(err, "--spec-draft-n-min " + std::to_string(f->draftNMin) + " is above --spec-draft-n-max " +
                         std::to_string(f->draftNMax));
  if (simToken >= 0 && f->simDraftAcceptance >= 0)
    return fail(err, "give one of --sim-draft-acceptance and --sim-token-acceptance, not both");
  f->simAcceptance = simToken;
  if (f->simDraftAcceptance >= 0) f->simAcceptance = perTokenForDraftAcceptance(f->simDraftAcceptance, f->draftNMax);
  if (f->simAcceptance >= 0 && f->draftPMin > 0)
    return fail(err,
                "--spec-draft-p-min cannot be combined with --sim-* (simulation replaces the draft whose "
                "probability p-min reads)");
  const bool sim = f->simAcceptance >= 0, replay = !f->replayTrace.empty();
  if (f->temp > 0 && (sim || replay || f->draftPMin > 0 || f->teacherForced))
    return fail(err,
                "--temp > 0 cannot be combined with --sim-*, --replay-trace, --spec-draft-p-min or --teacher-forced "
                "(greedy-run tools)");
  if (replay && (sim || f->draftPMin > 0))
    return fail(err, "--replay-trace cannot be combined with --sim-* or --spec-draft-p-min");
  if (f->teacherForced && (sim || replay || f->draftPMin > 0 || f->draftNMin > 0))
    return fail(err,
                "--teacher-forced measures greedy drafts of n-max tokens: no --sim-*, --replay-trace, n-min or p-min");
  if (f->teacherForced && f->tfContext >= f->tfWindow)
    return fail(err, "--tf-context must be smaller than --tf-window");
  if (f->allreduce != "auto" && f->allreduce != "nccl" && f->allreduce != "staged_host")
    return fail(err, "--allreduce must be auto, nccl or staged_host (got \"" + f->allreduce + "\")");
  tpcomm::Compression wire;
  if (!tpcomm::parseCompression(f->allreduceCompression.c_str(), &wire))
    return fail(err, "--allreduce-compression must be none, fp8 or int8 (got \"" + f->allreduceCompression + "\")");
  if (f->gemv != "auto" && f->gemv != "cublas" && f->gemv != "custom" && f->gemv != "stream")
    return fail(err, "--gemv must be auto, cublas, custom or stream (got \"" + f->gemv + "\")");
  const int promptSources = !f->promptText.empty() + !f->promptTextFile.empty() + !f->promptIds.empty();
  if (promptSources > 1) return fail(err, "give one of --prompt, --prompt-file and --prompt-ids");
  if (f->device == "cpu" && f->mpi) return fail(err, "--mpi is for GPU runs (--device cpu runs its ranks as threads)");
  if (!f->dumpLogits.empty() && f->mpi)
    return fail(err, "--dump-logits gathers the ranks' vocab shards in one process: run without --mpi");
  return true;
}

bool reportOutput(const Flags& f, const std::vector<int32_t>& out, std::string* err, const GenerateStats* spec) {
  std::printf("output:");
  for (size_t i = 0; i < out.size() && i < 64; ++i) std::printf(" %d", out[i]);
  std::printf("%s\n", out.size() > 64 ? " ..." : "");
  if (!f.traceOut.empty() && spec && !f.teacherForced) {
    const std::string header = "n-max " + std::to_string(f.draftNMax) + ", prompt " +
                               std::to_string(spec->promptTokens) + " tokens, " + std::to_string(spec->generated) +
                               " generated, temp " + std::to_string(f.temp);
    if (!writeTrace(f.traceOut, header, spec->trace, err)) return false;
    std::printf("trace-out: %zu rounds -> %s\n", spec->trace.size(), f.traceOut.c_str());
  }
  if (f.outputIds.empty()) return true;
  std::ofstream file(f.outputIds);
  for (size_t i = 0; i < out.size(); ++i) file << (i ? " " : "") << out[i];
  file << "\n";
  file.close();
  if (!file) return *err = "--output-ids: cannot write " + f.outputIds, false;
  std::printf("output-ids: %zu ids -> %s\n", out.size(), f.outputIds.c_str());
  return true;
}

std::string smallGemm(const Flags& f) {
  if (f.gemv != "auto") return f.gemv;
  return f.draftNMax > 0 ? "cublas" : "stream";
}

std::string describeSimulation(const Flags& f) {
  if (f.simAcceptance < 0 || f.draftNMax <= 0) return "";
  char buf[512];
  const double ratio = expectedDraftAcceptance(f.simAcceptance, f.draftNMax);
  std::snprintf(buf, sizeof(buf),
                "simulated acceptance: %s -> per-token probability %.4f; expected at drafts of %d: accepted/drafted "
                "%.4f (llama.cpp's draft acceptance), mean accepted length %.3f\n",
                f.simDraftAcceptance >= 0 ? ("--sim-draft-acceptance " + std::to_string(f.simDraftAcceptance)).c_str()
                                          : "--sim-token-acceptance",
                f.simAcceptance, f.draftNMax, ratio, expectedMeanAcceptedLength(f.simAcceptance, f.draftNMax));
  return buf;
}

bool prepareRun(RunSetup* s, std::string* err) {
  Flags& f = s->flags;
  if (f.teacherForced && f.ctxSize == 0) f.ctxSize = f.tfWindow + f.draftNMax + 1;
  if (!f.replayTrace.empty() && !readTrace(f.replayTrace, &s->replay, err)) return false;
  if (f.modelDir.empty()) {
    if (!presetConfig(f.preset, &s->cfg, err)) return false;
  } else if (!loadConfigFile(f.modelDir + "/config.json", &s->cfg, err) ||
             !SafetensorsModel::open(f.modelDir, &s->ckpt, err)) {
    return false;
  }
  std::string tokPath = f.tokenizer;
  if (tokPath.empty() && !f.modelDir.empty() && fileExists(f.modelDir + "/tokenizer.json"))
    tokPath = f.modelDir + "/tokenizer.json";
  const bool text = !f.promptText.empty() || !f.promptTextFile.empty();
  if (text && tokPath.empty())
    return fail(err, std::string(f.promptText.empty() ? "--prompt-file" : "--prompt") +
                         " needs a tokenizer: --tokenizer F (a Hugging Face tokenizer.json), or --model-dir DIR "
                         "with DIR/tokenizer.json");
  if (!tokPath.empty()) {
    if (!Tokenizer::load(tokPath, &s->tok, err)) return fail(err, "--tokenizer: " + *err);
    if (s->tok->idLimit() > s->cfg.vocabSize)
      return fail(err, "--tokenizer " + tokPath + ": ids up to " + std::to_string(s->tok->idLimit() - 1) +
                           " do not fit the model's vocab_size " + std::to_string(s->cfg.vocabSize));
  }
  std::vector<int32_t>& p = s->prompt;
  if (text) {
    std::string t = f.promptText;
    if (!f.promptTextFile.empty() && !readFile(f.promptTextFile, "--prompt-file", &t, err)) return false;
    if (!s->tok->encode(t, &p, err)) return fail(err, (f.promptText.empty() ? "--prompt-file: " : "--prompt: ") + *err);
    if (p.empty()) return fail(err, "the prompt text is empty");
  } else if (!f.promptIds.empty()) {
    std::string t = f.promptIds;
    if (t[0] == '@' && !readFile(t.substr(1), "--prompt-ids", &t, err)) return false;
    for (char& c : t)
      if (c == ',') c = ' ';
    std::istringstream is(t);
    std::string word;
    while (is >> word) {
      char* end = nullptr;
      errno = 0;
      const long long id = std::strtoll(word.c_str(), &end, 10);
      if (errno || *end || id < 0 || id >= s->cfg.vocabSize)
        return fail(
            err, "--prompt-ids: \"" + word + "\" is not a token id in [0, " + std::to_string(s->cfg.vocabSize) + ")");
      p.push_back(static_cast<int32_t>(id));
    }
    if (p.empty()) return fail(err, "--prompt-ids: no token ids");
  } else {
    for (int i = 0; i < f.promptTokens; ++i) p.push_back(static_cast<int32_t>((i * 7919LL + 13) % s->cfg.vocabSize));
  }
  return true;
}

void TextStreamer::push(const int32_t* ids, int n) {
  if (!dec_) return;
  if (!started_) std::printf("text: "), started_ = true;
  std::string piece;
  for (int i = 0; i < n; ++i)
    if (dec_->push(ids[i], &piece))
      writeLossy(piece);
    else
      std::printf("[%d?]", ids[i]);  // an id the tokenizer does not know (a model vocab larger than it)
  std::fflush(stdout);
}

void TextStreamer::finish() {
  if (!dec_) return;
  writeLossy(dec_->flush());
  std::printf("\n");
  std::fflush(stdout);
}

bool runPlainAndSpeculative(DecoderEngine& e, const RunSetup& s, TextStreamer* text, std::vector<int32_t>* out,
                            GenerateStats* plain, GenerateStats* spec, std::string* err) {
  const Flags& f = s.flags;
  if (f.teacherForced) {
    spec->speculative = true;
    return teacherForcedAcceptance(e, s.prompt, f.draftNMax, f.tfWindow, f.tfContext, &spec->teacherForced, err);
  }
  GenerateOptions g;
  g.nPredict = f.nPredict;
  g.seed = f.seed;
  g.sampling.temp = f.temp;
  g.sampling.topK = f.topK;
  g.sampling.topP = f.topP;
  g.sampling.seed = f.seed;
  auto stream = [text](const int32_t* ids, int n) {
    if (text) text->push(ids, n);
  };
  std::vector<int32_t> ref;
  if (needsPlainRun(f)) {
    if (f.draftNMax == 0) g.onTokens = stream;
    if (!generate(e, s.prompt, g, &ref, plain, err)) return false;
    *out = ref;
  }
  if (f.draftNMax > 0) {
    g.onTokens = stream;
    g.draftNMax = f.draftNMax;
    g.draftNMin = f.draftNMin;
    g.draftPMin = f.draftPMin;
    g.simAcceptance = f.simAcceptance;
    g.replay = f.replayTrace.empty() ? nullptr : &s.replay;
    g.reference = f.simAcceptance >= 0 || g.replay ? &ref : nullptr;
    if (!generate(e, s.prompt, g, out, spec, err)) return false;
    if (g.reference && *out != ref) return fail(err, "speculative output differs from plain greedy");
  }
  if (text) text->finish();
  return true;
}

}  // namespace qwen
