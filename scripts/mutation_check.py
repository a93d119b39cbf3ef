#!/usr/bin/env python3
"""Shows that the GPU fault tests fail when a fixed defect comes back (issue 21's "a test that
failed before"): each mutant puts one defect back into the source (a textual edit of the fix),
rebuilds tpcomm_gpu_tests incrementally, runs the tests written for that defect, and expects
them to FAIL; the source is restored after each mutant (also on errors), and the last step
rebuilds and runs the same tests unmutated, expecting them to pass.

    python3 scripts/mutation_check.py BUILD_DIR [--only NAME,...] [--log FILE]

Run on a GPU machine after a full build of BUILD_DIR (scripts/gpu_check.sh's). It edits the
working tree in place: run it on a copy (the GPU machine gets one), never on a checkout with
uncommitted work. Multicast stays off (NCCL_NVLS_ENABLE=0 ... are exported here too)."""
import argparse
import datetime
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, issue 21 item, file, text of the fix, the defect put back, tests that must fail.
MUTANTS = [
    ("poison_ignored", 13, "src/algos/p2p_common.cuh",
     "  *deadline = globalTimerNs() + p.timeoutNs;\n  return poison == 0;",
     "  *deadline = globalTimerNs() + p.timeoutNs;\n  return true;",
     "P2p/GpuFault.LateRankThenCallsAndReplaysNeverWrong/*"),
    ("streams_unordered", 14, "src/collectives/call_path.cc",
     "  if (!impl.haveLastStream || a.stream == impl.lastStream) {",
     "  if (true) {",
     "P2p/GpuFault.TwoStreamsAreOrdered/*"),
    ("pdl_wait_counted", 16, "src/algos/oneshot_p2p.cu",
     "  dev::pdlWait();  // inputs and the epoch may come from the previous kernel\n"
     "  uint64_t deadline;\n  if (!dev::p2pBegin(p, &deadline)) return;",
     "  uint64_t deadline;\n  const uint64_t startedNs = dev::globalTimerNs();\n  dev::pdlWait();\n"
     "  if (!dev::p2pBegin(p, &deadline)) return;\n  deadline = startedNs + p.timeoutNs;",
     "P2p/GpuFault.PdlWaitIsNotCountedAgainstTheTimeout/1"),
    # Lamport's own -0.0 unscrubbed alone is covered by the zero rule of every reduction (the
    # mutant survives: session 6); item 17's defect needs both gone.
    ("lamport_own_zero_unscrubbed", 17, "src/algos/lamport_p2p.cu",
     "        in[r] = dev::lamportScrub<T>(loadUserPack<T, kVec>(p.send, i, p.count));\n        continue;",
     "        in[r] = loadUserPack<T, kVec>(p.send, i, p.count);\n        continue;",
     "All/SignedZeros.*"),
    ("zero_rule_removed", 17, "src/algos/device_common.cuh",
     "    for (int i = 0; i < kElems; ++i) f[i] = __fadd_rn(f[i], 0.0f);\n  }",
     "    for (int i = 0; i < kElems; ++i) f[i] = f[i];\n  }",
     "All/SignedZeros.*"),
    ("gpu_signature_unchecked", 7, "src/algos/p2p_common.cuh",
     "  if (!p.signature) return true;\n  __shared__ int bad;",
     "  return true;\n  __shared__ int bad;",
     "P2p/GpuFault.MismatchedCallsAreCaughtOnTheGpu/*"),
]


def sh(cmd, timeout, log):
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        out, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = 124
    log.write("$ %s\n(rc %d, %.0f s)\n" % (" ".join(cmd), rc, time.time() - t0))
    return rc, out


def summary(out):
    lines = [l for l in out.splitlines() if l.startswith("[  PASSED  ]") or l.startswith("[  FAILED  ]")]
    return "; ".join(lines[:3])[:300]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--only", default="")
    ap.add_argument("--log", default="")
    a = ap.parse_args()
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
                      TPCOMM_MULTICAST="0")
    only = set(filter(None, a.only.split(",")))
    log = open(a.log or os.devnull, "w")
    test = os.path.join(a.build, "tests/gpu/tpcomm_gpu_tests")
    header = "# commit %s; date %s; command: %s" % (
        os.environ.get("COMMIT", "unknown"), datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        " ".join(sys.argv))
    print(header)
    log.write(header + "\n")
    rows, bad = [], 0
    chosen = [m for m in MUTANTS if not only or m[0] in only]
    for name, item, path, fixed, broken, tests in chosen:
        full = os.path.join(ROOT, path)
        src = open(full).read()
        if src.count(fixed) != 1:
            rows.append((name, item, tests, "n/a", "the fix's text is not in %s once: mutant out of date" % path))
            bad += 1
            continue
        try:
            open(full, "w").write(src.replace(fixed, broken))
            rc, out = sh(["ninja", "-C", a.build, "tpcomm_gpu_tests"], 600, log)
            if rc != 0:
                rows.append((name, item, tests, "build failed", out.strip().splitlines()[-1][:200] if out.strip() else ""))
                bad += 1
                continue
            rc, out = sh([test, "--gtest_filter=" + tests], 300, log)
            log.write(out[-20000:] + "\n")
            verdict = "FAILED (caught)" if rc != 0 else "passed (NOT caught)"
            bad += rc == 0
            rows.append((name, item, tests, verdict, "rc %d; %s" % (rc, summary(out))))
        finally:
            open(full, "w").write(src)
    # The same tests unmutated: they must pass.
    rc, out = sh(["ninja", "-C", a.build, "tpcomm_gpu_tests"], 600, log)
    filters = ":".join(m[5] for m in chosen)
    if rc == 0:
        rc, out = sh([test, "--gtest_filter=" + filters], 300, log)
        log.write(out[-20000:] + "\n")
    rows.append(("(none: the fixed code)", "-", filters, "passed" if rc == 0 else "FAILED", summary(out)))
    bad += rc != 0
    print("| mutant | item | tests | result | detail |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | `%s` | %s | %s |" % r)
        log.write("| %s | %s | `%s` | %s | %s |\n" % r)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
