// attention_prefill_cudnn.cc: CudnnPrefillAttention (attention_prefill_cudnn.h).
//
// One cuDNN graph per call shape (n queries over pos + n cache slots): Q, K, V and O are views of
// the decoder's own buffers, given to cuDNN as [batch 1, heads, tokens, head_dim] with the
// token-major strides they have in memory (q/out [n, hq, D], caches [ctx, hk, D]), so nothing is
// copied. GQA is cuDNN's: K and V have hk heads, Q hq. The causal mask is aligned bottom-right
// (the last query sees every slot), which is the decoder's "query t sees slots 0 .. pos + t".
#include "kernels/attention_prefill_cudnn.h"

#include <cmath>
#include <map>
#include <utility>

#ifdef QWEN_TP_HAVE_CUDNN
#include <dlfcn.h>

#include <cstdlib>
#include <cudnn_frontend.h>
#include <unordered_map>

// The frontend's calls into cuDNN go through this handle (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING):
// opened once, by the first init, never closed.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}
#endif

namespace qwen {
namespace gpu {

#ifdef QWEN_TP_HAVE_CUDNN

namespace fe = cudnn_frontend;

struct CudnnPrefillAttention::Impl {
  cudnnHandle_t handle = nullptr;
  int hq = 0, hk = 0, D = 0, ctx = 0;
  void* workspace = nullptr;
  size_t workspaceBytes = 0;
  size_t version = 0;
  // uids of the graph's tensors in the variant pack
  enum : int64_t { kQ = 1, kK = 2, kV = 3, kO = 4 };
  struct Built {
    std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN declined this shape (why)
    std::string why;
  };
  std::map<std::pair<int, int>, Built> graphs;  // (n, pos + n)

  Built build(int n, int skv) const {
    Built b;
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const int64_t q = static_cast<int64_t>(hq), k = static_cast<int64_t>(hk), d = static_cast<int64_t>(D),
                  sq = static_cast<int64_t>(n), sk = static_cast<int64_t>(skv), c = static_cast<int64_t>(ctx);
    auto Q = g->tensor(fe::graph::Tensor_attributes().set_name("Q").set_uid(kQ).set_dim({1, q, sq, d}).set_stride(
        {sq * q * d, d, q * d, 1}));
    auto K = g->tensor(fe::graph::Tensor_attributes().set_name("K").set_uid(kK).set_dim({1, k, sk, d}).set_stride(
        {c * k * d, d, k * d, 1}));
    auto V = g->tensor(fe::graph::Tensor_attributes().set_name("V").set_uid(kV).set_dim({1, k, sk, d}).set_stride(
        {c * k * d, d, k * d, 1}));
    auto attrs = fe::graph::SDPA_attributes()
                     .set_name("prefill_attention")
                     .set_generate_stats(false)
                     .set_attn_scale(1.0f / std::sqrt(static_cast<float>(D)))
                     .set_causal_mask_bottom_right(true);
    auto outs = g->sdpa(Q, K, V, attrs);
    outs[0]->set_output(true).set_uid(kO).set_dim({1, q, sq, d}).set_stride({sq * q * d, d, q * d, 1});
    auto step = [&](fe::error_t e, const char* what) {
      if (e.is_bad()) b.why = std::string("cuDNN ") + what + ": " + e.get_message();
      return !e.is_bad();
    };
    if (!step(g->validate(), "validate") || !step(g->build_operation_graph(handle), "build_operation_graph") ||
        !step(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans") ||
        !step(g->check_support(handle), "check_support") || !step(g->build_plans(handle), "build_plans"))
      return b;
    int64_t ws = 0;
    if (!step(g->get_workspace_size(ws), "get_workspace_size")) return b;
    if (ws < 0 || static_cast<size_t>(ws) > workspaceBytes) {
      b.why = "cuDNN wants " + std::to_string(ws) + " bytes of workspace, " + std::to_string(workspaceBytes) + " lent";
      return b;
    }
    b.graph = std::move(g);
    return b;
  }
};

CudnnPrefillAttention::CudnnPrefillAttention() = default;

CudnnPrefillAttention::~CudnnPrefillAttention() {
  if (impl_ && impl_->handle) {
    try {
      fe::detail::destroy_handle(impl_->handle);
    } catch (...) {
    }
  }
}

bool CudnnPrefillAttention::built() { return true; }

bool CudnnPrefillAttention::init(int hq, int hk, int D, int ctx, void* workspace, size_t workspaceBytes,
                                 std::string* why) {
  auto impl = std::make_unique<Impl>();
  impl->hq = hq, impl->hk = hk, impl->D = D, impl->ctx = ctx;
  impl->workspace = workspace, impl->workspaceBytes = workspaceBytes;
  if (!fe::cudnn_dlhandle) {
    // QWEN_CUDNN_LIBRARY names the library file; else the loader's search (LD_LIBRARY_PATH).
    const char* lib = std::getenv("QWEN_CUDNN_LIBRARY");
    fe::cudnn_dlhandle = dlopen(lib && *lib ? lib : "libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
    if (!fe::cudnn_dlhandle) {
      const char* e = dlerror();
      *why = std::string("cannot open ") + (lib && *lib ? lib : "libcudnn.so.9") + " (" + (e ? e : "?") +
             "): put cuDNN's lib directory on LD_LIBRARY_PATH or name the file in QWEN_CUDNN_LIBRARY";
      return false;
    }
  }
  try {
    impl->version = fe::detail::get_backend_version();
    if (fe::detail::create_handle(&impl->handle) != CUDNN_STATUS_SUCCESS) {
      *why = "cudnnCreate failed";
      return false;
    }
  } catch (const std::exception& e) {  // the frontend throws when dlopen finds no libcudnn.so.9
    *why = std::string("cuDNN not loaded (") + e.what() + "); its lib directory must be on LD_LIBRARY_PATH";
    return false;
  }
  impl_ = std::move(impl);
  return true;
}

size_t CudnnPrefillAttention::version() const { return impl_ ? impl_->version : 0; }

bool CudnnPrefillAttention::run(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache,
                                int pos, int n, __nv_bfloat16* out, cudaStream_t s, std::string* why) {
  if (!impl_) return *why = "cuDNN prefill attention: init did not succeed", false;
  if (n < 1 || pos < 0 || pos + n > impl_->ctx)
    return *why = "cuDNN prefill attention: positions outside the cache", false;
  try {
    const auto key = std::make_pair(n, pos + n);
    auto it = impl_->graphs.find(key);
    if (it == impl_->graphs.end()) {
      if (impl_->graphs.size() >= 256) impl_->graphs.clear();  // bound the plans kept
      it = impl_->graphs.emplace(key, impl_->build(n, pos + n)).first;
    }
    if (!it->second.graph) return *why = it->second.why, false;
    if (fe::detail::set_stream(impl_->handle, s) != CUDNN_STATUS_SUCCESS)
      return *why = "cudnnSetStream failed", false;
    std::unordered_map<int64_t, void*> pack = {{Impl::kQ, const_cast<__nv_bfloat16*>(q)},
                                               {Impl::kK, const_cast<__nv_bfloat16*>(kCache)},
                                               {Impl::kV, const_cast<__nv_bfloat16*>(vCache)},
                                               {Impl::kO, out}};
    fe::error_t e = it->second.graph->execute(impl_->handle, pack, impl_->workspace);
    if (e.is_bad()) return *why = "cuDNN execute: " + e.get_message(), false;
  } catch (const std::exception& e) {
    return *why = std::string("cuDNN: ") + e.what(), false;
  }
  return true;
}

#else  // built without cuDNN

struct CudnnPrefillAttention::Impl {};
CudnnPrefillAttention::CudnnPrefillAttention() = default;
CudnnPrefillAttention::~CudnnPrefillAttention() = default;
bool CudnnPrefillAttention::built() { return false; }
bool CudnnPrefillAttention::init(int, int, int, int, void*, size_t, std::string* why) {
  *why =
      "this build has no cuDNN path (CMake found no cuDNN or cuDNN frontend headers: "
      "examples/qwen_tp/tools/fetch_cudnn_frontend.sh, then reconfigure)";
  return false;
}
size_t CudnnPrefillAttention::version() const { return 0; }
bool CudnnPrefillAttention::run(const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int, int,
                                __nv_bfloat16*, cudaStream_t, std::string* why) {
  return *why = "this build has no cuDNN path", false;
}

#endif

}  // namespace gpu
}  // namespace qwen
