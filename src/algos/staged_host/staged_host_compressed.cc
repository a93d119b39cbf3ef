// staged_host+fp8, staged_host+int8 on host ranks: the compressed all-reduce through the host
// staging segment (threads or processes alike), a two-shot over one-byte codes
// (docs/compression.md). The message is cut into chunks of M elements (M a multiple of the
// quantization block, so a block never straddles two chunks and blocks start at multiples of
// kQuantBlockElems of the message: the result does not depend on the chunking). Per chunk:
//   1. every rank quantizes its whole chunk into its own staging slots (codes, then scales);
//      barrier.
//   2. rank r owns slice r (whole blocks): for each block it reads back every rank's codes,
//      sums them in fp32 in rank order 0..n-1, quantizes the sum once into the shared result
//      area and writes its own output from that quantized sum read back; barrier.
//   3. every rank reads the other slices back from the result area into its output.
// So every rank's output is decode(quantize(sum_r decode(quantize(x_r)))) per block, the same
// bits on every rank and from run to run. Two barriers per chunk suffice: a rank's staging is
// rewritten (step 1 of the next chunk) only after the barrier that ends step 2, its last reader;
// the result is rewritten (step 2 of the next chunk) only after the next chunk's first barrier,
// which every rank reaches after its step 3. The next call starts with the signature exchange (a
// barrier), so nothing here needs a barrier at the end. In place is safe: step 1 reads the whole
// input chunk before anything of it is written.
#include <cstdint>
#include <vector>

#include "algos/common/coll_args.h"
#include "algos/compressed/quantize.h"
#include "algos/compressed/quantize_host.h"
#include "algos/host/host_reduce.h"
#include "algos/staged_host/staged_host.h"
#include "common/error.h"
#include "transports/host_staged.h"

namespace tpcomm {

namespace {

constexpr size_t kBlock = kQuantBlockElems;

// One chunk of up to `cap` elements on the wire: cap code bytes, then one fp32 scale per block.
struct Wire {
  uint8_t* codes;
  float* scales;
};
Wire wireAt(char* base, size_t cap) { return {reinterpret_cast<uint8_t*>(base), reinterpret_cast<float*>(base + cap)}; }

// Elements [b, e) of `w` (b a multiple of kBlock) read back into out[b..e).
void dequantizeSlice(QuantFormat f, const Wire& w, size_t b, size_t e, void* out, DataType dt) {
  hostDequantize(f, w.codes + b, w.scales + b / kBlock, e - b, static_cast<char*>(out) + b * dataTypeSize(dt), dt);
}

}  // namespace

// The schedule above; the caller has checked the call's signature on every rank.
Status stagedHostCompressedAllReduce(HostStagedTransport& t, const CollArgs& a, QuantFormat f) {
  const int n = t.nRanks(), me = t.rank();
  const size_t es = a.elemSize();
  // Elements per chunk: the codes and scales of a whole chunk fit one rank's staging slots.
  const size_t cap = (t.slotsBytes() / (kBlock + sizeof(float))) * kBlock;
  if (cap == 0) return TPCOMM_ERROR(kInternal, "staged_host compressed: %zu-byte slots", t.slotsBytes());
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  std::vector<Wire> staged(n);
  for (int r = 0; r < n; ++r) staged[r] = wireAt(t.slots(r), cap);
  const Wire result = wireAt(t.result(), cap);
  std::vector<const uint8_t*> codes(n);
  std::vector<const float*> scales(n);
  for (size_t c0 = 0; c0 < a.count; c0 += cap) {
    const size_t len = a.count - c0 < cap ? a.count - c0 : cap;
    const char* in = send + c0 * es;
    char* out = recv + c0 * es;
    hostQuantize(f, in, a.dtype, len, staged[me].codes, staged[me].scales);
    TPCOMM_TRY(t.barrier());
    size_t b, e;
    partition(len, n, me, kBlock, &b, &e);
    for (int r = 0; r < n; ++r) {
      codes[r] = staged[r].codes + b;
      scales[r] = staged[r].scales + b / kBlock;
    }
    hostQuantizedSum(f, codes.data(), scales.data(), n, e - b, result.codes + b, result.scales + b / kBlock);
    dequantizeSlice(f, result, b, e, out, a.dtype);
    TPCOMM_TRY(t.barrier());
    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      partition(len, n, j, kBlock, &b, &e);
      dequantizeSlice(f, result, b, e, out, a.dtype);
    }
  }
  return Status::kOk;
}

}  // namespace tpcomm
