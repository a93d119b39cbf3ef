// teacher_forced.h: the two ways qwen_tp measures a draft besides a free-running speed run.
//
// Teacher-forced acceptance (--teacher-forced): over a text, at every position n, the round a
// run would make there with the text as its history: the MTP draft chain of nMax tokens (the
// first from the pair (h_{n-1}, x_n), the rest chained on the MTP's own output and drafts, in one
// mtpChainRun as a real round), then the target's verify of [x_n, d_1 .. d_nMax] at positions
// n..n+nMax. k = the number of leading drafts equal to the verify's greedy tokens: exactly the
// accepted count a greedy run whose history is x_0..x_n would see. Then the position advances by
// the text's token x_{n+1} (its MTP pair (h_n, x_{n+1}) makes the next first draft), not by the
// target's own, so loops in the model's output cannot inflate it. One chain of nMax serves every
// n-max m <= nMax: the accepted count at m is min(k, m) (drafts do not depend on m without p-min).
// The text goes in windows of `window` tokens, each started from position 0 with `context` tokens
// of prefill before its first evaluated position; consecutive windows overlap by `context`
// tokens so every position from `context` on is evaluated once.
//
// Round traces (--trace-out, --replay-trace): a text file, one line per verify round,
// "drafted accepted"; lines starting with '#' are comments (several runs' traces concatenate).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine.h"
#include "speculative.h"

namespace qwen {

/// Runs the teacher-forced measurement over `text` (see above) into *st. Needs the MTP head,
/// nMax >= 1, context >= 1, window > context and ctxSize() >= window + nMax + 1.
bool teacherForcedAcceptance(DecoderEngine& e, const std::vector<int32_t>& text, int nMax, int window, int context,
                             TeacherForcedStats* st, std::string* error);

/// The lines printed for it: the positions, the target's top-1 on the text, and for each n-max
/// 1..nMax llama.cpp's accepted/drafted, the per-token acceptance and the mean accepted length,
/// then the conditional rate of each draft index.
std::string formatTeacherForced(const TeacherForcedStats& st);

/// Writes a run's rounds (with a '#' header naming what it was) to path.
bool writeTrace(const std::string& path, const std::string& header, const std::vector<RoundRecord>& rounds,
                std::string* error);
/// Reads a trace file: "drafted accepted" per line, 0 <= accepted <= drafted <= 64.
bool readTrace(const std::string& path, std::vector<RoundRecord>* rounds, std::string* error);

}  // namespace qwen
