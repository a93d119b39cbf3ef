// safetensors.cc: header parsing and validation, mmap, dtype conversion, sharded index.
// Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape,
// data_offsets: [begin, end]}, "__metadata__": {...}}, then the data; offsets are relative to
// byte 8 + N.
#include "safetensors.h"

#include <cstdint>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "json_limits.h"

namespace qwen {
namespace {

using nlohmann::json;

bool fail(std::string* error, const std::string& msg) {
  if (error) *error = msg;
  return false;
}

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit

bool parseDtype(const std::string& s, StDtype* out) {
  if (s == "F32") *out = StDtype::kF32;
  else if (s == "F16") *out = StDtype::kF16;
  else if (s == "BF16") *out = StDtype::kBF16;
  else return false;
  return true;
}

std::string shapeString(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace

const char* stDtypeName(StDtype t) {
  switch (t) {
    case StDtype::kF32: return "F32";
    case StDtype::kF16: return "F16";
    case StDtype::kBF16: return "BF16";
  }
  return "?";
}

size_t stDtypeSize(StDtype t) { return t == StDtype::kF32 ? 4 : 2; }

uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f16ToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do { ++e; man <<= 1; } while (!(man & 0x400));
      u = sign | ((112 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t floatToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  uint32_t man = u & 0x7fffffu;
  if (((u >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (man ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000u;
    int shift = 14 - exp;
    uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (man >> 13), rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void TensorView::toFloat(std::vector<float>* out) const {
  size_t n = static_cast<size_t>(numel());
  out->resize(n);
  if (n == 0) return;  // data and out->data() may be null: memcpy(nullptr, .., 0) is undefined
  if (dtype == StDtype::kF32) {
    std::memcpy(out->data(), data, n * 4);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, data + 2 * i, 2);
    (*out)[i] = dtype == StDtype::kBF16 ? bf16ToFloat(v) : f16ToFloat(v);
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

bool SafetensorsFile::open(const std::string& path, std::unique_ptr<SafetensorsFile>* out, std::string* error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(error, path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return fail(error, path + ": fstat failed: " + std::strerror(errno));
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* m = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      return fail(error, path + ": mmap failed: " + std::strerror(errno));
    }
    f->map_ = m;
    f->base_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  if (!f->parse(error)) return false;
  *out = std::move(f);
  return true;
}

bool SafetensorsFile::fromBytes(std::vector<uint8_t> bytes, const std::string& name,
                                std::unique_ptr<SafetensorsFile>* out, std::string* error) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = name;
  f->owned_ = std::move(bytes);
  f->base_ = f->owned_.data();
  f->size_ = f->owned_.size();
  if (!f->parse(error)) return false;
  *out = std::move(f);
  return true;
}

bool SafetensorsFile::parse(std::string* error) {
  const std::string& p = path_;
  if (size_ < 8) return fail(error, p + ": truncated: " + std::to_string(size_) + " bytes, the 8-byte header length is missing");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base_[i];
  if (n > kMaxHeaderBytes) return fail(error, p + ": corrupt header: length " + std::to_string(n) + " exceeds 100 MiB");
  if (n > size_ - 8)
    return fail(error, p + ": truncated: header length " + std::to_string(n) + " but only " + std::to_string(size_ - 8) +
                           " bytes follow");
  std::string why;
  const char* hb = reinterpret_cast<const char*>(base_ + 8);
  if (!jsonWithinLimits(hb, hb + n, kMaxHeaderBytes, kMaxSafetensorsJsonDepth, &why))
    return fail(error, p + ": corrupt header: " + why);
  json h = json::parse(base_ + 8, base_ + 8 + n, nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded()) return fail(error, p + ": corrupt header: not valid JSON");
  if (!h.is_object()) return fail(error, p + ": corrupt header: expected a JSON object");
  const uint64_t dataBytes = size_ - 8 - n;
  const uint8_t* data = base_ + 8 + n;
  struct Range { uint64_t b, e; std::string name; };
  std::vector<Range> ranges;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const std::string where = p + ": tensor \"" + name + "\": ";
    const json& t = it.value();
    if (!t.is_object()) return fail(error, where + "entry is not an object");
    auto dt = t.find("dtype"), sh = t.find("shape"), off = t.find("data_offsets");
    if (dt == t.end() || !dt->is_string()) return fail(error, where + "missing or non-string \"dtype\"");
    TensorView v;
    v.name = name;
    v.file = p;
    if (!parseDtype(dt->get<std::string>(), &v.dtype))
      return fail(error, where + "dtype " + dt->get<std::string>() + " is not supported (F32, F16, BF16)");
    if (sh == t.end() || !sh->is_array()) return fail(error, where + "missing or non-array \"shape\"");
    uint64_t numel = 1;
    for (const json& d : *sh) {
      if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > (uint64_t(1) << 62)) ||
          d.get<int64_t>() < 0)
        return fail(error, where + "bad shape: dimension " + std::to_string(v.shape.size()) +
                               " is not a non-negative integer");
      int64_t dim = d.get<int64_t>();
      if (dim > 0 && numel > (uint64_t(1) << 48) / static_cast<uint64_t>(dim))
        return fail(error, where + "shape too large: more than 2^48 elements");
      numel *= static_cast<uint64_t>(dim);
      v.shape.push_back(dim);
    }
    if (off == t.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      return fail(error, where + "\"data_offsets\" must be [begin, end] with non-negative integers");
    uint64_t b = (*off)[0].get<uint64_t>(), e = (*off)[1].get<uint64_t>();
    if (e < b) return fail(error, where + "data_offsets end " + std::to_string(e) + " < begin " + std::to_string(b));
    if (e > dataBytes)
      return fail(error, where + "truncated: data ends at " + std::to_string(e) + " but the file has " +
                             std::to_string(dataBytes) + " data bytes");
    uint64_t want = numel * stDtypeSize(v.dtype);
    if (e - b != want)
      return fail(error, where + "size mismatch: shape " + shapeString(v.shape) + " of " + stDtypeName(v.dtype) + " needs " +
                             std::to_string(want) + " bytes, data_offsets span " + std::to_string(e - b));
    v.data = data + b;
    v.bytes = e - b;
    ranges.push_back({b, e, name});
    tensors_[name] = v;
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.b < b.b || (a.b == b.b && a.e < b.e); });
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].b < ranges[i - 1].e)
      return fail(error, p + ": overlapping tensors: \"" + ranges[i - 1].name + "\" [" + std::to_string(ranges[i - 1].b) + ", " +
                             std::to_string(ranges[i - 1].e) + ") and \"" + ranges[i].name + "\" [" +
                             std::to_string(ranges[i].b) + ", " + std::to_string(ranges[i].e) + ")");
  return true;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

bool SafetensorsModel::open(const std::string& dir, std::unique_ptr<SafetensorsModel>* out, std::string* error) {
  std::unique_ptr<SafetensorsModel> m(new SafetensorsModel());
  m->dir_ = dir;
  const std::string indexPath = dir + "/model.safetensors.index.json";
  std::ifstream idx(indexPath);
  if (idx) {
    std::stringstream ss;
    ss << idx.rdbuf();
    const std::string text = ss.str();
    std::string why;
    if (!jsonWithinLimits(text.data(), text.data() + text.size(), kMaxIndexJsonBytes, kMaxSafetensorsJsonDepth, &why))
      return fail(error, indexPath + ": " + why);
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return fail(error, indexPath + ": not a valid JSON object");
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object()) return fail(error, indexPath + ": missing \"weight_map\" object");
    std::map<std::string, SafetensorsFile*> byFile;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) return fail(error, indexPath + ": weight_map[\"" + it.key() + "\"] is not a file name");
      std::string fname = it.value().get<std::string>();
      if (fname.find('/') != std::string::npos || fname.empty())
        return fail(error, indexPath + ": weight_map[\"" + it.key() + "\"] = \"" + fname + "\" is not a plain file name");
      if (!byFile.count(fname)) {
        std::unique_ptr<SafetensorsFile> f;
        if (!SafetensorsFile::open(dir + "/" + fname, &f, error)) return false;
        byFile[fname] = f.get();
        m->files_.push_back(std::move(f));
      }
      const TensorView* v = byFile[fname]->find(it.key());
      if (!v)
        return fail(error, dir + "/" + fname + ": tensor \"" + it.key() + "\" is listed in model.safetensors.index.json but missing from the file");
      m->index_[it.key()] = v;
    }
  } else {
    std::unique_ptr<SafetensorsFile> f;
    if (!SafetensorsFile::open(dir + "/model.safetensors", &f, error)) return false;
    for (auto& kv : f->tensors()) m->index_[kv.first] = &kv.second;
    m->files_.push_back(std::move(f));
  }
  *out = std::move(m);
  return true;
}

const TensorView* SafetensorsModel::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

bool SafetensorsModel::require(const std::string& name, const std::vector<int64_t>& shape, const TensorView** out,
                               std::string* error) const {
  const TensorView* v = find(name);
  if (!v) return fail(error, dir_ + ": missing tensor \"" + name + "\" (expected shape " + shapeString(shape) + ")");
  if (v->shape != shape)
    return fail(error, v->file + ": tensor \"" + name + "\" has shape " + shapeString(v->shape) + ", expected " + shapeString(shape));
  *out = v;
  return true;
}

std::vector<uint8_t> buildSafetensors(const std::vector<TensorToWrite>& tensors) {
  json h = json::object();
  uint64_t off = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", stDtypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string hs = h.dump();
  while (hs.size() % 8) hs += ' ';
  std::vector<uint8_t> out(8);
  uint64_t n = hs.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), hs.begin(), hs.end());
  for (const auto& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

bool writeSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors, std::string* error) {
  std::vector<uint8_t> bytes = buildSafetensors(tensors);
  std::ofstream f(path, std::ios::binary);
  if (!f) return fail(error, path + ": cannot create");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) return fail(error, path + ": write failed");
  return true;
}

}  // namespace qwen
