// main.cc: the qwen_tp command line (flags as llama.cpp's; cli.h). Loads the model, tokenizer
// and prompt, then runs the GPU decoder (--device cuda, run_gpu.cc) or the fp32 CPU reference
// (--device cpu, run_cpu.cc). Examples:
//   qwen_tp --device cpu --model-preset tiny --tp 2 --tokenizer tokenizer.json --prompt "Hello"
//   qwen_tp --model-preset qwen3-32b --tp 2 --prompt-tokens 512 --n-predict 256 \
//           --spec-type draft-mtp --spec-draft-n-min 5 --spec-draft-n-max 5 --sim-draft-acceptance 0.485
#include <cstdio>
#include <string>

#include "cli.h"
#include "run.h"

int main(int argc, char** argv) {
  using namespace qwen;
  RunSetup s;
  std::string err;
  if (!parseFlags(argc, argv, &s.flags, &err)) return std::fprintf(stderr, "qwen_tp: %s\n", err.c_str()), 2;
  if (s.flags.help) return printUsage(), 0;
  if (!prepareRun(&s, &err)) return std::fprintf(stderr, "qwen_tp: %s\n", err.c_str()), 1;
  if (s.flags.device == "cpu") return runOnCpu(s);
#ifdef QWEN_TP_HAVE_CUDA
  for (const std::string& n : s.flags.notes) std::printf("note: %s\n", n.c_str());
  return runOnGpu(s, argc, argv);
#else
  (void)argc;
  return std::fprintf(stderr, "qwen_tp: built without CUDA: only --device cpu runs in this build\n"), 2;
#endif
}
