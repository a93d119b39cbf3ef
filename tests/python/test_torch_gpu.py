"""Runs torch_gpu_check.py under torchrun on the GPUs this machine has: 2 ranks when there are 2
or more, else the one-rank cases. Skipped (with the reason) without torch or a CUDA GPU."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")


def test_torchrun_gpu_check():
    ngpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if ngpu == 0:
        pytest.skip("no CUDA GPU (torch.cuda.device_count() == 0)")
    nproc = min(ngpu, 2)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_gpu_check.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=%d" % nproc, script]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    sys.stdout.write(r.stdout[-6000:])
    sys.stderr.write(r.stderr[-6000:])
    assert r.returncode == 0, "torchrun failed (%d)" % r.returncode
    assert " 0 failed" in r.stdout
