"""TPCOMM_SOCKET_IFNAME / TPCOMM_SOCKET_FAMILY choose the unique id's address (read once per
process, so each case runs in a fresh interpreter). Loopback only."""
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import threading, numpy as np, tpcomm
try:
    uid = tpcomm.UniqueId.generate()
except tpcomm.TpcommError as e:
    print("ERROR", type(e).__name__, e)
    raise SystemExit(0)
res = {}
def rank(r):
    with tpcomm.Communicator(2, uid, r, timeout_ms=10000) as c:
        x = np.full(4, r + 1, np.float32)
        c.all_reduce(x)
        res[r] = x.tolist()
ts = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
[t.start() for t in ts]; [t.join(30) for t in ts]
print("OK", res[0], res[1])
"""


def run(**env):
    e = dict(os.environ, **env)
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=e, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("ifname", ["lo", "=lo"])
def test_ifname_loopback(ifname):
    out = run(TPCOMM_SOCKET_IFNAME=ifname, TPCOMM_SOCKET_FAMILY="AF_INET")
    assert out == "OK [3.0, 3.0, 3.0, 3.0] [3.0, 3.0, 3.0, 3.0]", out


def test_ifname_that_matches_nothing():
    out = run(TPCOMM_SOCKET_IFNAME="=no-such-if0")
    assert out.startswith("ERROR SystemCallError") and "no-such-if0" in out, out


def test_bad_family_is_named():
    out = run(TPCOMM_SOCKET_IFNAME="lo", TPCOMM_SOCKET_FAMILY="IPX")
    assert out.startswith("ERROR InvalidArgumentError") and "TPCOMM_SOCKET_FAMILY='IPX'" in out, out
