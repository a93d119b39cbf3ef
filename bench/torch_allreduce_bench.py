"""Per-call latency of tpcomm.torch's all-reduce against the all-reduces a PyTorch engine already has.

    torchrun --nproc_per_node=N bench/torch_allreduce_bench.py [--max-bytes 256M] [--dtype bf16]

Backends, each through its own public API (nothing of ours wrapped around a baseline):
  nccl        dist.all_reduce(t) on an NCCL process group
  tpcomm      tpcomm.torch.Communicator.all_reduce(t) (the method a user calls)
  tpcomm_op   torch.ops.tpcomm.all_reduce_(t, handle, 0) (the registered op, no Python wrapper)
  symm_1shot  torch.ops.symm_mem.one_shot_all_reduce(t, "sum", group) on a symmetric tensor
  symm_2shot  torch.ops.symm_mem.two_shot_all_reduce_(t, "sum", group) (in place)
Multicast stays off (TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NCCL_NVLS_ENABLE=0 are required).

Eager: per size, each backend runs `warmup` calls, then `iters` back-to-back calls on torch's
current stream between two CUDA events; per call = elapsed / iters (whichever of the host's
enqueue cost and the GPU's time is larger, as in an engine's eager prefill). The backends run in
A..D, D..A order over `reps` repetitions and the median is reported. Graph: `graph_calls` calls
captured in one torch.cuda.CUDAGraph, replayed `replays` times between events. Cold: the very
first call of each backend in the process (wall clock, synchronised), reported apart.
Rank 0 prints the tables; --results FILE also writes them there with commit, date and command.
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1].upper(), 1)
    return int(s[:-1] if mult > 1 else s) * mult


def human(b):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div and b % div == 0:
            return "%d%s" % (b // div, unit)
    return "%d" % b


class Backend:
    """name, setup(numel) -> call() closure or raises (the reason is printed as n/a)."""

    def __init__(self, name, make):
        self.name, self.make, self.why = name, make, None


def make_backends(dtype, dev, world):
    import tpcomm.torch as tt

    comm = tt.Communicator.from_process_group()
    handle = comm._h
    group_name = dist.group.WORLD.group_name
    backends = []

    def nccl(numel):
        t = torch.ones(numel, dtype=dtype, device=dev)
        return lambda: dist.all_reduce(t)

    def tpcomm_method(numel):
        t = torch.ones(numel, dtype=dtype, device=dev)
        return lambda: comm.all_reduce(t)

    def tpcomm_op(numel):
        t = torch.ones(numel, dtype=dtype, device=dev)
        op = torch.ops.tpcomm.all_reduce_
        return lambda: op(t, handle, 0)

    symm = {}

    def symm_tensor(numel):
        import torch.distributed._symmetric_memory as sm

        if "buf" not in symm or symm["buf"].numel() < numel:
            symm.pop("buf", None)
            buf = sm.empty(numel, dtype=dtype, device=dev)
            sm.rendezvous(buf, group_name)
            symm["buf"] = buf
        return symm["buf"][:numel]

    def symm_1shot(numel):
        t = symm_tensor(numel)
        op = torch.ops.symm_mem.one_shot_all_reduce
        return lambda: op(t, "sum", group_name)

    def symm_2shot(numel):
        t = symm_tensor(numel)
        op = torch.ops.symm_mem.two_shot_all_reduce_
        return lambda: op(t, "sum", group_name)

    for name, fn in (("nccl", nccl), ("tpcomm", tpcomm_method), ("tpcomm_op", tpcomm_op),
                     ("symm_1shot", symm_1shot), ("symm_2shot", symm_2shot)):
        backends.append(Backend(name, fn))
    return comm, backends


def time_eager(call, iters):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        call()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1000.0 / iters  # us per call


def time_graph(call, calls, replays):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call()  # warm-up outside capture (lazy set-up must not happen while capturing)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            call()
    g.replay()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        g.replay()
    stop.record()
    stop.synchronize()
    del g
    return start.elapsed_time(stop) * 1000.0 / (replays * calls)


def agree(ok):
    """True on every rank only if ok on every rank (a backend that fails on one rank is skipped
    everywhere, so no rank waits in a collective the others never join)."""
    t = torch.tensor([0 if ok else 1], device="cuda")
    dist.all_reduce(t)
    return t.item() == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-bytes", default="8")
    ap.add_argument("--max-bytes", default="256M")
    ap.add_argument("--step", type=int, default=4)
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--graph-calls", type=int, default=20)
    ap.add_argument("--backends", default="nccl,tpcomm,tpcomm_op,symm_1shot,symm_2shot")
    ap.add_argument("--results", default="")
    a = ap.parse_args()
    for var in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST"):
        if os.environ.get(var) != ("0" if var.startswith("NCCL") else "1"):
            sys.exit("%s must be set (multicast stays off): NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1" % var)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local)
    dtype = DTYPES[a.dtype]
    es = torch.tensor([], dtype=dtype).element_size()
    wanted = a.backends.split(",")
    comm, backends = make_backends(dtype, dev, world)
    backends = [b for b in backends if b.name in wanted]

    lines = []

    def out(s=""):
        if rank == 0:
            print(s, flush=True)
            lines.append(s)

    commit = os.environ.get("COMMIT", "")  # given by the caller: a copied tree's .git may be stale
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                    cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
        except OSError:
            commit = ""
    out("# commit %s" % (commit or "unknown"))
    out("# date %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    out("# command: torchrun --nproc_per_node=%d %s" % (world, " ".join(sys.argv)))
    out("# torch %s, NCCL %s, %d rank(s), %s, %s" % (torch.__version__, ".".join(map(str, torch.cuda.nccl.version())),
                                                 world, torch.cuda.get_device_name(dev), a.dtype))

    # Cold: each backend's first call in this process, 8 KB.
    cold = {}
    for b in backends:
        ok = True
        try:
            call = b.make(max(1, 8192 // es))
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            call()
            torch.cuda.synchronize()
            cold[b.name] = (time.perf_counter() - t0) * 1e6
        except Exception as e:  # a baseline missing from this torch build is reported, not fatal
            ok, b.why = False, "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:120] if str(e) else "")
        if not agree(ok) and b.why is None:
            b.why = "failed on another rank"
    live = [b for b in backends if b.why is None]
    for b in backends:
        if b.why:
            out("# %s: n/a (%s)" % (b.name, b.why))
    out("# cold first call (8 KB, wall clock incl. sync, us): " +
        ", ".join("%s %.0f" % (b.name, cold[b.name]) for b in live))

    sizes = []
    s = parse_size(a.min_bytes)
    while s <= parse_size(a.max_bytes):
        sizes.append(s)
        s *= a.step
    results = {}  # (mode, size, backend) -> us
    for mode in ("eager", "graph"):
        for size in sizes:
            numel = max(1, size // es)
            calls = {}
            for b in live:
                ok = True
                try:
                    calls[b.name] = b.make(numel)
                    calls[b.name]()
                except Exception as e:
                    ok = False
                    print("rank %d: %s %s %s: %s" % (rank, b.name, mode, human(size), e), flush=True)
                if not agree(ok):
                    calls.pop(b.name, None)
            iters = max(5, min(200, (1 << 30) // max(size, 1)))
            for name in calls:  # warm-up
                for _ in range(5):
                    calls[name]()
            torch.cuda.synchronize()
            samples = {name: [] for name in calls}
            order = list(calls)
            for rep in range(a.reps):
                for name in (order if rep % 2 == 0 else order[::-1]):
                    dist.barrier()
                    try:
                        if mode == "eager":
                            samples[name].append(time_eager(calls[name], iters))
                        else:
                            samples[name].append(time_graph(calls[name], a.graph_calls, max(3, iters // a.graph_calls)))
                    except Exception as e:
                        print("rank %d: %s %s %s: %s" % (rank, name, mode, human(size), e), flush=True)
                        torch.cuda.synchronize()
            for name, v in samples.items():
                if v:
                    results[(mode, size, name)] = statistics.median(v)
    names = [b.name for b in live]
    for mode in ("eager", "graph"):
        out()
        out("# %s: us per call (median of %d runs, order alternating)%s" % (
            mode, a.reps, "" if mode == "eager" else ", %d calls per graph" % a.graph_calls))
        head = "%10s" % "bytes" + "".join("%12s" % n for n in names)
        ratios = [n for n in names if n != "nccl"]
        if "nccl" in names:
            head += "".join("%14s" % ("%s/nccl" % n[:8]) for n in ratios)
        out(head)
        for size in sizes:
            row = "%10s" % human(size)
            for n in names:
                v = results.get((mode, size, n))
                row += "%12s" % ("%.2f" % v if v is not None else "-")
            if "nccl" in names:
                base = results.get((mode, size, "nccl"))
                for n in ratios:
                    v = results.get((mode, size, n))
                    row += "%14s" % ("%.3f" % (v / base) if v is not None and base else "-")
            out(row)
    out("# tpcomm's last algorithm: %s" % comm.last_algorithm)
    if rank == 0 and a.results:
        with open(a.results, "w") as f:
            f.write("\n".join(lines) + "\n")
    comm.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
