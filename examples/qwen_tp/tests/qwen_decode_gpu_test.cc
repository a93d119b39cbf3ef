// GPU tests of the decode kernels behind GpuModelOptions::decode (part of qwen_gpu_test; label
// gpu). Each table row is a case; add a row to cover a new shape.
//  - gpu::attentionDecodeTc against an fp64 host reference: GQA groups 1..16, cache lengths 1,
//    2, 64, 511, 512, 513, 4096 and 32001, calls of 1, 3 and 16 tokens, split bounds 1, 7 and 33;
//    the output poisoned before every call and every element checked; each query's bits equal
//    to the one-token call at its own position (speculative == greedy rests on it); a second
//    call gives the same bits (the tickets were left at zero), and so does a call that asks L2
//    for a weight matrix's rows (an L2Ahead plan); against gpu::attention too.
//    Tolerance per element: 2^-7 |ref| + 4e-3 (P is rounded to bf16 before P V, as in prefill).
//  - attentionDecodeTcRope (q/k norm + RoPE + KV store inside) against qkNormRopeStore followed
//    by attentionDecodeTc, and a verify call's bits equal to one-token calls reading the cache.
//  - The fused GEMVs (gemvNormBf16, gemvNormSwiglu, gemvResidual) against an fp64 reference of
//    RMSNorm -> product -> SwiGLU / residual add; gemvResidual bit-exact against gemvBf16 plus
//    the bf16 add; tokens >= n never written; a token's bits the same whatever n (1..16). The
//    model's shapes: qwen_gemv_gpu_test.cc.
//  - gpu::addRmsNorm's two kernels (each thread's elements loaded at once; the per-element loop,
//    QWEN_NORM=loop) give the same bits, the residual bit-exact against the host's bf16 add and
//    the output within bf16 rounding of an fp64 norm: rows of 1..8200 (past 8192 both run the
//    loop), 1 and 5 rows, with and without the add, signed zeros among the inputs.
//  - the wide-row forms of swiglu and qkNormRopeStore (prefill chunks) against the per-element
//    kernels, to the bit, special values among the inputs.
//  - greedy sampling (argmaxPick, localArgmax + pickArgmax) against a host argmax: the first of
//    equal maxima, NaN never chosen, 16-byte and scalar rows, two ranks' shards.
// The model on every path: qwen_decode_model_gpu_test.cc.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "gpu_kernels.h"
#include "safetensors.h"

namespace qwen {
namespace {

#define CK(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

struct Rng {
  uint64_t s;
  float uniform() {  // [-1, 1)
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int64_t>(s >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
  }
  uint16_t bf16(float scale = 1.f) { return floatToBf16(uniform() * scale); }
};

template <typename T>
struct DevBuf {  // device memory freed on every exit of a test
  T* p = nullptr;
  explicit DevBuf(size_t n) { cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)); }
  ~DevBuf() { cudaFree(p); }
};

constexpr uint16_t kPoison = 0xFFFF;  // a bf16 NaN

// ---- gpu::attentionDecodeTc ----

struct AttnCase {
  int hq, hk, pos, n, maxSplits;
};

TEST(QwenDecodeGpu, TcAttentionMatchesReference) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_TRUE(gpu::prepareAttentionDecodeTc());
  const int D = gpu::kDecodeTcHeadDim;
  const AttnCase cases[] = {
      {32, 8, 0, 1, 33},   {32, 8, 1, 1, 33},    {32, 8, 63, 1, 33},  {32, 8, 510, 1, 33}, {32, 8, 511, 1, 33},
      {32, 8, 512, 1, 33}, {32, 8, 510, 3, 33},  {32, 8, 4095, 1, 7}, {32, 8, 300, 16, 7}, {64, 8, 511, 1, 33},
      {64, 8, 700, 3, 33}, {16, 8, 600, 3, 33},  {8, 8, 200, 2, 33},  {32, 2, 1000, 3, 1}, {32, 2, 129, 16, 33},
      {32, 8, 32000, 1, 33}, {64, 8, 32000, 2, 33},
  };
  Rng rng{0x2545f4914f6cdd1dull};
  std::string err;
  // A stand-in for o_proj's matrix (qwen3-8b's: 4096 rows of 8 KB), whose rows the attention asks
  // L2 for under an L2Ahead plan: a prefix of every row, and (a plan of more rows than the grid
  // has threads) whole rows of 32 bytes. Requests only: the output keeps its bits.
  DevBuf<uint16_t> dw(4096 * 4096);
  CK(cudaMemset(dw.p, 0x3C, 4096 * 4096 * 2));
  const gpu::L2Ahead plans[] = {gpu::planL2Ahead(dw.p, 4096, 8192, 24u << 20, 8 * D * 4, size_t(1) << 40),
                                gpu::planL2Ahead(dw.p, 500000, 32, 64u << 20, 8 * D * 4, size_t(1) << 40)};
  ASSERT_EQ(plans[0].bytesPerRow, 6144);
  ASSERT_EQ(plans[1].bytesPerRow, 32);
  for (const AttnCase& c : cases) {
    const std::string what = "hq " + std::to_string(c.hq) + " hk " + std::to_string(c.hk) + " pos " +
                             std::to_string(c.pos) + " n " + std::to_string(c.n) + " splits " + std::to_string(c.maxSplits);
    ASSERT_TRUE(gpu::attentionDecodeTcSupported(c.hq, c.hk, D)) << what;
    const int ctx = c.pos + c.n, G = c.hq / c.hk;
    std::vector<uint16_t> q(static_cast<size_t>(c.n) * c.hq * D), k(static_cast<size_t>(ctx) * c.hk * D), v(k.size());
    for (auto& x : q) x = rng.bf16(3.f);  // scores of a few units: a peaked softmax
    for (auto& x : k) x = rng.bf16();
    for (auto& x : v) x = rng.bf16();
    DevBuf<uint16_t> dq(q.size()), dk(k.size()), dv(v.size()), dout(q.size()), dold(q.size());
    DevBuf<float> dpart(gpu::decodeTcPartialFloats(c.n, c.hq, c.maxSplits));
    DevBuf<float> doldPart(static_cast<size_t>(c.n) * c.hq * 128 * (D + 2));
    DevBuf<int> dtk(gpu::decodeTcTickets(c.n, c.hk));
    DevBuf<int32_t> dpos(1);
    auto bf = [](uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); };
    CK(cudaMemcpy(dq.p, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dk.p, k.data(), k.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv.p, v.data(), v.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(dtk.p, 0, gpu::decodeTcTickets(c.n, c.hk) * 4));
    CK(cudaMemcpy(dpos.p, &c.pos, 4, cudaMemcpyHostToDevice));
    std::vector<uint16_t> out(q.size()), again(q.size()), old(q.size()), alone(static_cast<size_t>(c.hq) * D);
    auto run = [&](const uint16_t* qp, int n, std::vector<uint16_t>* dst, const gpu::L2Ahead& ahead = {}) {
      CK(cudaMemset(dout.p, 0xFF, dst->size() * 2));  // poison
      gpu::attentionDecodeTc(bf(const_cast<uint16_t*>(qp)), bf(dk.p), bf(dv.p), dpos.p, n, c.hq, c.hk, c.maxSplits,
                             dpart.p, dtk.p, bf(dout.p), nullptr, ahead);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(dst->data(), dout.p, dst->size() * 2, cudaMemcpyDeviceToHost));
    };
    run(dq.p, c.n, &out);
    run(dq.p, c.n, &again);
    EXPECT_EQ(0, std::memcmp(out.data(), again.data(), out.size() * 2)) << what << ": a second call differs";
    for (const gpu::L2Ahead& a : plans) {
      run(dq.p, c.n, &again, a);
      EXPECT_EQ(0, std::memcmp(out.data(), again.data(), out.size() * 2))
          << what << ": with the L2 prefetch of " << a.rows << " rows the bits differ";
    }
    std::vector<int> tickets(gpu::decodeTcTickets(c.n, c.hk), -1);
    CK(cudaMemcpy(tickets.data(), dtk.p, tickets.size() * 4, cudaMemcpyDeviceToHost));
    for (int x : tickets) EXPECT_EQ(x, 0) << what << ": a ticket was left non-zero";
    // The CUDA-core kernel on the same inputs (64-slot chunks, up to 128 splits).
    const int oldSplits = std::min(128, (ctx + 63) / 64);
    gpu::attention(bf(dq.p), bf(dk.p), bf(dv.p), dpos.p, c.n, c.hq, c.hk, D, oldSplits, 64, doldPart.p, bf(dold.p), nullptr);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(old.data(), dold.p, old.size() * 2, cudaMemcpyDeviceToHost));
    int bad = 0, badOld = 0;
    for (int t = 0; t < c.n; ++t) {
      if (c.n > 1) {  // query t alone at its own position: the same bits
        const int p1 = c.pos + t;
        CK(cudaMemcpy(dpos.p, &p1, 4, cudaMemcpyHostToDevice));
        run(dq.p + static_cast<size_t>(t) * c.hq * D, 1, &alone);
        CK(cudaMemcpy(dpos.p, &c.pos, 4, cudaMemcpyHostToDevice));
        EXPECT_EQ(0, std::memcmp(alone.data(), out.data() + static_cast<size_t>(t) * c.hq * D, alone.size() * 2))
            << what << ": query " << t << "'s bits depend on n";
      }
      const int last = c.pos + t;
      for (int h = 0; h < c.hq; ++h) {
        const int kvh = h / G;
        std::vector<double> sc(static_cast<size_t>(last) + 1);
        double mx = -1e300, sum = 0;
        for (int j = 0; j <= last; ++j) {
          double d = 0;
          for (int e = 0; e < D; ++e)
            d += static_cast<double>(bf16ToFloat(q[(static_cast<size_t>(t) * c.hq + h) * D + e])) *
                 bf16ToFloat(k[(static_cast<size_t>(j) * c.hk + kvh) * D + e]);
          mx = std::max(mx, sc[j] = d / std::sqrt(static_cast<double>(D)));
        }
        for (double& x : sc) sum += (x = std::exp(x - mx));
        std::vector<double> r(D, 0.0);
        for (int j = 0; j <= last; ++j)
          for (int e = 0; e < D; ++e) r[e] += sc[j] * bf16ToFloat(v[(static_cast<size_t>(j) * c.hk + kvh) * D + e]);
        for (int e = 0; e < D; ++e) {
          const size_t i = (static_cast<size_t>(t) * c.hq + h) * D + e;
          const double ref = r[e] / sum, tol = std::ldexp(std::fabs(ref), -7) + 4e-3;
          const double g = bf16ToFloat(out[i]), o = bf16ToFloat(old[i]);
          if (!(std::fabs(g - ref) <= tol) && ++bad <= 3)  // NaN (an unwritten element) fails too
            ADD_FAILURE() << what << ": t " << t << " head " << h << " dim " << e << " gpu " << g << " ref " << ref;
          if (!(std::fabs(o - ref) <= tol)) ++badOld;
        }
      }
    }
    EXPECT_EQ(bad, 0) << what;
    EXPECT_EQ(badOld, 0) << what << " (gpu::attention, the old kernel)";
  }
}

// attentionDecodeTcRope (q/k norm + RoPE + KV store inside) against qkNormRopeStore followed by
// attentionDecodeTc: outputs within twice the attention tolerance, the call's cache rows written
// (poisoned before; K within 2 bf16 ulps: the per-head norm sums in another order, V bit-exact),
// the rows before untouched; then each query alone at its own position, reading the earlier
// rows from the cache the n-token call wrote, gives the n-token call's bits (a verify call
// reproduces greedy steps).
struct RopeCase {
  int hq, hk, pos, n, maxSplits, ropeOffset;
};

TEST(QwenDecodeGpu, TcAttentionWithRopeMatchesSeparateKernels) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_TRUE(gpu::prepareAttentionDecodeTc());
  const int D = gpu::kDecodeTcHeadDim;
  const float eps = 1e-6f, theta = 1e6f;
  // The last three put the call's own slots past their chunk's first tile: in tile 2, where the
  // three-stage ring wraps (1090), split over tiles 1 and 2 (1080), in tile 1 and then the next
  // chunk (2300), so the rows held in registers are stored into a later tile.
  const RopeCase cases[] = {{32, 8, 0, 1, 33, 0},    {32, 8, 511, 1, 33, 0},  {32, 8, 100, 16, 33, 0},
                            {64, 8, 700, 3, 33, 1},  {32, 2, 1000, 5, 7, 0},  {32, 8, 4000, 6, 33, 0},
                            {16, 8, 63, 2, 33, 0},   {32, 8, 1090, 16, 7, 0}, {32, 8, 1080, 16, 7, 0},
                            {32, 8, 2300, 16, 33, 0}};
  Rng rng{4242};
  auto bf = [](uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); };
  for (const RopeCase& c : cases) {
    const std::string what = "hq " + std::to_string(c.hq) + " hk " + std::to_string(c.hk) + " pos " +
                             std::to_string(c.pos) + " n " + std::to_string(c.n) + " splits " + std::to_string(c.maxSplits);
    const int ctx = c.pos + c.n, W = (c.hq + 2 * c.hk) * D;
    const size_t row = static_cast<size_t>(c.hk) * D, qn = static_cast<size_t>(c.n) * c.hq * D;
    std::vector<uint16_t> qkv(static_cast<size_t>(c.n) * W), cache(static_cast<size_t>(ctx) * row), nq(D), nk(D);
    for (auto& x : qkv) x = rng.bf16(2.f);
    for (auto& x : nq) x = rng.bf16(2.f);
    for (auto& x : nk) x = rng.bf16(2.f);
    for (auto& x : cache) x = rng.bf16();
    for (size_t i = static_cast<size_t>(c.pos) * row; i < cache.size(); ++i) cache[i] = kPoison;  // the call's rows
    DevBuf<uint16_t> dqkv(qkv.size()), dnq(D), dnk(D), dq(qn), kA(cache.size()), vA(cache.size()), kB(cache.size()),
        vB(cache.size()), outA(qn), outB(qn);
    DevBuf<float> dpart(gpu::decodeTcPartialFloats(c.n, c.hq, c.maxSplits));
    DevBuf<int> dtk(gpu::decodeTcTickets(c.n, c.hk));
    DevBuf<int32_t> dpos(1);
    CK(cudaMemcpy(dqkv.p, qkv.data(), qkv.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dnq.p, nq.data(), D * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dnk.p, nk.data(), D * 2, cudaMemcpyHostToDevice));
    for (uint16_t* d : {kA.p, vA.p, kB.p, vB.p}) CK(cudaMemcpy(d, cache.data(), cache.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(dtk.p, 0, gpu::decodeTcTickets(c.n, c.hk) * 4));
    CK(cudaMemcpy(dpos.p, &c.pos, 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(outA.p, 0xFF, qn * 2));
    CK(cudaMemset(outB.p, 0xFF, qn * 2));
    gpu::qkNormRopeStore(bf(dqkv.p), c.n, c.hq, c.hk, D, bf(dnq.p), bf(dnk.p), eps, theta, dpos.p, c.ropeOffset, bf(dq.p),
                         bf(kA.p), bf(vA.p), nullptr);
    gpu::attentionDecodeTc(bf(dq.p), bf(kA.p), bf(vA.p), dpos.p, c.n, c.hq, c.hk, c.maxSplits, dpart.p, dtk.p,
                           bf(outA.p), nullptr);
    gpu::DecodeRope rope;
    rope.qkv = bf(dqkv.p), rope.qNorm = bf(dnq.p), rope.kNorm = bf(dnk.p), rope.eps = eps, rope.theta = theta;
    rope.ropeOffset = c.ropeOffset;
    gpu::attentionDecodeTcRope(rope, bf(kB.p), bf(vB.p), dpos.p, c.n, c.hq, c.hk, c.maxSplits, dpart.p, dtk.p,
                               bf(outB.p), nullptr);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> a(qn), b(qn), ka(cache.size()), kb(cache.size()), va(cache.size()), vb(cache.size());
    CK(cudaMemcpy(a.data(), outA.p, qn * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), outB.p, qn * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ka.data(), kA.p, ka.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(kb.data(), kB.p, kb.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(va.data(), vA.p, va.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(vb.data(), vB.p, vb.size() * 2, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < qn; ++i) {
      const double x = bf16ToFloat(a[i]), y = bf16ToFloat(b[i]);
      if (!(std::fabs(x - y) <= std::ldexp(std::fabs(x), -6) + 8e-3) && ++bad <= 3)
        ADD_FAILURE() << what << ": out " << i << " rope-fused " << y << " separate " << x;
    }
    for (size_t i = 0; i < cache.size(); ++i) {
      const bool mine = i >= static_cast<size_t>(c.pos) * row;
      if (!mine && (kb[i] != cache[i] || vb[i] != cache[i]) && ++bad <= 3) ADD_FAILURE() << what << ": old row " << i / row << " changed";
      if (!mine) continue;
      // A flipped rounding of one normed value moves its rotated pair by an ulp of the pair's norm:
      // bounded by 2^-7 of the head's largest |k|.
      double big = 0;
      for (size_t e = i / D * D; e < i / D * D + D; ++e) big = std::max(big, std::fabs(static_cast<double>(bf16ToFloat(ka[e]))));
      const double x = bf16ToFloat(ka[i]), y = bf16ToFloat(kb[i]);
      if (!(std::fabs(x - y) <= std::ldexp(std::fabs(x), -6) + std::ldexp(big, -7)) && ++bad <= 3)
        ADD_FAILURE() << what << ": k slot " << i / row << " rope-fused " << y << " separate " << x;
      if (vb[i] != va[i] && ++bad <= 3) ADD_FAILURE() << what << ": v slot " << i / row << " differs";
    }
    EXPECT_EQ(bad, 0) << what;
    for (int t = 0; t < c.n && c.n > 1; ++t) {  // query t alone, its earlier slots from the cache
      const int p1 = c.pos + t;
      CK(cudaMemcpy(dpos.p, &p1, 4, cudaMemcpyHostToDevice));
      rope.qkv = bf(dqkv.p) + static_cast<size_t>(t) * W;
      CK(cudaMemset(outB.p, 0xFF, qn * 2));
      gpu::attentionDecodeTcRope(rope, bf(kB.p), bf(vB.p), dpos.p, 1, c.hq, c.hk, c.maxSplits, dpart.p, dtk.p,
                                 bf(outB.p), nullptr);
      CK(cudaDeviceSynchronize());
      std::vector<uint16_t> alone(static_cast<size_t>(c.hq) * D);
      CK(cudaMemcpy(alone.data(), outB.p, alone.size() * 2, cudaMemcpyDeviceToHost));
      EXPECT_EQ(0, std::memcmp(alone.data(), b.data() + static_cast<size_t>(t) * c.hq * D, alone.size() * 2))
          << what << ": query " << t << "'s bits depend on n";
    }
  }
}

// ---- the fused GEMVs ----

struct GemvCase {
  int out, in;
};

// Every fused form, n = 1..16 (two launches past kGemvMaxTokens): against the fp64 reference,
// gemvResidual bit for bit gemvBf16 + the bf16 add, tokens >= n never written, and a token's bits
// the n = 16 call's. Shapes: in a multiple of 32 or not (264, 1032 and 2056 end in a unit of 8
// columns), out not a multiple of 16 or of 8.
TEST(QwenDecodeGpu, FusedGemvsMatchReference) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const GemvCase cases[] = {{384, 512}, {40, 264}, {96, 64}, {1024, 4096}, {136, 1032}, {21, 2056}};
  const float eps = 1e-6f;
  Rng rng{77};
  auto bf = [](uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); };
  for (const GemvCase& c : cases) {
    const int N = gpu::kGemvFusedMaxTokens;
    std::vector<uint16_t> W(static_cast<size_t>(2) * c.out * c.in), X(static_cast<size_t>(N) * c.in), nw(c.in),
        R(static_cast<size_t>(N) * c.out);
    for (auto& x : W) x = rng.bf16(0.1f);
    for (auto& x : X) x = rng.bf16(2.f);
    for (auto& x : nw) x = rng.bf16(1.5f);
    for (auto& x : R) x = rng.bf16();
    DevBuf<uint16_t> dW(W.size()), dX(X.size()), dnw(nw.size()), dY(R.size()), dR(R.size()), dP(R.size());
    CK(cudaMemcpy(dW.p, W.data(), W.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dX.p, X.data(), X.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dnw.p, nw.data(), nw.size() * 2, cudaMemcpyHostToDevice));
    // fp64 reference: hn = x * inv * w (unrounded); the normed products of W's 2 out rows with
    // every token, and their bounds sum |hn w|.
    std::vector<double> hnRef(X.size());
    for (int t = 0; t < N; ++t) {
      double ss = 0;
      for (int j = 0; j < c.in; ++j) ss += std::pow(bf16ToFloat(X[static_cast<size_t>(t) * c.in + j]), 2);
      for (int i = 0; i < c.in; ++i)
        hnRef[static_cast<size_t>(t) * c.in + i] =
            bf16ToFloat(X[static_cast<size_t>(t) * c.in + i]) / std::sqrt(ss / c.in + eps) * bf16ToFloat(nw[i]);
    }
    std::vector<double> prod(static_cast<size_t>(N) * 2 * c.out), mag(prod.size());
    for (int t = 0; t < N; ++t)
      for (int o = 0; o < 2 * c.out; ++o) {
        double sum = 0, a = 0;
        for (int i = 0; i < c.in; ++i) {
          const double p = hnRef[static_cast<size_t>(t) * c.in + i] * bf16ToFloat(W[static_cast<size_t>(o) * c.in + i]);
          sum += p, a += std::fabs(p);
        }
        prod[static_cast<size_t>(t) * 2 * c.out + o] = sum, mag[static_cast<size_t>(t) * 2 * c.out + o] = a;
      }
    auto fetch = [&](uint16_t* d, std::vector<uint16_t>* h) {
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(h->data(), d, h->size() * 2, cudaMemcpyDeviceToHost));
    };
    std::vector<uint16_t> y16(R.size()), a16(R.size());  // the n = 16 call's rows
    for (int n = N; n >= 1; --n) {
      const std::string what =
          "out " + std::to_string(c.out) + " in " + std::to_string(c.in) + " n " + std::to_string(n);
      std::vector<uint16_t> y(R.size()), a(R.size()), r(R.size());
      // gemvNormBf16 (out rows) and gemvNormSwiglu (W = [gate; up], I = out)
      CK(cudaMemset(dY.p, 0xFF, R.size() * 2));
      CK(cudaMemset(dP.p, 0xFF, R.size() * 2));
      ASSERT_TRUE(gpu::gemvNormBf16(bf(dW.p), c.out, c.in, bf(dX.p), n, bf(dnw.p), eps, bf(dY.p), nullptr)) << what;
      ASSERT_TRUE(gpu::gemvNormSwiglu(bf(dW.p), c.out, c.in, bf(dX.p), n, bf(dnw.p), eps, bf(dP.p), nullptr)) << what;
      fetch(dY.p, &y);
      fetch(dP.p, &a);
      // gemvResidual against gemvBf16 + the bf16 add, bit for bit
      CK(cudaMemcpy(dR.p, R.data(), R.size() * 2, cudaMemcpyHostToDevice));
      ASSERT_TRUE(gpu::gemvResidual(bf(dW.p), c.out, c.in, bf(dX.p), n, bf(dR.p), nullptr)) << what;
      fetch(dR.p, &r);
      for (int t0 = 0; t0 < n; t0 += gpu::kGemvMaxTokens)
        ASSERT_TRUE(gpu::gemvBf16(bf(dW.p), c.out, c.in, bf(dX.p) + static_cast<size_t>(t0) * c.in,
                                  std::min(gpu::kGemvMaxTokens, n - t0), bf(dY.p) + static_cast<size_t>(t0) * c.out,
                                  false, nullptr));
      std::vector<uint16_t> plain(R.size());
      fetch(dY.p, &plain);
      int bad = 0;
      for (int t = 0; t < N; ++t)
        for (int o = 0; o < c.out; ++o) {
          const size_t i = static_cast<size_t>(t) * c.out + o;
          if (t >= n) {  // never written
            EXPECT_TRUE(y[i] == kPoison && a[i] == kPoison && r[i] == R[i]) << what << ": token " << t << " written";
            continue;
          }
          const uint16_t want = floatToBf16(bf16ToFloat(R[i]) + bf16ToFloat(plain[i]));
          if (r[i] != want && ++bad <= 3) ADD_FAILURE() << what << ": residual t " << t << " o " << o;
          const size_t at = static_cast<size_t>(t) * 2 * c.out + o;
          const double g = prod[at], u = prod[at + c.out], sg = mag[at], su = mag[at + c.out];
          const double eg = 4e-3 * sg + std::ldexp(std::fabs(g), -7), eu = 4e-3 * su + std::ldexp(std::fabs(u), -7);
          const double silu = g / (1 + std::exp(-g)), ra = silu * u;
          if (!(std::fabs(bf16ToFloat(y[i]) - g) <= eg) && ++bad <= 3)
            ADD_FAILURE() << what << ": norm gemv t " << t << " o " << o << " " << bf16ToFloat(y[i]) << " vs " << g;
          if (!(std::fabs(bf16ToFloat(a[i]) - ra) <=
                1.2 * eg * std::fabs(u) + std::fabs(silu) * eu + eg * eu + std::ldexp(std::fabs(ra), -7)) &&
              ++bad <= 3)
            ADD_FAILURE() << what << ": swiglu t " << t << " o " << o << " " << bf16ToFloat(a[i]) << " vs " << ra;
        }
      EXPECT_EQ(bad, 0) << what;
      // A token's bits whatever n: the n = 16 call's rows are the n-token call's rows.
      if (n == N) {
        y16 = y, a16 = a;
      } else {
        EXPECT_EQ(0, std::memcmp(y16.data(), y.data(), static_cast<size_t>(n) * c.out * 2)) << what;
        EXPECT_EQ(0, std::memcmp(a16.data(), a.data(), static_cast<size_t>(n) * c.out * 2)) << what;
      }
    }
  }
}

// ---- gpu::addRmsNorm ----

TEST(QwenDecodeGpu, AddRmsNormKernelsSameBitsAndReference) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  struct Unset {  // the process-wide switch back to the default, even on a failure
    ~Unset() { gpu::setNormLoop(false); }
  } unset;
  const float eps = 1e-6f;
  Rng rng{0x9e3779b97f4a7c15ull};
  auto bf = [](uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); };
  for (int H : {1, 64, 513, 1000, 4096, 5120, 8192, 8200})
    for (int n : {1, 5})
      for (bool withAdd : {false, true}) {
        const std::string what = "H " + std::to_string(H) + " n " + std::to_string(n) + (withAdd ? " add" : "");
        const size_t count = static_cast<size_t>(n) * H;
        std::vector<uint16_t> x(count), add(count), w(H);
        for (size_t i = 0; i < count; ++i) {
          x[i] = i % 97 == 0 ? 0x8000 : i % 89 == 0 ? 0x0000 : rng.bf16(4.f);  // -0.0, +0.0 among them
          add[i] = i % 83 == 0 ? 0x8000 : rng.bf16(4.f);
        }
        for (auto& v : w) v = rng.bf16(2.f);
        std::vector<uint16_t> gotX[2], gotOut[2];
        for (int loop = 0; loop < 2; ++loop) {
          DevBuf<uint16_t> dx(count), da(count), dw(H), dout(count);
          CK(cudaMemcpy(dx.p, x.data(), count * 2, cudaMemcpyHostToDevice));
          CK(cudaMemcpy(da.p, add.data(), count * 2, cudaMemcpyHostToDevice));
          CK(cudaMemcpy(dw.p, w.data(), H * 2, cudaMemcpyHostToDevice));
          CK(cudaMemset(dout.p, 0xff, count * 2));
          gpu::setNormLoop(loop == 1);
          gpu::addRmsNorm(bf(dx.p), withAdd ? bf(da.p) : nullptr, bf(dw.p), n, H, eps, bf(dout.p), nullptr);
          CK(cudaDeviceSynchronize());
          gotX[loop].resize(count);
          gotOut[loop].resize(count);
          CK(cudaMemcpy(gotX[loop].data(), dx.p, count * 2, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(gotOut[loop].data(), dout.p, count * 2, cudaMemcpyDeviceToHost));
        }
        ASSERT_EQ(gotX[0], gotX[1]) << what << ": the residual differs between the kernels";
        ASSERT_EQ(gotOut[0], gotOut[1]) << what << ": the output differs between the kernels";
        for (int t = 0; t < n; ++t) {
          std::vector<double> r(H);
          double ss = 0;
          for (int i = 0; i < H; ++i) {
            const size_t at = static_cast<size_t>(t) * H + i;
            const uint16_t want =
                withAdd ? floatToBf16(bf16ToFloat(x[at]) + bf16ToFloat(add[at])) : x[at];  // fp32 add, one rounding
            ASSERT_EQ(gotX[0][at], want) << what << " row " << t << " element " << i;
            r[i] = bf16ToFloat(want);
            ss += r[i] * r[i];
          }
          const double inv = 1.0 / std::sqrt(ss / H + eps);
          for (int i = 0; i < H; ++i) {
            const double ref = r[i] * inv * bf16ToFloat(w[i]);
            const double got = bf16ToFloat(gotOut[0][static_cast<size_t>(t) * H + i]);
            ASSERT_LE(std::fabs(got - ref), std::ldexp(std::fabs(ref), -7) + 1e-6)
                << what << " row " << t << " element " << i << ": got " << got << " expected " << ref;
          }
        }
      }
}

// embedRmsNorm and rmsNormBf16 (both on norm_rows.cuh's arithmetic, a row loaded at once up to
// 8192 elements and the loop past it) at H 1 .. 8200: embedRmsNorm's two forms (setNormLoop)
// give the same x and out, x the embedding row (zeros for a token another rank owns), and out
// the bits of embed() followed by addRmsNorm; rmsNormBf16 with row strides wider than H within
// bf16 rounding of the fp64 norm, nothing written between the rows.
TEST(QwenDecodeGpu, EmbedAndRowNormsMatchTheReference) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  struct Unset {
    ~Unset() { gpu::setNormLoop(false); }
  } unset;
  const float eps = 1e-6f;
  Rng rng{0x51ab1e};
  auto bf = [](uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); };
  const int n = 3, Vl = 7, vocabBegin = 1;
  const int32_t tokens[n] = {3, 7, 0};  // local rows 2 and 6; 0 belongs to another rank
  for (int H : {1, 64, 513, 1000, 4096, 5120, 8192, 8200}) {
    const std::string what = "H " + std::to_string(H);
    std::vector<uint16_t> E(static_cast<size_t>(Vl) * H), w(H);
    for (size_t i = 0; i < E.size(); ++i) E[i] = i % 97 == 0 ? 0x8000 : rng.bf16(4.f);
    for (auto& v : w) v = rng.bf16(2.f);
    DevBuf<uint16_t> dE(E.size()), dw(H), dx(static_cast<size_t>(n) * H), dout(static_cast<size_t>(n) * H),
        dref(static_cast<size_t>(n) * H);
    DevBuf<int32_t> dtok(n);
    CK(cudaMemcpy(dE.p, E.data(), E.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw.p, w.data(), H * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dtok.p, tokens, n * 4, cudaMemcpyHostToDevice));
    std::vector<uint16_t> x[2], out[2];
    for (int loop = 0; loop < 2; ++loop) {
      CK(cudaMemset(dx.p, 0xff, static_cast<size_t>(n) * H * 2));
      CK(cudaMemset(dout.p, 0xff, static_cast<size_t>(n) * H * 2));
      gpu::setNormLoop(loop == 1);
      gpu::embedRmsNorm(dtok.p, n, bf(dE.p), vocabBegin, Vl, H, bf(dw.p), eps, bf(dx.p), bf(dout.p), nullptr);
      gpu::setNormLoop(false);
      CK(cudaDeviceSynchronize());
      x[loop].resize(static_cast<size_t>(n) * H);
      out[loop].resize(static_cast<size_t>(n) * H);
      CK(cudaMemcpy(x[loop].data(), dx.p, x[loop].size() * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(out[loop].data(), dout.p, out[loop].size() * 2, cudaMemcpyDeviceToHost));
    }
    ASSERT_EQ(x[0], x[1]) << what << ": embedRmsNorm's x differs between its forms";
    ASSERT_EQ(out[0], out[1]) << what << ": embedRmsNorm's out differs between its forms";
    for (int t = 0; t < n; ++t) {
      const int local = tokens[t] - vocabBegin;
      for (int i = 0; i < H; ++i) {
        const uint16_t want = local >= 0 && local < Vl ? E[static_cast<size_t>(local) * H + i] : 0;
        ASSERT_EQ(x[0][static_cast<size_t>(t) * H + i], want) << what << " row " << t << " element " << i;
      }
    }
    // embed() + addRmsNorm on the same x: the same bits.
    CK(cudaMemcpy(dx.p, x[0].data(), x[0].size() * 2, cudaMemcpyHostToDevice));
    gpu::addRmsNorm(bf(dx.p), nullptr, bf(dw.p), n, H, eps, bf(dref.p), nullptr);
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> ref(static_cast<size_t>(n) * H);
    CK(cudaMemcpy(ref.data(), dref.p, ref.size() * 2, cudaMemcpyDeviceToHost));
    ASSERT_EQ(out[0], ref) << what << ": embedRmsNorm against embed() + addRmsNorm";

    // rmsNormBf16 with row strides H + 8 in and H + 16 out.
    const int ldIn = H + 8, ldOut = H + 16;
    std::vector<uint16_t> in(static_cast<size_t>(n) * ldIn);
    for (size_t i = 0; i < in.size(); ++i) in[i] = i % 89 == 0 ? 0x0000 : rng.bf16(4.f);
    DevBuf<uint16_t> din(in.size()), dno(static_cast<size_t>(n) * ldOut);
    CK(cudaMemcpy(din.p, in.data(), in.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(dno.p, 0xff, static_cast<size_t>(n) * ldOut * 2));
    gpu::rmsNormBf16(bf(din.p), ldIn, bf(dw.p), n, H, eps, bf(dno.p), ldOut, nullptr);
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> no(static_cast<size_t>(n) * ldOut);
    CK(cudaMemcpy(no.data(), dno.p, no.size() * 2, cudaMemcpyDeviceToHost));
    for (int t = 0; t < n; ++t) {
      double ss = 0;
      for (int i = 0; i < H; ++i) ss += std::pow(bf16ToFloat(in[static_cast<size_t>(t) * ldIn + i]), 2);
      const double inv = 1.0 / std::sqrt(ss / H + eps);
      for (int i = 0; i < ldOut; ++i) {
        const uint16_t got = no[static_cast<size_t>(t) * ldOut + i];
        if (i >= H) {
          ASSERT_EQ(got, kPoison) << what << " row " << t << ": written past H at " << i;
          continue;
        }
        const double r = bf16ToFloat(in[static_cast<size_t>(t) * ldIn + i]) * inv * bf16ToFloat(w[i]);
        ASSERT_LE(std::fabs(bf16ToFloat(got) - r), std::ldexp(std::fabs(r), -7) + 1e-6)
            << what << " rmsNormBf16 row " << t << " element " << i << ": got " << bf16ToFloat(got) << " expected " << r;
      }
    }
  }
}

// ---- the wide-row kernels (prefill chunks) against the per-element ones ----

// gpu::swiglu, gpu::addRmsNorm and gpu::qkNormRopeStore over more than kWideRows rows take the
// wide-row forms: their outputs (act; x and the normed rows; q, the K and V rows) must be the
// per-element kernels' to the bit (addRmsNorm's: H 1000..8200, with and without the add), for
// head_dim 64, 128, 192 and 256 (one to four warp sums per head), GQA and MHA, rows past the
// threshold and a 2048-row chunk, an odd start position, signed zeros, NaN and +-Inf among the
// inputs, and nothing written outside the call's rows and slots. swiglu at I % 8 != 0 and at an
// unaligned row start falls back to the per-element kernel (same bits there trivially).
TEST(QwenDecodeGpu, WideRowKernelsKeepTheBits) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  struct Unset {  // the process-wide switch back to the default, even on a failure
    ~Unset() { gpu::setWideRowKernels(true); }
  } unset;
  Rng rng{0x2545f4914f6cdd1dull};
  auto bf = [](uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); };
  auto special = [&](size_t i, float scale) -> uint16_t {
    return i % 101 == 0 ? 0x8000 : i % 103 == 0 ? 0x0000 : i % 4099 == 0 ? 0x7FC0 : i % 4111 == 0 ? 0x7F80
           : i % 4127 == 0 ? 0xFF80 : rng.bf16(scale);
  };
  // swiglu: n rows of [gate | up], I columns each.
  for (int I : {12288, 1000, 24, 13})
    for (int n : {17, 33, 2048}) {
      if (I == 13 && n == 2048) continue;
      const std::string what = "swiglu I " + std::to_string(I) + " n " + std::to_string(n);
      const size_t in = static_cast<size_t>(n) * 2 * I, out = static_cast<size_t>(n) * I;
      std::vector<uint16_t> gu(in);
      for (size_t i = 0; i < in; ++i) gu[i] = special(i, 6.f);
      std::vector<uint16_t> got[2];
      for (int wide = 0; wide < 2; ++wide) {
        DevBuf<uint16_t> dgu(in), dact(out + 16);
        CK(cudaMemcpy(dgu.p, gu.data(), in * 2, cudaMemcpyHostToDevice));
        CK(cudaMemset(dact.p, 0xff, (out + 16) * 2));
        gpu::setWideRowKernels(wide == 1);
        gpu::swiglu(bf(dgu.p), n, I, bf(dact.p), nullptr);
        CK(cudaDeviceSynchronize());
        got[wide].resize(out + 16);
        CK(cudaMemcpy(got[wide].data(), dact.p, (out + 16) * 2, cudaMemcpyDeviceToHost));
      }
      for (size_t i = out; i < out + 16; ++i) ASSERT_EQ(got[1][i], kPoison) << what << ": written past the rows";
      ASSERT_EQ(got[0], got[1]) << what << ": the wide kernel's bits differ";
    }
  // addRmsNorm: the residual written back to x and the normed rows, with and without the add;
  // H past 8192 compares with the loop kernel, H = 13 takes the per-element kernels both times.
  for (int H : {4096, 5120, 1000, 8200, 13})
    for (int n : {17, 2048})
      for (bool withAdd : {false, true}) {
        if (H == 8200 && n == 2048) continue;
        const std::string what =
            "addRmsNorm H " + std::to_string(H) + " n " + std::to_string(n) + (withAdd ? " add" : "");
        const size_t count = static_cast<size_t>(n) * H;
        std::vector<uint16_t> x(count), add(count), w(H);
        for (size_t i = 0; i < count; ++i) x[i] = special(i, 4.f), add[i] = special(i + 7, 4.f);
        for (auto& v : w) v = rng.bf16(2.f);
        std::vector<uint16_t> gotX[2], gotOut[2];
        for (int wide = 0; wide < 2; ++wide) {
          DevBuf<uint16_t> dx(count), da(count), dw(H), dout(count + 16);
          CK(cudaMemcpy(dx.p, x.data(), count * 2, cudaMemcpyHostToDevice));
          CK(cudaMemcpy(da.p, add.data(), count * 2, cudaMemcpyHostToDevice));
          CK(cudaMemcpy(dw.p, w.data(), H * 2, cudaMemcpyHostToDevice));
          CK(cudaMemset(dout.p, 0xff, (count + 16) * 2));
          gpu::setWideRowKernels(wide == 1);
          gpu::addRmsNorm(bf(dx.p), withAdd ? bf(da.p) : nullptr, bf(dw.p), n, H, 1e-6f, bf(dout.p), nullptr);
          CK(cudaDeviceSynchronize());
          gotX[wide].resize(count);
          gotOut[wide].resize(count + 16);
          CK(cudaMemcpy(gotX[wide].data(), dx.p, count * 2, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(gotOut[wide].data(), dout.p, (count + 16) * 2, cudaMemcpyDeviceToHost));
        }
        for (size_t i = count; i < count + 16; ++i) ASSERT_EQ(gotOut[1][i], kPoison) << what << ": written past the rows";
        ASSERT_EQ(gotX[0], gotX[1]) << what << ": the residual differs";
        ASSERT_EQ(gotOut[0], gotOut[1]) << what << ": the output differs";
        if (!withAdd) ASSERT_EQ(gotX[1], x) << what << ": x changed without an add";
      }
  // qkNormRopeStore: n rows of [q heads | k heads | v heads] at positions [pos, pos + n).
  struct RopeCase {
    int D, hq, hk, n, pos;
  };
  for (const RopeCase& c : std::vector<RopeCase>{{128, 32, 8, 2048, 0},
                                                 {128, 32, 8, 17, 31999},
                                                 {64, 4, 4, 40, 7},
                                                 {192, 6, 2, 100, 513},
                                                 {256, 8, 1, 65, 3}}) {
    const std::string what = "rope D " + std::to_string(c.D) + " hq " + std::to_string(c.hq) + " hk " +
                             std::to_string(c.hk) + " n " + std::to_string(c.n) + " pos " + std::to_string(c.pos);
    const int width = (c.hq + 2 * c.hk) * c.D, slots = c.pos + c.n + 2;
    const size_t in = static_cast<size_t>(c.n) * width, qn = static_cast<size_t>(c.n) * c.hq * c.D,
                 kvn = static_cast<size_t>(slots) * c.hk * c.D;
    std::vector<uint16_t> qkv(in), wq(c.D), wk(c.D);
    for (size_t i = 0; i < in; ++i) qkv[i] = special(i, 3.f);
    for (auto& v : wq) v = rng.bf16(2.f);
    for (auto& v : wk) v = rng.bf16(2.f);
    const int32_t pos = c.pos;
    std::vector<uint16_t> gq[2], gk[2], gv[2];
    for (int wide = 0; wide < 2; ++wide) {
      DevBuf<uint16_t> dqkv(in), dwq(c.D), dwk(c.D), dq(qn), dk(kvn), dv(kvn);
      DevBuf<int32_t> dpos(1);
      CK(cudaMemcpy(dqkv.p, qkv.data(), in * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dwq.p, wq.data(), c.D * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dwk.p, wk.data(), c.D * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dpos.p, &pos, 4, cudaMemcpyHostToDevice));
      for (uint16_t* p : {dq.p, dk.p, dv.p}) CK(cudaMemset(p, 0xff, (p == dq.p ? qn : kvn) * 2));
      gpu::setWideRowKernels(wide == 1);
      gpu::qkNormRopeStore(bf(dqkv.p), c.n, c.hq, c.hk, c.D, bf(dwq.p), bf(dwk.p), 1e-6f, 1e6f, dpos.p, 0, bf(dq.p),
                           bf(dk.p), bf(dv.p), nullptr);
      CK(cudaDeviceSynchronize());
      gq[wide].resize(qn);
      gk[wide].resize(kvn);
      gv[wide].resize(kvn);
      CK(cudaMemcpy(gq[wide].data(), dq.p, qn * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(gk[wide].data(), dk.p, kvn * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(gv[wide].data(), dv.p, kvn * 2, cudaMemcpyDeviceToHost));
    }
    const size_t row = static_cast<size_t>(c.hk) * c.D;
    for (size_t i = 0; i < kvn; ++i) {
      const bool inCall = i >= static_cast<size_t>(c.pos) * row && i < static_cast<size_t>(c.pos + c.n) * row;
      if (!inCall) ASSERT_EQ(gk[1][i], kPoison) << what << ": K written outside the call's slots at " << i;
      if (!inCall) ASSERT_EQ(gv[1][i], kPoison) << what << ": V written outside the call's slots at " << i;
    }
    ASSERT_EQ(gq[0], gq[1]) << what << ": q differs";
    ASSERT_EQ(gk[0], gk[1]) << what << ": K differs";
    ASSERT_EQ(gv[0], gv[1]) << what << ": V differs";
    // Not vacuous: every q element written, and some of them finite and nonzero.
    size_t finite = 0;
    for (uint16_t v : gq[1]) {
      ASSERT_NE(v, kPoison) << what << ": a q element left unwritten";
      finite += (v & 0x7F80) != 0x7F80 && (v & 0x7FFF) != 0;
    }
    ASSERT_GT(finite, qn / 2) << what;
  }
}

// ---- greedy sampling (kernels/sampling.cu) ----

// gpu::argmaxPick, with and without the top probability, and gpu::localArgmax + pickArgmax,
// against a host argmax: the first of equal maxima (three planted: two adjacent, one far), NaN
// never chosen, -inf and signed zeros among the values; rows whose vocabulary is a multiple of 4
// (16-byte loads), not (one float at a time), and starting off 16 bytes. The top probability
// against fp64 1 / sum exp(v - max) to 1e-4 relative (fp32 sums, __expf) on rows without NaN;
// the fused launch and the separate pair give the same token and probability bits; without the
// probability the table's sums are 0; QWEN_ARGMAX=loop's form gives the same tokens. Then the
// vocabulary split over two ranks (localArgmax per shard, the tables summed as the all-reduce
// would): the same token and probability.
TEST(QwenDecodeGpu, ArgmaxPicksTheFirstMaximum) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  struct Case {
    int V, n, offset;
    bool special;  // NaN, -inf and +-0 planted (tokens checked, not the probability)
  };
  const Case cases[] = {{151936, 1, 0, false}, {151936, 3, 0, true}, {1001, 2, 0, false},
                        {4096, 2, 1, true},    {8, 1, 0, false},     {9, 1, 0, true}};
  const int E = gpu::kArgmaxEntry;
  Rng rng{0x5eed};
  for (const Case& c : cases) {
    const std::string what = "V " + std::to_string(c.V) + " n " + std::to_string(c.n) + " offset " +
                             std::to_string(c.offset) + (c.special ? " with NaN/-inf/+-0" : "");
    std::vector<float> lg(static_cast<size_t>(c.n) * c.V + c.offset);
    for (auto& x : lg) x = rng.uniform() * 8.f;
    std::vector<int32_t> want(c.n);
    std::vector<double> wantP(c.n);
    for (int t = 0; t < c.n; ++t) {
      float* r = lg.data() + c.offset + static_cast<size_t>(t) * c.V;
      const int a = std::max(3, c.V / 3 + t);  // a, a + 1 and the last element: equal maxima
      r[a] = r[a + 1] = r[c.V - 1] = 20.f + t;
      if (c.special) r[0] = NAN, r[1] = -0.f, r[2] = 0.f, r[c.V - 2] = -INFINITY;  // V >= 9: apart from them
      int best = -1;
      for (int i = 0; i < c.V; ++i)
        if (!std::isnan(r[i]) && (best < 0 || r[i] > r[best])) best = i;
      want[t] = best;
      double sum = 0;
      for (int i = 0; i < c.V; ++i) sum += std::exp(static_cast<double>(r[i]) - r[best]);
      wantP[t] = 1.0 / sum;
    }
    DevBuf<float> dl(lg.size()), table(static_cast<size_t>(c.n) * E), table2(static_cast<size_t>(c.n) * E), prob(c.n),
        prob2(c.n);
    DevBuf<int32_t> tok(c.n), tok2(c.n), tok3(c.n);
    CK(cudaMemcpy(dl.p, lg.data(), lg.size() * 4, cudaMemcpyHostToDevice));
    const float* d = dl.p + c.offset;
    gpu::argmaxPick(d, c.n, c.V, table.p, tok.p, prob.p, nullptr);
    gpu::localArgmax(d, c.n, c.V, 0, 1, 0, table2.p, nullptr);
    gpu::pickArgmax(table2.p, c.n, 1, tok2.p, prob2.p, nullptr);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<int32_t> got(c.n), got2(c.n), got3(c.n);
    std::vector<float> p(c.n), p2(c.n), tb(static_cast<size_t>(c.n) * E);
    CK(cudaMemcpy(got.data(), tok.p, c.n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got2.data(), tok2.p, c.n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(p.data(), prob.p, c.n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(p2.data(), prob2.p, c.n * 4, cudaMemcpyDeviceToHost));
    gpu::argmaxPick(d, c.n, c.V, table.p, tok3.p, nullptr, nullptr);  // no probability: no exponentials
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got3.data(), tok3.p, c.n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(tb.data(), table.p, tb.size() * 4, cudaMemcpyDeviceToHost));
    for (int t = 0; t < c.n; ++t) {
      EXPECT_EQ(got[t], want[t]) << what << ", row " << t;
      EXPECT_EQ(got2[t], want[t]) << what << ", row " << t << " (localArgmax + pickArgmax)";
      EXPECT_EQ(got3[t], want[t]) << what << ", row " << t << " (without the probability)";
      EXPECT_EQ(0, std::memcmp(&p[t], &p2[t], 4)) << what << ", row " << t << ": fused " << p[t] << " separate " << p2[t];
      EXPECT_EQ(tb[static_cast<size_t>(t) * E + 2], 0.f) << what << ", row " << t << ": a sum without the probability";
      if (!c.special) EXPECT_NEAR(p[t], wantP[t], 1e-4 * wantP[t]) << what << ", row " << t;
    }
    gpu::setArgmaxLoop(true);  // QWEN_ARGMAX=loop: a float at a time, the same tokens
    gpu::argmaxPick(d, c.n, c.V, table.p, tok3.p, prob2.p, nullptr);
    gpu::setArgmaxLoop(false);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got3.data(), tok3.p, c.n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(p2.data(), prob2.p, c.n * 4, cudaMemcpyDeviceToHost));
    for (int t = 0; t < c.n; ++t) {
      EXPECT_EQ(got3[t], want[t]) << what << ", row " << t << " (QWEN_ARGMAX=loop)";
      if (!c.special) EXPECT_NEAR(p2[t], wantP[t], 1e-4 * wantP[t]) << what << ", row " << t << " (QWEN_ARGMAX=loop)";
    }
    if (c.V % 2 || c.special) continue;
    // Two ranks, half the vocabulary each: rank r's shard rows [n, V / 2] from vocabBegin r V / 2.
    const int h = c.V / 2;
    std::vector<float> sum(static_cast<size_t>(c.n) * 2 * E, 0.f);
    for (int r = 0; r < 2; ++r) {
      std::vector<float> shard(static_cast<size_t>(c.n) * h);
      for (int t = 0; t < c.n; ++t)
        std::memcpy(shard.data() + static_cast<size_t>(t) * h, lg.data() + c.offset + static_cast<size_t>(t) * c.V + r * h,
                    h * 4);
      DevBuf<float> ds(shard.size()), dt(static_cast<size_t>(c.n) * 2 * E);
      CK(cudaMemcpy(ds.p, shard.data(), shard.size() * 4, cudaMemcpyHostToDevice));
      gpu::localArgmax(ds.p, c.n, h, r * h, 2, r, dt.p, nullptr);
      CK(cudaDeviceSynchronize());
      std::vector<float> part(sum.size());
      CK(cudaMemcpy(part.data(), dt.p, part.size() * 4, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];  // the other rank's entries are zeros
    }
    DevBuf<float> dsum(sum.size()), dp(c.n);
    DevBuf<int32_t> dtok(c.n);
    CK(cudaMemcpy(dsum.p, sum.data(), sum.size() * 4, cudaMemcpyHostToDevice));
    gpu::pickArgmax(dsum.p, c.n, 2, dtok.p, dp.p, nullptr);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got.data(), dtok.p, c.n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(p.data(), dp.p, c.n * 4, cudaMemcpyDeviceToHost));
    for (int t = 0; t < c.n; ++t) {
      EXPECT_EQ(got[t], want[t]) << what << ", row " << t << ", two ranks";
      EXPECT_NEAR(p[t], wantP[t], 1e-4 * wantP[t]) << what << ", row " << t << ", two ranks";
    }
  }
}

// The argmax's tails and rows without a maximum: a unique maximum at the row's last element and at
// the first element of its last float4 (V = 151932: the 16-byte path's last batch is partial), in
// the 16-byte form and the scalar one (a row off 16 bytes), with and without the probability, the
// loop form and the two-launch form; and rows all NaN or all -inf, whose token is the first one
// (the CPU reference's), never an index past the vocabulary.
TEST(QwenDecodeGpu, ArgmaxTailsAndRowsWithoutAMaximum) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const int V = 151932, n = 5, E = gpu::kArgmaxEntry;
  for (int offset : {0, 1}) {
    std::vector<float> lg(static_cast<size_t>(n) * V + offset);
    Rng rng{0x7a11};
    for (auto& x : lg) x = rng.uniform() * 8.f;
    float* r0 = lg.data() + offset;
    const int want[n] = {V - 1, V - 4, V - 3, 0, 0};
    r0[0 * static_cast<size_t>(V) + V - 1] = 30.f;  // the last element
    r0[1 * static_cast<size_t>(V) + V - 4] = 30.f;  // the first of the last float4
    r0[2 * static_cast<size_t>(V) + V - 3] = 30.f;
    for (int i = 0; i < V; ++i) r0[3 * static_cast<size_t>(V) + i] = NAN, r0[4 * static_cast<size_t>(V) + i] = -INFINITY;
    DevBuf<float> dl(lg.size()), table(static_cast<size_t>(n) * E), prob(n);
    DevBuf<int32_t> tok(n);
    CK(cudaMemcpy(dl.p, lg.data(), lg.size() * 4, cudaMemcpyHostToDevice));
    const float* d = dl.p + offset;
    for (int form = 0; form < 4; ++form) {
      const char* what[] = {"with the probability", "without it", "QWEN_ARGMAX=loop", "localArgmax + pickArgmax"};
      CK(cudaMemset(tok.p, 0xff, n * 4));
      gpu::setArgmaxLoop(form == 2);
      if (form == 3) {
        gpu::localArgmax(d, n, V, 0, 1, 0, table.p, nullptr);
        gpu::pickArgmax(table.p, n, 1, tok.p, prob.p, nullptr);
      } else {
        gpu::argmaxPick(d, n, V, table.p, tok.p, form == 1 ? nullptr : prob.p, nullptr);
      }
      gpu::setArgmaxLoop(false);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      std::vector<int32_t> got(n);
      CK(cudaMemcpy(got.data(), tok.p, n * 4, cudaMemcpyDeviceToHost));
      for (int t = 0; t < n; ++t)
        EXPECT_EQ(got[t], want[t]) << "offset " << offset << ", " << what[form] << ", row " << t;
    }
    // Two ranks, the rows without a maximum on both: the first token of the first shard.
    const int h = V / 2;
    std::vector<float> sum(static_cast<size_t>(n) * 2 * E, 0.f);
    for (int r = 0; r < 2; ++r) {
      std::vector<float> shard(static_cast<size_t>(n) * h);
      for (int t = 0; t < n; ++t)
        std::memcpy(shard.data() + static_cast<size_t>(t) * h, r0 + static_cast<size_t>(t) * V + r * h, h * 4);
      DevBuf<float> ds(shard.size()), dt(sum.size());
      CK(cudaMemcpy(ds.p, shard.data(), shard.size() * 4, cudaMemcpyHostToDevice));
      gpu::localArgmax(ds.p, n, h, r * h, 2, r, dt.p, nullptr);
      CK(cudaDeviceSynchronize());
      std::vector<float> part(sum.size());
      CK(cudaMemcpy(part.data(), dt.p, part.size() * 4, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    DevBuf<float> dsum(sum.size());
    CK(cudaMemcpy(dsum.p, sum.data(), sum.size() * 4, cudaMemcpyHostToDevice));
    gpu::pickArgmax(dsum.p, n, 2, tok.p, nullptr, nullptr);
    CK(cudaDeviceSynchronize());
    std::vector<int32_t> got(n);
    CK(cudaMemcpy(got.data(), tok.p, n * 4, cudaMemcpyDeviceToHost));
    for (int t = 0; t < n; ++t) EXPECT_EQ(got[t], want[t]) << "offset " << offset << ", two ranks, row " << t;
  }
}

}  // namespace
}  // namespace qwen
