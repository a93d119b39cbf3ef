"""torch_preload_check.py: PyTorch's own torch.distributed all_reduce under libtpcomm_nccl.so.

Run by run_torch_preload.sh under torchrun --nproc_per_node=2, once without and once with
LD_PRELOAD (the same script, the same inputs):
  --mode check --out F   sizes 4 B .. 256 MB (x4), f32/f16/bf16, sum (every size) and max/min
                         (up to 4 MB), eager and CUDA graph; small-integer inputs so every result
                         is exact; each output is checked element by element against the exact
                         answer, and rank 0 writes one line per case with a sha1 of the output
                         bytes (run_torch_preload.sh compares the two runs' files bitwise).
  --mode time --out F    bf16 in-place sum, 8 KB .. 2 MB (x2), a CUDA graph of --calls all-reduces
                         replayed --reps times: median microseconds per all-reduce (CUDA events).
Exit status 1 on any wrong element.
"""
import argparse
import hashlib
import os
import statistics
import sys

import torch
import torch.distributed as dist

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def inputs(rank, n, dtype, device):
    i = torch.arange(n, dtype=torch.int64, device=device)
    return (((i * 7 + rank * 3) % 13) - 6).to(dtype)


def expected(world, n, dtype, op, device):
    parts = torch.stack([inputs(r, n, torch.float64, device) for r in range(world)])
    ref = parts.sum(0) if op == "sum" else parts.max(0).values if op == "max" else parts.min(0).values
    return ref.to(dtype)


def run_check(out_path):
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", torch.cuda.current_device())
    lines, wrong_total = [], 0
    for mode in ("eager", "graph"):
        for dname, dtype in DTYPES.items():
            esize = torch.tensor([], dtype=dtype).element_size()
            for op in OPS:
                nbytes = 4
                while nbytes <= (256 << 20):
                    if op != "sum" and nbytes > (4 << 20):
                        break
                    n = max(1, nbytes // esize)
                    x = inputs(rank, n, dtype, dev)
                    if mode == "eager":
                        dist.all_reduce(x, op=OPS[op])
                    else:
                        buf = torch.full((n,), float("nan"), dtype=dtype, device=dev)
                        src = inputs(rank, n, dtype, dev)
                        g = torch.cuda.CUDAGraph()
                        s = torch.cuda.Stream()
                        s.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(s):  # warm-up outside the capture (also sets tpcomm up)
                            buf.copy_(src)
                            dist.all_reduce(buf, op=OPS[op])
                        torch.cuda.current_stream().wait_stream(s)
                        with torch.cuda.graph(g):
                            buf.copy_(src)
                            dist.all_reduce(buf, op=OPS[op])
                        buf.fill_(float("nan"))  # poison: only the replay may write the answer
                        g.replay()
                        x = buf
                    torch.cuda.synchronize()
                    want = expected(world, n, dtype, op, dev)
                    wrong = int((x.view(torch.int16 if esize == 2 else torch.int32) !=
                                 want.view(torch.int16 if esize == 2 else torch.int32)).sum().item())
                    wrong_total += wrong
                    sha = hashlib.sha1(x.view(torch.uint8).cpu().numpy().tobytes()).hexdigest()
                    lines.append(f"case rank={rank} {dname} {op} {nbytes} {mode} sha1={sha} wrong={wrong}")
                    nbytes *= 4
    gathered = [None] * world
    dist.all_gather_object(gathered, lines)
    if rank == 0:
        with open(out_path, "w") as f:
            for part in gathered:
                f.write("\n".join(part) + "\n")
    total = torch.tensor([wrong_total], device=dev)
    dist.all_reduce(total)
    return int(total.item())


def run_time(out_path, calls, reps):
    rank = dist.get_rank()
    dev = torch.device("cuda", torch.cuda.current_device())
    rows = []
    nbytes = 8 << 10
    while nbytes <= (2 << 20):
        x = torch.ones(nbytes // 2, dtype=torch.bfloat16, device=dev)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                dist.all_reduce(x)
        for _ in range(3):
            g.replay()
        samples = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            dist.barrier()
            torch.cuda.synchronize()
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) * 1000.0 / calls)
        rows.append((nbytes, statistics.median(samples)))
        nbytes *= 2
    if rank == 0:
        with open(out_path, "w") as f:
            for nbytes, us in rows:
                f.write(f"time {nbytes} {us:.2f}\n")
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["check", "time"], required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--reps", type=int, default=50)
    a = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    try:
        bad = run_check(a.out) if a.mode == "check" else run_time(a.out, a.calls, a.reps)
    finally:
        dist.destroy_process_group()
    if bad:
        print(f"rank {local}: {bad} wrong elements", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
