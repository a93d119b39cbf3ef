"""Runs host ranks as processes (multiprocessing, spawn) meeting through the socket bootstrap on
127.0.0.1, and the workers they run. Every wait is bounded: a rank that hangs is killed and the
test fails saying so."""
import multiprocessing as mp
import queue
import time
import traceback

import numpy as np

import tpcomm

SPAWN = mp.get_context("spawn")


def run_ranks(nranks, target, args=(), ranks=None, timeout_s=120.0, ids=None, wrap=None):
    """Starts target(rank, *args, q) for each rank in `ranks` (default all), returns {rank: result}
    where result is what the worker put on q. Fails (AssertionError) if a rank does not finish.
    `wrap` (default _wrap) is what each process starts in; the module that defines it is the first
    one the process imports (_torch_workers.wrap imports torch before tpcomm)."""
    ranks = list(range(nranks)) if ranks is None else list(ranks)
    q = SPAWN.Queue()
    procs = {r: SPAWN.Process(target=wrap or _wrap, args=(target, r, args, q), daemon=True) for r in ranks}
    for p in procs.values():
        p.start()
    results = {}
    deadline = time.monotonic() + timeout_s
    while len(results) < len(ranks) and time.monotonic() < deadline:
        try:
            r, value = q.get(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            results[r] = value
        except queue.Empty:
            if all(not p.is_alive() for p in procs.values()) and q.empty():
                break
    for p in procs.values():
        p.join(timeout=max(1.0, deadline - time.monotonic()))
    hung = [r for r, p in procs.items() if p.is_alive()]
    for r in hung:
        procs[r].kill()
        procs[r].join(5)
    assert not hung, "ranks %s did not finish within %.0f s (killed)" % (hung, timeout_s)
    missing = [r for r in ranks if r not in results]
    assert not missing, "ranks %s exited without a result (exit codes %s)" % (
        missing, {r: procs[r].exitcode for r in missing})
    return results


def _wrap(target, rank, args, q):
    try:
        q.put((rank, target(rank, *args)))
    except BaseException as e:  # report, never hang the parent
        q.put((rank, ("exception", type(e).__name__, str(e), traceback.format_exc())))


def raise_if_failed(results):
    for r, v in sorted(results.items()):
        if isinstance(v, tuple) and v and isinstance(v[0], str) and v[0] == "exception":
            raise AssertionError("rank %d raised %s: %s\n%s" % (r, v[1], v[2], v[3]))


# --- inputs whose exact reduction is known (nccl-tests' idea): small integers --------------------
def rank_input(rank, count, seed=0):
    i = np.arange(count, dtype=np.int64)
    return (((i * 7 + rank * 5 + seed * 3) % 17) - 8).astype(np.float32)


def to_dtype(values_f32, dtype):
    """float32 integer values -> the array tpcomm takes for dtype ('f32', 'f16', 'bf16' as uint16)."""
    if dtype == "f32":
        return values_f32.astype(np.float32)
    if dtype == "f16":
        return values_f32.astype(np.float16)
    return (values_f32.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # exact for small ints


def from_dtype(arr, dtype):
    if dtype == "bf16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr.astype(np.float32)


def reference(op, arrays):
    fn = {"sum": np.sum, "max": np.max, "min": np.min}[op]
    return fn(np.stack(arrays), axis=0).astype(np.float32)


# --- workers (module level: spawn pickles them by name) ------------------------------------------
def compression_worker(rank, nranks, raw_id, q=None):
    """Per-call compression on a communicator made without it (forced onto staged_host+fp8, which
    host ranks never pick on cost): [(algorithm, result) for None, "fp8", "none"] and the error a
    bad value gives."""
    comm = tpcomm.Communicator(nranks, tpcomm.UniqueId(raw_id), rank, timeout_ms=20000, algo="staged_host+fp8")
    runs = []
    for c in (None, "fp8", "none"):
        x = rank_input(rank, 1000).astype(np.float32)
        comm.all_reduce(x, compression=c)
        runs.append((comm.last_algorithm, x))
    try:
        comm.all_reduce(rank_input(rank, 10).astype(np.float32), compression="fp4")
        bad = "no error"
    except tpcomm.TpcommError as e:
        bad = "%s: %s" % (type(e).__name__, e)
    comm.destroy()
    return runs, bad


def collectives_worker(rank, nranks, raw_id, cases, q=None):
    """Runs every case {id: (coll, dtype, op, count)} on one communicator; returns
    {id: (float32 result, algorithm)} or {id: ("error", message)}."""
    comm = tpcomm.Communicator(nranks, tpcomm.UniqueId(raw_id), rank, timeout_ms=20000)
    out = {}
    for cid, (coll, dtype, op, count) in cases.items():
        kw = {"dtype": "bf16"} if dtype == "bf16" else {}
        try:
            if coll == "all_reduce":
                send = to_dtype(rank_input(rank, count), dtype)
                recv = np.full_like(send, 0x7E00 if dtype != "f32" else np.nan)  # poison
                res = comm.all_reduce(send, recv, op=op, **kw)
                assert res is recv
            elif coll == "all_reduce_inplace":
                recv = to_dtype(rank_input(rank, count), dtype)
                comm.all_reduce(recv, op=op, **kw)
            elif coll == "reduce_scatter":
                send = to_dtype(rank_input(rank, count * nranks), dtype)
                recv = np.full_like(send[:count], 0x7E00 if dtype != "f32" else np.nan)
                comm.reduce_scatter(send, recv, op=op, **kw)
            elif coll == "all_gather":
                send = to_dtype(rank_input(rank, count), dtype)
                recv = np.full_like(np.empty(count * nranks, dtype=send.dtype), 0x7E00 if dtype != "f32" else np.nan)
                comm.all_gather(send, recv, **kw)
            out[cid] = (from_dtype(recv, dtype), comm.last_algorithm)
        except tpcomm.TpcommError as e:
            out[cid] = ("error", "%s: %s" % (type(e).__name__, e))
    comm.destroy()
    return out


def init_worker(rank, nranks, raw_id, timeout_ms, q=None):
    """Init only; returns ("ok", algo-less) or ("error", class name, message, seconds taken)."""
    t0 = time.monotonic()
    try:
        comm = tpcomm.Communicator(nranks, tpcomm.UniqueId(raw_id), rank, timeout_ms=timeout_ms)
    except tpcomm.TpcommError as e:
        return ("error", type(e).__name__, str(e), time.monotonic() - t0)
    x = np.full(5, rank + 1, dtype=np.float32)
    comm.all_reduce(x)
    comm.destroy()
    return ("ok", x.tolist(), time.monotonic() - t0)


def mismatch_worker(rank, nranks, raw_id, counts, q=None):
    """Rank r all-reduces counts[r] elements; returns ("ok",) or ("error", class name, message), and
    whether a matching call afterwards still works."""
    comm = tpcomm.Communicator(nranks, tpcomm.UniqueId(raw_id), rank, timeout_ms=20000)
    x = np.ones(counts[rank], dtype=np.float32)
    try:
        comm.all_reduce(x)
        result = ("ok",)
    except tpcomm.TpcommError as e:
        result = ("error", type(e).__name__, str(e))
    y = np.full(8, rank + 1, dtype=np.float32)
    comm.all_reduce(y)
    comm.destroy()
    return result + (y.tolist(),)


def abort_worker(rank, nranks, raw_id, q=None):
    """Rank 1 aborts at once after init; rank 0 then all-reduces and must fail, bounded."""
    comm = tpcomm.Communicator(nranks, tpcomm.UniqueId(raw_id), rank, timeout_ms=2000)
    if rank == 1:
        t0 = time.monotonic()
        comm.abort()
        return ("aborted", time.monotonic() - t0)
    time.sleep(0.3)
    t0 = time.monotonic()
    try:
        comm.all_reduce(np.ones(16, dtype=np.float32))
        result = ("no error",)
    except tpcomm.TpcommError as e:
        result = ("error", type(e).__name__, str(e))
    try:
        comm.destroy()
        destroy = "ok"
    except tpcomm.TpcommError as e:
        destroy = type(e).__name__
    return result + (destroy, time.monotonic() - t0)


def rmsnorm_worker(rank, nranks, raw_id, rows, hidden, dtype, q=None):
    comm = tpcomm.Communicator(nranks, tpcomm.UniqueId(raw_id), rank, timeout_ms=20000)
    x = to_dtype(rank_input(rank, rows * hidden), dtype)
    residual = to_dtype(rank_input(99, rows * hidden, seed=1), dtype)
    weight = to_dtype((np.arange(hidden) % 5 + 1).astype(np.float32), dtype)
    out = np.zeros_like(x)
    kw = {"dtype": "bf16"} if dtype == "bf16" else {}
    comm.all_reduce_residual_rmsnorm(x, residual, weight, eps=1e-5, out=out, **kw)
    algo = comm.last_algorithm
    comm.destroy()
    return from_dtype(residual, dtype), from_dtype(out, dtype), algo
