// qwen_cli_test.cc: the qwen_tp command line (cli.h): flags with bad values are refused naming
// the flag, the simulation flags resolve as documented, prompts come from text (through the
// tokenizer), ids or a file. QWEN_TINY_TOKENIZER names tests/data/tiny_tokenizer.json (a byte-level
// BPE of 1002 tokens made by tokenizer/make_reference.py --vocab-size 1000; fits the tiny preset).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cli.h"
#include "kernels/l2_ahead.h"
#include "kernels/stream_grid.h"

namespace qwen {
namespace {

bool parse(std::vector<std::string> args, Flags* f, std::string* err) {
  args.insert(args.begin(), "qwen_tp");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(&a[0]);
  return parseFlags(static_cast<int>(argv.size()), argv.data(), f, err);
}

TEST(QwenCli, BadFlagsAreRefusedNamingTheFlag) {
  struct Row {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Row> rows = {
      {{"--n-predict", "ten"}, "--n-predict: expected an integer"},
      {{"--n-predict", "0"}, "--n-predict: expected an integer in [1,"},
      {{"--tp", "2x"}, "--tp: expected an integer"},
      {{"--device", "tpu"}, "--device must be cuda or cpu"},
      {{"--spec-type", "draft-mtp", "--spec-draft-p-min", "1.5"}, "--spec-draft-p-min: expected a number in [0, 1]"},
      {{"--spec-type", "draft-mtp", "--sim-token-acceptance", "-0.1"}, "--sim-token-acceptance: expected a number"},
      {{"--spec-type", "draft-mtp", "--spec-draft-n-max", "2", "--spec-draft-n-min", "3"},
       "is above --spec-draft-n-max"},
      {{"--spec-draft-n-max", "5"}, "need --spec-type draft-mtp"},
      {{"--spec-type", "draft-mtp", "--sim-draft-acceptance", "0.5", "--sim-token-acceptance", "0.5"}, "not both"},
      {{"--spec-type", "draft-mtp", "--sim-draft-acceptance", "0.5", "--spec-draft-p-min", "0.5"},
       "cannot be combined"},
      {{"--prompt", "hi", "--prompt-ids", "1,2"}, "give one of --prompt"},
      {{"--device", "cpu", "--mpi"}, "--mpi is for GPU runs"},
      {{"--prompt"}, "--prompt needs a value"},
      {{"--bogus"}, "unknown flag --bogus"},
      {{"--gemv", "fast"}, "--gemv must be auto, cublas, custom or stream"},
      {{"--temp", "-1"}, "--temp: expected a number in [0, 100]"},
      {{"--temp", "hot"}, "--temp: expected a number"},
      {{"--top-k", "-3"}, "--top-k: expected an integer"},
      {{"--top-p", "0"}, "--top-p: expected a number in (0, 1]"},
      {{"--top-p", "1.5"}, "--top-p: expected a number in [0, 1]"},
      {{"--teacher-forced"}, "need --spec-type draft-mtp"},
      {{"--replay-trace", "t.txt"}, "need --spec-type draft-mtp"},
      {{"--spec-type", "draft-mtp", "--temp", "0.8", "--replay-trace", "t.txt"}, "--temp > 0 cannot be combined"},
      {{"--spec-type", "draft-mtp", "--temp", "0.8", "--teacher-forced"}, "--temp > 0 cannot be combined"},
      {{"--spec-type", "draft-mtp", "--replay-trace", "t.txt", "--sim-token-acceptance", "0.5"},
       "--replay-trace cannot be combined"},
      {{"--spec-type", "draft-mtp", "--teacher-forced", "--spec-draft-p-min", "0.5"}, "no --sim-*, --replay-trace"},
      {{"--spec-type", "draft-mtp", "--teacher-forced", "--tf-window", "64", "--tf-context", "64"},
       "--tf-context must be smaller than --tf-window"},
  };
  for (const Row& r : rows) {
    Flags f;
    std::string err;
    EXPECT_FALSE(parse(r.args, &f, &err)) << r.expect;
    EXPECT_NE(err.find(r.expect), std::string::npos) << "expected \"" << r.expect << "\" in: " << err;
  }
}

TEST(QwenCli, SimulationFlagsResolveToPerTokenProbability) {
  Flags f;
  std::string err;
  ASSERT_TRUE(parse({"--spec-type", "draft-mtp", "--spec-draft-n-min", "5", "--spec-draft-n-max", "5",
                     "--sim-draft-acceptance", "0.485"},
                    &f, &err))
      << err;
  EXPECT_NEAR(expectedDraftAcceptance(f.simAcceptance, 5), 0.485, 1e-9);
  EXPECT_NE(describeSimulation(f).find("accepted/drafted 0.4850"), std::string::npos) << describeSimulation(f);
  Flags g;
  ASSERT_TRUE(parse({"--spec-type", "draft-mtp", "--spec-draft-n-max", "5", "--sim-acceptance", "0.77"}, &g, &err));
  EXPECT_DOUBLE_EQ(g.simAcceptance, 0.77);
  ASSERT_EQ(g.notes.size(), 1u);
  EXPECT_NE(g.notes[0].find("deprecated"), std::string::npos);
  EXPECT_NE(describeSimulation(g).find("mean accepted length 3.44"), std::string::npos) << describeSimulation(g);
  Flags h;
  ASSERT_TRUE(parse({"--spec-type", "draft-mtp"}, &h, &err));
  EXPECT_EQ(h.draftNMax, 3);
  EXPECT_LT(h.simAcceptance, 0);
  EXPECT_EQ(describeSimulation(h), "");
}

// Sampling (--temp, --top-k, --top-p, --seed) and the measurement flags (--teacher-forced, --trace-out,
// --replay-trace).
TEST(QwenCli, SamplingAndMeasurementFlags) {
  Flags f;
  std::string err;
  ASSERT_TRUE(parse({}, &f, &err)) << err;
  EXPECT_EQ(f.temp, 0);  // greedy unless --temp is given
  EXPECT_FALSE(f.teacherForced);
  Flags g;
  ASSERT_TRUE(parse({"--temp", "0.7", "--top-k", "0", "--top-p", "1", "--seed", "9", "--spec-type", "draft-mtp",
                     "--trace-out", "t.txt"},
                    &g, &err))
      << err;
  EXPECT_EQ(g.temp, 0.7);
  EXPECT_EQ(g.topK, 0);
  EXPECT_EQ(g.topP, 1.0);
  EXPECT_EQ(g.seed, 9u);
  EXPECT_EQ(g.traceOut, "t.txt");
  EXPECT_FALSE(needsPlainRun(g));
  Flags h;
  ASSERT_TRUE(parse({"--spec-type", "draft-mtp", "--replay-trace", "t.txt"}, &h, &err)) << err;
  EXPECT_TRUE(needsPlainRun(h));  // the reference continuation, and the MTP-off measurement
  Flags t;
  ASSERT_TRUE(parse({"--spec-type", "draft-mtp", "--spec-draft-n-max", "6", "--teacher-forced", "--tf-window", "512"},
                    &t, &err))
      << err;
  EXPECT_FALSE(needsPlainRun(t));
  RunSetup s;  // the KV cache holds a window and its verify tokens, whatever the text's length
  s.flags = t;
  s.flags.promptTokens = 3000;
  ASSERT_TRUE(prepareRun(&s, &err)) << err;
  EXPECT_EQ(s.flags.ctxSize, 512 + 6 + 1);
  EXPECT_EQ(s.prompt.size(), 3000u);
}

// --no-fused-kernels (GpuModelOptions::fusedKernels): on by default, the flag turns it off.
TEST(QwenCli, FusedKernelsOnUnlessTurnedOff) {
  Flags f, g;
  std::string err;
  ASSERT_TRUE(parse({}, &f, &err)) << err;
  EXPECT_TRUE(f.fusedKernels);
  ASSERT_TRUE(parse({"--no-fused-kernels"}, &g, &err)) << err;
  EXPECT_FALSE(g.fusedKernels);
}

// --gemv auto (default): the one-token stream without speculation, cuBLAS with it (a token's bits
// the same in a verify call as in a one-token step); an explicit choice is kept either way.
TEST(QwenCli, SmallGemmAutoIsTheStreamWithoutSpeculation) {
  Flags f;
  std::string err;
  ASSERT_TRUE(parse({}, &f, &err)) << err;
  EXPECT_EQ(f.gemv, "auto");
  EXPECT_EQ(smallGemm(f), "stream");
  ASSERT_TRUE(parse({"--spec-type", "draft-mtp", "--spec-draft-n-max", "3"}, &f, &err)) << err;
  EXPECT_EQ(smallGemm(f), "cublas");
  for (const char* g : {"cublas", "custom", "stream"}) {
    Flags a, b;
    ASSERT_TRUE(parse({"--gemv", g}, &a, &err)) << err;
    EXPECT_EQ(smallGemm(a), g);
    ASSERT_TRUE(parse({"--gemv", g, "--spec-type", "draft-mtp"}, &b, &err)) << err;
    EXPECT_EQ(smallGemm(b), g);
  }
}

std::string tinyTokenizer() {
  const char* p = std::getenv("QWEN_TINY_TOKENIZER");
  return p ? p : "";
}

TEST(QwenCli, PromptFromTextIdsOrFile) {
  const std::string tok = tinyTokenizer();
  ASSERT_FALSE(tok.empty()) << "QWEN_TINY_TOKENIZER not set (ctest sets it)";
  RunSetup s;
  std::string err;
  ASSERT_TRUE(parse({"--device", "cpu", "--tokenizer", tok, "--prompt", "def f(x):\n    return x"}, &s.flags, &err));
  ASSERT_TRUE(prepareRun(&s, &err)) << err;
  ASSERT_TRUE(s.tok);
  std::vector<int32_t> ids;
  ASSERT_TRUE(s.tok->encode("def f(x):\n    return x", &ids, &err));
  EXPECT_EQ(s.prompt, ids);
  std::string back;
  ASSERT_TRUE(s.tok->decode(s.prompt, &back, &err));
  EXPECT_EQ(back, "def f(x):\n    return x");

  const std::string file = testing::TempDir() + "qwen_cli_prompt.txt";
  std::ofstream(file) << "3, 4\n5";
  RunSetup t;
  ASSERT_TRUE(parse({"--prompt-ids", "@" + file}, &t.flags, &err));
  ASSERT_TRUE(prepareRun(&t, &err)) << err;
  EXPECT_EQ(t.prompt, (std::vector<int32_t>{3, 4, 5}));
  std::ofstream(file) << "text from a file";
  RunSetup u;
  ASSERT_TRUE(parse({"--tokenizer", tok, "--prompt-file", file}, &u.flags, &err));
  ASSERT_TRUE(prepareRun(&u, &err)) << err;
  ASSERT_TRUE(u.tok->decode(u.prompt, &back, &err));
  EXPECT_EQ(back, "text from a file");
  std::remove(file.c_str());

  struct Row {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Row> rows = {
      {{"--prompt", "hello"}, "--prompt needs a tokenizer"},
      {{"--tokenizer", "/nonexistent.json", "--prompt", "x"}, "/nonexistent.json: cannot open"},
      {{"--prompt-ids", "1,x,3"}, "--prompt-ids: \"x\" is not a token id"},
      {{"--prompt-ids", "1,1024"}, "\"1024\" is not a token id in [0, 1024)"},
      {{"--prompt-ids", "@/nonexistent"}, "--prompt-ids /nonexistent: cannot open"},
      {{"--tokenizer", tok, "--prompt-file", "/nonexistent"}, "--prompt-file /nonexistent: cannot open"},
      {{"--tokenizer", tok, "--prompt", "bad \xFF"}, "--prompt: text is not valid UTF-8"},
      {{"--model-preset", "huge"}, "huge"},
  };
  for (const Row& r : rows) {
    RunSetup x;
    ASSERT_TRUE(parse(r.args, &x.flags, &err)) << err;
    EXPECT_FALSE(prepareRun(&x, &err)) << r.expect;
    EXPECT_NE(err.find(r.expect), std::string::npos) << "expected \"" << r.expect << "\" in: " << err;
  }
}

}  // namespace
}  // namespace qwen

// The stream's grid (kernels/stream_grid.h): every warp the same number of rows, and the rule
// that PDL-launches the down stream only when its blocks take 90% of the resident slots.
TEST(QwenStreamGrid, BalancedBlocksAndTheSlotRule) {
  using qwen::gpu::streamBlocks;
  using qwen::gpu::streamFillsSlots;
  // H200 (132 multiprocessors, 264 slots of 16 warps): qwen3-8b's products, then qwen3-32b's.
  EXPECT_EQ(streamBlocks(4096, 132), 256);   // o, down: a row a warp
  EXPECT_EQ(streamBlocks(6144, 132), 192);   // qkv: 3072 warps of 2, not 4224 with 1920 taking two
  EXPECT_EQ(streamBlocks(12288, 132), 256);  // gate/up pairs: 3 a warp
  EXPECT_EQ(streamBlocks(5120, 132), 160);
  EXPECT_EQ(streamBlocks(10240, 132), 214);
  EXPECT_EQ(streamBlocks(25600, 132), 229);
  EXPECT_TRUE(streamFillsSlots(4096, 132));
  EXPECT_FALSE(streamFillsSlots(5120, 132));
  EXPECT_FALSE(streamFillsSlots(6144, 132));
  // Small and odd sizes: never more blocks than slots, never a zero division.
  EXPECT_EQ(streamBlocks(1, 132), 1);
  EXPECT_EQ(streamBlocks(4224, 132), 264);
  EXPECT_EQ(streamBlocks(4225, 132), 133);  // two rows a warp: 2113 warps
  EXPECT_EQ(streamBlocks(0, 132), 0);
  EXPECT_EQ(streamBlocks(4096, 0), 0);
  EXPECT_FALSE(streamFillsSlots(4096, 0));
  EXPECT_FALSE(streamFillsSlots(0, 132));
}

// The decode attention's L2 prefetch of o_proj (kernels/l2_ahead.h): the same prefix of every
// row within the budget, whole rows when it covers them, nothing for a prefix under a line or
// an unaligned matrix, and the context past which the KV would evict it.
TEST(QwenL2Ahead, PrefixOfEveryRowWithinTheBudget) {
  using qwen::gpu::planL2Ahead;
  alignas(16) static char w[64];
  const int64_t kvSlot = 8 * 128 * 4;  // qwen3-8b and 32b: 8 KV heads of 128, K and V in bf16
  const size_t half = 25u << 20, quarter = half / 2;  // a 50 MB L2 (the H200 measured has 60)
  auto a = planL2Ahead(w, 4096, 8192, half, kvSlot, quarter);  // qwen3-8b's o_proj
  EXPECT_EQ(a.base, w);
  EXPECT_EQ(a.bytesPerRow, 6400);  // 25 MB / 4096 rows, a multiple of 128
  EXPECT_EQ(a.maxLen, 3200);       // 12.5 MB of K and V at 4 KB a slot
  EXPECT_EQ(planL2Ahead(w, 5120, 16384, half, kvSlot, quarter).bytesPerRow, 5120);  // qwen3-32b's
  EXPECT_EQ(planL2Ahead(w, 4096, 8192, 64u << 20, kvSlot, quarter).bytesPerRow, 8192);  // whole rows
  EXPECT_EQ(planL2Ahead(w, 100, 48, 1u << 20, kvSlot, quarter).bytesPerRow, 48);       // rows under a line
  EXPECT_EQ(planL2Ahead(w, 4096, 8192, 4096u * 200, kvSlot, quarter).bytesPerRow, 128);  // 200 -> 128
  // Nothing: a prefix under a line, a null or unaligned matrix, rows not of 16-byte multiples,
  // no rows, or a KV cap under one slot.
  EXPECT_EQ(planL2Ahead(w, 4096, 8192, 4096u * 100, kvSlot, quarter).base, nullptr);
  EXPECT_EQ(planL2Ahead(nullptr, 4096, 8192, half, kvSlot, quarter).base, nullptr);
  EXPECT_EQ(planL2Ahead(w + 8, 4096, 8192, half, kvSlot, quarter).base, nullptr);
  EXPECT_EQ(planL2Ahead(w, 4096, 8200, half, kvSlot, quarter).base, nullptr);
  EXPECT_EQ(planL2Ahead(w, 0, 8192, half, kvSlot, quarter).base, nullptr);
  EXPECT_EQ(planL2Ahead(w, 4096, 8192, half, kvSlot, 100).base, nullptr);
  EXPECT_EQ(planL2Ahead(w, 4096, 8192, half, 0, quarter).base, nullptr);
}

