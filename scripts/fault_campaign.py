#!/usr/bin/env python3
"""A fault and bad-input campaign against one build: the C API's arguments and config struct,
unique ids, every TPCOMM_* parameter with hostile values, host ranks that go missing, disagree or
share a communicator, hostile peers of the socket bootstrap, and tpcomm-doctor (the attacks:
scripts/fault_attacks.py). Each attack runs in a worker process, so a crash or a hang is an
outcome, not the end of the run. Outcomes: ok; crash (a signal); hang (no answer in time); slow
(an answer after the attack's bound); wrong (a status that is not right for it); unclear (a
refusal whose message names nothing the attack changed). Prints one row per category, and every
failure with --failures. Exit status 1 when anything failed.

    python3 scripts/fault_campaign.py BUILD_DIR [--only CATEGORY,...] [--failures] [--jobs N]

BUILD_DIR holds libtpcomm.so and tools/tpcomm-doctor (a host-only build is enough). Loopback
only; multicast stays off."""
import argparse
import ctypes
import json
import os
import random
import select
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fault_attacks as A  # noqa: E402
from fault_workers import run_attack  # noqa: E402

CATS = ["C API arguments", "C API config", "unique ids", "environment", "host ranks", "socket bootstrap",
        "tpcomm-doctor"]
KINDS = ["ok", "crash", "hang", "slow", "wrong", "unclear"]


def doctor_params(build):
    out = subprocess.run([os.path.join(build, "tools", "tpcomm-doctor"), "--params"], capture_output=True, text=True,
                         timeout=30).stdout
    return [l.split()[0] for l in out.splitlines() if l.strip().startswith("TPCOMM_")]


def classify(attack, code, msg, seconds):
    if seconds > attack.get("bound_s", 10):
        return "slow"
    if code not in attack["ok"]:
        return "wrong"
    says = [w for w in attack.get("says", []) if w]
    if code != 0 and says and not any(w in msg for w in says):
        return "unclear"
    return "ok"


def run_worker_batch(build, attacks, indices, env=None):
    """Runs attacks[i] for i in indices in worker processes (restarted after a crash or a hang);
    returns {i: (outcome, detail)}."""
    results, todo = {}, list(indices)
    while todo:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", build] + [str(i) for i in todo]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, bufsize=1)
        current, t0 = None, time.time()
        while True:
            limit = (attacks[current].get("bound_s", 10) * 2 + 10) if current is not None else 60
            ready, _, _ = select.select([p.stdout], [], [], max(0.1, limit - (time.time() - t0)))
            if not ready:
                p.kill()
                p.wait()
                if current is not None:
                    results[current] = ("hang", "no answer within %.0f s" % limit)
                break
            line = p.stdout.readline()
            if not line:  # the worker died
                rc = p.wait()
                if current is not None:
                    results[current] = ("crash", "worker ended with %s" % (("signal %d" % -rc) if rc < 0 else "exit %d" % rc))
                break
            word, _, rest = line.strip().partition(" ")
            if word == "BEGIN":
                current, t0 = int(rest), time.time()
            elif word == "END":
                i, _, payload = rest.partition(" ")
                code, msg, secs = json.loads(payload)
                results[int(i)] = (classify(attacks[int(i)], code, msg, secs), "status %d in %.2f s: %s" % (code, secs, msg[:300]))
                current = None
        todo = [i for i in todo if i not in results]
        p.stdout.close()
        if p.poll() is None:
            p.kill()
            p.wait()
    return results


def run_doctor(build, attack):
    a = attack["args"]
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TPCOMM_TOPO_CACHE="0", **a["env"])
    try:
        r = subprocess.run([os.path.join(build, "tools", "tpcomm-doctor")] + a["argv"], capture_output=True, text=True,
                           env=env, timeout=attack["bound_s"])
    except subprocess.TimeoutExpired:
        return ("hang", "no exit within %d s" % attack["bound_s"])
    if r.returncode < 0:
        return ("crash", "signal %d" % -r.returncode)
    out = r.stdout + r.stderr
    outcome = classify(attack, r.returncode, out, 0)
    return (outcome, "exit %d: %s" % (r.returncode, out.strip().splitlines()[-1][:200] if out.strip() else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--only", default="")
    ap.add_argument("--failures", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.environ.update(NCCL_NVLS_ENABLE="0", TPCOMM_MULTICAST="0", TPCOMM_DEBUG="NONE",
                      XDG_CACHE_HOME=os.path.join(build, "campaign-cache"))
    attacks = A.all_attacks(doctor_params(build))
    only = set(filter(None, a.only.split(",")))
    chosen = [i for i, x in enumerate(attacks) if not only or x["cat"] in only]
    results = {}
    t0 = time.time()
    batch = [i for i in chosen if attacks[i]["kind"] not in ("env", "doctor")]
    results.update(run_worker_batch(build, attacks, batch))
    envs = [i for i in chosen if attacks[i]["kind"] == "env"]

    def one_env(i):
        x = attacks[i]["args"]
        return run_worker_batch(build, attacks, [i], env=dict(os.environ, **{x["var"]: x["value"]}))

    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for r in pool.map(one_env, envs):
            results.update(r)
    for i in chosen:
        if attacks[i]["kind"] == "doctor":
            results[i] = run_doctor(build, attacks[i])
    print("| category | attacks | failures | crash | hang | slow | wrong | unclear |")
    print("|---|---|---|---|---|---|---|---|")
    total, failed = 0, 0
    for cat in CATS:
        idx = [i for i in chosen if attacks[i]["cat"] == cat]
        if not idx:
            continue
        counts = {k: sum(1 for i in idx if results[i][0] == k) for k in KINDS}
        bad = len(idx) - counts["ok"]
        total, failed = total + len(idx), failed + bad
        print("| %s | %d | %d | %d | %d | %d | %d | %d |" % (cat, len(idx), bad, counts["crash"], counts["hang"],
                                                            counts["slow"], counts["wrong"], counts["unclear"]))
    print("| all | %d | %d | | | | | |" % (total, failed))
    print("(%.0f s)" % (time.time() - t0))
    if a.failures:
        for i in chosen:
            if results[i][0] != "ok":
                print("- [%s] %s / %s: %s" % (results[i][0], attacks[i]["cat"], attacks[i]["name"][:80], results[i][1]))
    return 1 if failed else 0


def worker(build, indices):
    os.environ.setdefault("TPCOMM_DEBUG", "NONE")
    attacks = A.all_attacks(doctor_params(build))
    lib = ctypes.CDLL(os.path.join(build, "libtpcomm.so"))
    for i in indices:
        print("BEGIN %d" % i, flush=True)
        t0 = time.time()
        code, msg = run_attack(lib, attacks[i])
        print("END %d %s" % (i, json.dumps([code, msg, time.time() - t0])), flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        sys.exit(worker(os.path.abspath(sys.argv[2]), [int(x) for x in sys.argv[3:]]))
    sys.exit(main())
