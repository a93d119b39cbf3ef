// tokenizer.h: the byte-level BPE tokenizer of Qwen2/Qwen3, read from a Hugging Face
// tokenizer.json (model type BPE; pre-tokenizer: Split on Qwen2's regex, then ByteLevel without
// its own regex; decoder ByteLevel). encode(): added and special tokens are matched first
// (leftmost, longest), the text between them is split by Qwen2's pattern (pretokenizeQwen2,
// written by hand: std::regex has no \p{L}), each piece's UTF-8 bytes are mapped through GPT-2's
// byte-to-unicode table and merged by rank. decode(): the inverse, to raw bytes.
//
// A "NFC" normalizer (Qwen3's) is applied to the text between added tokens, as Hugging Face
// applies it (Qwen's added tokens are all normalized: false). Not implemented, each refused with
// an error naming the field: other normalizers and pre-tokenizer patterns, byte_fallback, subword
// prefixes/suffixes, added tokens with single_word.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace qwen {

/// Input bounds for tokenizer.json (Qwen3's is ~11 MB and nests 5 levels).
constexpr size_t kMaxTokenizerJsonBytes = 64u << 20;
constexpr int kMaxTokenizerJsonDepth = 32;

/// Splits UTF-8 `text` as Qwen2's pre-tokenizer regex does (Hugging Face Split, Isolated):
///   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
///   \s*[\r\n]+|\s+(?!\S)|\s+
/// Returns byte ranges [first, second) into text that cover it. Invalid UTF-8 bytes are taken as
/// single code points of "other" category (the tokenizer refuses invalid UTF-8 before this).
std::vector<std::pair<size_t, size_t>> pretokenizeQwen2(const std::string& text);

/// Unicode NFC of valid UTF-8 `text` (tokenizer_nfc.cc; tables of Unicode 14).
std::string nfcNormalize(const std::string& text);

/// True when `text` is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool isValidUtf8(const std::string& text, size_t* badOffset);

class Tokenizer {
 public:
  /// Reads tokenizer.json at `path`. False with a message naming the file and the field.
  static bool load(const std::string& path, std::unique_ptr<Tokenizer>* out, std::string* error);
  /// Same from the JSON text; `source` names it in messages.
  static bool loadFromString(const std::string& json, const std::string& source, std::unique_ptr<Tokenizer>* out,
                             std::string* error);

  /// Token ids of UTF-8 `text` (added/special tokens in the text become their ids). False when
  /// the text is not valid UTF-8.
  bool encode(const std::string& text, std::vector<int32_t>* ids, std::string* error) const;
  /// The bytes of the tokens (special tokens included as their text). False on an unknown id.
  bool decode(const std::vector<int32_t>& ids, std::string* bytes, std::string* error) const;
  /// One token's bytes (may be part of a UTF-8 character); false on an unknown id.
  bool tokenBytes(int32_t id, std::string* bytes) const;
  /// Largest id + 1 (vocab and added tokens).
  int idLimit() const { return idLimit_; }
  /// Id of a token string (vocab form, e.g. "Ġthe", or an added token's content); -1 if none.
  int32_t tokenId(const std::string& token) const;
  /// Whether the tokenizer.json has the NFC normalizer (applied by encode).
  bool normalizesNfc() const { return nfc_; }

 private:
  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool lstrip = false, rstrip = false;
  };
  void encodeWord(const std::string& piece, std::vector<int32_t>* ids) const;
  void encodeOrdinary(const std::string& text, size_t b, size_t e, std::vector<int32_t>* ids) const;

  std::unordered_map<std::string, int32_t> vocab_;                    // byte-unicode form -> id
  std::vector<std::string> idBytes_;                                  // id -> raw bytes ("" + !known_ if none)
  std::vector<char> known_;                                           // id -> has a token
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (idA, idB) -> (rank, merged id)
  std::vector<AddedToken> added_;                                     // sorted by content length, longest first
  std::string byteToUnicode_[256];                                    // GPT-2's table, as UTF-8
  int32_t byteId_[256];                                               // id of each single byte (-1: not in vocab)
  bool ignoreMerges_ = false, nfc_ = false;
  int idLimit_ = 0;
};

/// Streams decoded text: push() a token, get back the bytes that complete UTF-8 characters (a
/// character split over tokens is held until its last byte arrives). flush() returns the rest.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t) : tok_(t) {}
  /// False on an unknown id.
  bool push(int32_t id, std::string* ready);
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace qwen
