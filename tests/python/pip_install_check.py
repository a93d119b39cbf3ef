"""`pip install .` from a clean clone into a fresh virtual environment, then a two-rank all-reduce
with the installed package (imported from outside the source tree) on numpy arrays: numpy must
have come with the package.

    python pip_install_check.py --source <repo> --work <scratch dir>

The clone is of the repository's committed HEAD (what a user clones). Host-only build unless
TPCOMM_PIP_CHECK_CUDA=1 (the CUDA kernels take many minutes on a small machine). Exit 77 (ctest:
skipped) when the source is not a git checkout."""
import argparse
import os
import shutil
import subprocess
import sys
import time

SMOKE = r"""
import os, threading, numpy as np, tpcomm
here = os.path.dirname(tpcomm.__file__)
assert os.path.realpath(here).startswith(os.path.realpath(os.environ["VENV"])), here
libs = sorted(f for f in os.listdir(os.path.join(here, "lib")) if ".so" in f)
assert libs == ["libtpcomm.so"], libs  # one unversioned library (a wheel holds no symlinks)
assert os.path.exists(os.path.join(here, "torch", "csrc", "tpcomm_torch.cpp")), "torch ops source missing"
uid = tpcomm.UniqueId.generate("127.0.0.1")
res = {}
def rank(r):
    with tpcomm.Communicator(2, uid, r, timeout_ms=20000) as c:
        x = np.arange(1000, dtype=np.float16) % 7 * (r + 1)
        c.all_reduce(x)
        res[r] = (x, c.last_algorithm)
ts = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
[t.start() for t in ts]; [t.join(60) for t in ts]
want = np.arange(1000, dtype=np.float16) % 7 * 3
for r in range(2):
    assert np.array_equal(res[r][0], want), (r, res[r][0][:8])
    assert res[r][1] == "staged_host", res[r][1]
try:
    tpcomm.Communicator(2, uid, 7)
except tpcomm.InvalidArgumentError as e:
    assert "rank 7 out of range" in str(e), e
else:
    raise SystemExit("no error for rank 7")
print("installed tpcomm", tpcomm.version(), "at", here, ": 2-rank all-reduce ok")
"""


def run(cmd, timeout, env=None, cwd=None):
    print("+", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, timeout=timeout, env=env, cwd=cwd, stdin=subprocess.DEVNULL)
    print("  (%.0f s)" % (time.monotonic() - t0), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(a.source, ".git")) and not os.path.isfile(os.path.join(a.source, ".git")):
        print("SKIP: %s is not a git checkout (nothing to clone)" % a.source)
        return 77
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    src, venv = os.path.join(a.work, "src"), os.path.join(a.work, "venv")
    run(["git", "clone", "-q", "--no-hardlinks", a.source, src], 300)
    py = os.environ.get("TPCOMM_PYTHON", shutil.which("python3") or sys.executable)
    run([py, "-m", "venv", venv], 300)
    vpy = os.path.join(venv, "bin", "python")
    env = dict(os.environ)
    if os.environ.get("TPCOMM_PIP_CHECK_CUDA") != "1":
        env["TPCOMM_WITH_CUDA"] = "OFF"
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    # numpy comes with the package (a dependency): the smoke test below imports it.
    run([vpy, "-m", "pip", "install", "-q", "--disable-pip-version-check", src], 1500, env=env)
    env = dict(os.environ, VENV=venv)
    run([vpy, "-c", SMOKE], 300, env=env, cwd=a.work)  # cwd outside the source tree
    return 0


if __name__ == "__main__":
    sys.exit(main())
