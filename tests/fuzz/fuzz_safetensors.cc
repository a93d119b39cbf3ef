// libFuzzer target: the decoder's safetensors reader (examples/qwen_tp/safetensors.h, through
// qwen_tp_core): header length, JSON header, dtypes, shapes and offsets of an untrusted file.
// An image it accepts must have every tensor inside it; small ones are converted to fp32.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  std::unique_ptr<qwen::SafetensorsFile> f;
  std::string err;
  if (!qwen::SafetensorsFile::fromBytes(std::move(bytes), "fuzz", &f, &err)) return 0;
  std::vector<float> out;
  for (const auto& kv : f->tensors()) {
    const qwen::TensorView& t = kv.second;
    if (t.bytes <= (1u << 16)) t.toFloat(&out);
  }
  return 0;
}
