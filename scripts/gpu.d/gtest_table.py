#!/usr/bin/env python3
"""gtest_table.py DIR: a table of gtest results per run and algorithm, for `scripts/gpu.sh ranks`.

For every DIR/<run>.list (the output of --gtest_list_tests, which names each parameterised
test's parameters) and DIR/<run>.txt (the run's output, possibly cut short by a timeout), counts
per algorithm the tests that passed, failed, were skipped and were not reached; then, per run,
the seconds its finished test suites took and the slowest four; then the last line of each
DIR/decoder_tp*.txt."""
import glob
import os
import re
import sys

ALGOS = ["lamport", "oneshot", "twoshot", "ll", "staged", "ring_nccl", "auto"]


def algo_of(text):
    text = text.lower()
    base = next((a for a in ALGOS if re.search(r"(^|[^a-z])" + a + r"(_|\b)", text)), "other")
    if "fused" in text or "rmsnorm" in text:
        base = "fused/" + base
    if re.search(r"int8|fp8|compress|quantiz", text):
        base += "+q"
    return base


def main(d):
    rows, tot = {}, [0, 0, 0, 0]
    for lst in sorted(glob.glob(os.path.join(d, "*.list"))):
        tag = os.path.basename(lst)[:-5]
        params, suite = {}, ""
        for line in open(lst, errors="replace"):
            if line.strip() and not line.startswith(" ") and line.split()[0].endswith("."):
                suite = line.split()[0]
            elif line.startswith("  ") and suite:
                parts = line.strip().split("#", 1)
                params[suite + parts[0].strip()] = parts[1] if len(parts) > 1 else ""
        seen = {}
        log = os.path.join(d, tag + ".txt")
        for line in open(log, errors="replace") if os.path.exists(log) else []:
            line = re.sub(r"\x1b\[[0-9;]*m", "", line)  # gtest's colours (mpirun gives it a terminal)
            m = re.match(r"\[\s*(OK|FAILED|SKIPPED)\s*\] ([^\s,]+)", line)
            if m and m.group(2) in params:
                seen[m.group(2)] = m.group(1)
        for name, p in params.items():
            r = rows.setdefault((tag, algo_of(name + " " + p)), [0, 0, 0, 0])
            k = {"OK": 0, "FAILED": 1, "SKIPPED": 2}.get(seen.get(name), 3)
            r[k] += 1
            tot[k] += 1
    print("%-10s %-18s %7s %7s %7s %11s" % ("run", "algorithm", "passed", "failed", "skipped", "not reached"))
    for (tag, a), v in sorted(rows.items()):
        print("%-10s %-18s %7d %7d %7d %11d" % (tag, a, *v))
    print("%-10s %-18s %7d %7d %7d %11d" % ("all", "", *tot))
    # Where each run's time went: its slowest test suites (gtest's "(N ms total)" lines), to size
    # the shares of a call.
    for log in sorted(glob.glob(os.path.join(d, "*.txt"))):
        suites = []
        for line in open(log, errors="replace"):
            m = re.match(r"\[-+\] (\d+) tests? from (\S+) \((\d+) ms total\)", re.sub(r"\x1b\[[0-9;]*m", "", line))
            if m:
                suites.append((int(m.group(3)), m.group(2), int(m.group(1))))
        if suites:
            suites.sort(reverse=True)
            top = ", ".join("%s %.1f s (%d)" % (name, ms / 1000, n) for ms, name, n in suites[:4])
            print("%-10s suites %.1f s; slowest: %s" % (os.path.basename(log)[:-4], sum(x[0] for x in suites) / 1000, top))
    for f in sorted(glob.glob(os.path.join(d, "decoder_tp*.txt"))):
        lines = open(f, errors="replace").read().strip().splitlines()
        if lines:
            print(lines[-1])


if __name__ == "__main__":
    main(sys.argv[1])
