// engine_allreduce: calls the NCCL API the way the two engine shapes do, for the GPU checks of
// libtpcomm_nccl.so (run_gpu_checks.sh runs it with and without LD_PRELOAD and compares).
//   --initall   one process drives every GPU: ncclCommInitAll, then each all-reduce is a
//               ncclGroupStart / ncclAllReduce per device / ncclGroupEnd from one thread,
//               in place (llama.cpp's ggml-cuda)
//   --mpi       one process per GPU under mpirun: rank 0 makes the unique id, MPI spreads it,
//               ncclCommInitRank; in place and out of place (PyTorch's ProcessGroupNCCL)
// Sizes 4 B .. 16 MB (x4), f32/f16/bf16, sum/max/min, eager then CUDA graph. Inputs are small
// integers, so every result is exact; outputs are poisoned first and every element is checked
// against the host's answer. One line per case: "case ... fnv=<hash of the output bytes>";
// exit 1 on any wrong element, 77 with fewer than 2 GPUs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#ifdef TPCOMM_SHIM_TEST_MPI
#include <mpi.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

#define CHECK_CUDA(x)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)
#define CHECK_NCCL(x)                                                                         \
  do {                                                                                        \
    ncclResult_t r_ = (x);                                                                    \
    if (r_ != ncclSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

struct Type {
  ncclDataType_t nccl;
  const char* name;
  size_t size;
};
const Type kTypes[] = {{ncclFloat32, "f32", 4}, {ncclFloat16, "f16", 2}, {ncclBfloat16, "bf16", 2}};
const ncclRedOp_t kOps[] = {ncclSum, ncclMax, ncclMin};
const char* opName(ncclRedOp_t o) { return o == ncclSum ? "sum" : o == ncclMax ? "max" : "min"; }

float inputValue(int rank, size_t i) { return static_cast<float>(static_cast<int>((i * 7 + rank * 3) % 13) - 6); }

void encode(const Type& t, const std::vector<float>& v, std::vector<char>* out) {
  out->resize(v.size() * t.size);
  for (size_t i = 0; i < v.size(); ++i) {
    if (t.nccl == ncclFloat32)
      std::memcpy(out->data() + 4 * i, &v[i], 4);
    else if (t.nccl == ncclFloat16) {
      __half h = __float2half(v[i]);
      std::memcpy(out->data() + 2 * i, &h, 2);
    } else {
      __nv_bfloat16 b = __float2bfloat16(v[i]);
      std::memcpy(out->data() + 2 * i, &b, 2);
    }
  }
}

uint64_t fnv(const std::vector<char>& b) {
  uint64_t h = 1469598103934665603ull;
  for (char c : b) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

// One rank's buffers on one device.
struct RankBuffers {
  int device = 0, rank = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
};

struct Case {
  Type t;
  ncclRedOp_t op;
  size_t bytes;
  bool inPlace, graph;
};

// Runs one case on the local ranks (all of them from this thread). Returns wrong elements.
long runCase(std::vector<RankBuffers>& local, int nRanks, const Case& c, bool group) {
  size_t count = c.bytes / c.t.size;
  std::vector<float> expect(count);
  for (size_t i = 0; i < count; ++i) {
    float acc = inputValue(0, i);
    for (int r = 1; r < nRanks; ++r) {
      float v = inputValue(r, i);
      acc = c.op == ncclSum ? acc + v : c.op == ncclMax ? std::fmax(acc, v) : std::fmin(acc, v);
    }
    expect[i] = acc;
  }
  std::vector<char> want;
  encode(c.t, expect, &want);
  for (RankBuffers& b : local) {
    CHECK_CUDA(cudaSetDevice(b.device));
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = inputValue(b.rank, i);
    std::vector<char> bytes;
    encode(c.t, in, &bytes);
    CHECK_CUDA(cudaMemcpy(b.send, bytes.data(), c.bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(b.recv, 0xff, c.bytes));  // poison (NaN in every type)
    // The copy and the memset ran on the legacy stream, which does not order against b.stream
    // (non-blocking): without this a fast all-reduce could write recv before the poison lands.
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  auto issue = [&] {
    if (group) CHECK_NCCL(ncclGroupStart());
    for (RankBuffers& b : local) {
      CHECK_CUDA(cudaSetDevice(b.device));
      void* dst = c.inPlace ? b.send : b.recv;
      CHECK_NCCL(ncclAllReduce(b.send, dst, count, c.t.nccl, c.op, b.comm, b.stream));
    }
    if (group) CHECK_NCCL(ncclGroupEnd());
  };
  if (!c.graph) {
    issue();
  } else {
    std::vector<cudaGraph_t> graphs(local.size());
    std::vector<cudaGraphExec_t> execs(local.size());
    for (RankBuffers& b : local) {
      CHECK_CUDA(cudaSetDevice(b.device));
      CHECK_CUDA(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeGlobal));
    }
    issue();
    // End every capture before instantiating: a global-mode capture still open on another
    // stream forbids cudaGraphInstantiate (llama.cpp captures one device at a time; a grouped
    // call across devices needs all streams captured together).
    for (size_t i = 0; i < local.size(); ++i) {
      CHECK_CUDA(cudaSetDevice(local[i].device));
      CHECK_CUDA(cudaStreamEndCapture(local[i].stream, &graphs[i]));
    }
    for (size_t i = 0; i < local.size(); ++i) {
      CHECK_CUDA(cudaSetDevice(local[i].device));
      CHECK_CUDA(cudaGraphInstantiate(&execs[i], graphs[i], 0));
    }
    for (size_t i = 0; i < local.size(); ++i) {
      CHECK_CUDA(cudaSetDevice(local[i].device));
      CHECK_CUDA(cudaGraphLaunch(execs[i], local[i].stream));
    }
    for (size_t i = 0; i < local.size(); ++i) {
      CHECK_CUDA(cudaSetDevice(local[i].device));
      CHECK_CUDA(cudaStreamSynchronize(local[i].stream));
      cudaGraphExecDestroy(execs[i]);
      cudaGraphDestroy(graphs[i]);
    }
  }
  long wrong = 0;
  for (RankBuffers& b : local) {
    CHECK_CUDA(cudaSetDevice(b.device));
    CHECK_CUDA(cudaStreamSynchronize(b.stream));
    std::vector<char> got(c.bytes);
    CHECK_CUDA(cudaMemcpy(got.data(), c.inPlace ? b.send : b.recv, c.bytes, cudaMemcpyDeviceToHost));
    long w = 0;
    for (size_t i = 0; i < count; ++i)
      if (std::memcmp(got.data() + i * c.t.size, want.data() + i * c.t.size, c.t.size) != 0) ++w;
    std::printf("case rank=%d %s %s %zu %s %s fnv=%016llx wrong=%ld\n", b.rank, c.t.name, opName(c.op), c.bytes,
                c.inPlace ? "inplace" : "outofplace", c.graph ? "graph" : "eager",
                static_cast<unsigned long long>(fnv(got)), w);
    wrong += w;
  }
  return wrong;
}

std::vector<Case> cases(bool outOfPlace) {
  std::vector<Case> out;
  for (bool graph : {false, true})
    for (const Type& t : kTypes)
      for (ncclRedOp_t op : kOps)
        for (size_t bytes = 4; bytes <= (16u << 20); bytes *= 4) {  // 4 B .. 16 MB: every routing band
          if (bytes < t.size) continue;
          out.push_back({t, op, bytes, true, graph});
          if (outOfPlace) out.push_back({t, op, bytes, false, graph});
        }
  return out;
}

void allocate(RankBuffers& b) {
  CHECK_CUDA(cudaSetDevice(b.device));
  CHECK_CUDA(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
  CHECK_CUDA(cudaMalloc(&b.send, 16u << 20));
  CHECK_CUDA(cudaMalloc(&b.recv, 16u << 20));
}

void release(RankBuffers& b) {
  cudaSetDevice(b.device);
  cudaStreamDestroy(b.stream);
  cudaFree(b.send);
  cudaFree(b.recv);
}

int initAllMode() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    std::printf("SKIP: needs 2 GPUs, found %d\n", n);
    return 77;
  }
  std::vector<RankBuffers> local(n);
  std::vector<ncclComm_t> comms(n);
  std::vector<int> devs(n);
  for (int i = 0; i < n; ++i) devs[i] = i;
  CHECK_NCCL(ncclCommInitAll(comms.data(), n, devs.data()));
  for (int i = 0; i < n; ++i) {
    local[i].device = i;
    local[i].rank = i;
    local[i].comm = comms[i];
    allocate(local[i]);
  }
  long wrong = 0;
  for (const Case& c : cases(false)) wrong += runCase(local, n, c, true);
  for (RankBuffers& b : local) {
    release(b);
    CHECK_NCCL(ncclCommDestroy(b.comm));
  }
  std::printf("wrong total %ld\n", wrong);
  return wrong == 0 ? 0 : 1;
}

int mpiMode(int argc, char** argv) {
#ifdef TPCOMM_SHIM_TEST_MPI
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int haveGpus = cudaGetDeviceCount(&n) == cudaSuccess && n >= 2 && size >= 2 ? 1 : 0, all = 0;
  MPI_Allreduce(&haveGpus, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (rank == 0) std::printf("SKIP: needs 2 ranks with a GPU each\n");
    MPI_Finalize();
    return 77;
  }
  ncclUniqueId id;
  if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  std::vector<RankBuffers> local(1);
  local[0].device = rank % n;
  local[0].rank = rank;
  CHECK_CUDA(cudaSetDevice(local[0].device));
  CHECK_NCCL(ncclCommInitRank(&local[0].comm, size, id, rank));
  allocate(local[0]);
  long wrong = 0;
  for (const Case& c : cases(true)) wrong += runCase(local, size, c, false);
  release(local[0]);
  CHECK_NCCL(ncclCommFinalize(local[0].comm));
  CHECK_NCCL(ncclCommDestroy(local[0].comm));
  long total = 0;
  MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("wrong total %ld\n", total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
#else
  (void)argc;
  (void)argv;
  std::printf("SKIP: built without MPI\n");
  return 77;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc >= 2 && std::strcmp(argv[1], "--initall") == 0) return initAllMode();
  if (argc >= 2 && std::strcmp(argv[1], "--mpi") == 0) return mpiMode(argc, argv);
  std::fprintf(stderr, "usage: engine_allreduce --initall | --mpi (under mpirun)\n");
  return 2;
}
