// GPU tests of the small-n GEMV at the decoder's own shapes (part of qwen_gpu_test; label gpu).
// qwen_gpu_test.cc (CustomGemvMatchesCublas) and qwen_decode_gpu_test.cc (FusedGemvsMatchReference)
// cover small and odd shapes; these cover the model's: thousands of blocks (the lm_head's 9496),
// `in` up to 25600 (100 units a warp), the fused forms at the 8b layer's shapes.
//  - ModelShapesMatchReference: qwen3-8b and qwen3-32b layer products at TP=1 (qkv, o_proj,
//    gate/up, down; the lm_head at n = 1, fp32 out), n = 1 and 5, against an fp64 host
//    reference: |y - ref| <= 2e-4 sum_i |x_i w_i| + 2^-8 |ref| for bf16 outputs (the bound of
//    CustomGemvMatchesCublas); a token's bits the same at n = 1 and 5; the fused forms on the 8b
//    shapes (norm + qkv, norm + gate/up + SwiGLU against the reference; o_proj and down with the
//    residual add bit for bit gemvBf16 + the bf16 add).
//  - StreamGemvMatchesReference: gemvStream (the plain stream of W, n = 1..8) at the same shapes
//    and ragged ones, the same bound, a token's bits the same at every n, NaN kept to its token.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "config.h"
#include "gpu_kernels.h"
#include "kernels/stream_grid.h"
#include "lt_gemm.h"
#include "safetensors.h"

namespace qwen {
namespace {

#define CK(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

template <typename T>
struct DevBuf {  // device memory freed on every exit of a test
  T* p = nullptr;
  explicit DevBuf(size_t n) { cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)); }
  ~DevBuf() { cudaFree(p); }
  __nv_bfloat16* bf() const { return reinterpret_cast<__nv_bfloat16*>(p); }
};

// body(lo, hi) over [0, n) in slices, one thread a core.
void parallelFor(size_t n, const std::function<void(size_t, size_t)>& body) {
  const size_t k = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> th;
  for (size_t i = 0; i < k; ++i) th.emplace_back(body, n * i / k, n * (i + 1) / k);
  for (auto& t : th) t.join();
}

// Random bf16 in [-scale, scale), element i a function of (seed, i) only (filled in parallel).
std::vector<uint16_t> randomBf16(size_t n, uint64_t seed, float scale) {
  std::vector<uint16_t> v(n);
  parallelFor(n, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      uint64_t z = (seed + i) * 0x9e3779b97f4a7c15ull;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      v[i] = floatToBf16(scale * (static_cast<float>(z >> 40) / static_cast<float>(1 << 23) - 1.f));
    }
  });
  return v;
}

template <typename T>
std::vector<T> fetch(const T* d, size_t n) {
  std::vector<T> h(n);
  if (cudaDeviceSynchronize() != cudaSuccess ||
      cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
    ADD_FAILURE() << "fetch: " << cudaGetErrorString(cudaGetLastError());
  return h;
}

// fp64 products of W's rows with n operand rows A [n, in] (doubles): ref [t, row], mag = sum |a w|.
void reference(const std::vector<uint16_t>& W, int rows, int in, const std::vector<double>& A, int n,
               std::vector<double>* ref, std::vector<double>* mag) {
  ref->assign(static_cast<size_t>(n) * rows, 0.0);
  mag->assign(ref->size(), 0.0);
  parallelFor(rows, [&](size_t lo, size_t hi) {
    std::vector<double> w(in);
    for (size_t o = lo; o < hi; ++o) {
      for (int i = 0; i < in; ++i) w[i] = bf16ToFloat(W[o * in + i]);
      for (int t = 0; t < n; ++t) {
        const double* a = A.data() + static_cast<size_t>(t) * in;
        double s = 0, m = 0;
        for (int i = 0; i < in; ++i) s += a[i] * w[i], m += std::fabs(a[i] * w[i]);
        (*ref)[static_cast<size_t>(t) * rows + o] = s, (*mag)[static_cast<size_t>(t) * rows + o] = m;
      }
    }
  });
}

std::vector<double> toDouble(const std::vector<uint16_t>& x) {
  std::vector<double> d(x.size());
  for (size_t i = 0; i < x.size(); ++i) d[i] = bf16ToFloat(x[i]);
  return d;
}

// RMSNorm of n rows of X [n, in] with weight nw, unrounded (the reference's hn).
std::vector<double> normed(const std::vector<uint16_t>& X, int n, int in, const std::vector<uint16_t>& nw, float eps) {
  std::vector<double> hn(static_cast<size_t>(n) * in);
  for (int t = 0; t < n; ++t) {
    double ss = 0;
    for (int i = 0; i < in; ++i) ss += std::pow(bf16ToFloat(X[static_cast<size_t>(t) * in + i]), 2);
    const double inv = 1 / std::sqrt(ss / in + eps);
    for (int i = 0; i < in; ++i)
      hn[static_cast<size_t>(t) * in + i] = bf16ToFloat(X[static_cast<size_t>(t) * in + i]) * inv * bf16ToFloat(nw[i]);
  }
  return hn;
}

struct Shape {
  const char* name;
  int out, in;
};

std::vector<Shape> layerShapes(const char* preset, bool withHead) {
  ModelConfig c;
  std::string err;
  presetConfig(preset, &c, &err);
  const int H = c.hiddenSize, D = c.headDim, hq = c.numHeads, hk = c.numKvHeads, I = c.intermediateSize;
  std::vector<Shape> s = {{"qkv", (hq + 2 * hk) * D, H}, {"o", H, hq * D}, {"gate_up", 2 * I, H}, {"down", H, I}};
  if (withHead) s.push_back({"lm_head", c.vocabSize, H});
  return s;
}

TEST(QwenGemvGpu, ModelShapesMatchReference) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  constexpr int kN = 5;
  uint64_t seed = 1000;
  for (const char* preset : {"qwen3-8b", "qwen3-32b"})
    for (const Shape& sh : layerShapes(preset, std::strcmp(preset, "qwen3-8b") == 0)) {
      const bool head = std::strcmp(sh.name, "lm_head") == 0;
      const int nMax = head ? 1 : kN;
      const std::vector<uint16_t> W = randomBf16(static_cast<size_t>(sh.out) * sh.in, seed += 7919, 0.05f),
                                  X = randomBf16(static_cast<size_t>(nMax) * sh.in, seed += 7919, 1.f);
      std::vector<double> ref, mag;
      reference(W, sh.out, sh.in, toDouble(X), nMax, &ref, &mag);
      DevBuf<uint16_t> dW(W.size()), dX(X.size());
      DevBuf<float> dY(static_cast<size_t>(nMax) * sh.out);
      CK(cudaMemcpy(dW.p, W.data(), W.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dX.p, X.data(), X.size() * 2, cudaMemcpyHostToDevice));
      std::vector<uint16_t> first;  // n = 1's row
      for (int n : {1, nMax}) {
        const std::string what = std::string(preset) + " " + sh.name + " n " + std::to_string(n);
        CK(cudaMemset(dY.p, 0xFF, static_cast<size_t>(nMax) * sh.out * 4));
        ASSERT_TRUE(gpu::gemvBf16(dW.bf(), sh.out, sh.in, dX.bf(), n, dY.p, head, nullptr)) << what;
        const std::vector<float> y32 = head ? fetch(dY.p, static_cast<size_t>(n) * sh.out) : std::vector<float>();
        const std::vector<uint16_t> y16 =
            head ? std::vector<uint16_t>() : fetch(reinterpret_cast<uint16_t*>(dY.p), static_cast<size_t>(n) * sh.out);
        int bad = 0;
        double worst = 0;
        for (size_t i = 0; i < static_cast<size_t>(n) * sh.out; ++i) {
          const double y = head ? y32[i] : bf16ToFloat(y16[i]), r = ref[i];
          const double tol = 2e-4 * mag[i] + (head ? 0.0 : std::ldexp(std::fabs(r), -8)) + 1e-30;
          worst = std::max(worst, std::fabs(y - r) / (mag[i] + 1e-30));
          if (!(std::fabs(y - r) <= tol) && ++bad <= 3)
            ADD_FAILURE() << what << ": t " << i / sh.out << " o " << i % sh.out << " " << y << " vs " << r;
        }
        EXPECT_EQ(bad, 0) << what << ": worst |y - ref| / sum|xw| " << worst;
        if (!head && n == 1) first.assign(y16.begin(), y16.begin() + sh.out);
        if (!head && n > 1)
          EXPECT_EQ(0, std::memcmp(first.data(), y16.data(), sh.out * 2)) << what << ": token 0's bits depend on n";
      }
    }
}

// gemvStream (gemv_stream.cu) at the qwen3-8b and qwen3-32b layer shapes and the 8b lm_head (fp32
// out, n <= 4) against the fp64 reference, ModelShapesMatchReference's bound, for n = 1, 3, 4
// and 8 (its three forms; X in shared memory and, past 96 KB, from L1: the 8b down and the 32b
// gate/up at n = 8, the 32b down from n = 4); small and ragged shapes (one row; rows fewer than
// a block's warps; in = 8, 24 and 2056: a partial chunk). Token t's bits the same at every n
// (n = 1 is token 0 alone; n = 8 gives every token's reference bits); nothing written past the
// n rows; the same bits on a second call; one NaN in a token's X makes that token's outputs NaN
// and leaves the other tokens' bits; bad `in`, alignment and n refused.
TEST(QwenGemvGpu, StreamGemvMatchesReference) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_TRUE(gpu::prepareGemvStream());
  constexpr int kN = gpu::kGemvStreamMaxTokens;
  std::vector<Shape> shapes = layerShapes("qwen3-8b", true);
  for (const Shape& sh : layerShapes("qwen3-32b", false)) shapes.push_back(sh);
  for (Shape sh : std::vector<Shape>{{"one row", 1, 4096}, {"ragged", 17, 24}, {"tiny", 5, 8}, {"tail", 300, 2056}})
    shapes.push_back(sh);
  uint64_t seed = 5000;
  for (const Shape& sh : shapes) {
    const bool head = std::strcmp(sh.name, "lm_head") == 0;
    const int nMax = head ? 4 : kN, yb = head ? 4 : 2;
    const std::string shape = std::string(sh.name) + " " + std::to_string(sh.out) + " x " + std::to_string(sh.in);
    const std::vector<uint16_t> W = randomBf16(static_cast<size_t>(sh.out) * sh.in, seed += 7919, 0.05f),
                                X = randomBf16(static_cast<size_t>(nMax) * sh.in, seed += 7919, 1.f);
    std::vector<double> ref, mag;
    reference(W, sh.out, sh.in, toDouble(X), nMax, &ref, &mag);
    const size_t outBytes = static_cast<size_t>(nMax) * sh.out * yb;
    DevBuf<uint16_t> dW(W.size()), dX(X.size());
    DevBuf<uint8_t> dY(outBytes + 64);
    CK(cudaMemcpy(dW.p, W.data(), W.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dX.p, X.data(), X.size() * 2, cudaMemcpyHostToDevice));
    auto run = [&](int n, const std::string& what) {
      CK(cudaMemset(dY.p, 0xFF, outBytes + 64));
      EXPECT_TRUE(gpu::gemvStream(dW.bf(), sh.out, sh.in, dX.bf(), n, dY.p, head, nullptr)) << what;
    };
    std::vector<uint8_t> full;  // n = nMax: every token's bits
    for (int n : {nMax, 1, 3, 4, 8}) {
      if (n > nMax) continue;
      const std::string what = shape + " n " + std::to_string(n);
      run(n, what);
      const size_t bytes = static_cast<size_t>(n) * sh.out * yb;
      const std::vector<uint8_t> raw = fetch(dY.p, outBytes + 64);
      int past = 0;
      for (size_t b = bytes; b < raw.size(); ++b) past += raw[b] != 0xFF;
      EXPECT_EQ(past, 0) << what << ": written past token " << n;
      if (n != nMax) {
        EXPECT_EQ(0, std::memcmp(full.data(), raw.data(), bytes)) << what << ": a token's bits depend on n";
        continue;
      }
      full = raw;
      int bad = 0;
      double worst = 0;
      for (size_t i = 0; i < static_cast<size_t>(n) * sh.out; ++i) {
        float f32;
        uint16_t b16;
        std::memcpy(&f32, raw.data() + 4 * i * head, 4);
        std::memcpy(&b16, raw.data() + 2 * i, 2);
        const double y = head ? f32 : bf16ToFloat(b16), r = ref[i];
        const double tol = 2e-4 * mag[i] + (head ? 0.0 : std::ldexp(std::fabs(r), -8)) + 1e-30;
        worst = std::max(worst, std::fabs(y - r) / (mag[i] + 1e-30));
        if (!(std::fabs(y - r) <= tol) && ++bad <= 3)
          ADD_FAILURE() << what << ": t " << i / sh.out << " o " << i % sh.out << " " << y << " vs " << r;
      }
      EXPECT_EQ(bad, 0) << what << ": worst |y - ref| / sum|xw| " << worst;
      run(n, what + " (second call)");
      EXPECT_EQ(0, std::memcmp(full.data(), fetch(dY.p, bytes).data(), bytes)) << what << ": a second call's bits differ";
    }
    if (head || sh.out < 64) continue;
    // One NaN in token 1's X: token 1's outputs all NaN, the others' bits unchanged.
    const uint16_t nan = 0x7FC0;
    CK(cudaMemcpy(dX.bf() + sh.in + sh.in / 3, &nan, 2, cudaMemcpyHostToDevice));
    run(3, shape + " NaN");
    const std::vector<uint16_t> y = fetch(reinterpret_cast<uint16_t*>(dY.p), static_cast<size_t>(3) * sh.out);
    int notNan = 0;
    for (int o = 0; o < sh.out; ++o) notNan += !std::isnan(bf16ToFloat(y[sh.out + o]));
    EXPECT_EQ(notNan, 0) << shape << ": token 1's outputs must be NaN";
    EXPECT_EQ(0, std::memcmp(full.data(), y.data(), sh.out * 2)) << shape << ": token 0 changed by token 1's NaN";
    EXPECT_EQ(0, std::memcmp(full.data() + 4 * sh.out, y.data() + 2 * sh.out, sh.out * 2)) << shape << ": token 2 changed";
  }
  DevBuf<uint16_t> dW(64), dX(16);
  EXPECT_FALSE(gpu::gemvStream(dW.bf(), 4, 12, dX.bf(), 1, dW.p, false, nullptr)) << "in % 8 != 0 must be refused";
  EXPECT_FALSE(gpu::gemvStream(dW.bf() + 1, 4, 16, dX.bf(), 1, dW.p, false, nullptr)) << "unaligned W must be refused";
  EXPECT_FALSE(gpu::gemvStream(dW.bf(), 4, 16, dX.bf(), 0, dW.p, false, nullptr)) << "n = 0 must be refused";
  EXPECT_FALSE(gpu::gemvStream(dW.bf(), 4, 16, dX.bf(), kN + 1, dW.p, false, nullptr)) << "n > max must be refused";
  EXPECT_EQ(gpu::streamBlocks(5120, 132), 160) << "5120 rows: 2560 warps of 2 rows";
  EXPECT_EQ(gpu::streamBlocks(4096, 132), 256) << "4096 rows: a warp each";
  EXPECT_EQ(gpu::streamBlocks(151936, 132), 264);
}

// A preset's layer sizes at TP=1.
struct LayerDims {
  int hidden, inter, qkvRows, attIn;
};
LayerDims layerDims(const char* preset) {
  ModelConfig c;
  std::string err;
  presetConfig(preset, &c, &err);
  return {c.hiddenSize, c.intermediateSize, (c.numHeads + 2 * c.numKvHeads) * c.headDim, c.numHeads * c.headDim};
}

// The stream's fused forms (GpuModel's fused step at one token under streamGemv) at the qwen3-8b
// and qwen3-32b layer shapes, each bit for bit its unfused pair on the device: gemvStreamNorm =
// addRmsNorm + gemvStream (qkv); gemvStreamResidual = gemvStream + addRmsNorm's add (o_proj,
// down; n = 1 and 3); gemvStreamNormSwiglu = addRmsNorm + gemvStream over [gate; up] + swiglu. The
// residual row holds -0 and large values; every output compared, nothing written past it.
TEST(QwenGemvGpu, StreamFusedFormsKeepTheBits) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_TRUE(gpu::prepareGemvStream());
  const float eps = 1e-6f;
  uint64_t seed = 9000;
  for (const char* preset : {"qwen3-8b", "qwen3-32b"}) {
    const LayerDims d = layerDims(preset);
    const int H = d.hidden, I = d.inter, qkvRows = d.qkvRows, attIn = d.attIn;
    const int rows = std::max({qkvRows, 2 * I, H}), maxIn = std::max({H, I, attIn});
    std::vector<uint16_t> W = randomBf16(static_cast<size_t>(rows) * maxIn, seed += 7919, 0.05f),
                          X = randomBf16(static_cast<size_t>(3) * maxIn, seed += 7919, 4.f),
                          nw = randomBf16(maxIn, seed += 7919, 1.f);
    X[5] = 0x8000;  // -0
    X[7] = floatToBf16(3.0e4f);
    DevBuf<uint16_t> dW(W.size()), dX(X.size()), dNw(nw.size()), dHn(maxIn), dA(size_t(3) * rows + 64),
        dB(size_t(3) * rows + 64), dR(size_t(3) * rows), dAct(I + 64);
    CK(cudaMemcpy(dW.p, W.data(), W.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dX.p, X.data(), X.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dNw.p, nw.data(), nw.size() * 2, cudaMemcpyHostToDevice));
    auto same = [&](const uint16_t* a, const uint16_t* b, size_t count, const std::string& what) {
      const std::vector<uint16_t> ha = fetch(a, count + 64), hb = fetch(b, count + 64);
      EXPECT_EQ(0, std::memcmp(ha.data(), hb.data(), count * 2)) << preset << " " << what;
      int past = 0;
      for (size_t i = count; i < count + 64; ++i) past += ha[i] != 0xFFFF;
      EXPECT_EQ(past, 0) << preset << " " << what << ": written past the output";
    };
    // norm + qkv: the residual row X, ln = nw.
    CK(cudaMemset(dA.p, 0xFF, (size_t(3) * rows + 64) * 2));
    CK(cudaMemset(dB.p, 0xFF, (size_t(3) * rows + 64) * 2));
    ASSERT_TRUE(gpu::gemvStreamNorm(dW.bf(), qkvRows, H, dX.bf(), dNw.bf(), eps, dA.bf(), nullptr));
    gpu::addRmsNorm(dX.bf(), nullptr, dNw.bf(), 1, H, eps, dHn.bf(), nullptr);
    ASSERT_TRUE(gpu::gemvStream(dW.bf(), qkvRows, H, dHn.bf(), 1, dB.p, false, nullptr));
    same(dA.p, dB.p, qkvRows, "norm + qkv");
    // o_proj and down + residual, n = 1 and 3: R from X's rows, the product's input X too.
    for (const auto& sh : std::vector<std::pair<int, const char*>>{{attIn, "o_proj"}, {I, "down"}})
      for (int n : {1, 3}) {
        const std::string what = std::string(sh.second) + " + residual, n " + std::to_string(n);
        CK(cudaMemcpy(dR.p, X.data(), size_t(n) * H * 2, cudaMemcpyHostToDevice));
        CK(cudaMemset(dA.p, 0xFF, (size_t(3) * rows + 64) * 2));
        CK(cudaMemcpy(dA.p, X.data(), size_t(n) * H * 2, cudaMemcpyHostToDevice));  // the fused form's R
        ASSERT_TRUE(gpu::gemvStreamResidual(dW.bf(), H, sh.first, dX.bf(), n, dA.bf(), nullptr)) << what;
        ASSERT_TRUE(gpu::gemvStream(dW.bf(), H, sh.first, dX.bf(), n, dB.p, false, nullptr)) << what;
        gpu::addRmsNorm(dR.bf(), dB.bf(), dNw.bf(), n, H, eps, dHn.bf(), nullptr);  // R += y (and a norm, unused)
        CK(cudaMemset(dB.p, 0xFF, (size_t(3) * rows + 64) * 2));
        CK(cudaMemcpy(dB.p, dR.p, size_t(n) * H * 2, cudaMemcpyDeviceToDevice));
        same(dA.p, dB.p, size_t(n) * H, what);
      }
    // norm + gate/up + SwiGLU.
    CK(cudaMemset(dAct.p, 0xFF, (size_t(I) + 64) * 2));
    CK(cudaMemset(dB.p, 0xFF, (size_t(3) * rows + 64) * 2));
    ASSERT_TRUE(gpu::gemvStreamNormSwiglu(dW.bf(), I, H, dX.bf(), dNw.bf(), eps, dAct.bf(), nullptr));
    gpu::addRmsNorm(dX.bf(), nullptr, dNw.bf(), 1, H, eps, dHn.bf(), nullptr);
    ASSERT_TRUE(gpu::gemvStream(dW.bf(), 2 * I, H, dHn.bf(), 1, dA.p, false, nullptr));
    gpu::swiglu(dA.bf(), 1, I, dB.bf(), nullptr);
    same(dAct.p, dB.p, I, "norm + gate/up + SwiGLU");
  }
  DevBuf<uint16_t> dW(64), dX(16);
  EXPECT_FALSE(gpu::gemvStreamNorm(dW.bf(), 4, 16, dX.bf(), nullptr, 1e-6f, dW.bf(), nullptr)) << "no norm weights";
  EXPECT_FALSE(gpu::gemvStreamResidual(dW.bf(), 4, 16, dX.bf(), 0, dW.bf(), nullptr)) << "n = 0";
}

// gpu::streamPick (the lm_head's one-token stream with the greedy pick in its last block) against
// the kernels it replaces: addRmsNorm + gemvStream (fp32) + argmaxPick, and gemvStream + argmaxPick
// without the norm. The logits and the normed row bit for bit, nothing written past them, the
// same token, over a full grid (151936 rows), a ragged one (9973) and one block (5 rows); with
// the best row tied three ways (the lowest wins), a NaN logit (never picked) above them, an
// +inf logit (picked), every logit NaN (token 0) and every logit +0 (token 0). Several launches
// in a row on one scratch (the ticket back at zero after each); bad operands refused.
TEST(QwenGemvGpu, StreamPickEqualsTheLmHeadAndArgmax) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_TRUE(gpu::prepareGemvStream());
  const size_t scratchBytes = gpu::streamPickScratch();
  ASSERT_GT(scratchBytes, sizeof(unsigned));
  DevBuf<uint8_t> scratch(scratchBytes);
  CK(cudaMemset(scratch.p, 0, scratchBytes));
  const float eps = 1e-6f;
  uint64_t seed = 4242;
  struct Case {
    int out, in;
  };
  for (Case c : {Case{151936, 1024}, Case{9973, 4096}, Case{5, 64}}) {
    std::vector<uint16_t> W = randomBf16(static_cast<size_t>(c.out) * c.in, seed += 7919, 0.05f),
                          X = randomBf16(c.in, seed += 7919, 4.f), nw = randomBf16(c.in, seed += 7919, 1.f);
    DevBuf<uint16_t> dW(W.size()), dX(c.in), dNw(c.in), dHn(c.in + 64), dRef(c.in + 64);
    DevBuf<float> dA(c.out + 64), dB(c.out + 64), table(gpu::kArgmaxEntry);
    DevBuf<int32_t> tok(2);
    CK(cudaMemcpy(dNw.p, nw.data(), nw.size() * 2, cudaMemcpyHostToDevice));
    // One comparison, W and X as they are now: *agreed = the token both give (-1 if not).
    auto compare = [&](bool withNorm, const std::string& what, int* agreed) {
      CK(cudaMemcpy(dW.p, W.data(), W.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dX.p, X.data(), X.size() * 2, cudaMemcpyHostToDevice));
      for (auto* b : {dA.p, dB.p}) CK(cudaMemset(b, 0xFF, (c.out + 64) * sizeof(float)));
      for (auto* b : {dHn.p, dRef.p}) CK(cudaMemset(b, 0xFF, (c.in + 64) * 2));
      CK(cudaMemset(tok.p, 0xFF, 2 * sizeof(int32_t)));
      const __nv_bfloat16* in = dX.bf();
      if (withNorm) {
        gpu::addRmsNorm(dX.bf(), nullptr, dNw.bf(), 1, c.in, eps, dRef.bf(), nullptr);
        in = dRef.bf();
      }
      ASSERT_TRUE(gpu::gemvStream(dW.bf(), c.out, c.in, in, 1, dB.p, true, nullptr)) << what;
      gpu::argmaxPick(dB.p, 1, c.out, table.p, tok.p + 1, nullptr, nullptr);
      ASSERT_TRUE(gpu::streamPick(dW.bf(), c.out, c.in, dX.bf(), withNorm ? dNw.bf() : nullptr, eps,
                                  withNorm ? dHn.bf() : nullptr, dA.p, scratch.p, scratchBytes, tok.p, nullptr))
          << what << ": streamPick refused";
      const std::vector<float> a = fetch(dA.p, c.out + 64), b = fetch(dB.p, c.out);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), c.out * sizeof(float))) << what << ": logits";
      int past = 0;
      for (int i = c.out; i < c.out + 64; ++i) past += std::isnan(a[i]) ? 0 : 1;  // 0xFFFFFFFF is a NaN
      EXPECT_EQ(past, 0) << what << ": written past the logits";
      if (withNorm) {
        const std::vector<uint16_t> h = fetch(dHn.p, c.in + 64), r = fetch(dRef.p, c.in);
        EXPECT_EQ(0, std::memcmp(h.data(), r.data(), c.in * 2)) << what << ": the normed row";
        int tail = 0;
        for (int i = c.in; i < c.in + 64; ++i) tail += h[i] != 0xFFFF;
        EXPECT_EQ(tail, 0) << what << ": written past the normed row";
      }
      const std::vector<int32_t> t = fetch(tok.p, 2);
      EXPECT_EQ(t[0], t[1]) << what << ": streamPick's token against argmaxPick's";
      const std::vector<uint8_t> sc = fetch(scratch.p, scratchBytes);
      unsigned ticket = 0;
      std::memcpy(&ticket, sc.data() + scratchBytes - sizeof(unsigned), sizeof(unsigned));
      EXPECT_EQ(ticket, 0u) << what << ": the ticket left at zero";
      *agreed = t[0] == t[1] ? t[0] : -1;
    };
    auto check = [&](bool withNorm, const std::string& what) {
      int agreed = -1;
      compare(withNorm, what, &agreed);
      return agreed;
    };
    const std::string at = std::to_string(c.out) + " x " + std::to_string(c.in);
    check(true, at + ", normed");
    const int best = check(false, at + ", plain");
    ASSERT_GE(best, 0) << at;
    // The best row, larger still (the row times 4), copied to rows 0 and out - 1 (the first and
    // the last block's): a tie the lowest row wins.
    std::vector<uint16_t> top(W.begin() + static_cast<size_t>(best) * c.in,
                              W.begin() + static_cast<size_t>(best + 1) * c.in);
    for (auto& v : top) v = floatToBf16(4.f * bf16ToFloat(v));
    for (int r : {0, best, c.out - 1}) std::copy(top.begin(), top.end(), W.begin() + static_cast<size_t>(r) * c.in);
    EXPECT_EQ(check(false, at + ", three-way tie"), 0) << at;
    const std::vector<uint16_t> tied = W;
    if (c.out > 3) {
      // A NaN logit at row 0 (never picked) and an +inf one at row 2 (picked over everything).
      W[3] = 0x7FC0;  // a NaN weight in row 0
      const float x0 = bf16ToFloat(X[0]);
      W[static_cast<size_t>(2) * c.in] = x0 >= 0 ? 0x7F80 : 0xFF80;  // +-inf against x[0]
      if (x0 == 0.f) X[0] = floatToBf16(1.f);
      EXPECT_EQ(check(false, at + ", NaN and +inf logits"), 2) << at;
      W = tied;
    }
    const std::vector<uint16_t> keep = X;
    std::fill(X.begin(), X.end(), 0x7FC0);
    EXPECT_EQ(check(false, at + ", every logit NaN"), 0) << at;
    std::fill(X.begin(), X.end(), 0);
    EXPECT_EQ(check(false, at + ", every logit +0"), 0) << at;
    X = keep;
  }
  DevBuf<uint16_t> dW(64), dX(16);
  DevBuf<float> lg(8);
  DevBuf<int32_t> tok(1);
  EXPECT_FALSE(gpu::streamPick(dW.bf(), 4, 16, dX.bf(), nullptr, eps, nullptr, lg.p, scratch.p, scratchBytes - 1,
                               tok.p, nullptr))
      << "scratch too small";
  EXPECT_FALSE(gpu::streamPick(dW.bf(), 4, 16, dX.bf(), nullptr, eps, nullptr, nullptr, scratch.p, scratchBytes,
                               tok.p, nullptr))
      << "no logits";
  EXPECT_FALSE(gpu::streamPick(dW.bf(), 4, 12, dX.bf(), nullptr, eps, nullptr, lg.p, scratch.p, scratchBytes, tok.p,
                               nullptr))
      << "in % 8 != 0";
  EXPECT_FALSE(gpu::streamPick(dW.bf(), 4, 16, dX.bf(), dX.bf(), eps, dX.bf() + 1, lg.p, scratch.p, scratchBytes,
                               tok.p, nullptr))
      << "normOut not 16-byte aligned";
}

// gpu::streamQkvRope (qkv with the q/k norm, RoPE and KV store in one launch, a cluster of blocks a
// head) against gemvStreamNorm + qkNormRopeStore: q and the K and V cache rows bit for bit, no
// other cache row written, at the qwen3-8b and qwen3-32b shapes and a group of three at head_dim
// 64 and 256, at slot 0, 37 and the cache's last (RoPE offsets 0 and 3), two launches in a row;
// operands it cannot take refused.
TEST(QwenGemvGpu, StreamQkvRopeEqualsTheTwoKernels) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_TRUE(gpu::prepareGemvStream());
  int major = 0;
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  struct Case {
    const char* name;
    int hidden, hq, hk, D;
  };
  std::vector<Case> cases;
  for (const char* preset : {"qwen3-8b", "qwen3-32b"}) {
    ModelConfig m;
    std::string err;
    ASSERT_TRUE(presetConfig(preset, &m, &err)) << err;
    cases.push_back({preset, m.hiddenSize, m.numHeads, m.numKvHeads, m.headDim});
  }
  cases.push_back({"6/2 heads x 64", 512, 6, 2, 64});
  cases.push_back({"4/2 heads x 256", 1024, 4, 2, 256});
  const float eps = 1e-6f, theta = 1e6f;
  uint64_t seed = 777;
  for (const Case& c : cases) {
    gpu::QkvRope r;
    r.hidden = c.hidden, r.hq = c.hq, r.hk = c.hk, r.headDim = c.D;
    if (major < 9) {
      EXPECT_EQ(gpu::streamQkvRopeCluster(r), 0) << "clusters need sm_90";
      continue;
    }
    const int cl = gpu::streamQkvRopeCluster(r);
    ASSERT_GT(cl, 0) << c.name;
    const int rows = (c.hq + 2 * c.hk) * c.D, slots = 64;
    std::vector<uint16_t> W = randomBf16(static_cast<size_t>(rows) * c.hidden, seed += 7919, 0.05f),
                          X = randomBf16(c.hidden, seed += 7919, 4.f), ln = randomBf16(c.hidden, seed += 7919, 1.f),
                          qn = randomBf16(c.D, seed += 7919, 1.f), kn = randomBf16(c.D, seed += 7919, 1.f);
    X[3] = 0x8000;  // -0
    const size_t cache = static_cast<size_t>(slots) * c.hk * c.D;
    DevBuf<uint16_t> dW(W.size()), dX(c.hidden), dLn(c.hidden), dQn(c.D), dKn(c.D), dQkv(rows), dQa(c.hq * c.D),
        dQb(c.hq * c.D), dKa(cache), dVa(cache), dKb(cache), dVb(cache);
    DevBuf<int32_t> dPos(1);
    CK(cudaMemcpy(dW.p, W.data(), W.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dX.p, X.data(), X.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dLn.p, ln.data(), ln.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dQn.p, qn.data(), qn.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dKn.p, kn.data(), kn.size() * 2, cudaMemcpyHostToDevice));
    for (auto* b : {dKa.p, dVa.p, dKb.p, dVb.p}) CK(cudaMemset(b, 0xFF, cache * 2));
    r.wqkv = dW.bf(), r.x = dX.bf(), r.ln = dLn.bf(), r.qNorm = dQn.bf(), r.kNorm = dKn.bf(), r.pos = dPos.p;
    r.eps = eps, r.theta = theta;
    for (auto at : std::vector<std::pair<int, int>>{{0, 0}, {37, 3}, {slots - 1, 0}}) {
      const std::string what = std::string(c.name) + ", slot " + std::to_string(at.first) + ", offset " +
                               std::to_string(at.second) + ", " + std::to_string(cl) + " blocks a head";
      CK(cudaMemcpy(dPos.p, &at.first, 4, cudaMemcpyHostToDevice));
      for (auto* b : {dQa.p, dQb.p}) CK(cudaMemset(b, 0xFF, static_cast<size_t>(c.hq) * c.D * 2));
      r.ropeOffset = at.second, r.q = dQa.bf(), r.kCache = dKa.bf(), r.vCache = dVa.bf();
      ASSERT_TRUE(gpu::streamQkvRope(r, nullptr)) << what;
      ASSERT_TRUE(gpu::streamQkvRope(r, nullptr)) << what << ", again";
      ASSERT_TRUE(gpu::gemvStreamNorm(dW.bf(), rows, c.hidden, dX.bf(), dLn.bf(), eps, dQkv.bf(), nullptr)) << what;
      gpu::qkNormRopeStore(dQkv.bf(), 1, c.hq, c.hk, c.D, dQn.bf(), dKn.bf(), eps, theta, dPos.p, at.second, dQb.bf(),
                           dKb.bf(), dVb.bf(), nullptr);
      const std::vector<uint16_t> qa = fetch(dQa.p, size_t(c.hq) * c.D), qb = fetch(dQb.p, size_t(c.hq) * c.D);
      EXPECT_EQ(0, std::memcmp(qa.data(), qb.data(), qa.size() * 2)) << what << ": q";
      const std::vector<uint16_t> ka = fetch(dKa.p, cache), kb = fetch(dKb.p, cache), va = fetch(dVa.p, cache),
                                  vb = fetch(dVb.p, cache);
      EXPECT_EQ(0, std::memcmp(ka.data(), kb.data(), cache * 2)) << what << ": the K cache";
      EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), cache * 2)) << what << ": the V cache";
      const size_t row = static_cast<size_t>(at.first) * c.hk * c.D;
      int written = 0;
      for (size_t i = 0; i < cache; ++i) written += (ka[i] != 0xFFFF || va[i] != 0xFFFF) && (i < row || i >= row + size_t(c.hk) * c.D);
      EXPECT_EQ(written, 0) << what << ": cache rows other than the slot's written (or left from an earlier slot)";
      for (auto* b : {dKa.p, dVa.p, dKb.p, dVb.p}) CK(cudaMemset(b, 0xFF, cache * 2));
    }
  }
  gpu::QkvRope bad;
  bad.hidden = 512, bad.hq = 6, bad.hk = 2, bad.headDim = 96;
  EXPECT_EQ(gpu::streamQkvRopeCluster(bad), 0) << "head_dim 96";
  EXPECT_FALSE(gpu::streamQkvRope(bad, nullptr)) << "no operands";
}

// gpu::streamLayer (one cooperative launch: o_proj + residual, norm + gate/up + SwiGLU, down +
// residual, the next layer's norm + qkv, grid barriers between) at the qwen3-8b and qwen3-32b
// shapes: x, act and qkv bit for bit the four separate stream launches', with and without the
// next layer's qkv; three launches in a row (the barrier words reused, back at zero after each);
// the failure flag never set; a launch without its barrier words refused.
TEST(QwenGemvGpu, StreamLayerEqualsTheSeparateStreams) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_TRUE(gpu::prepareGemvStream());
  const float eps = 1e-6f;
  uint64_t seed = 12000;
  for (const char* preset : {"qwen3-8b", "qwen3-32b"}) {
    const LayerDims d = layerDims(preset);
    const int H = d.hidden, I = d.inter, qkvRows = d.qkvRows, attIn = d.attIn;
    const std::vector<uint16_t> wo = randomBf16(size_t(H) * attIn, seed += 7919, 0.05f),
                                wgu = randomBf16(size_t(2) * I * H, seed += 7919, 0.05f),
                                wd = randomBf16(size_t(H) * I, seed += 7919, 0.05f),
                                wqkv = randomBf16(size_t(qkvRows) * H, seed += 7919, 0.05f),
                                att = randomBf16(attIn, seed += 7919, 1.f), x0 = randomBf16(H, seed += 7919, 4.f),
                                ln1 = randomBf16(H, seed += 7919, 1.f), ln2 = randomBf16(H, seed += 7919, 1.f);
    auto up = [](const std::vector<uint16_t>& h, DevBuf<uint16_t>* d) {
      return cudaMemcpy(d->p, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
    };
    DevBuf<uint16_t> dWo(wo.size()), dWgu(wgu.size()), dWd(wd.size()), dWqkv(wqkv.size()), dAtt(att.size()),
        dLn1(H), dLn2(H), dX(H), dAct(I), dQkv(qkvRows), dX2(H), dAct2(I), dQkv2(qkvRows);
    for (auto pr : {std::make_pair(&wo, &dWo), std::make_pair(&wgu, &dWgu), std::make_pair(&wd, &dWd),
                    std::make_pair(&wqkv, &dWqkv), std::make_pair(&att, &dAtt), std::make_pair(&ln1, &dLn1),
                    std::make_pair(&ln2, &dLn2)})
      CK(up(*pr.first, pr.second));
    DevBuf<unsigned> bar(2);
    int* failed = nullptr;
    int* dFailed = nullptr;
    CK(cudaHostAlloc(reinterpret_cast<void**>(&failed), sizeof(int), cudaHostAllocMapped));
    *failed = 0;
    CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dFailed), failed, 0));
    CK(cudaMemset(bar.p, 0, 2 * sizeof(unsigned)));
    for (bool withQkv : {true, false}) {
      const std::string what = std::string(preset) + (withQkv ? " with" : " without") + " the next qkv";
      CK(up(x0, &dX));
      CK(up(x0, &dX2));
      CK(cudaMemset(dQkv.p, 0xFF, size_t(qkvRows) * 2));
      CK(cudaMemset(dQkv2.p, 0xFF, size_t(qkvRows) * 2));
      gpu::StreamLayer a;
      a.wo = dWo.bf(), a.wgu = dWgu.bf(), a.wd = dWd.bf(), a.ln2 = dLn2.bf(), a.att = dAtt.bf(), a.x = dX.bf();
      a.act = dAct.bf(), a.hidden = H, a.attIn = attIn, a.inter = I, a.eps = eps;
      if (withQkv) a.wqkv = dWqkv.bf(), a.ln1 = dLn1.bf(), a.qkv = dQkv.bf(), a.qkvRows = qkvRows;
      a.barrier = bar.p, a.failed = dFailed, a.boundNs = 2000000000ull;
      for (int call = 0; call < 3; ++call) {  // x moves on each call, as layer after layer
        ASSERT_TRUE(gpu::streamLayer(a, nullptr)) << what << ": " << cudaGetErrorString(cudaGetLastError());
        ASSERT_TRUE(gpu::gemvStreamResidual(dWo.bf(), H, attIn, dAtt.bf(), 1, dX2.bf(), nullptr));
        ASSERT_TRUE(gpu::gemvStreamNormSwiglu(dWgu.bf(), I, H, dX2.bf(), dLn2.bf(), eps, dAct2.bf(), nullptr));
        ASSERT_TRUE(gpu::gemvStreamResidual(dWd.bf(), H, I, dAct2.bf(), 1, dX2.bf(), nullptr));
        if (withQkv) ASSERT_TRUE(gpu::gemvStreamNorm(dWqkv.bf(), qkvRows, H, dX2.bf(), dLn1.bf(), eps, dQkv2.bf(), nullptr));
        CK(cudaDeviceSynchronize());
        EXPECT_EQ(*failed, 0) << what << " call " << call;
        const std::vector<unsigned> b = fetch(bar.p, 2);
        EXPECT_EQ(b[0], 0u) << what << ": the arrival count is back at zero";
        const std::string at = what + ", call " + std::to_string(call);
        EXPECT_EQ(fetch(dX.p, H), fetch(dX2.p, H)) << at << ": x";
        EXPECT_EQ(fetch(dAct.p, I), fetch(dAct2.p, I)) << at << ": act";
        EXPECT_EQ(fetch(dQkv.p, qkvRows), fetch(dQkv2.p, qkvRows)) << at << ": qkv";
      }
    }
    gpu::StreamLayer bad;
    bad.wo = dWo.bf(), bad.wgu = dWgu.bf(), bad.wd = dWd.bf(), bad.ln2 = dLn2.bf(), bad.att = dAtt.bf();
    bad.x = dX.bf(), bad.act = dAct.bf(), bad.hidden = H, bad.attIn = attIn, bad.inter = I, bad.failed = dFailed;
    EXPECT_FALSE(gpu::streamLayer(bad, nullptr)) << "no barrier words";
    cudaFreeHost(failed);
  }
}

// The fused forms on the qwen3-8b layer: norm + qkv and norm + gate/up + SwiGLU against the fp64
// reference (FusedGemvsMatchReference's bounds), o_proj and down with the residual bit for bit
// gemvBf16 + the bf16 add.
TEST(QwenGemvGpu, FusedFormsAtModelShapes) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ModelConfig c;
  std::string err;
  ASSERT_TRUE(presetConfig("qwen3-8b", &c, &err)) << err;
  const int H = c.hiddenSize, I = c.intermediateSize, qkv = (c.numHeads + 2 * c.numKvHeads) * c.headDim;
  const float eps = 1e-6f;
  constexpr int kN = 5;
  const std::vector<uint16_t> X = randomBf16(static_cast<size_t>(kN) * I, 11, 2.f), nw = randomBf16(H, 12, 1.5f),
                              R = randomBf16(static_cast<size_t>(kN) * H, 13, 1.f);
  std::vector<uint16_t> Xh(X.begin(), X.begin() + static_cast<long>(kN) * H);  // [kN, H]
  const std::vector<double> hn = normed(Xh, kN, H, nw, eps);
  DevBuf<uint16_t> dX(X.size()), dXh(Xh.size()), dnw(H), dR(R.size()), dY(static_cast<size_t>(kN) * 2 * I),
      dP(static_cast<size_t>(kN) * H);
  CK(cudaMemcpy(dX.p, X.data(), X.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dXh.p, Xh.data(), Xh.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dnw.p, nw.data(), H * 2, cudaMemcpyHostToDevice));
  struct Form {
    const char* name;
    int out, in;  // W [out, in]; gate/up: out = 2 I
  };
  for (const Form& f : {Form{"norm qkv", qkv, H}, Form{"norm gate/up swiglu", 2 * I, H}, Form{"o residual", H, H},
                        Form{"down residual", H, I}}) {
    const std::vector<uint16_t> W = randomBf16(static_cast<size_t>(f.out) * f.in, 100 + f.out + f.in, 0.05f);
    DevBuf<uint16_t> dW(W.size());
    CK(cudaMemcpy(dW.p, W.data(), W.size() * 2, cudaMemcpyHostToDevice));
    const bool norm = f.in == H && std::strncmp(f.name, "norm", 4) == 0, swiglu = f.out == 2 * I;
    std::vector<double> ref, mag;
    if (norm) reference(W, f.out, f.in, hn, kN, &ref, &mag);
    const std::string what = f.name;
    int bad = 0;
    if (norm && !swiglu) {
      CK(cudaMemset(dY.p, 0xFF, static_cast<size_t>(kN) * f.out * 2));
      ASSERT_TRUE(gpu::gemvNormBf16(dW.bf(), f.out, H, dXh.bf(), kN, dnw.bf(), eps, dY.bf(), nullptr)) << what;
      const std::vector<uint16_t> y = fetch(dY.p, static_cast<size_t>(kN) * f.out);
      for (size_t i = 0; i < y.size(); ++i)
        if (!(std::fabs(bf16ToFloat(y[i]) - ref[i]) <= 4e-3 * mag[i] + std::ldexp(std::fabs(ref[i]), -7)) && ++bad <= 3)
          ADD_FAILURE() << what << ": t " << i / f.out << " o " << i % f.out << " " << bf16ToFloat(y[i]) << " vs "
                        << ref[i];
    } else if (swiglu) {
      CK(cudaMemset(dY.p, 0xFF, static_cast<size_t>(kN) * I * 2));
      ASSERT_TRUE(gpu::gemvNormSwiglu(dW.bf(), I, H, dXh.bf(), kN, dnw.bf(), eps, dY.bf(), nullptr)) << what;
      const std::vector<uint16_t> a = fetch(dY.p, static_cast<size_t>(kN) * I);
      for (int t = 0; t < kN; ++t)
        for (int o = 0; o < I; ++o) {
          const size_t gi = static_cast<size_t>(t) * 2 * I + o, ui = gi + I;
          const double g = ref[gi], u = ref[ui];
          const double eg = 4e-3 * mag[gi] + std::ldexp(std::fabs(g), -7),
                       eu = 4e-3 * mag[ui] + std::ldexp(std::fabs(u), -7);
          const double silu = g / (1 + std::exp(-g)), ra = silu * u, v = bf16ToFloat(a[static_cast<size_t>(t) * I + o]);
          if (!(std::fabs(v - ra) <=
                1.2 * eg * std::fabs(u) + std::fabs(silu) * eu + eg * eu + std::ldexp(std::fabs(ra), -7)) &&
              ++bad <= 3)
            ADD_FAILURE() << what << ": t " << t << " o " << o << " " << v << " vs " << ra;
        }
    } else {
      CK(cudaMemcpy(dR.p, R.data(), static_cast<size_t>(kN) * H * 2, cudaMemcpyHostToDevice));
      ASSERT_TRUE(gpu::gemvResidual(dW.bf(), H, f.in, dX.bf(), kN, dR.bf(), nullptr)) << what;
      ASSERT_TRUE(gpu::gemvBf16(dW.bf(), H, f.in, dX.bf(), kN, dP.p, false, nullptr)) << what;
      const std::vector<uint16_t> r = fetch(dR.p, static_cast<size_t>(kN) * H),
                                  p = fetch(dP.p, static_cast<size_t>(kN) * H);
      for (size_t i = 0; i < r.size(); ++i)
        if (r[i] != floatToBf16(bf16ToFloat(R[i]) + bf16ToFloat(p[i])) && ++bad <= 3)
          ADD_FAILURE() << what << ": element " << i;
    }
    EXPECT_EQ(bad, 0) << what;
  }
}

// QWEN_GEMM=lt (lt_gemm.h): every algorithm cuBLASLt's heuristics offer for the decoder's product
// layout gives cublasGemmEx's result (|y - y_Ex| <= 2^-7 |y_Ex| + 1e-3 max |y_Ex|: split-K sums in
// another order, then one bf16 rounding each), at decode rows, a prefill chunk's and the fp32
// lm_head output; LtGemms keeps a tuned shape (keepAlways) and runs it with the same result, and
// declines a shape it never tuned.
TEST(QwenGemvGpu, CublasLtAlgorithmsMatchGemmEx) {
  struct Case {
    int out, in, n;
    bool f32;
  };
  const Case cases[] = {{6144, 4096, 1, false}, {4096, 12288, 1, false}, {4096, 4096, 5, false},
                        {24576, 4096, 64, false}, {8192, 4096, 3, true}};
  cublasHandle_t cublas = nullptr;
  ASSERT_EQ(cublasCreate(&cublas), CUBLAS_STATUS_SUCCESS);
  cudaStream_t s = nullptr;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasSetStream(cublas, s);
  const size_t wsBytes = 32u << 20;
  DevBuf<char> ws(wsBytes);
  cublasSetWorkspace(cublas, ws.p, wsBytes);
  LtGemms lt;
  std::string err;
  ASSERT_TRUE(lt.init(ws.p, wsBytes, &err)) << err;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.out) + " x " + std::to_string(c.in) + " at " + std::to_string(c.n) + " rows" +
                 (c.f32 ? ", fp32 out" : ""));
    const size_t wN = size_t(c.out) * c.in, xN = size_t(c.n) * c.in, yN = size_t(c.n) * c.out;
    const std::vector<uint16_t> hw = randomBf16(wN, 7 + c.out, 0.05f), hx = randomBf16(xN, 99 + c.n, 1.f);
    DevBuf<uint16_t> W(wN), X(xN);
    DevBuf<float> Y(yN);
    CK(cudaMemcpy(W.p, hw.data(), wN * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(X.p, hx.data(), xN * 2, cudaMemcpyHostToDevice));
    auto fetch = [&] {
      std::vector<float> y(yN);
      if (c.f32) {
        EXPECT_EQ(cudaMemcpy(y.data(), Y.p, yN * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      } else {
        std::vector<uint16_t> h(yN);
        EXPECT_EQ(cudaMemcpy(h.data(), Y.p, yN * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t i = 0; i < yN; ++i) y[i] = bf16ToFloat(h[i]);
      }
      return y;
    };
    const float alpha = 1.f, beta = 0.f;
    ASSERT_EQ(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, c.out, c.n, c.in, &alpha, W.p, CUDA_R_16BF, c.in, X.p,
                           CUDA_R_16BF, c.in, &beta, Y.p, c.f32 ? CUDA_R_32F : CUDA_R_16BF, c.out, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    CK(cudaStreamSynchronize(s));
    const std::vector<float> y0 = fetch();
    float mx = 0;
    for (float v : y0) mx = std::max(mx, std::fabs(v));
    ASSERT_GT(mx, 0.f);
    auto expectClose = [&](const std::vector<float>& y, const std::string& what) {
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < yN; ++i)
        if (!(std::fabs(y[i] - y0[i]) <= 0.0078125f * std::fabs(y0[i]) + 1e-3f * mx) && bad++ == 0) first = i;
      EXPECT_EQ(bad, 0u) << what << ": first at " << first << ": " << y[first] << " against " << y0[first];
    };
    LtProblem p;
    {
      cublasLtHandle_t h = nullptr;
      ASSERT_EQ(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
      ASSERT_TRUE(ltProblem(h, c.out, c.in, c.n, c.f32, wsBytes, LtGemms::kMaxCandidates, &p));
      ASSERT_FALSE(p.algos.empty());
      for (const auto& a : p.algos) {
        CK(cudaMemset(Y.p, 0xff, yN * 4));  // NaN: an algorithm that writes nothing fails
        ASSERT_EQ(cublasLtMatmul(h, p.op, &alpha, W.p, p.a, X.p, p.b, &beta, Y.p, p.c, Y.p, p.c, &a.algo, ws.p, wsBytes,
                                 s),
                  CUBLAS_STATUS_SUCCESS)
            << ltAlgoName(a.algo);
        CK(cudaStreamSynchronize(s));
        expectClose(fetch(), ltAlgoName(a.algo));
      }
      cublasLtDestroy(h);
    }
    const std::vector<const __nv_bfloat16*> ws1{W.bf(), W.bf()};
    ASSERT_TRUE(lt.tune(cublas, ws1, c.out, c.in, X.bf(), c.n, Y.p, c.f32, s, &err, /*keepAlways=*/true)) << err;
    CK(cudaMemset(Y.p, 0xff, yN * 4));
    ASSERT_TRUE(lt.run(W.bf(), c.out, c.in, X.bf(), c.n, Y.p, c.f32, s));
    CK(cudaStreamSynchronize(s));
    expectClose(fetch(), "LtGemms::run");
    EXPECT_FALSE(lt.run(W.bf(), c.out, c.in, X.bf(), c.n + 1, Y.p, c.f32, s)) << "a shape never tuned";
  }
  EXPECT_NE(lt.describe().find("5 of 5 shapes on cuBLASLt"), std::string::npos) << lt.describe();
  cudaStreamDestroy(s);
  cublasDestroy(cublas);
}

}  // namespace
}  // namespace qwen
