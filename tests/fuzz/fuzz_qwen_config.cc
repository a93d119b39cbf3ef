// libFuzzer target: the decoder's Hugging Face config.json parser (examples/qwen_tp/config.h,
// through qwen_tp_core). A config it accepts must also pass its own derived checks without UB.
#include <cstddef>
#include <cstdint>
#include <string>

#include "config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  qwen::ModelConfig c;
  std::string err;
  if (!qwen::parseConfigJson(text, "fuzz", &c, &err)) return 0;
  (void)qwen::validateConfig(c, &err);
  (void)qwen::checkCtxSize(c, 4096, &err);
  for (int tp : {1, 2, 8}) {
    qwen::TpShape s;
    (void)qwen::makeTpShape(c, tp, tp - 1, &s, &err);
  }
  return 0;
}
