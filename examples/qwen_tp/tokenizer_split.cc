// tokenizer_split.cc: Qwen2's pre-tokenizer regex, matched by hand over code points, and UTF-8
// validation. Each alternative of the pattern is tried in order at the current position, as a
// backtracking regex engine (Oniguruma, which `tokenizers` uses) tries them; the first that
// matches wins, and the scan continues after it. \p{L} and \p{N} come from unicode_tables.h
// (generated from Python's unicodedata); \s is Unicode White_Space, as Oniguruma has it.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer.h"
#include "unicode_tables.h"

namespace qwen {
namespace {

struct Cp {
  uint32_t cp;
  size_t begin;  // byte offset
};

bool inRanges(const unicode::CodeRange* b, const unicode::CodeRange* e, uint32_t cp) {
  const unicode::CodeRange* it =
      std::upper_bound(b, e, cp, [](uint32_t c, const unicode::CodeRange& r) { return c < r.first; });
  return it != b && cp <= (it - 1)->last;
}

bool isLetter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return inRanges(std::begin(unicode::kLetterRanges), std::end(unicode::kLetterRanges), cp);
}
bool isNumber(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return inRanges(std::begin(unicode::kNumberRanges), std::end(unicode::kNumberRanges), cp);
}
// Unicode White_Space (Oniguruma's \s under Unicode).
bool isSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
bool isCrLf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// Decodes one UTF-8 sequence at text[i]; *len = its length. Returns 0xFFFFFFFF for an invalid one
// (then *len = 1).
uint32_t decodeAt(const std::string& text, size_t i, size_t* len) {
  const unsigned char c = static_cast<unsigned char>(text[i]);
  *len = 1;
  if (c < 0x80) return c;
  int n = 0;
  uint32_t cp = 0, min = 0;
  if ((c & 0xE0) == 0xC0)
    n = 1, cp = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0)
    n = 2, cp = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0)
    n = 3, cp = c & 0x07, min = 0x10000;
  else
    return 0xFFFFFFFF;
  if (i + n >= text.size()) return 0xFFFFFFFF;  // truncated sequence
  for (int k = 1; k <= n; ++k) {
    const unsigned char d = static_cast<unsigned char>(text[i + k]);
    if ((d & 0xC0) != 0x80) return 0xFFFFFFFF;
    cp = (cp << 6) | (d & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0xFFFFFFFF;
  *len = static_cast<size_t>(n) + 1;
  return cp;
}

// Lower-case ASCII letter that cp folds to under (?i) for the contraction suffixes (U+017F long s
// folds to 's', U+212A Kelvin to 'k'; only 's' matters here), else 0.
char foldAscii(uint32_t cp) {
  if (cp < 0x80 && isLetter(cp)) return static_cast<char>(cp | 0x20);
  if (cp == 0x17F) return 's';
  return 0;
}

}  // namespace

bool isValidUtf8(const std::string& text, size_t* badOffset) {
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    if (decodeAt(text, i, &len) == 0xFFFFFFFF) {
      if (badOffset) *badOffset = i;
      return false;
    }
    i += len;
  }
  return true;
}

std::vector<std::pair<size_t, size_t>> pretokenizeQwen2(const std::string& text) {
  std::vector<Cp> cps;
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    const uint32_t cp = decodeAt(text, i, &len);
    cps.push_back({cp, i});
    i += len;
  }
  const size_t n = cps.size();
  auto at = [&](size_t k) { return cps[k].cp; };
  auto byteAt = [&](size_t k) { return k < n ? cps[k].begin : text.size(); };
  std::vector<std::pair<size_t, size_t>> out;
  size_t i = 0;
  while (i < n) {
    size_t end = i;  // match is code points [i, end)
    const uint32_t c = at(i);
    // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (c == '\'' && i + 1 < n) {
      const char a = foldAscii(at(i + 1)), b = i + 2 < n ? foldAscii(at(i + 2)) : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd')
        end = i + 2;
      else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        end = i + 3;
      // ('re etc. are tried before 'm/'d only in order; the suffix letters differ, so no clash)
    }
    // 2. [^\r\n\p{L}\p{N}]?\p{L}+
    if (end == i) {
      size_t k = i;
      if (!isLetter(c) && !isNumber(c) && !isCrLf(c) && i + 1 < n && isLetter(at(i + 1))) k = i + 1;
      if (isLetter(at(k))) {
        while (k < n && isLetter(at(k))) ++k;
        end = k;
      }
    }
    // 3. \p{N}
    if (end == i && isNumber(c)) end = i + 1;
    // 4. ' '?[^\s\p{L}\p{N}]+[\r\n]*
    if (end == i) {
      auto other = [&](size_t k) { return k < n && !isSpace(at(k)) && !isLetter(at(k)) && !isNumber(at(k)); };
      size_t k = (c == ' ' && other(i + 1)) ? i + 1 : i;
      if (other(k)) {
        while (other(k)) ++k;
        while (k < n && isCrLf(at(k))) ++k;
        end = k;
      }
    }
    if (end == i && isSpace(c)) {
      size_t run = i;
      while (run < n && isSpace(at(run))) ++run;
      // 5. \s*[\r\n]+ : up to the last \r or \n of the whitespace run
      for (size_t k = run; k > i; --k)
        if (isCrLf(at(k - 1))) {
          end = k;
          break;
        }
      // 6. \s+(?!\S): the run, less its last character unless the run ends the text
      if (end == i) {
        if (run == n)
          end = run;
        else if (run - i >= 2)
          end = run - 1;
      }
      // 7. \s+
      if (end == i) end = run;
    }
    if (end == i) end = i + 1;  // not reached for valid input (every code point matches 2-7)
    out.emplace_back(byteAt(i), byteAt(end));
    i = end;
  }
  return out;
}

}  // namespace qwen
