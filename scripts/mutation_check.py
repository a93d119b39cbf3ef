#!/usr/bin/env python3
"""Shows that the tests written for fixed defects fail when a defect comes back (a test that
cannot fail proves nothing): each mutant puts one defect back into the source (a textual
edit of the fix, one or more edits, each of whose fix text must occur exactly once), rebuilds
incrementally, runs the tests written for that defect, and expects them to FAIL; every edited
file is restored after each mutant (also on errors and Ctrl-C), and the last step rebuilds and
runs the same tests unmutated, expecting them to pass.

    python3 scripts/mutation_check.py BUILD_DIR [--cpu | --ci] [--only NAME,...] [--log FILE] [--check]

GPU mutants (the default): run on a GPU machine after a full build of BUILD_DIR
(scripts/gpu.sh tests makes one); each rebuilds tpcomm_gpu_tests (or its own test binary:
GPU_OTHER_MUTANTS) and runs a gtest filter of it.
Multicast stays off (NCCL_NVLS_ENABLE=0 ... are exported here too).

CPU mutants (--cpu): run anywhere the CPU tests run (CI's machine; mpirun for the MPI ones),
after a full build of BUILD_DIR; each rebuilds its targets with ninja (all of them for a
CMakeLists.txt edit) and runs `ctest -R REGEX` in BUILD_DIR and/or a test executable with a
gtest filter. Results: bench/results/ci-vm-2core.md and bench/results/h200x1.md.

--ci: the handful of CPU mutants marked ci=True (a reduction, bounds, error paths): what CI runs
after its build and tests; each must turn its test red, and the unmutated run must pass.

--check only verifies that every chosen mutant's fix text is in the source once (no build).
It edits the working tree in place: run it on a copy or a clean checkout, never on one with
uncommitted work."""
import argparse
import datetime
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from mutants import CPU_MUTANTS, GPU_OTHER_MUTANTS, MUTANTS  # noqa: E402  (scripts/mutants.py, beside this file)


def gpu_mutants():
    """The GPU table in the CPU table's form."""
    return [dict(name=m[0], item=m[1], edits=[(m[2], m[3], m[4])], targets=["tpcomm_gpu_tests"],
                 tests=[("gtest", "tests/gpu/tpcomm_gpu_tests", m[5]) + ((m[6],) if len(m) > 6 else ())])
            for m in MUTANTS] + GPU_OTHER_MUTANTS


def sh(cmd, timeout, log, cwd=ROOT):
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        out, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = 124
    log.write("$ %s\n(rc %d, %.0f s)\n" % (" ".join(cmd), rc, time.time() - t0))
    log.flush()
    return rc, out


def summary(out):
    keep = ("[  PASSED  ]", "[  FAILED  ]", "tests passed", "***Timeout", "***Failed", "Exception:", "passed,")
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)  # gtest colours under mpiexec
    lines = [l.strip() for l in out.splitlines() if any(k in l for k in keep)]
    return "; ".join(lines[:4])[:300].replace("|", "/")


def clip(out):
    """The first 6000 and the last 14000 characters of a long output (first failures and summary)."""
    return out if len(out) <= 20000 else out[:6000] + "\n[... %d characters left out ...]\n" % (len(out) - 20000) + out[-14000:]


def describe(tests):
    return " + ".join("ctest -R '%s'" % t[1] if t[0] == "ctest" else "%s --gtest_filter=%s" % (os.path.basename(t[1]), t[2])
                      for t in tests)


def build(build_dir, targets, log, jobs):
    cmd = ["ninja", "-C", build_dir] + (["-j", str(jobs)] if jobs else []) + list(targets)
    return sh(cmd, 3600, log)


def run_tests(build_dir, tests, log):
    """(failed, detail, empty): failed when any test failed (rc != 0); empty when a regex or
    filter matched no test (neither a catch nor a pass: the mutant's test list is out of date)."""
    failed, empty, details = False, False, []
    for t in tests:
        if t[0] == "ctest":
            rc, out = sh(["ctest", "-R", t[1], "--output-on-failure"], 1800, log, cwd=build_dir)
            empty |= "No tests were found" in out
        else:
            exe = os.path.join(build_dir, t[1])
            wrapper = list(t[3]) if len(t) > 3 else []  # e.g. compute-sanitizer --tool synccheck
            rc, out = sh(wrapper + [exe, "--gtest_filter=" + t[2]], 1800, log, cwd=os.path.dirname(exe))
            empty |= "[==========] 0 tests" in out
        log.write(clip(out) + "\n")
        failed |= rc != 0
        details.append("%s rc %d%s" % (os.path.basename(t[1]), rc, (": " + summary(out)) if summary(out) else ""))
    return failed, "; ".join(details), empty


def apply_mutant(m):
    """Edits the files; returns {path: original text}, or raises ValueError when a fix's text is
    not in its file exactly once (nothing is left edited then)."""
    originals, texts = {}, {}
    for path, fixed, broken in m["edits"]:
        full = os.path.join(ROOT, path)
        if full not in texts:
            texts[full] = originals[full] = open(full).read()
        if texts[full].count(fixed) != 1:
            raise ValueError("the fix's text is in %s %d times, not once: mutant out of date" % (path, texts[full].count(fixed)))
        texts[full] = texts[full].replace(fixed, broken)
    return originals, texts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--cpu", action="store_true", help="the CPU mutants (default: the GPU ones)")
    ap.add_argument("--ci", action="store_true", help="the CPU mutants marked ci=True (CI's handful)")
    ap.add_argument("--only", default="")
    ap.add_argument("--log", default="")
    ap.add_argument("--jobs", type=int, default=0, help="ninja -j (default: ninja's)")
    ap.add_argument("--check", action="store_true", help="only check that every fix text is there once")
    a = ap.parse_args()
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
                      TPCOMM_MULTICAST="0")
    a.build = os.path.abspath(a.build)
    only = set(filter(None, a.only.split(",")))
    table = [m for m in CPU_MUTANTS if m.get("ci")] if a.ci else CPU_MUTANTS if a.cpu else gpu_mutants()
    chosen = [m for m in table if not only or m["name"] in only]
    if only - {m["name"] for m in chosen}:
        print("unknown mutant(s): %s" % ", ".join(sorted(only - {m["name"] for m in chosen})))
        return 2
    if a.check:
        bad = 0
        for m in chosen:
            try:
                apply_mutant(m)
                print("ok   %s" % m["name"])
            except ValueError as e:
                print("BAD  %s: %s" % (m["name"], e))
                bad += 1
        return 1 if bad else 0
    log = open(a.log or os.devnull, "w")
    commit = os.environ.get("COMMIT", "")
    if not commit:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        commit = r.stdout.strip() if r.returncode == 0 else "unknown"
    header = "# commit %s; date %s; command: %s" % (
        commit, datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), " ".join(sys.argv))
    print(header, flush=True)
    log.write(header + "\n")
    rows, bad = [], 0
    for m in chosen:
        t0 = time.time()
        try:
            originals, texts = apply_mutant(m)
        except ValueError as e:
            rows.append((m["name"], m["item"], describe(m["tests"]), "n/a", str(e)))
            bad += 1
            continue
        log.write("## mutant %s (item %s)\n" % (m["name"], m["item"]))
        try:
            for full, text in texts.items():
                open(full, "w").write(text)
            rc, out = build(a.build, m["targets"], log, a.jobs)
            if rc != 0:
                log.write(out[-5000:] + "\n")
                rows.append((m["name"], m["item"], describe(m["tests"]), "build failed",
                             out.strip().splitlines()[-1][:200] if out.strip() else ""))
                bad += 1
                continue
            failed, detail, empty = run_tests(a.build, m["tests"], log)
            verdict = "no test matched" if empty else "FAILED (caught)" if failed else "passed (NOT caught)"
            rows.append((m["name"], m["item"], describe(m["tests"]), verdict, detail))
            bad += empty or not failed
        finally:
            for full, text in originals.items():
                open(full, "w").write(text)
        print("%s: %s (%.0f s)" % (m["name"], rows[-1][3], time.time() - t0), flush=True)
    # The same tests unmutated: they must pass.
    targets = sorted({t for m in chosen for t in m["targets"]})
    if any(not m["targets"] for m in chosen):
        targets = []
    tests = []
    for m in chosen:
        for t in m["tests"]:
            if t not in tests:
                tests.append(t)
    rc, out = build(a.build, targets, log, a.jobs)
    if rc == 0:
        failed, detail, empty = run_tests(a.build, tests, log)
        failed |= empty
    else:
        failed, detail = True, "build failed: " + (out.strip().splitlines()[-1][:200] if out.strip() else "")
    rows.append(("(none: the fixed code)", "-", describe(tests), "FAILED" if failed else "passed", detail))
    bad += failed
    print("| mutant | item | tests | result | detail |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | `%s` | %s | %s |" % r)
        log.write("| %s | %s | `%s` | %s | %s |\n" % r)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
