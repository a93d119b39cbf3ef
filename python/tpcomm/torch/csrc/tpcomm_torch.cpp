// tpcomm's torch ops, registered with the dispatcher (TORCH_LIBRARY) so that a call costs what a
// native op costs, graph capture sees a plain kernel launch on torch's current stream, and
// torch.compile(fullgraph=True) traces them (Meta kernels give shapes, no graph break).
//
// Built by tpcomm/torch/_build.py against the installed torch at first import. It links nothing
// of tpcomm: Python hands over the C API's function addresses (libtpcomm, already loaded by the
// ctypes layer) through tpcomm::_set_api, so the extension needs neither tpcomm's headers nor a
// link path. The prototypes below are those of include/tpcomm/tpcomm_c.h (tpcommAllReduceCompressed:
// C API version 3).
#include <torch/library.h>
#include <ATen/ATen.h>

#ifdef TPCOMM_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstdint>
#include <string>
#include <vector>

namespace {

using AllReduceFn = int (*)(const void*, void*, size_t, int, int, void*, void*);
using AllReduceCompressedFn = int (*)(const void*, void*, size_t, int, int, const char*, void*, void*);
using ReduceScatterFn = int (*)(const void*, void*, size_t, int, int, void*, void*);
using AllGatherFn = int (*)(const void*, void*, size_t, int, void*, void*);
using RmsNormFn = int (*)(const void*, void*, const void*, float, void*, size_t, size_t, int, void*, void*);
using LastErrorFn = const char* (*)(void*);

struct Api {
  AllReduceFn allReduce = nullptr;
  ReduceScatterFn reduceScatter = nullptr;
  AllGatherFn allGather = nullptr;
  RmsNormFn rmsNorm = nullptr;
  LastErrorFn lastError = nullptr;
  AllReduceCompressedFn allReduceCompressed = nullptr;
};
Api gApi;

void setApi(const std::vector<int64_t>& addrs) {
  TORCH_CHECK(addrs.size() == 6, "tpcomm::_set_api: expected 6 function addresses, got ", addrs.size());
  gApi.allReduce = reinterpret_cast<AllReduceFn>(addrs[0]);
  gApi.reduceScatter = reinterpret_cast<ReduceScatterFn>(addrs[1]);
  gApi.allGather = reinterpret_cast<AllGatherFn>(addrs[2]);
  gApi.rmsNorm = reinterpret_cast<RmsNormFn>(addrs[3]);
  gApi.lastError = reinterpret_cast<LastErrorFn>(addrs[4]);
  gApi.allReduceCompressed = reinterpret_cast<AllReduceCompressedFn>(addrs[5]);
}

int dtypeCode(const at::Tensor& t, const char* fn, const char* arg) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return 0;
    case at::kHalf:
      return 1;
    case at::kBFloat16:
      return 2;
    default:
      TORCH_CHECK(false, "tpcomm.", fn, ": ", arg, " has dtype ", t.scalar_type(),
                  "; tpcomm supports float32, float16 and bfloat16");
  }
  return -1;
}

void checkTensor(const at::Tensor& t, const char* fn, const char* arg) {
  TORCH_CHECK(t.is_contiguous(), "tpcomm.", fn, ": ", arg, " is not contiguous");
  TORCH_CHECK(t.is_cpu() || t.is_cuda(), "tpcomm.", fn, ": ", arg, " is on ", t.device(), "; expected CPU or CUDA");
}

// Torch's current stream on the tensor's device; null for CPU tensors (host ranks).
void* streamFor(const at::Tensor& t) {
#ifdef TPCOMM_TORCH_CUDA
  if (t.is_cuda()) return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
#endif
  TORCH_CHECK(!t.is_cuda(), "tpcomm: this build of the torch ops has no CUDA (torch or the CUDA toolkit lacked it)");
  return nullptr;
}

void check(int result, const char* fn) {
  if (result != 0) TORCH_CHECK(false, "tpcomm.", fn, ": ", gApi.lastError ? gApi.lastError(nullptr) : "(no message)",
                               " [tpcomm status ", result, "]");
}

void* commPtr(int64_t comm, const char* fn) {
  TORCH_CHECK(gApi.allReduce, "tpcomm.", fn, ": the ops were loaded without tpcomm::_set_api (import tpcomm.torch)");
  TORCH_CHECK(comm != 0, "tpcomm.", fn, ": the communicator was destroyed");
  return reinterpret_cast<void*>(comm);
}

// compression: none (the communicator's setting), else "none", "fp8" or "int8" for this call.
int allReduceCall(const at::Tensor& x, void* out, int64_t comm, int64_t op,
                  const std::optional<c10::string_view>& compression) {
  void* c = commPtr(comm, "all_reduce");
  checkTensor(x, "all_reduce", "tensor");
  const int dtype = dtypeCode(x, "all_reduce", "tensor");
  if (!compression) return gApi.allReduce(x.data_ptr(), out, x.numel(), dtype, static_cast<int>(op), c, streamFor(x));
  const std::string name(compression->data(), compression->size());
  return gApi.allReduceCompressed(x.data_ptr(), out, x.numel(), dtype, static_cast<int>(op), name.c_str(), c,
                                  streamFor(x));
}

void allReduceInPlace(at::Tensor x, int64_t comm, int64_t op, std::optional<c10::string_view> compression) {
  check(allReduceCall(x, x.data_ptr(), comm, op, compression), "all_reduce");
}

at::Tensor allReduceOut(const at::Tensor& x, int64_t comm, int64_t op, std::optional<c10::string_view> compression) {
  at::Tensor out = at::empty_like(x);
  check(allReduceCall(x, out.data_ptr(), comm, op, compression), "all_reduce");
  return out;
}

at::Tensor reduceScatter(const at::Tensor& x, int64_t comm, int64_t op, int64_t nranks) {
  void* c = commPtr(comm, "reduce_scatter");
  checkTensor(x, "reduce_scatter", "tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(0) % nranks == 0, "tpcomm.reduce_scatter: tensor's first dimension (",
              x.dim() ? x.size(0) : 0, ") is not a multiple of the ranks (", nranks, ")");
  std::vector<int64_t> shape = x.sizes().vec();
  shape[0] /= nranks;
  at::Tensor out = at::empty(shape, x.options());
  check(gApi.reduceScatter(x.data_ptr(), out.data_ptr(), out.numel(), dtypeCode(x, "reduce_scatter", "tensor"),
                           static_cast<int>(op), c, streamFor(x)),
        "reduce_scatter");
  return out;
}

at::Tensor allGather(const at::Tensor& x, int64_t comm, int64_t nranks) {
  void* c = commPtr(comm, "all_gather");
  checkTensor(x, "all_gather", "tensor");
  std::vector<int64_t> shape = x.sizes().vec();
  if (shape.empty()) shape.push_back(1);
  shape[0] *= nranks;
  at::Tensor out = at::empty(shape, x.options());
  check(gApi.allGather(x.data_ptr(), out.data_ptr(), x.numel(), dtypeCode(x, "all_gather", "tensor"), c, streamFor(x)),
        "all_gather");
  return out;
}

at::Tensor rmsNorm(const at::Tensor& x, at::Tensor residual, const at::Tensor& weight, double eps, int64_t comm) {
  const char* fn = "all_reduce_residual_rmsnorm";
  void* c = commPtr(comm, fn);
  checkTensor(x, fn, "x");
  checkTensor(residual, fn, "residual");
  checkTensor(weight, fn, "weight");
  int dt = dtypeCode(x, fn, "x");
  TORCH_CHECK(residual.scalar_type() == x.scalar_type() && weight.scalar_type() == x.scalar_type(), "tpcomm.", fn,
              ": x, residual and weight must share a dtype");
  int64_t hidden = weight.numel();
  TORCH_CHECK(hidden > 0 && x.numel() % hidden == 0, "tpcomm.", fn, ": x has ", x.numel(),
              " elements, not a multiple of weight's ", hidden);
  TORCH_CHECK(residual.numel() == x.numel(), "tpcomm.", fn, ": residual has ", residual.numel(), " elements, x has ",
              x.numel());
  at::Tensor out = at::empty_like(x);
  check(gApi.rmsNorm(x.data_ptr(), residual.data_ptr(), weight.data_ptr(), static_cast<float>(eps), out.data_ptr(),
                     x.numel() / hidden, hidden, dt, c, streamFor(x)),
        fn);
  return out;
}

// Meta (fake-tensor) kernels: shapes only, for torch.compile and torch.export.
void allReduceInPlaceMeta(at::Tensor, int64_t, int64_t, std::optional<c10::string_view>) {}
at::Tensor allReduceOutMeta(const at::Tensor& x, int64_t, int64_t, std::optional<c10::string_view>) {
  return at::empty_like(x);
}
at::Tensor reduceScatterMeta(const at::Tensor& x, int64_t, int64_t, int64_t nranks) {
  std::vector<int64_t> shape = x.sizes().vec();
  TORCH_CHECK(!shape.empty() && shape[0] % nranks == 0, "tpcomm.reduce_scatter: first dimension not a multiple of ranks");
  shape[0] /= nranks;
  return at::empty(shape, x.options());
}
at::Tensor allGatherMeta(const at::Tensor& x, int64_t, int64_t nranks) {
  std::vector<int64_t> shape = x.sizes().vec();
  if (shape.empty()) shape.push_back(1);
  shape[0] *= nranks;
  return at::empty(shape, x.options());
}
at::Tensor rmsNormMeta(const at::Tensor& x, at::Tensor, const at::Tensor&, double, int64_t) { return at::empty_like(x); }

}  // namespace

TORCH_LIBRARY(tpcomm, m) {
  m.def("_set_api(int[] addrs) -> ()", &setApi);
  m.def("all_reduce_(Tensor(a!) tensor, int comm, int op, str? compression=None) -> ()");
  m.def("all_reduce(Tensor tensor, int comm, int op, str? compression=None) -> Tensor");
  m.def("reduce_scatter(Tensor tensor, int comm, int op, int nranks) -> Tensor");
  m.def("all_gather(Tensor tensor, int comm, int nranks) -> Tensor");
  m.def("all_reduce_residual_rmsnorm(Tensor x, Tensor(a!) residual, Tensor weight, float eps, int comm) -> Tensor");
}

TORCH_LIBRARY_IMPL(tpcomm, CompositeExplicitAutograd, m) {
  m.impl("all_reduce_", &allReduceInPlace);
  m.impl("all_reduce", &allReduceOut);
  m.impl("reduce_scatter", &reduceScatter);
  m.impl("all_gather", &allGather);
  m.impl("all_reduce_residual_rmsnorm", &rmsNorm);
}

TORCH_LIBRARY_IMPL(tpcomm, Meta, m) {
  m.impl("all_reduce_", &allReduceInPlaceMeta);
  m.impl("all_reduce", &allReduceOutMeta);
  m.impl("reduce_scatter", &reduceScatterMeta);
  m.impl("all_gather", &allGatherMeta);
  m.impl("all_reduce_residual_rmsnorm", &rmsNormMeta);
}
