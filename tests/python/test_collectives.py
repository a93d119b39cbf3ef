"""Every collective x dtype x op on 2, 3 and 4 host-rank processes meeting through the socket
bootstrap on 127.0.0.1. One process group per rank count runs the whole table (spawning is the
slow part); each row is its own test. Inputs are small integers, so results are exact and
compared bitwise; outputs are poisoned first. Add a case: add a row to CASES."""
import itertools

import numpy as np
import pytest

import tpcomm
from _harness import (compression_worker, from_dtype, raise_if_failed, rank_input, reference, run_ranks, to_dtype,
                      collectives_worker, rmsnorm_worker)

DTYPES = ["f32", "f16", "bf16"]
OPS = ["sum", "max", "min"]
# (collective, count): count is the per-rank result for reduce_scatter, the per-rank input for
# all_gather; 300001 f32 elements span several 1 MiB staging chunks.
SIZES = {"all_reduce": [1, 1000, 300001], "all_reduce_inplace": [7, 4099], "reduce_scatter": [1, 333],
         "all_gather": [5, 1025]}
CASES = [(coll, dtype, op, count)
         for coll, counts in SIZES.items() for dtype in DTYPES
         for op in (OPS if coll != "all_gather" else ["sum"]) for count in counts]
NRANKS = [2, 3, 4]

_groups = {}


def group_results(nranks):
    if nranks not in _groups:
        uid = tpcomm.UniqueId.generate("127.0.0.1")
        results = run_ranks(nranks, collectives_worker, (nranks, bytes(uid), dict(enumerate(CASES))), timeout_s=300)
        raise_if_failed(results)
        _groups[nranks] = results
    return _groups[nranks]


def expected(coll, op, count, nranks, rank):
    if coll == "all_gather":
        return np.concatenate([rank_input(r, count) for r in range(nranks)])
    if coll == "reduce_scatter":
        full = reference(op, [rank_input(r, count * nranks) for r in range(nranks)])
        return full[rank * count:(rank + 1) * count]
    return reference(op, [rank_input(r, count) for r in range(nranks)])


@pytest.mark.parametrize("nranks", NRANKS)
@pytest.mark.parametrize("case", CASES, ids=["%s-%s-%s-%d" % c for c in CASES])
def test_collective(nranks, case):
    results = group_results(nranks)
    cid = CASES.index(case)
    coll, dtype, op, count = case
    for rank in range(nranks):
        got = results[rank][cid]
        assert not isinstance(got[0], str), "rank %d: %s" % (rank, got[1])
        values, algo = got
        want = expected(coll, op, count, nranks, rank)
        # Integer inputs: the 16-bit round trip is exact, so compare bits.
        want = from_dtype(to_dtype(want, dtype), dtype)
        assert values.shape == want.shape
        bad = np.flatnonzero(values.view(np.uint32) != want.view(np.uint32))
        assert bad.size == 0, "rank %d: %d wrong elements, first at %d: %r != %r" % (
            rank, bad.size, bad[0], values[bad[0]], want[bad[0]])
        assert algo == "staged_host"


@pytest.mark.parametrize("nranks,dtype", [(2, "f32"), (3, "f16"), (4, "bf16")])
def test_all_reduce_residual_rmsnorm(nranks, dtype):
    rows, hidden = 3, 64
    uid = tpcomm.UniqueId.generate("127.0.0.1")
    results = run_ranks(nranks, rmsnorm_worker, (nranks, bytes(uid), rows, hidden, dtype))
    raise_if_failed(results)
    summed = reference("sum", [rank_input(r, rows * hidden) for r in range(nranks)])
    residual0 = from_dtype(to_dtype(rank_input(99, rows * hidden, seed=1), dtype), dtype)
    res_want = residual0 + summed  # small integers: exact in every dtype
    weight = from_dtype(to_dtype((np.arange(hidden) % 5 + 1).astype(np.float32), dtype), dtype).astype(np.float64)
    r = res_want.reshape(rows, hidden).astype(np.float64)
    out_want = r / np.sqrt((r * r).mean(axis=1, keepdims=True) + 1e-5) * weight
    tol = {"f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}[dtype]
    first = None
    for rank in range(nranks):
        residual, out, algo = results[rank]
        assert np.array_equal(residual, res_want), "rank %d residual" % rank
        np.testing.assert_allclose(out.reshape(rows, hidden), out_want, rtol=tol, atol=tol)
        # Every rank gets the same bits.
        first = out if first is None else first
        assert np.array_equal(out.view(np.uint32), first.view(np.uint32)), "rank %d differs from rank 0" % rank


def test_per_call_compression():
    """all_reduce(compression=...) overrides the communicator's setting for one call: fp8 runs
    staged_host+fp8 (close to the sum, not exact), "none" and None run staged_host exactly; a
    bad value raises InvalidArgumentError naming it."""
    uid = tpcomm.UniqueId.generate("127.0.0.1")
    results = run_ranks(2, compression_worker, (2, bytes(uid)))
    exact = reference("sum", [rank_input(r, 1000).astype(np.float32) for r in range(2)])
    for rank, (runs, bad) in sorted(results.items()):
        algos = [a for a, _ in runs]
        assert algos == ["staged_host", "staged_host+fp8", "staged_host"], (rank, algos)
        assert np.array_equal(runs[0][1], exact) and np.array_equal(runs[2][1], exact), rank
        fp8 = runs[1][1]
        assert not np.array_equal(fp8, exact)  # quantized
        assert np.max(np.abs(fp8 - exact)) <= 0.15 * np.max(np.abs(exact)), rank
        assert "InvalidArgumentError" in bad and "fp4" in bad, bad
