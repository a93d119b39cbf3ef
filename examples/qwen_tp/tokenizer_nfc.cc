// tokenizer_nfc.cc: Unicode NFC (canonical decomposition, canonical ordering, canonical
// composition; UAX #15), the normalizer Qwen3's tokenizer.json names. Tables from
// unicode_nfc_tables.h (generated from Python's unicodedata); Hangul syllables algorithmically.
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer.h"
#include "unicode_nfc_tables.h"

namespace qwen {
namespace {

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

struct Tables {
  std::unordered_map<uint32_t, const unicode::Decomposition*> decomp;  // cp -> its decomposition
  std::unordered_map<uint64_t, uint32_t> compose;                      // (first, second) -> primary composite
  Tables() {
    for (const unicode::Decomposition& d : unicode::kDecompositions) {
      decomp[d.cp] = &d;
      if (d.composite) compose[(static_cast<uint64_t>(d.first) << 32) | d.second] = d.cp;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

int ccc(uint32_t cp) {
  const auto* b = std::begin(unicode::kCombiningRanges);
  const auto* e = std::end(unicode::kCombiningRanges);
  const auto* it = std::upper_bound(b, e, cp, [](uint32_t c, const unicode::CombiningRange& r) { return c < r.first; });
  return it != b && cp <= (it - 1)->last ? (it - 1)->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {  // Hangul syllable: L V [T]
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out->push_back(kTBase + s % kTCount);
    return;
  }
  const auto& d = tables().decomp;
  auto f = d.find(cp);
  if (f == d.end()) return out->push_back(cp);
  decompose(f->second->first, out);
  if (f->second->second) decompose(f->second->second, out);
}

// The primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto& c = tables().compose;
  auto f = c.find((static_cast<uint64_t>(a) << 32) | b);
  return f == c.end() ? 0 : f->second;
}

void appendUtf8(uint32_t cp, std::string* s) {
  if (cp < 0x80) {
    *s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *s += static_cast<char>(0xC0 | (cp >> 6));
    *s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *s += static_cast<char>(0xE0 | (cp >> 12));
    *s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *s += static_cast<char>(0xF0 | (cp >> 18));
    *s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

std::string nfcNormalize(const std::string& text) {
  // Fast path: ASCII is always NFC.
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) return text;
  // 1. Full canonical decomposition (the text is valid UTF-8: Tokenizer::encode checks first).
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n && i + k < text.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    decompose(cp, &cps);
    i += static_cast<size_t>(n);
  }
  // 2. Canonical ordering: each run of non-starters sorted by combining class, stably.
  for (size_t i = 0; i < cps.size();) {
    if (ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  // 3. Canonical composition: a character joins the last starter unless blocked (a character
  //    between them with a class >= its own, or a starter between them).
  if (!cps.empty()) {
    size_t starter = 0, target = 1;
    int lastClass = ccc(cps[0]) == 0 ? 0 : 256;  // text starting with a non-starter: nothing composes with it
    for (size_t i = 1; i < cps.size(); ++i) {
      const uint32_t ch = cps[i];
      const int chClass = ccc(ch);
      const uint32_t composite = lastClass == 256 ? 0 : compose(cps[starter], ch);
      if (composite && (lastClass < chClass || lastClass == 0)) {
        cps[starter] = composite;
        continue;
      }
      if (chClass == 0) starter = target;
      lastClass = chClass;
      cps[target++] = ch;
    }
    cps.resize(target);
  }
  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : cps) appendUtf8(cp, &out);
  return out;
}

}  // namespace qwen
