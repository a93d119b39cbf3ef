"""tpcomm.torch on CPU tensors (host ranks, 2 and 3 processes): every op and dtype, the out-of-place
form, torch.compile(fullgraph=True), errors. Skipped where torch is not installed (the tests'
own venv has none: `pip install torch` into it, or run this file with a Python that has torch).
The GPU cases (bitwise equal to dist.all_reduce, CUDA graphs) are torch_gpu_check.py's."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tpcomm  # noqa: E402
from _harness import raise_if_failed, rank_input, reference, run_ranks  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def built_ops():
    import tpcomm.torch  # noqa: F401  (compiles the ops once, before the ranks start)


def rounded(values, dname):
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dname]
    return torch.from_numpy(np.asarray(values, dtype=np.float32)).to(dt).double().numpy()


@pytest.mark.parametrize("nranks", [2, 3])
def test_torch_ops_on_host_ranks(nranks):
    from _torch_workers import torch_cpu_worker, wrap
    uid = tpcomm.UniqueId.generate("127.0.0.1")
    results = run_ranks(nranks, torch_cpu_worker, (nranks, bytes(uid)), timeout_s=600, wrap=wrap)
    raise_if_failed(results)
    inputs = lambda n: [rank_input(r, n) for r in range(nranks)]  # noqa: E731
    for rank, out in results.items():
        for dname in ("f32", "f16", "bf16"):
            for op in ("sum", "max", "min"):
                want = rounded(reference(op, inputs(1001)), dname)
                assert np.array_equal(out["all_reduce_%s_%s" % (dname, op)], want), (rank, dname, op)
            y, x = out["all_reduce_out_%s" % dname]
            assert np.array_equal(y, rounded(reference("sum", inputs(64)), dname))
            assert np.array_equal(x, rounded(rank_input(rank, 64), dname)), "out-of-place changed its input"
            full = reference("max", inputs(6 * nranks)).reshape(nranks * 2, 3)
            assert np.array_equal(out["reduce_scatter_%s" % dname], rounded(full[rank * 2:rank * 2 + 2], dname))
            gathered = np.concatenate([rank_input(r, 10).reshape(2, 5) for r in range(nranks)])
            assert np.array_equal(out["all_gather_%s" % dname], rounded(gathered, dname))
        s = reference("sum", [rank_input(r, 32) * 2 for r in range(nranks)])
        want = reference("sum", [s + 1] * nranks) - 1
        assert np.array_equal(out["compiled"], want) and np.array_equal(out["eager"], want), rank
        assert "tpcomm.all_reduce: tensor has dtype Int" in out["int32"], out["int32"]
        assert "not contiguous" in out["strided"], out["strided"]
        assert "destroyed" in out["destroyed"], out["destroyed"]


def test_torch_device_mismatch_is_refused():
    import tpcomm.torch as tt
    comm = tt.Communicator(1, tpcomm.UniqueId.generate("127.0.0.1"), 0, device=-1)
    try:
        with pytest.raises(tpcomm.InvalidArgumentError, match="bad_op|op='avg'"):
            comm.all_reduce(torch.zeros(4), op="avg")
        if torch.cuda.is_available():
            with pytest.raises(tpcomm.InvalidArgumentError, match="host rank"):
                comm.all_reduce(torch.zeros(4, device="cuda"))
    finally:
        comm.destroy()


@pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16])
def test_numpy_layer_takes_torch_tensors_through_dlpack(dt):
    """The torch-free layer reads torch CPU tensors through __dlpack__ (bf16 included)."""
    comm = tpcomm.Communicator(1, tpcomm.UniqueId.generate("127.0.0.1"), 0)
    try:
        x = torch.arange(10, dtype=torch.float32).to(dt)
        y = torch.full((10,), -1.0, dtype=dt)
        assert comm.all_reduce(x, y) is y and torch.equal(x, y)
        with pytest.raises(tpcomm.InvalidArgumentError, match="not C-contiguous"):
            comm.all_reduce(torch.zeros(8, dtype=dt)[::2])
        with pytest.raises(tpcomm.InvalidArgumentError, match="send has element type torch.int32"):
            comm.all_reduce(torch.zeros(4, dtype=torch.int32))
        with pytest.raises(tpcomm.InvalidArgumentError, match="out has dtype"):
            comm.all_reduce(x, torch.zeros(10, dtype=torch.float16 if dt == torch.float32 else torch.float32))
    finally:
        comm.destroy()


def test_vllm_adapter_interface_on_host_ranks():
    """The vLLM drop-in's interface (should_custom_ar, custom_all_reduce out of place, capture,
    all_reduce into out, close) with a gloo group and CPU tensors; vLLM itself is not run."""
    from _torch_workers import vllm_adapter_worker, wrap
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = run_ranks(2, vllm_adapter_worker, (2, port), timeout_s=300, wrap=wrap)
    raise_if_failed(results)
    want = rounded(reference("sum", [rank_input(r, 100) for r in range(2)]), "bf16")
    for rank, (flags, y, x, same, after_close) in results.items():
        assert flags == [True, False, False, False], flags
        assert np.array_equal(y, want) and same, rank
        assert np.array_equal(x, rounded(rank_input(rank, 100), "bf16")), "custom_all_reduce changed its input"
        assert after_close is None


def test_torch_per_call_compression():
    """comm.all_reduce(t, compression=...) overrides the communicator's setting for one call, in
    place, out of place and under torch.compile: fp8 runs staged_host+fp8 (close, not exact, the
    same bits on every rank and in every form), "none" and None run staged_host exactly; a bad
    value raises RuntimeError naming it."""
    from _torch_workers import torch_compression_worker, wrap
    uid = tpcomm.UniqueId.generate("127.0.0.1")
    results = run_ranks(2, torch_compression_worker, (2, bytes(uid)), timeout_s=600, wrap=wrap)
    raise_if_failed(results)
    exact = reference("sum", [rank_input(r, 1000).astype(np.float32) for r in range(2)])
    first = None
    for rank, (runs, bad) in sorted(results.items()):
        algos = [a for a, _ in runs]
        assert algos == ["staged_host", "staged_host+fp8", "staged_host"] + ["staged_host+fp8"] * 2, (rank, algos)
        values = [np.asarray(v) for _, v in runs]
        assert np.array_equal(values[0], exact) and np.array_equal(values[2], exact), rank
        fp8 = values[1]
        assert not np.array_equal(fp8, exact)  # quantized
        assert np.max(np.abs(fp8 - exact)) <= 0.15 * np.max(np.abs(exact)), rank
        assert np.array_equal(values[3], fp8) and np.array_equal(values[4], fp8), rank
        first = fp8 if first is None else first
        assert np.array_equal(fp8, first), "rank %d differs from rank 0" % rank
        assert "fp4" in bad, bad
