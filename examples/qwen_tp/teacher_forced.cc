// teacher_forced.cc: teacher-forced acceptance over a text, and round traces (teacher_forced.h).
#include "teacher_forced.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace qwen {
namespace {

bool fail(std::string* error, const std::string& msg) {
  if (error) *error = msg;
  return false;
}

}  // namespace

bool teacherForcedAcceptance(DecoderEngine& e, const std::vector<int32_t>& text, int nMax, int window, int context,
                             TeacherForcedStats* st, std::string* error) {
  *st = TeacherForcedStats();
  st->nMax = nMax;
  st->hist.assign(static_cast<size_t>(nMax) + 1, 0);
  if (!e.hasMtp()) return fail(error, "--teacher-forced: the model has no MTP head");
  if (nMax < 1 || nMax + 1 > e.maxTokensPerCall()) return fail(error, "--teacher-forced: n-max out of range");
  if (context < 1 || window <= context) return fail(error, "--teacher-forced: needs 1 <= context < window");
  if (window + nMax + 1 > e.ctxSize())
    return fail(error, "--teacher-forced: a window of " + std::to_string(window) + " tokens and " +
                           std::to_string(nMax + 1) + " verify tokens do not fit the KV cache of " +
                           std::to_string(e.ctxSize()));
  const int T = static_cast<int>(text.size());
  std::vector<int32_t> batch(static_cast<size_t>(nMax) + 1), next(batch.size());
  for (int w0 = 0; w0 + context < T; w0 += window - context) {
    const int len = std::min(window, T - w0);  // tokens of this window; positions [context, len) evaluated
    // History x_0 .. x_{context-1} in the KV cache, x_context committed (the text's, not the
    // target's), its first draft made from (h_{context-1}, x_context).
    std::vector<int32_t> hist(text.begin() + w0, text.begin() + w0 + context);
    const int32_t xc = text[static_cast<size_t>(w0 + context)];
    int32_t draft = 0;
    auto forced = [xc](int32_t* last, std::string*) { return *last = xc, true; };
    if (!prefillChunked(e, &hist, true, &draft, error, forced)) return false;
    ++st->windows;
    for (int n = context; n < len; ++n) {
      batch[0] = text[static_cast<size_t>(w0 + n)];
      batch[1] = draft;
      if (nMax > 1 && !e.mtpChainRun(draft, n, nMax - 1, &batch[2], nullptr, error)) return false;
      if (!e.target(batch.data(), nMax + 1, n, next.data(), error)) return false;
      int k = 0;
      while (k < nMax && batch[static_cast<size_t>(k) + 1] == next[static_cast<size_t>(k)]) ++k;
      ++st->hist[static_cast<size_t>(k)];
      ++st->positions;
      if (n + 1 < len) {
        const int32_t x1 = text[static_cast<size_t>(w0 + n + 1)];
        st->targetTop1 += next[0] == x1;
        // The MTP pair (h_n, x_{n+1}): h_n is row 0 of the verify just run.
        if (!e.mtpFromTarget(&x1, 1, n, &draft, error)) return false;
      }
    }
    if (w0 + window >= T) break;
  }
  if (st->positions == 0)
    return fail(error, "--teacher-forced: the text (" + std::to_string(T) +
                           " tokens) is not longer than the context (" + std::to_string(context) + ")");
  return true;
}

std::string formatTeacherForced(const TeacherForcedStats& st) {
  std::string r;
  char buf[512];
  const int64_t top1Positions = st.positions - st.windows;  // the last position of a window has no next text token
  std::snprintf(buf, sizeof(buf),
                "teacher-forced: %lld positions in %lld windows, drafts chained to n-max %d; the target's greedy token "
                "is the text's next token at %.4f of them\n",
                static_cast<long long>(st.positions), static_cast<long long>(st.windows), st.nMax,
                top1Positions > 0 ? static_cast<double>(st.targetTop1) / top1Positions : 0.0);
  r += buf;
  for (int m = 1; m <= st.nMax; ++m) {
    const int64_t a = st.accepted(m), d = st.drafted(m), rej = st.rejected(m);
    std::snprintf(buf, sizeof(buf),
                  "teacher-forced n-max %d: accepted/drafted = %.5f (%lld / %lld), per-token acceptance = %.5f (%lld / "
                  "%lld accepted + first rejections), mean accepted length = %.3f\n",
                  m, d ? static_cast<double>(a) / d : 0.0, static_cast<long long>(a), static_cast<long long>(d),
                  a + rej ? static_cast<double>(a) / (a + rej) : 0.0, static_cast<long long>(a),
                  static_cast<long long>(a + rej), st.positions ? 1.0 + static_cast<double>(a) / st.positions : 0.0);
    r += buf;
  }
  r += "teacher-forced draft i right, given drafts 1..i-1 right:";
  int64_t reach = st.positions;  // positions whose first i-1 drafts were right
  for (int i = 1; i <= st.nMax; ++i) {
    const int64_t right = reach - st.hist[static_cast<size_t>(i) - 1];
    std::snprintf(buf, sizeof(buf), " %d: %.4f", i, reach ? static_cast<double>(right) / reach : 0.0);
    r += buf;
    reach = right;
  }
  return r + "\n";
}

bool writeTrace(const std::string& path, const std::string& header, const std::vector<RoundRecord>& rounds,
                std::string* error) {
  std::ofstream f(path);
  f << "# qwen_tp round trace: drafted accepted, one verify round a line\n# " << header << "\n";
  for (const RoundRecord& r : rounds) f << r.drafted << " " << r.accepted << "\n";
  f.close();
  if (!f) return fail(error, "--trace-out: cannot write " + path);
  return true;
}

bool readTrace(const std::string& path, std::vector<RoundRecord>* rounds, std::string* error) {
  std::ifstream f(path);
  if (!f) return fail(error, "--replay-trace " + path + ": cannot open");
  rounds->clear();
  std::string line;
  int lineNo = 0;
  while (std::getline(f, line)) {
    ++lineNo;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    std::istringstream is(line);
    RoundRecord r;
    std::string rest;
    if (!(is >> r.drafted >> r.accepted) || (is >> rest) || r.drafted < 0 || r.drafted > 64 || r.accepted < 0 ||
        r.accepted > r.drafted)
      return fail(error, "--replay-trace " + path + ":" + std::to_string(lineNo) +
                             ": expected \"drafted accepted\" with 0 <= accepted <= drafted <= 64, got \"" + line +
                             "\"");
    rounds->push_back(r);
    if (rounds->size() > (1u << 24)) return fail(error, "--replay-trace " + path + ": more than 2^24 rounds");
  }
  if (rounds->empty()) return fail(error, "--replay-trace " + path + ": no rounds");
  return true;
}

}  // namespace qwen
