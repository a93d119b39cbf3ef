// gpu_kernels.h: the decoder's own CUDA kernels, one file per op under kernels/ (llm.c style):
// everything but the large GEMMs, which are cuBLAS (calls of up to 8 tokens may take the
// small-n GEMV gemvBf16 behind GpuModelOptions::customGemv).
// Activations, the residual stream included, are bf16 (as Hugging Face runs a bf16 model, and
// as tpcomm's fused all-reduce + residual + RMSNorm needs: one dtype for input, residual and
// output); logits and the argmax table are fp32; every reduction runs in fp32. Kernels read the
// call's start position from device memory (`pos`), so one captured CUDA graph serves every
// step of a shape.
#pragma once

#include "kernels/attention_decode.cuh"
#include "kernels/attention_decode_tc.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/attention_prefill_fa3.cuh"
#include "kernels/embed_norm.cuh"
#include "kernels/embedding.cuh"
#include "kernels/gemv.cuh"
#include "kernels/l2_prefetch.cuh"
#include "kernels/mtp_prologue.cuh"
#include "kernels/norms.cuh"
#include "kernels/rope.cuh"
#include "kernels/sampling.cuh"
#include "kernels/swiglu.cuh"
#include "kernels/synth_init.cuh"

namespace qwen {
namespace gpu {

/// Launch every kernel (but initSynthetic) with programmatic dependent launch (sm_90+), so
/// a kernel's blocks are scheduled while the previous kernel of the stream finishes, and
/// gemvBf16 prefetches its first weights into L2 before waiting for its input. Process-wide;
/// off by default (GpuModelOptions::pdl sets it). Each kernel waits for its predecessor before
/// touching anything but constant weights, so results are the same bits either way.
void setPdl(bool on);

/// Calls of more rows than kWideRows (prefill chunks) take the wide-row forms of swiglu,
/// addRmsNorm and qkNormRopeStore: 16-byte accesses, a 128-thread block per norm row, the rotary
/// angles once per token; the same arithmetic in the same order, so the same bits. On by
/// default; off sends every call to the per-element kernels (the tests' reference for the wide
/// ones). Process-wide.
constexpr int kWideRows = 16;
void setWideRowKernels(bool on);

/// Whether CUDA loads modules lazily (a kernel at its first launch; the default since CUDA 12.2)
/// as the driver reports it; *known false (and false returned) when the driver cannot say. The
/// driver reads CUDA_MODULE_LOADING once, when CUDA starts (the process's first CUDA call), so
/// setting it later changes nothing. A lazy load may wait for the whole device: ranks sharing a
/// GPU need eager loading (docs/reliability.md).
bool lazyModuleLoading(bool* known);

}  // namespace gpu
}  // namespace qwen
