#!/usr/bin/env python3
"""Plots allreduce_perf --json results: out-of-place latency vs message size, one line per -A
table (tpcomm auto, each algorithm, NCCL), one panel per JSON file, plus tpcomm/NCCL ratio.

  bench/plot.py OUT.png RUN1.json [RUN2.json ...]

Each JSON is one allreduce_perf run; its title says eager or CUDA graph and the rank count.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        run = json.load(f)
    cfg = run["config"]
    mode = f"CUDA graph (-G {cfg['graph']})" if cfg.get("graph") else "eager"
    title = f"{cfg['nranks']} ranks, {cfg['type']}, {mode}"
    series = {}
    for t in run["tables"]:
        rows = [r for r in t["results"] if r["out_of_place"]["time"] > 0]
        series[t["algo"]] = ([r["size"] for r in rows], [r["out_of_place"]["time"] for r in rows])
    return title, series


def human(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div:
            return f"{n // div}{unit}"
    return str(n)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, paths = sys.argv[1], sys.argv[2:]
    fig, axes = plt.subplots(2, len(paths), figsize=(7 * len(paths), 9), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 1.3]})
    for col, path in enumerate(paths):
        title, series = load(path)
        top, bottom = axes[0][col], axes[1][col]
        for name, (sizes, times) in series.items():
            style = {"linewidth": 2.5, "color": "black"} if name == "nccl" else {"linewidth": 1.5}
            top.plot(sizes, times, marker="o", markersize=3, label=name, **style)
        top.set_xscale("log", base=2)
        top.set_yscale("log")
        top.set_title(title)
        top.set_ylabel("time per all-reduce (us, median)")
        top.grid(True, which="both", alpha=0.3)
        top.legend()
        if "nccl" in series:
            ref = dict(zip(*series["nccl"]))
            for name, (sizes, times) in series.items():
                if name == "nccl":
                    continue
                pts = [(s, t / ref[s]) for s, t in zip(sizes, times) if s in ref]
                bottom.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=name)
            bottom.axhline(1.0, color="black", linewidth=1)
            bottom.axhline(0.5, color="gray", linewidth=1, linestyle="--")
        bottom.set_xscale("log", base=2)
        bottom.set_ylabel("time / NCCL time")
        bottom.set_xlabel("message size (bytes)")
        ticks = [1 << k for k in range(3, 31, 3)]
        for ax in (top, bottom):
            ax.set_xticks(ticks)
            ax.set_xticklabels([human(t) for t in ticks])
        bottom.grid(True, which="both", alpha=0.3)
        bottom.set_ylim(0, 2.5)
    fig.suptitle("tpcomm vs NCCL all-reduce, same binary and buffers (allreduce_perf)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
