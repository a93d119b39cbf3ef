// logits_dump.h: qwen_tp --dump-logits FILE. The prompt is run teacher-forced through the target
// (chunks at consecutive positions, as a prefill would), every position's full-vocab logits are
// gathered from the tensor-parallel ranks' vocab shards and written as fp32, so another
// implementation (tests/hf_parity.py: Hugging Face transformers) can be compared position by
// position. The file (little-endian):
//   char magic[8] = "QWLOGIT1"; uint32 positions; uint32 vocab; int32 ids[positions];
//   float32 logits[positions][vocab]   (row p: the logits after ids[0..p], predicting ids[p+1])
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine.h"

namespace qwen {

/// Every position's logits of one id sequence, full vocab.
struct LogitsTable {
  std::vector<int32_t> ids;
  int vocab = 0;
  std::vector<float> logits;  ///< [ids.size(), vocab]
  /// Sizes the table for `ids` and `vocab` (zeros), before the ranks fill their shards.
  void reset(const std::vector<int32_t>& tokens, int vocabSize);
};

/// This rank's logits of the last `rows` rows of the engine's last target() call,
/// [rows, vocabLocal] (CpuModel::lastLogits, GpuModel::lastLogits).
using RowLogitsFn = std::function<bool(int rows, std::vector<float>* out, std::string* error)>;

/// One rank's part: target() over table->ids in chunks of at most `chunk` tokens at positions
/// 0.., writing this rank's vocab columns [vocabBegin, vocabBegin + vocabLocal) of each row into
/// table->logits. Ranks write disjoint columns, so all ranks of a group may fill one table at
/// once (reset() first). Fails when the ids do not fit the engine's KV cache.
bool collectTeacherForcedLogits(DecoderEngine& e, int chunk, int vocabBegin, int vocabLocal, const RowLogitsFn& rows,
                                LogitsTable* table, std::string* error);

/// Writes the table in the format above; reads it back (checking the sizes against the file's).
bool writeLogitsFile(const std::string& path, const LogitsTable& t, std::string* error);
bool readLogitsFile(const std::string& path, LogitsTable* t, std::string* error);

}  // namespace qwen
