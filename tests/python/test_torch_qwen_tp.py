"""bench/baselines/torch_qwen_tp.py (the end-to-end TP decoder) on CPU: torchrun with 2
ranks, --device cpu (gloo group, host-rank tpcomm communicators, fp32), tiny preset, a few steps.
nccl (gloo here), tpcomm and tpcomm_fused must decode the same greedy tokens, and the same as one
rank holding the whole model; symm is skipped with its reason; the table and the results file
are written; the script refuses to start with multicast not switched off. Skipped where torch is
not installed (the tests' own venv and CI have none)."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "baselines", "torch_qwen_tp.py")
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def env_for_ranks():
    import tpcomm

    env = dict(os.environ, OMP_NUM_THREADS="1", **MULTICAST_OFF)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(tpcomm.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH", "")) if p)
    return env


def torchrun(nranks, args, tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=%d" % nranks,
           SCRIPT, "--device", "cpu", "--preset", "tiny"] + args
    p = subprocess.run(cmd, env=env_for_ranks(), capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert p.returncode == 0, "exit %d\n%s\n%s" % (p.returncode, p.stdout[-4000:], p.stderr[-4000:])
    records = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return p.stdout, records


FAST = ["--modes", "eager", "--decode-batch", "1,2", "--decode-pos", "20", "--prefill", "16,32",
        "--steps", "2", "--reps", "1", "--rounds", "2", "--generate", "6", "--gen-prompt", "9"]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    import tpcomm.torch  # noqa: F401  (compiles the ops once, before the ranks start)

    tmp = tmp_path_factory.mktemp("qwen_tp")
    results = tmp / "results.txt"
    stdout, records = torchrun(2, ["--allreduce", "nccl,symm,tpcomm,tpcomm_fused", "--results", str(results)] + FAST,
                               tmp)
    return stdout, records, results


def tokens_of(records):
    return {r["allreduce"]: r["tokens"] for r in records if r["what"] == "tokens"}


def test_backends_decode_the_same_greedy_tokens(two_ranks):
    stdout, records, _ = two_ranks
    toks = tokens_of(records)
    assert set(toks) == {"nccl", "tpcomm", "tpcomm_fused"}, toks
    assert len(toks["nccl"]) == 6 and len(set(toks["nccl"])) > 1, toks  # varied: equality means something
    assert toks["tpcomm"] == toks["nccl"], toks
    assert toks["tpcomm_fused"] == toks["nccl"], toks
    steps = [r for r in records if r["what"] == "step_tokens"]
    assert len(steps) == 2 * 3 and all(r["same"] for r in steps), steps
    assert "# decode step tokens across backends (last timed call): eager batch 1: same; eager batch 2: same" in stdout


def test_two_ranks_decode_what_one_rank_holding_everything_decodes(two_ranks, tmp_path):
    _, records, _ = two_ranks
    _, one = torchrun(1, ["--allreduce", "nccl", "--modes", "eager", "--decode-batch", "1", "--prefill", "",
                          "--steps", "1", "--rounds", "1", "--generate", "6", "--gen-prompt", "9"], tmp_path)
    assert tokens_of(one)["nccl"] == tokens_of(records)["nccl"]


def test_table_and_measurements(two_ranks):
    stdout, records, _ = two_ranks
    assert "# symm: skipped (RuntimeError: torch symmetric memory needs CUDA tensors" in stdout
    head = [l for l in stdout.splitlines() if l.startswith("phase")]
    assert head and head[0].split()[:6] == ["phase", "mode", "size", "nccl", "tpcomm", "tpcomm_fused"], head
    assert "tpcomm/nccl" in head[0] and "tpcomm_fused/nccl" in head[0]
    rows = {tuple(l.split()[:3]) for l in stdout.splitlines() if l.startswith(("decode", "prefill"))}
    for want in (("decode", "eager", "1"), ("decode", "eager", "2"), ("prefill", "eager", "16"),
                 ("prefill", "eager", "32")):
        assert want in rows, (want, rows)
    dec = [r for r in records if r["what"] == "decode"]
    pre = [r for r in records if r["what"] == "prefill"]
    assert len(dec) == 2 * 3 and len(pre) == 2 * 3, (dec, pre)
    assert all(r["tok_s"] > 0 and r["step_ms"] > 0 and r["cold_ms"] > 0 for r in dec)
    assert all(r["tok_s"] > 0 and r["warm_ms"] > 0 for r in pre)
    assert "# greedy tokens (9-token prompt, eager): nccl" in stdout and "tpcomm_fused same" in stdout
    assert "staged_host" in stdout  # tpcomm's last algorithm on host ranks


def test_results_file_has_the_header(two_ranks):
    stdout, _, results = two_ranks
    text = results.read_text()
    first = text.splitlines()[0]
    assert first.startswith("# commit ") and "; date 20" in first and "; command: torchrun --nproc_per_node=2 " in first
    assert "\nphase " in text and '"what": "decode"' in text and '"what": "tokens"' in text
    assert first in stdout  # the same lines rank 0 printed


def test_commit_comes_from_the_environment_first(tmp_path):
    env = dict(env_for_ranks(), COMMIT="abc1234")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", SCRIPT,
           "--device", "cpu", "--preset", "tiny", "--allreduce", "nccl", "--modes", "eager", "--decode-batch", "1",
           "--prefill", "", "--steps", "1", "--rounds", "1", "--generate", "0"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.startswith("# commit abc1234; date "), p.stdout[:300]


@pytest.mark.parametrize("unset", sorted(MULTICAST_OFF))
def test_refuses_to_run_with_multicast_not_off(unset):
    env = env_for_ranks()
    env.pop(unset)
    p = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", "--preset", "tiny"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "%s=" % unset in p.stderr and "multicast stays off" in p.stderr, p.stderr
