// logits_dump.cc: teacher-forced logits of the prompt and their file (see logits_dump.h).
#include "logits_dump.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace qwen {
namespace {

constexpr char kMagic[8] = {'Q', 'W', 'L', 'O', 'G', 'I', 'T', '1'};

bool fail(std::string* error, const std::string& msg) {
  if (error) *error = msg;
  return false;
}

}  // namespace

void LogitsTable::reset(const std::vector<int32_t>& tokens, int vocabSize) {
  ids = tokens;
  vocab = vocabSize;
  logits.assign(tokens.size() * static_cast<size_t>(vocabSize), 0.f);
}

bool collectTeacherForcedLogits(DecoderEngine& e, int chunk, int vocabBegin, int vocabLocal, const RowLogitsFn& rows,
                                LogitsTable* t, std::string* error) {
  const int P = static_cast<int>(t->ids.size());
  if (P == 0) return fail(error, "--dump-logits: the prompt is empty");
  if (P > e.ctxSize())
    return fail(error, "--dump-logits: " + std::to_string(P) + " prompt tokens do not fit the KV cache of " +
                           std::to_string(e.ctxSize()) + " positions (--ctx-size)");
  if (vocabBegin < 0 || vocabLocal <= 0 || vocabBegin + vocabLocal > t->vocab)
    return fail(error, "--dump-logits: vocab shard outside the table");
  chunk = std::max(1, std::min(chunk, e.maxTokensPerCall()));
  std::vector<int32_t> next(static_cast<size_t>(chunk));
  std::vector<float> part;
  for (int a = 0; a < P; a += chunk) {
    const int n = std::min(chunk, P - a);
    if (!e.target(t->ids.data() + a, n, a, next.data(), error)) return false;
    if (!rows(n, &part, error)) return false;
    if (part.size() != static_cast<size_t>(n) * vocabLocal)
      return fail(error, "--dump-logits: the engine returned " + std::to_string(part.size()) + " logits for " +
                             std::to_string(n) + " rows of " + std::to_string(vocabLocal));
    for (int r = 0; r < n; ++r)
      std::memcpy(t->logits.data() + static_cast<size_t>(a + r) * t->vocab + vocabBegin,
                  part.data() + static_cast<size_t>(r) * vocabLocal, sizeof(float) * vocabLocal);
  }
  return true;
}

bool writeLogitsFile(const std::string& path, const LogitsTable& t, std::string* error) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return fail(error, "--dump-logits " + path + ": cannot open for writing");
  const uint32_t head[2] = {static_cast<uint32_t>(t.ids.size()), static_cast<uint32_t>(t.vocab)};
  f.write(kMagic, sizeof(kMagic));
  f.write(reinterpret_cast<const char*>(head), sizeof(head));
  f.write(reinterpret_cast<const char*>(t.ids.data()), static_cast<std::streamsize>(t.ids.size() * 4));
  f.write(reinterpret_cast<const char*>(t.logits.data()), static_cast<std::streamsize>(t.logits.size() * 4));
  if (!f) return fail(error, "--dump-logits " + path + ": write failed");
  return true;
}

bool readLogitsFile(const std::string& path, LogitsTable* t, std::string* error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail(error, path + ": cannot open");
  char magic[8];
  uint32_t head[2];
  if (!f.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return fail(error, path + ": not a QWLOGIT1 file");
  if (!f.read(reinterpret_cast<char*>(head), sizeof(head))) return fail(error, path + ": truncated header");
  f.seekg(0, std::ios::end);
  const uint64_t want = 16 + 4ull * head[0] + 4ull * head[0] * head[1];
  if (static_cast<uint64_t>(f.tellg()) != want)
    return fail(error, path + ": " + std::to_string(static_cast<long long>(f.tellg())) + " bytes, the header says " +
                           std::to_string(want));
  f.seekg(16);
  t->ids.resize(head[0]);
  t->vocab = static_cast<int>(head[1]);
  t->logits.resize(static_cast<size_t>(head[0]) * head[1]);
  f.read(reinterpret_cast<char*>(t->ids.data()), static_cast<std::streamsize>(t->ids.size() * 4));
  f.read(reinterpret_cast<char*>(t->logits.data()), static_cast<std::streamsize>(t->logits.size() * 4));
  if (!f) return fail(error, path + ": read failed");
  return true;
}

}  // namespace qwen
