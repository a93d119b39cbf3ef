"""Workers for test_torch.py (a module of its own: it imports torch)."""
import torch  # before tpcomm: a libtpcomm with NCCL linked in must not load its NCCL first

import tpcomm
import tpcomm.torch as tt
from _harness import _wrap, rank_input


def wrap(target, rank, args, q):
    """run_ranks(wrap=...) for torch workers: a spawned process imports this module, so torch,
    first."""
    _wrap(target, rank, args, q)

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def torch_cpu_worker(rank, nranks, raw_id, q=None):
    """Every torch op on CPU tensors (host ranks); returns {name: float64 list or error text}."""
    comm = tt.Communicator(nranks, tpcomm.UniqueId(raw_id), rank, device=-1, timeout_ms=20000)
    out = {}
    for dname, dt in DTYPES.items():
        for op in ("sum", "max", "min"):
            x = torch.from_numpy(rank_input(rank, 1001)).to(dt)
            comm.all_reduce(x, op=op)
            out["all_reduce_%s_%s" % (dname, op)] = x.double().tolist()
        x = torch.from_numpy(rank_input(rank, 64)).to(dt)
        y = comm.all_reduce(x, inplace=False)
        out["all_reduce_out_%s" % dname] = (y.double().tolist(), x.double().tolist())
        x = torch.from_numpy(rank_input(rank, 6 * nranks)).to(dt).reshape(nranks * 2, 3)
        out["reduce_scatter_%s" % dname] = comm.reduce_scatter(x, op="max").double().tolist()
        x = torch.from_numpy(rank_input(rank, 10)).to(dt).reshape(2, 5)
        out["all_gather_%s" % dname] = comm.all_gather(x).double().tolist()
    # torch.compile(fullgraph=True): the ops trace without a graph break (aot_eager: no C++
    # compiler needed for the graph itself; fake tensors go through the Meta kernels).
    def step(x, r):
        y = x * 2
        comm.all_reduce(y)
        z = comm.all_reduce(y + 1, inplace=False)
        return z - r

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    x = torch.from_numpy(rank_input(rank, 32))
    out["compiled"] = compiled(x, torch.ones(32)).double().tolist()
    out["eager"] = step(x, torch.ones(32)).double().tolist()
    # Errors carry tpcomm's message.
    try:
        comm.all_reduce(torch.zeros(4, dtype=torch.int32))
        out["int32"] = "no error"
    except RuntimeError as e:
        out["int32"] = str(e)
    try:
        comm.all_reduce(torch.zeros(8)[::2])
        out["strided"] = "no error"
    except RuntimeError as e:
        out["strided"] = str(e)
    comm.destroy()
    try:
        comm.all_reduce(torch.zeros(4))
        out["destroyed"] = "no error"
    except RuntimeError as e:
        out["destroyed"] = str(e)
    return out


def vllm_adapter_worker(rank, nranks, port):
    """TpcommCustomAllreduce with a gloo group on CPU tensors, the way vLLM would call it."""
    import torch.distributed as dist
    from tpcomm.torch.vllm import TpcommCustomAllreduce
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=nranks)
    try:
        ca = TpcommCustomAllreduce(group=dist.group.WORLD, device=torch.device("cpu"), max_size=4096)
        x = torch.from_numpy(rank_input(rank, 100)).to(torch.bfloat16)
        flags = [ca.should_custom_ar(x), ca.should_custom_ar(torch.zeros(2048)),  # 8 KB > max_size
                 ca.should_custom_ar(torch.zeros(8, dtype=torch.int32)), ca.should_custom_ar(torch.zeros(8)[::2])]
        with ca.capture():
            y = ca.custom_all_reduce(x)
        out = torch.empty_like(x)
        z = ca.all_reduce(x, out=out)
        ca.close()
        return flags, y.double().tolist(), x.double().tolist(), z is out and torch.equal(z, y), ca.custom_all_reduce(x)
    finally:
        dist.destroy_process_group()


def torch_compression_worker(rank, nranks, raw_id, q=None):
    """The torch op's per-call compression on a communicator made without it (forced onto
    staged_host+fp8, which host ranks never pick on cost): [(algorithm, result)] for None, "fp8",
    "none", then "fp8" out of place and "fp8" under torch.compile; and the error a bad value gives."""
    comm = tt.Communicator(nranks, tpcomm.UniqueId(raw_id), rank, device=-1, timeout_ms=20000,
                           algo="staged_host+fp8")
    runs = []
    for c in (None, "fp8", "none"):
        x = torch.from_numpy(rank_input(rank, 1000)).float()
        comm.all_reduce(x, compression=c)
        runs.append((comm.last_algorithm, x.double().tolist()))
    x = torch.from_numpy(rank_input(rank, 1000)).float()
    y = comm.all_reduce(x, inplace=False, compression="fp8")
    runs.append((comm.last_algorithm, y.double().tolist()))
    compiled = torch.compile(lambda t: comm.all_reduce(t * 1, inplace=False, compression="fp8"), fullgraph=True,
                             backend="aot_eager")
    y = compiled(torch.from_numpy(rank_input(rank, 1000)).float())
    runs.append((comm.last_algorithm, y.double().tolist()))
    try:
        comm.all_reduce(torch.zeros(10), compression="fp4")
        bad = "no error"
    except RuntimeError as e:
        bad = str(e)
    comm.destroy()
    return runs, bad
