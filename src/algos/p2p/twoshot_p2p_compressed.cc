// twoshot_p2p+fp8, twoshot_p2p+int8: twoshot_p2p's schedule with block-scaled one-byte codes on
// the wire (kernel and memory ordering: twoshot_p2p_compressed.cu; formats and error bounds:
// docs/compression.md). Offered only when Config::compression / TPCOMM_COMPRESSION names its
// format, for sums (a quantized max is not the max); any size (chunks). Each rank sends about
// 2(n-1)/n x the message at (64 + 4) / 64 bytes per element instead of 2 or 4. Not in the
// deterministic mode's list: an element's result depends on the other elements of its block.
// No fused norm kernel: allReduceResidualRmsNorm runs this all-reduce, then the norm kernel.
#include "algos/p2p/twoshot_p2p_compressed.h"

#include <memory>

#include "algos/compressed/quantize.h"
#include "algos/p2p/twoshot_p2p.h"
#include "common/error.h"

namespace tpcomm {

namespace {

class TwoshotP2pCompressed final : public TwoshotP2pBase {
 public:
  TwoshotP2pCompressed(const AlgoContext* ctx, Compression wire)
      : TwoshotP2pBase(ctx, nameOf(wire), nameOf(wire),
                       wire == Compression::kInt8 ? TPCOMM_P2P_KERNELS(kTwoshotInt8Kernels)
                                                  : TPCOMM_P2P_KERNELS(kTwoshotFp8Kernels)),
        wire_(wire) {}
  bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const override {
    if (q.op != ReduceOp::kSum) {
      if (whyNot) *whyNot = "compressed: sums only (a quantized max is not the max)";
      return false;
    }
    return P2pAlgorithm::supports(topo, q, whyNot);
  }
  bool deterministic() const override { return false; }  // block-dependent (docs/determinism.md)
  Compression compression() const override { return wire_; }

 private:
  static const char* nameOf(Compression wire) {
    return wire == Compression::kInt8 ? "twoshot_p2p+int8" : "twoshot_p2p+fp8";
  }
  Compression wire_;
};

}  // namespace

std::unique_ptr<Algorithm> makeTwoshotP2pCompressed(const AlgoContext* ctx, Compression wire) {
  return std::make_unique<TwoshotP2pCompressed>(ctx, wire);
}

}  // namespace tpcomm
