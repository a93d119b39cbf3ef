// safetensors.h: a reader for Hugging Face safetensors files (one file, or a sharded directory
// with model.safetensors.index.json). The header is checked in full before any tensor is used:
// sizes, dtypes, shapes, offsets inside the file, no two tensors overlapping. Every error names
// the file and, where one is involved, the tensor. Files are mmapped read-only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace qwen {

/// Element types this decoder reads (the ones Qwen3 checkpoints use).
enum class StDtype { kF32, kF16, kBF16 };

/// "F32", "F16", "BF16".
const char* stDtypeName(StDtype t);
/// Bytes per element.
size_t stDtypeSize(StDtype t);

/// One tensor inside a mapped file. `data` stays valid while its SafetensorsFile lives.
struct TensorView {
  std::string name;
  std::string file;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  int64_t numel() const;
  /// Converts every element to fp32 into `out` (resized to numel()).
  void toFloat(std::vector<float>* out) const;
};

/// One .safetensors file.
class SafetensorsFile {
 public:
  ~SafetensorsFile();
  /// Opens and validates `path`.
  static bool open(const std::string& path, std::unique_ptr<SafetensorsFile>* out, std::string* error);
  /// Validates an in-memory image (tests use this for malformed headers). `name` is used in errors.
  static bool fromBytes(std::vector<uint8_t> bytes, const std::string& name,
                        std::unique_ptr<SafetensorsFile>* out, std::string* error);
  const std::string& path() const { return path_; }
  /// Tensor `name`, or nullptr.
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;
  bool parse(std::string* error);
  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;          // mmap region, or null
  std::vector<uint8_t> owned_;   // fromBytes image
  std::map<std::string, TensorView> tensors_;
};

/// All tensors of a model directory: model.safetensors, or the shards listed in
/// model.safetensors.index.json (every listed tensor must exist in the file the index names).
class SafetensorsModel {
 public:
  static bool open(const std::string& dir, std::unique_ptr<SafetensorsModel>* out, std::string* error);
  /// Tensor `name` or nullptr.
  const TensorView* find(const std::string& name) const;
  /// Tensor `name` with exactly `shape`; fails naming the tensor and file when missing or when
  /// the shape differs.
  bool require(const std::string& name, const std::vector<int64_t>& shape, const TensorView** out,
               std::string* error) const;
  size_t numTensors() const { return index_.size(); }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

/// Writes a safetensors file (used by tests and by tools that make small checkpoints).
struct TensorToWrite {
  std::string name;
  StDtype dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
std::vector<uint8_t> buildSafetensors(const std::vector<TensorToWrite>& tensors);
bool writeSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors, std::string* error);

/// fp32 -> bf16 bits (round to nearest even) and back; shared with the synthetic weights.
uint16_t floatToBf16(float f);
float bf16ToFloat(uint16_t b);
/// IEEE half <-> float.
float f16ToFloat(uint16_t h);
uint16_t floatToF16(float f);

}  // namespace qwen
