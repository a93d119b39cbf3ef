// cpu_model.cc: the fp32 reference forward, one tensor-parallel rank. Matrix products accumulate
// in double so the reference is sharper than anything it is compared against.
#include "cpu_model.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>

#include "tpcomm/communicator.h"

namespace qwen {
namespace {

// y[t][i] = sum_j W[(r0 + i) * ldw + c0 + j] * x[t][j], i < rows, j < cols; x is [n, cols].
void linear(const std::vector<float>& W, int64_t ldw, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
            const float* x, int n, float* y) {
  for (int t = 0; t < n; ++t)
    for (int64_t i = 0; i < rows; ++i) {
      const float* wr = W.data() + (r0 + i) * ldw + c0;
      const float* xr = x + t * cols;
      double s = 0;
      for (int64_t j = 0; j < cols; ++j) s += static_cast<double>(wr[j]) * xr[j];
      y[t * rows + i] = static_cast<float>(s);
    }
}

// out = x / rms(x) * w over `dim` elements (fp32 math, as HF's Qwen3RMSNorm).
void rmsNorm(const float* x, const float* w, int dim, float eps, float* out) {
  double ss = 0;
  for (int i = 0; i < dim; ++i) ss += static_cast<double>(x[i]) * x[i];
  float inv = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
  for (int i = 0; i < dim; ++i) out[i] = w[i] * (x[i] * inv);
}

// Rotate-half rotary embedding of one head vector at position `pos`.
void rope(float* v, int dim, int pos, float theta) {
  const int half = dim / 2;
  for (int i = 0; i < half; ++i) {
    double invFreq = std::pow(static_cast<double>(theta), -2.0 * i / dim);
    double a = pos * invFreq, c = std::cos(a), s = std::sin(a);
    double x1 = v[i], x2 = v[i + half];
    v[i] = static_cast<float>(x1 * c - x2 * s);
    v[i + half] = static_cast<float>(x2 * c + x1 * s);
  }
}

}  // namespace

CpuModel::CpuModel(const ModelConfig& cfg, const TpShape& shape, const HostWeights* weights, tpcomm::Communicator* comm,
                   int ctxSize, bool fusedNorm)
    : cfg_(cfg), shape_(shape), weights_(weights), comm_(comm), ctx_(ctxSize), fusedNorm_(fusedNorm) {
  size_t per = static_cast<size_t>(ctx_) * shape_.kvHeads * cfg_.headDim;
  caches_.resize(cfg_.numLayers);
  for (auto& c : caches_) c.k.assign(per, 0.f), c.v.assign(per, 0.f);
  if (cfg_.mtpLayers > 0) mtpCache_.k.assign(per, 0.f), mtpCache_.v.assign(per, 0.f);
}

bool CpuModel::allReduce(float* buf, size_t count, std::string* error, bool exact) {
  ++allReduces_;
  if (shape_.tp == 1) return true;
  tpcomm::Status s =
      exact ? comm_->allReduce(buf, buf, count, tpcomm::DataType::kF32, tpcomm::ReduceOp::kSum, nullptr,
                               tpcomm::Compression::kNone)
            : comm_->allReduce(buf, buf, count, tpcomm::DataType::kF32, tpcomm::ReduceOp::kSum, nullptr);
  if (s == tpcomm::Status::kOk) return true;
  if (error) *error = std::string("tpcomm allReduce failed: ") + tpcomm::statusName(s) + ": " + tpcomm::lastErrorMessage();
  return false;
}

bool CpuModel::allReduceAddNorm(float* partial, float* x, const float* weight, int n, float* out, std::string* error) {
  const int H = cfg_.hiddenSize;
  if (fusedNorm_ && shape_.tp > 1) {
    ++allReduces_, ++fusedNorms_;
    tpcomm::Status s = comm_->allReduceResidualRmsNorm(partial, x, weight, cfg_.rmsNormEps, out, static_cast<size_t>(n),
                                                       static_cast<size_t>(H), tpcomm::DataType::kF32, nullptr);
    if (s == tpcomm::Status::kOk) return true;
    if (error)
      *error = std::string("tpcomm allReduceResidualRmsNorm failed: ") + tpcomm::statusName(s) + ": " +
               tpcomm::lastErrorMessage();
    return false;
  }
  if (!allReduce(partial, static_cast<size_t>(n) * H, error)) return false;
  for (size_t i = 0; i < static_cast<size_t>(n) * H; ++i) x[i] += partial[i];
  for (int t = 0; t < n; ++t) rmsNorm(x + static_cast<size_t>(t) * H, weight, H, cfg_.rmsNormEps, out + static_cast<size_t>(t) * H);
  return true;
}

bool CpuModel::embed(const int32_t* tokens, int n, float* x, std::string* error) {
  const int H = cfg_.hiddenSize;
  const std::vector<float>& E = w("model.embed_tokens.weight");
  std::memset(x, 0, sizeof(float) * n * H);
  for (int t = 0; t < n; ++t) {
    int tok = tokens[t];
    if (tok < 0 || tok >= cfg_.vocabSize) {
      if (error) *error = "token id " + std::to_string(tok) + " out of range [0, " + std::to_string(cfg_.vocabSize) + ")";
      return false;
    }
    int local = tok - shape_.vocabBegin();
    if (local >= 0 && local < shape_.vocab) std::memcpy(x + t * H, E.data() + static_cast<size_t>(tok) * H, sizeof(float) * H);
  }
  return allReduce(x, static_cast<size_t>(n) * H, error, true);  // vocab-parallel embedding: exact
}

bool CpuModel::layer(const std::string& p, Cache& cache, float* x, float* h, int n, int slot0, int ropePos0,
                     const float* nextNorm, float* normOut, std::string* error) {
  const int H = cfg_.hiddenSize, D = cfg_.headDim, hq = shape_.heads, hk = shape_.kvHeads, I = shape_.inter;
  const float eps = cfg_.rmsNormEps;
  std::vector<float> q(static_cast<size_t>(n) * hq * D), k(static_cast<size_t>(n) * hk * D),
      v(static_cast<size_t>(n) * hk * D), att(static_cast<size_t>(n) * hq * D), o(static_cast<size_t>(n) * H);
  linear(w(p + "self_attn.q_proj.weight"), H, shape_.headBegin() * D, hq * D, 0, H, h, n, q.data());
  linear(w(p + "self_attn.k_proj.weight"), H, shape_.kvHeadBegin() * D, hk * D, 0, H, h, n, k.data());
  linear(w(p + "self_attn.v_proj.weight"), H, shape_.kvHeadBegin() * D, hk * D, 0, H, h, n, v.data());
  const float* qn = w(p + "self_attn.q_norm.weight").data();
  const float* kn = w(p + "self_attn.k_norm.weight").data();
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < hq; ++i) {
      float* qh = q.data() + (t * hq + i) * D;
      rmsNorm(qh, qn, D, eps, qh);
      rope(qh, D, ropePos0 + t, cfg_.ropeTheta);
    }
    for (int i = 0; i < hk; ++i) {
      float* kh = k.data() + (t * hk + i) * D;
      rmsNorm(kh, kn, D, eps, kh);
      rope(kh, D, ropePos0 + t, cfg_.ropeTheta);
    }
    size_t off = static_cast<size_t>(slot0 + t) * hk * D;
    std::memcpy(cache.k.data() + off, k.data() + t * hk * D, sizeof(float) * hk * D);
    std::memcpy(cache.v.data() + off, v.data() + t * hk * D, sizeof(float) * hk * D);
  }
  // Causal GQA attention: query head i reads kv head i / (hq / hk); slot s attends slots 0..s.
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const int group = hq / hk;
  for (int t = 0; t < n; ++t) {
    const int last = slot0 + t;
    for (int i = 0; i < hq; ++i) {
      const float* qh = q.data() + (t * hq + i) * D;
      const int kvh = i / group;
      std::vector<double> sc(last + 1);
      double mx = -1e300;
      for (int s = 0; s <= last; ++s) {
        const float* kh = cache.k.data() + (static_cast<size_t>(s) * hk + kvh) * D;
        double d = 0;
        for (int j = 0; j < D; ++j) d += static_cast<double>(qh[j]) * kh[j];
        sc[s] = d * scale;
        mx = std::max(mx, sc[s]);
      }
      double sum = 0;
      for (int s = 0; s <= last; ++s) sum += (sc[s] = std::exp(sc[s] - mx));
      float* out = att.data() + (t * hq + i) * D;
      for (int j = 0; j < D; ++j) {
        double a = 0;
        for (int s = 0; s <= last; ++s) a += sc[s] * cache.v[(static_cast<size_t>(s) * hk + kvh) * D + j];
        out[j] = static_cast<float>(a / sum);
      }
    }
  }
  // Row-parallel o_proj: this rank's heads are its slice of o_proj's input columns.
  linear(w(p + "self_attn.o_proj.weight"), cfg_.qDim(), 0, H, shape_.headBegin() * D, hq * D, att.data(), n, o.data());
  // Residual add + post_attention_layernorm, fused with the all-reduce.
  if (!allReduceAddNorm(o.data(), x, w(p + "post_attention_layernorm.weight").data(), n, h, error)) return false;
  // SwiGLU MLP, gate/up column-parallel, down row-parallel.
  std::vector<float> g(static_cast<size_t>(n) * I), u(static_cast<size_t>(n) * I);
  linear(w(p + "mlp.gate_proj.weight"), H, shape_.interBegin(), I, 0, H, h, n, g.data());
  linear(w(p + "mlp.up_proj.weight"), H, shape_.interBegin(), I, 0, H, h, n, u.data());
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
  linear(w(p + "mlp.down_proj.weight"), cfg_.intermediateSize, 0, H, shape_.interBegin(), I, g.data(), n, o.data());
  // Residual add + the next norm (the next layer's input_layernorm, or the final norm).
  return allReduceAddNorm(o.data(), x, nextNorm, n, normOut, error);
}

bool CpuModel::greedy(const float* hidden, int n, int32_t* out, std::string* error) {
  const int H = cfg_.hiddenSize, Vl = shape_.vocab, tp = shape_.tp;
  logits_.assign(static_cast<size_t>(n) * Vl, 0.f);
  linear(w(lmHeadName(cfg_)), H, shape_.vocabBegin(), Vl, 0, H, hidden, n, logits_.data());
  // Each rank's (max, index) lands in its own slot of a zeroed table; a sum all-reduce is then
  // an all-gather. Ties: the lowest index wins, on a rank and across ranks (as torch.argmax).
  std::vector<float> table(static_cast<size_t>(n) * tp * 2, 0.f);
  for (int t = 0; t < n; ++t) {
    const float* l = logits_.data() + static_cast<size_t>(t) * Vl;
    int best = 0;
    for (int i = 1; i < Vl; ++i)
      if (l[i] > l[best]) best = i;
    table[(t * tp + shape_.rank) * 2] = l[best];
    table[(t * tp + shape_.rank) * 2 + 1] = static_cast<float>(shape_.vocabBegin() + best);  // exact below 2^24
  }
  if (!allReduce(table.data(), table.size(), error, true)) return false;  // ids: never compressed
  for (int t = 0; t < n; ++t) {
    int br = 0;
    for (int r = 1; r < tp; ++r)
      if (table[(t * tp + r) * 2] > table[(t * tp + br) * 2]) br = r;
    out[t] = static_cast<int32_t>(table[(t * tp + br) * 2 + 1]);
  }
  return true;
}

bool CpuModel::topProbability(int row, double* p, std::string* error) {
  const int Vl = shape_.vocab, tp = shape_.tp;
  const float* l = logits_.data() + static_cast<size_t>(row) * Vl;
  // The global max: each rank's max in its own slot of a zeroed table, gathered by a sum.
  std::vector<float> maxes(static_cast<size_t>(tp), 0.f);
  maxes[static_cast<size_t>(shape_.rank)] = *std::max_element(l, l + Vl);
  if (!allReduce(maxes.data(), maxes.size(), error, true)) return false;
  const float m = *std::max_element(maxes.begin(), maxes.end());
  float sum = 0;  // sum of exp(l - max) over this shard, then over all shards
  for (int i = 0; i < Vl; ++i) sum += std::exp(l[i] - m);
  if (!allReduce(&sum, 1, error, true)) return false;
  *p = 1.0 / sum;
  return true;
}

bool CpuModel::logitsRows(int rows, std::vector<float>* out, std::string* error) {
  const int Vl = shape_.vocab, V = cfg_.vocabSize;
  const int have = static_cast<int>(logits_.size() / static_cast<size_t>(Vl));
  if (rows < 1 || rows > have) {
    if (error)
      *error = "logitsRows: " + std::to_string(rows) + " rows asked, the last call kept " + std::to_string(have);
    return false;
  }
  out->assign(static_cast<size_t>(rows) * V, 0.f);
  for (int t = 0; t < rows; ++t)
    std::copy_n(logits_.data() + static_cast<size_t>(have - rows + t) * Vl, Vl,
                out->data() + static_cast<size_t>(t) * V + shape_.vocabBegin());
  return shape_.tp == 1 || allReduce(out->data(), out->size(), error, true);
}

bool CpuModel::target(const int32_t* tokens, int n, int pos, int32_t* next, std::string* error) {
  if (n <= 0 || pos < 0 || pos + n > ctx_) {
    if (error) *error = "target: positions [" + std::to_string(pos) + ", " + std::to_string(pos + n) + ") outside the KV cache of " + std::to_string(ctx_);
    return false;
  }
  const int H = cfg_.hiddenSize;
  std::vector<float> x(static_cast<size_t>(n) * H), h(x.size());
  if (!embed(tokens, n, x.data(), error)) return false;
  hidden_.resize(x.size());
  for (int t = 0; t < n; ++t)
    rmsNorm(x.data() + t * H, w("model.layers.0.input_layernorm.weight").data(), H, cfg_.rmsNormEps, h.data() + t * H);
  for (int l = 0; l < cfg_.numLayers; ++l) {
    const bool last = l + 1 == cfg_.numLayers;
    const float* nextNorm = w(last ? std::string("model.norm.weight")
                                   : "model.layers." + std::to_string(l + 1) + ".input_layernorm.weight").data();
    if (!layer("model.layers." + std::to_string(l) + ".", caches_[l], x.data(), h.data(), n, pos, pos, nextNorm,
               last ? hidden_.data() : h.data(), error))
      return false;
  }
  return greedy(hidden_.data(), n, next, error);
}

bool CpuModel::mtpForward(const int32_t* tokens, const float* hiddenIn, int n, int slot, int32_t* draft, std::string* error) {
  if (!hasMtp()) {
    if (error) *error = cfg_.name + ": the model has no MTP head (mtp_num_hidden_layers = 0)";
    return false;
  }
  if (n <= 0 || slot < 0 || slot + n > ctx_) {
    if (error) *error = "mtp: slots [" + std::to_string(slot) + ", " + std::to_string(slot + n) + ") outside the KV cache of " + std::to_string(ctx_);
    return false;
  }
  const int H = cfg_.hiddenSize;
  const float eps = cfg_.rmsNormEps;
  std::vector<float> e(static_cast<size_t>(n) * H), cat(static_cast<size_t>(n) * 2 * H), x(static_cast<size_t>(n) * H);
  if (!embed(tokens, n, e.data(), error)) return false;
  for (int t = 0; t < n; ++t) {  // concat(norm_e(embed), norm_h(hidden)), embedding first
    rmsNorm(e.data() + t * H, w("mtp.pre_fc_norm_embedding.weight").data(), H, eps, cat.data() + t * 2 * H);
    rmsNorm(hiddenIn + static_cast<size_t>(t) * H, w("mtp.pre_fc_norm_hidden.weight").data(), H, eps, cat.data() + t * 2 * H + H);
  }
  linear(w("mtp.fc.weight"), 2 * H, 0, H, 0, 2 * H, cat.data(), n, x.data());  // replicated on every rank
  std::vector<float> h(x.size());
  for (int t = 0; t < n; ++t) rmsNorm(x.data() + t * H, w("mtp.layers.0.input_layernorm.weight").data(), H, eps, h.data() + t * H);
  mtpHidden_.resize(x.size());
  if (!layer("mtp.layers.0.", mtpCache_, x.data(), h.data(), n, slot, slot + 1, w("mtp.norm.weight").data(),
             mtpHidden_.data(), error))
    return false;
  std::vector<int32_t> out(n);
  if (!greedy(mtpHidden_.data(), n, out.data(), error)) return false;
  if (draftProb_ && !topProbability(n - 1, &draftP_, error)) return false;
  *draft = out[n - 1];
  mtpHidden_.erase(mtpHidden_.begin(), mtpHidden_.begin() + static_cast<ptrdiff_t>(n - 1) * H);  // keep the last row
  return true;
}

bool CpuModel::mtpFromTarget(const int32_t* tokens, int n, int slot, int32_t* draft, std::string* error) {
  if (static_cast<size_t>(n) * cfg_.hiddenSize > hidden_.size()) {
    if (error) *error = "mtpFromTarget: " + std::to_string(n) + " rows requested but the last target() call produced fewer";
    return false;
  }
  return mtpForward(tokens, hidden_.data(), n, slot, draft, error);
}

bool CpuModel::mtpChain(int32_t token, int slot, int32_t* draft, std::string* error) {
  if (mtpHidden_.size() != static_cast<size_t>(cfg_.hiddenSize)) {
    if (error) *error = "mtpChain: no MTP hidden state yet (call mtpFromTarget first)";
    return false;
  }
  std::vector<float> h = mtpHidden_;
  return mtpForward(&token, h.data(), 1, slot, draft, error);
}

}  // namespace qwen
