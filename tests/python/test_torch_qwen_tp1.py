"""bench/baselines/torch_qwen_tp1.py (the single-GPU torch baseline) on CPU, tiny preset:
the --compile variant compiles one layer function once for all layers (one graph per cache
bucket), runs other positions of its bucket without recompiling, and decodes the same greedy
tokens as the eager step (a differing argmax only at a near-tie); a compile that runs past
--compile-timeout ends the process with a message; bad flags are refused. Skipped where torch is
not installed (the tests' own venv and CI have none)."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "baselines", "torch_qwen_tp1.py")
BASE = [sys.executable, SCRIPT, "--device", "cpu", "--preset", "tiny", "--steps", "2", "--reps", "1"]


def run(args, timeout=300, **env_add):
    env = dict(os.environ, OMP_NUM_THREADS="1", **env_add)
    return subprocess.run(BASE + args, env=env, capture_output=True, text=True, timeout=timeout)


def records(p):
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def compiled():
    # positions 20 and 40 with 32-slot buckets: two buckets, so exactly two compiles
    p = run(["--prefill", "16", "--decode", "20,40", "--compile", "--compile-bucket", "32", "--check-tokens", "16"],
            TORCH_LOGS="recompiles")
    assert p.returncode == 0, "exit %d\n%s\n%s" % (p.returncode, p.stdout[-4000:], p.stderr[-4000:])
    # dynamo's own word: one recompile in the whole run, for the second bucket
    assert p.stderr.count("Recompiling function") == 1 and "bucket == 32" in p.stderr, p.stderr[-4000:]
    return records(p)


def test_one_compiled_graph_serves_every_layer_and_position(compiled):
    times = [r for r in compiled if r["what"] == "compile_time"]
    assert [(r["pos"], r["bucket"]) for r in times] == [(20, 32), (40, 64)], times
    for r in times:
        assert r["graphs_compiled"] == 1, r  # 3 layers, one graph
        assert r["recompiles_across_positions"] == 0, r  # other positions of the bucket: none
        assert r["seconds"] > 0 and r["mode"] == "default" and r["attention"].startswith("matmul, masked"), r
        assert r["positions_run"] == sorted({r["pos"] - 1, r["pos"], r["bucket"] - 1}), r


def test_compiled_step_decodes_the_eager_tokens(compiled):
    checks = [r for r in compiled if r["what"] == "compile_check"]
    assert [r["positions"] for r in checks] == [[5, 20], [25, 40]], checks
    for r in checks:
        assert len(r["eager"]) == 16 and len(set(r["eager"])) > 1, r  # varied: equality means something
        assert r["ok"] and r["recompiles"] == 0, r
        assert all(d["eager_top2_gap"] <= r["tol"] for d in r["differ"]), r  # only near-ties may differ


def test_variants_are_timed(compiled):
    dec = {(r["pos"], r["variant"]): r for r in compiled if r["what"] == "decode"}
    assert set(dec) == {(20, "eager"), (20, "compile"), (40, "eager"), (40, "compile")}, dec
    assert all(r["step_ms"] > 0 and r["tok_s"] > 0 for r in dec.values())
    pre = [r for r in compiled if r["what"] == "prefill"]
    assert len(pre) == 1 and pre[0]["tokens"] == 16 and pre[0]["warm_ms"] > 0, pre


def test_compile_past_its_timeout_ends_the_process_with_a_message():
    p = run(["--prefill", "", "--decode", "20", "--no-eager-decode", "--compile", "--compile-timeout", "0.01"])
    assert p.returncode == 3, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert "compile did not finish within 0.01 s" in p.stdout, p.stdout
    assert [r["what"] for r in records(p)][-1] == "compile_timeout"


@pytest.mark.parametrize("args, says", [
    (["--compile", "--compile-mode", "reduce-overhead"], "invalid choice: 'reduce-overhead'"),
    (["--check-tokens", "4"], "go with --compile"),
    (["--decode", "5,x"], "is not a comma-separated list"),
])
def test_bad_flags_are_refused(args, says):
    p = run(args, timeout=120)
    assert p.returncode != 0 and says in p.stderr, (p.returncode, p.stderr[-2000:])
