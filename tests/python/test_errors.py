"""Bad input raises an exception naming the argument, carrying tpcomm's message; a rank that never
arrives times out within the bound naming it; a wrong secret is refused; abort is local."""
import os
import pickle
import time

import numpy as np
import pytest

import tpcomm
from _harness import abort_worker, init_worker, mismatch_worker, run_ranks


@pytest.fixture
def solo():
    """A one-rank host communicator (no peers needed for argument checks)."""
    comm = tpcomm.Communicator(1, tpcomm.UniqueId.generate("127.0.0.1"), 0, timeout_ms=5000)
    yield comm
    comm.destroy()


def test_version():
    v, api = tpcomm.version()
    assert v == tpcomm.__version__ and api == 3


def test_unique_id_round_trips():
    uid = tpcomm.UniqueId.generate("127.0.0.1")
    assert len(bytes(uid)) == 128
    assert tpcomm.UniqueId.from_hex(uid.hex()) == uid
    assert pickle.loads(pickle.dumps(uid)) == uid
    assert tpcomm.UniqueId.generate("127.0.0.1") != uid  # a new secret (and port) each time
    with pytest.raises(tpcomm.InvalidArgumentError, match="expected 128 bytes"):
        tpcomm.UniqueId(b"short")
    with pytest.raises(tpcomm.InvalidArgumentError, match="not a hex string"):
        tpcomm.UniqueId.from_hex("xyz")
    with pytest.raises(tpcomm.InvalidArgumentError, match="'nowhere' is not a numeric"):
        tpcomm.UniqueId.generate("nowhere")


def test_bad_init_arguments():
    uid = tpcomm.UniqueId.generate("127.0.0.1")
    with pytest.raises(tpcomm.InvalidArgumentError, match="rank 2 out of range"):
        tpcomm.Communicator(2, uid, 2)
    with pytest.raises(tpcomm.InvalidArgumentError, match="nranks 0"):
        tpcomm.Communicator(0, uid, 0)
    with pytest.raises(tpcomm.InvalidArgumentError, match="device -3"):
        tpcomm.Communicator(1, uid, 0, device=-3)
    with pytest.raises(tpcomm.InvalidArgumentError, match="timeoutMs -1"):
        tpcomm.Communicator(1, uid, 0, timeout_ms=-1)
    with pytest.raises(tpcomm.InvalidArgumentError, match="not a tpcomm socket unique id"):
        tpcomm.Communicator(2, tpcomm.UniqueId(bytes(128)), 1)
    with pytest.raises(tpcomm.InvalidArgumentError, match="unique_id is a str"):
        tpcomm.Communicator(1, "id", 0)
    with pytest.raises(tpcomm.InvalidArgumentError, match="rank='0': expected an int"):
        tpcomm.Communicator(1, uid, "0")
    with pytest.raises(tpcomm.InvalidArgumentError, match="config->compression 'zstd'"):
        tpcomm.Communicator(1, uid, 0, compression="zstd")


def test_compression_one_rank():
    """compression="fp8" reaches Config::compression: a one-rank call stays the exact copy."""
    comm = tpcomm.Communicator(1, tpcomm.UniqueId.generate("127.0.0.1"), 0, compression="fp8")
    x = np.arange(100, dtype=np.float32)
    assert np.array_equal(comm.all_reduce(x), x)
    comm.destroy()


@pytest.mark.parametrize("bad", [np.float64, np.int32, np.int8, np.complex64])
def test_wrong_dtype_names_the_argument(solo, bad):
    x = np.zeros(8, dtype=bad)
    with pytest.raises(tpcomm.InvalidArgumentError, match=r"all_reduce: send has element type"):
        solo.all_reduce(x)
    with pytest.raises(tpcomm.InvalidArgumentError, match=r"all_gather: send has element type"):
        solo.all_gather(x, np.zeros(8, np.float32))


def test_mixed_dtypes_and_sizes(solo):
    f32, f16 = np.zeros(8, np.float32), np.zeros(8, np.float16)
    with pytest.raises(tpcomm.InvalidArgumentError, match="all_reduce: out has dtype float16, send has float32"):
        solo.all_reduce(f32, f16)
    with pytest.raises(tpcomm.InvalidArgumentError, match="out has 7 elements, send has 8"):
        solo.all_reduce(f32, np.zeros(7, np.float32))
    with pytest.raises(tpcomm.InvalidArgumentError, match=r"send has 8 elements, expected size \(1\) x out's 4"):
        solo.reduce_scatter(f32, np.zeros(4, np.float32))
    with pytest.raises(tpcomm.InvalidArgumentError, match=r"out has 9 elements, expected size \(1\) x send's 8"):
        solo.all_gather(f32, np.zeros(9, np.float32))
    with pytest.raises(tpcomm.InvalidArgumentError, match="out is None"):
        solo.all_gather(f32, None)
    with pytest.raises(tpcomm.InvalidArgumentError, match="send has dtype float32 but dtype=bfloat16 was given"):
        solo.all_reduce(f32, dtype="bf16")
    with pytest.raises(tpcomm.InvalidArgumentError, match="pass dtype='bf16'"):
        solo.all_reduce(np.zeros(4, np.uint16))
    with pytest.raises(tpcomm.InvalidArgumentError, match="dtype='int8'"):
        solo.all_reduce(f32, dtype="int8")
    with pytest.raises(tpcomm.InvalidArgumentError, match="not a multiple of weight's 3"):
        solo.all_reduce_residual_rmsnorm(f32, f32.copy(), np.ones(3, np.float32))


def test_other_bad_arguments(solo):
    x = np.zeros(8, np.float32)
    with pytest.raises(tpcomm.InvalidArgumentError, match="op='avg'"):
        solo.all_reduce(x, op="avg")
    with pytest.raises(tpcomm.InvalidArgumentError, match="not C-contiguous"):
        solo.all_reduce(np.zeros((4, 4), np.float32)[:, ::2])
    with pytest.raises(tpcomm.InvalidArgumentError, match="send is a list, not an array"):
        solo.all_reduce([1.0, 2.0])
    ro = np.zeros(4, np.float32)
    ro.setflags(write=False)
    with pytest.raises(tpcomm.InvalidArgumentError, match="send is read-only"):
        solo.all_reduce(ro)
    with pytest.raises(tpcomm.InvalidArgumentError, match="host rank"):
        solo.all_reduce(x, stream=1)
    # A host rank computes even a one-rank all-reduce correctly (a copy).
    y = np.zeros(8, np.float32)
    assert solo.all_reduce(np.arange(8, dtype=np.float32), y) is y and y[7] == 7


def test_use_after_destroy():
    comm = tpcomm.Communicator(1, tpcomm.UniqueId.generate("127.0.0.1"), 0)
    comm.destroy()
    with pytest.raises(tpcomm.InvalidArgumentError, match="all_reduce: the communicator was destroyed"):
        comm.all_reduce(np.zeros(2, np.float32))
    comm.destroy()  # twice: no-op


def test_errors_carry_tpcomm_message_and_status():
    try:
        tpcomm.Communicator(2, tpcomm.UniqueId.generate("127.0.0.1"), 5)
    except tpcomm.TpcommError as e:
        assert e.status == 1 and "rank 5 out of range [0, 2)" in e.message and isinstance(e, ValueError)
    else:
        pytest.fail("no exception")


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_missing_rank_times_out_naming_it(nranks):
    """The last rank never starts: every other rank fails with CommTimeoutError naming it, within
    the bound (timeout, plus 1 s grace for non-root ranks, plus process start-up slack)."""
    uid = tpcomm.UniqueId.generate("127.0.0.1")
    timeout_ms = 1500
    results = run_ranks(nranks, init_worker, (nranks, bytes(uid), timeout_ms), ranks=range(nranks - 1), timeout_s=60)
    for rank, res in results.items():
        assert res[0] == "error", "rank %d: %r" % (rank, res)
        _, cls, msg, took = res
        assert cls == "CommTimeoutError", (rank, cls, msg)
        assert ("rank %d" % (nranks - 1)) in msg, msg
        assert took < timeout_ms / 1000 + 1.0 + 1.5, "rank %d took %.2f s" % (rank, took)


def test_missing_root_times_out_naming_it():
    uid = tpcomm.UniqueId.generate("127.0.0.1")
    t0 = time.monotonic()
    with pytest.raises(tpcomm.CommTimeoutError, match="rank 0"):
        tpcomm.Communicator(2, uid, 1, timeout_ms=800)
    assert time.monotonic() - t0 < 0.8 + 1.5


def test_wrong_secret_is_refused():
    """An id with the right address and port but another secret is refused at once; the real
    rank 1 still joins afterwards."""
    uid = tpcomm.UniqueId.generate("127.0.0.1")
    raw = bytearray(bytes(uid))
    raw[40] ^= 0x5A  # inside the secret
    from _harness import SPAWN
    q = SPAWN.Queue()
    import _harness
    root = SPAWN.Process(target=_harness._wrap, args=(init_worker, 0, (2, bytes(uid), 10000), q), daemon=True)
    root.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(tpcomm.RemoteError, match="wrong secret"):
            tpcomm.Communicator(2, tpcomm.UniqueId(bytes(raw)), 1, timeout_ms=10000)
        assert time.monotonic() - t0 < 5.0, "refusal was not prompt"
        res = init_worker(1, 2, bytes(uid), 10000)
        assert res[0] == "ok" and res[1] == [3.0] * 5, res
        r, root_res = q.get(timeout=30)
        assert r == 0 and root_res[0] == "ok", root_res
    finally:
        root.join(30)
        if root.is_alive():
            root.kill()


def test_ranks_with_different_counts_are_refused_on_every_rank():
    """The host path checks every call's signature across ranks (docs/python.md): counts 8 and
    600000 fail on both ranks with InvalidArgumentError naming the count, and the next matching
    call is right (before the check: wrong elements on one rank, a timeout on the other)."""
    uid = tpcomm.UniqueId.generate("127.0.0.1")
    results = run_ranks(2, mismatch_worker, (2, bytes(uid), [8, 600000]), timeout_s=60)
    for rank, res in results.items():
        assert res[0] == "error", (rank, res)
        assert res[1] == "InvalidArgumentError", (rank, res)
        assert "count" in res[2] and "rank 1" in res[2], (rank, res[2])
        assert res[3] == [3.0] * 8, (rank, res[3])


def test_abort_is_local():
    results = run_ranks(2, abort_worker, (2, bytes(tpcomm.UniqueId.generate("127.0.0.1"))), timeout_s=60)
    assert results[1][0] == "aborted" and results[1][1] < 3.0, results[1]
    kind, *rest = results[0]
    assert kind == "error", results[0]
    cls, msg, destroy, took = rest
    assert cls in ("CommTimeoutError", "RemoteError"), (cls, msg)
    assert destroy != "ok", "destroy after the peer aborted reported success"
    assert took < 2.0 + 2.0 + 2.0, took


class _FakeCudaArray:
    """Looks like a CUDA array (no memory behind it: tpcomm must refuse it before touching it)."""

    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0xDEAD0000, False), "version": 3}


def test_cuda_array_on_a_host_rank_is_refused(solo):
    with pytest.raises(tpcomm.InvalidArgumentError, match="send is GPU memory but this communicator is a host rank"):
        solo.all_reduce(_FakeCudaArray())


def test_gpu_rank_without_a_gpu_fails_cleanly():
    """device 0 where there is no GPU (CI) or no CUDA in the build: an exception, not a crash."""
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("a GPU is present: this case is for machines without one")
    with pytest.raises((tpcomm.NotSupportedError, tpcomm.CudaError), match="device 0"):
        tpcomm.Communicator(1, tpcomm.UniqueId.generate("127.0.0.1"), 0, device=0)
