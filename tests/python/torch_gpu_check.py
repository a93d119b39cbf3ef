"""GPU check of tpcomm.torch under torchrun (NOT RUN YET: written without a GPU machine).

    torchrun --nproc_per_node=2 tests/python/torch_gpu_check.py [--max-bytes 256M] [--replays 1000]

Per rank, on its own GPU, against dist.all_reduce (NCCL) on the same inputs:
  1. eager: f32/f16/bf16, 8 B .. max-bytes (x4 steps), in place and out of place: bitwise equal
     (2 ranks: one addition per element, exact in both libraries' fp32 accumulation);
  2. a CUDA graph of tpcomm's in-place all-reduce, replayed `replays` times with new inputs
     copied in before each replay, every replay checked against NCCL;
  3. torch.compile(fullgraph=True) of a step that calls the op (no graph break), checked too.
Prints "N passed, M failed"; exit 1 on any failure. With one rank (--nproc_per_node=1) it runs
the one-rank cases (the all-reduce is a copy)."""
import argparse
import os
import sys

import torch
import torch.distributed as dist

import tpcomm.torch as tt

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1].upper(), 1)
    return int(s[:-1] if mult > 1 else s) * mult


def inputs(rank, n, dtype, seed, device):
    g = torch.Generator(device="cpu").manual_seed(seed * 1000 + rank)
    return torch.randn(n, generator=g).to(dtype).to(device)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-bytes", default="256M")
    ap.add_argument("--replays", type=int, default=1000)
    a = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local)
    comm = tt.Communicator.from_process_group()
    passed = failed = 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print("rank %d FAIL %s %s" % (rank, name, detail), flush=True)

    # 1. eager, every size and dtype, in and out of place.
    max_bytes = parse_size(a.max_bytes)
    for dtype in DTYPES:
        size = 8
        while size <= max_bytes:
            n = max(1, size // torch.tensor([], dtype=dtype).element_size())
            x = inputs(rank, n, dtype, size, dev)
            ref = x.clone()
            dist.all_reduce(ref)
            y = comm.all_reduce(x, inplace=False)
            comm.all_reduce(x)
            torch.cuda.synchronize()
            check("eager %s %d B out-of-place (%s)" % (dtype, size, comm.last_algorithm), torch.equal(y, ref))
            check("eager %s %d B in-place" % (dtype, size), torch.equal(x, ref))
            size *= 4

    # 2. CUDA graph replays with changing inputs.
    n = 4096
    static = torch.zeros(n, dtype=torch.bfloat16, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        comm.all_reduce(static)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        comm.all_reduce(static)
    bad = 0
    for i in range(a.replays):
        x = inputs(rank, n, torch.bfloat16, 10_000 + i, dev)
        ref = x.clone()
        dist.all_reduce(ref)
        static.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        bad += 0 if torch.equal(static, ref) else 1
    check("graph: %d replays" % a.replays, bad == 0, "%d replays differ" % bad)

    # 3. torch.compile(fullgraph=True).
    def step(h, w):
        y = h @ w
        comm.all_reduce(y)
        return torch.nn.functional.silu(y)

    compiled = torch.compile(step, fullgraph=True)
    h = inputs(rank, 64 * 128, torch.bfloat16, 7, dev).reshape(64, 128)
    w = inputs(0, 128 * 256, torch.bfloat16, 8, dev).reshape(128, 256)
    y_ref = h @ w
    dist.all_reduce(y_ref)
    y_ref = torch.nn.functional.silu(y_ref)
    y = compiled(h, w)
    torch.cuda.synchronize()
    check("torch.compile fullgraph", torch.allclose(y.float(), y_ref.float(), rtol=2e-2, atol=2e-2))

    comm.destroy()
    totals = torch.tensor([passed, failed], device=dev)
    dist.all_reduce(totals)
    if rank == 0:
        print("%d passed, %d failed" % (totals[0].item(), totals[1].item()), flush=True)
    dist.destroy_process_group()
    return 1 if totals[1].item() else 0


if __name__ == "__main__":
    sys.exit(main())
