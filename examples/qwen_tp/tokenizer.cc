// tokenizer.cc: loading tokenizer.json (nlohmann_json, bounded as json_limits.h bounds the other
// files), byte-level BPE encode by merge rank, decode, streamed decode.
#include "tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "json_limits.h"

namespace qwen {
namespace {

using nlohmann::json;

// Qwen2's split pattern as tokenizer.json stores it (after JSON unescaping).
const char kQwen2Pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

bool fail(std::string* error, const std::string& msg) {
  if (error) *error = msg;
  return false;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A string-or-null field that must be empty when present.
bool emptyOrNull(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return true;
  return j[key].is_string() && j[key].get<std::string>().empty();
}

uint64_t pairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

bool asciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// The pre-tokenizer must be Qwen2's: Sequence[Split(Qwen2 regex, Isolated), ByteLevel(no regex,
// no prefix space)].
bool checkPreTokenizer(const json& p, const std::string& src, std::string* error) {
  const std::string where = src + ": pre_tokenizer: ";
  if (!p.is_object() || p.value("type", "") != "Sequence" || !p.contains("pretokenizers") ||
      !p["pretokenizers"].is_array() || p["pretokenizers"].size() != 2)
    return fail(error, where + "expected a Sequence of [Split (Qwen2's pattern), ByteLevel] as Qwen2/Qwen3 use");
  const json& split = p["pretokenizers"][0];
  const json& bl = p["pretokenizers"][1];
  if (!split.is_object() || split.value("type", "") != "Split" || !split.contains("pattern") ||
      !split["pattern"].is_object() || !split["pattern"].contains("Regex") || !split["pattern"]["Regex"].is_string())
    return fail(error, where + "the first step must be a Split with a \"Regex\" pattern");
  if (split["pattern"]["Regex"].get<std::string>() != kQwen2Pattern)
    return fail(error, where + "the Split pattern is not Qwen2's (only Qwen2's pattern is implemented)");
  if (split.value("behavior", "") != "Isolated" || split.value("invert", false))
    return fail(error, where + "the Split must have behavior \"Isolated\" and invert false");
  if (!bl.is_object() || bl.value("type", "") != "ByteLevel")
    return fail(error, where + "the second step must be ByteLevel");
  if (bl.value("add_prefix_space", false) || bl.value("use_regex", true))
    return fail(error, where + "ByteLevel must have add_prefix_space false and use_regex false");
  return true;
}

}  // namespace

bool Tokenizer::load(const std::string& path, std::unique_ptr<Tokenizer>* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(error, path + ": cannot open (expected a Hugging Face tokenizer.json)");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) return fail(error, path + ": cannot read");
  if (static_cast<uint64_t>(size) > kMaxTokenizerJsonBytes)
    return fail(error, path + ": " + std::to_string(size) + " bytes exceed the tokenizer.json limit of " +
                           std::to_string(kMaxTokenizerJsonBytes));
  in.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(&text[0], size)) return fail(error, path + ": cannot read");
  return loadFromString(text, path, out, error);
}

bool Tokenizer::loadFromString(const std::string& text, const std::string& src, std::unique_ptr<Tokenizer>* out,
                               std::string* error) {
  std::string why;
  if (!jsonWithinLimits(text.data(), text.data() + text.size(), kMaxTokenizerJsonBytes, kMaxTokenizerJsonDepth, &why))
    return fail(error, src + ": " + why);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail(error, src + ": not valid JSON");
  if (!j.is_object()) return fail(error, src + ": expected a JSON object at the top level");
  std::unique_ptr<Tokenizer> t(new Tokenizer());

  // normalizer: null, or NFC (applied between added tokens)
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const json& nm = j["normalizer"];
    if (!nm.is_object() || nm.value("type", "") != "NFC")
      return fail(error, src + ": normalizer: only null or {\"type\": \"NFC\"} is supported");
    t->nfc_ = true;
  }
  if (!j.contains("pre_tokenizer")) return fail(error, src + ": missing \"pre_tokenizer\"");
  if (!checkPreTokenizer(j["pre_tokenizer"], src, error)) return false;
  if (j.contains("decoder") && !j["decoder"].is_null() &&
      (!j["decoder"].is_object() || j["decoder"].value("type", "") != "ByteLevel"))
    return fail(error, src + ": decoder: expected ByteLevel (or null)");

  if (!j.contains("model") || !j["model"].is_object()) return fail(error, src + ": missing the \"model\" object");
  const json& m = j["model"];
  if (m.value("type", "BPE") != "BPE") return fail(error, src + ": model.type: expected \"BPE\"");
  if (m.contains("byte_fallback") && !(m["byte_fallback"].is_boolean() && !m["byte_fallback"].get<bool>()))
    return fail(error, src + ": model.byte_fallback: only false is supported");
  if (m.contains("dropout") && !m["dropout"].is_null() &&
      !(m["dropout"].is_number() && m["dropout"].get<double>() == 0))
    return fail(error, src + ": model.dropout: only null or 0 is supported (BPE dropout makes encoding random)");
  if (!emptyOrNull(m, "continuing_subword_prefix") || !emptyOrNull(m, "end_of_word_suffix"))
    return fail(error, src + ": model: continuing_subword_prefix / end_of_word_suffix are not supported");
  if (m.contains("ignore_merges") && m["ignore_merges"].is_boolean()) t->ignoreMerges_ = m["ignore_merges"].get<bool>();
  if (!m.contains("vocab") || !m["vocab"].is_object()) return fail(error, src + ": model.vocab: expected an object");
  if (!m.contains("merges") || !m["merges"].is_array()) return fail(error, src + ": model.merges: expected an array");

  // GPT-2's byte-to-unicode table: printable Latin-1 bytes map to themselves, the others to
  // U+0100 onwards in byte order.
  std::unordered_map<std::string, unsigned char> unicodeToByte;
  for (int b = 0, next = 256; b < 256; ++b) {
    const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    t->byteToUnicode_[b] = utf8(keep ? static_cast<uint32_t>(b) : static_cast<uint32_t>(next++));
    unicodeToByte[t->byteToUnicode_[b]] = static_cast<unsigned char>(b);
  }

  int32_t maxId = -1;
  auto setToken = [&](int32_t id, const std::string& bytes) {
    if (static_cast<size_t>(id) >= t->idBytes_.size()) {
      t->idBytes_.resize(static_cast<size_t>(id) + 1);
      t->known_.resize(static_cast<size_t>(id) + 1, 0);
    }
    t->idBytes_[static_cast<size_t>(id)] = bytes;
    t->known_[static_cast<size_t>(id)] = 1;
    maxId = std::max(maxId, id);
  };
  constexpr int64_t kMaxId = 1 << 24;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() >= kMaxId)
      return fail(error, src + ": model.vocab: the id of a token is not an integer in [0, 2^24)");
    const int32_t id = static_cast<int32_t>(it.value().get<int64_t>());
    t->vocab_[it.key()] = id;
    // raw bytes: each character of the token through the inverse table
    std::string bytes;
    const std::string& s = it.key();
    for (size_t i = 0; i < s.size();) {
      size_t len = 1;
      const unsigned char c = static_cast<unsigned char>(s[i]);
      if (c >= 0xC0) len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      len = std::min(len, s.size() - i);
      auto f = unicodeToByte.find(s.substr(i, len));
      if (f != unicodeToByte.end())
        bytes += static_cast<char>(f->second);
      else
        bytes += s.substr(i, len);  // not a byte-level character: kept as it is
      i += len;
    }
    setToken(id, bytes);
  }
  for (int b = 0; b < 256; ++b) {
    auto f = t->vocab_.find(t->byteToUnicode_[b]);
    t->byteId_[b] = f == t->vocab_.end() ? -1 : f->second;
  }
  const json& merges = m["merges"];
  for (size_t r = 0; r < merges.size(); ++r) {
    std::string a, b;
    const json& e = merges[r];
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return fail(error, src + ": model.merges[" + std::to_string(r) + "]: expected \"A B\"");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>(), b = e[1].get<std::string>();
    } else {
      return fail(error, src + ": model.merges[" + std::to_string(r) + "]: expected \"A B\" or [\"A\", \"B\"]");
    }
    auto fa = t->vocab_.find(a), fb = t->vocab_.find(b), fm = t->vocab_.find(a + b);
    if (fa == t->vocab_.end() || fb == t->vocab_.end() || fm == t->vocab_.end())
      return fail(error, src + ": model.merges[" + std::to_string(r) + "]: a token of the merge is not in the vocab");
    t->merges_[pairKey(fa->second, fb->second)] = {static_cast<int32_t>(r), fm->second};
  }

  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    const json& at = j["added_tokens"];
    if (!at.is_array()) return fail(error, src + ": added_tokens: expected an array");
    for (size_t k = 0; k < at.size(); ++k) {
      const json& e = at[k];
      const std::string where = src + ": added_tokens[" + std::to_string(k) + "]: ";
      if (!e.is_object() || !e.contains("id") || !e["id"].is_number_integer() || !e.contains("content") ||
          !e["content"].is_string())
        return fail(error, where + "expected an object with an integer \"id\" and a string \"content\"");
      const int64_t id = e["id"].get<int64_t>();
      if (id < 0 || id >= kMaxId) return fail(error, where + "id outside [0, 2^24)");
      if (e.value("single_word", false)) return fail(error, where + "single_word is not supported");
      AddedToken a;
      a.content = e["content"].get<std::string>();
      if (a.content.empty()) return fail(error, where + "empty content");
      a.id = static_cast<int32_t>(id);
      a.lstrip = e.value("lstrip", false);
      a.rstrip = e.value("rstrip", false);
      setToken(a.id, a.content);
      t->added_.push_back(a);
    }
    std::stable_sort(t->added_.begin(), t->added_.end(),
                     [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  }
  if (maxId < 0) return fail(error, src + ": the vocabulary is empty");
  t->idLimit_ = maxId + 1;
  *out = std::move(t);
  return true;
}

int32_t Tokenizer::tokenId(const std::string& token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  auto f = vocab_.find(token);
  return f == vocab_.end() ? -1 : f->second;
}

void Tokenizer::encodeWord(const std::string& piece, std::vector<int32_t>* ids) const {
  if (ignoreMerges_) {
    std::string u;
    for (unsigned char c : piece) u += byteToUnicode_[c];
    auto f = vocab_.find(u);
    if (f != vocab_.end()) return ids->push_back(f->second);
  }
  std::vector<int32_t> sym;
  sym.reserve(piece.size());
  for (unsigned char c : piece)
    if (byteId_[c] >= 0) sym.push_back(byteId_[c]);  // a byte outside the vocab is dropped, as HF does
  // Merge the adjacent pair of lowest rank (leftmost on ties) until none is left.
  while (sym.size() > 1) {
    int32_t best = std::numeric_limits<int32_t>::max(), merged = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto f = merges_.find(pairKey(sym[i], sym[i + 1]));
      if (f != merges_.end() && f->second.first < best) best = f->second.first, merged = f->second.second, at = i;
    }
    if (merged < 0) break;
    sym[at] = merged;
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  ids->insert(ids->end(), sym.begin(), sym.end());
}

void Tokenizer::encodeOrdinary(const std::string& text, size_t b, size_t e, std::vector<int32_t>* ids) const {
  if (b >= e) return;
  const std::string part = nfc_ ? nfcNormalize(text.substr(b, e - b)) : text.substr(b, e - b);
  for (const auto& r : pretokenizeQwen2(part)) encodeWord(part.substr(r.first, r.second - r.first), ids);
}

bool Tokenizer::encode(const std::string& text, std::vector<int32_t>* ids, std::string* error) const {
  ids->clear();
  size_t bad = 0;
  if (!isValidUtf8(text, &bad)) return fail(error, "text is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
  // Added tokens first: leftmost match, longest at that position (added_ is longest first).
  size_t done = 0;  // text[0, done) is encoded
  for (size_t i = 0; i < text.size(); ++i) {
    const AddedToken* hit = nullptr;
    for (const AddedToken& a : added_)
      if (text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    if (!hit) continue;
    size_t s = i, e = i + hit->content.size();
    if (hit->lstrip)
      while (s > done && asciiSpace(text[s - 1])) --s;
    if (hit->rstrip)
      while (e < text.size() && asciiSpace(text[e])) ++e;
    encodeOrdinary(text, done, s, ids);
    ids->push_back(hit->id);
    done = e;
    i = e - 1;
  }
  encodeOrdinary(text, done, text.size(), ids);
  return true;
}

bool Tokenizer::tokenBytes(int32_t id, std::string* bytes) const {
  if (id < 0 || static_cast<size_t>(id) >= known_.size() || !known_[static_cast<size_t>(id)]) return false;
  *bytes = idBytes_[static_cast<size_t>(id)];
  return true;
}

bool Tokenizer::decode(const std::vector<int32_t>& ids, std::string* bytes, std::string* error) const {
  bytes->clear();
  std::string one;
  for (int32_t id : ids) {
    if (!tokenBytes(id, &one)) return fail(error, "token id " + std::to_string(id) + " is not in the tokenizer");
    *bytes += one;
  }
  return true;
}

bool StreamDecoder::push(int32_t id, std::string* ready) {
  std::string b;
  ready->clear();
  if (!tok_.tokenBytes(id, &b)) return false;
  pending_ += b;
  // Emit up to the last complete UTF-8 character; keep a trailing incomplete one (at most 3 bytes).
  size_t cut = pending_.size();
  for (size_t back = 1; back <= 3 && back <= pending_.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(pending_[pending_.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > back) cut = pending_.size() - back;
    break;
  }
  *ready = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return true;
}

std::string StreamDecoder::flush() {
  std::string r;
  r.swap(pending_);
  return r;
}

}  // namespace qwen
