#!/usr/bin/env python3
"""draft_summary.py: the tables of draft_session.sh from its logs (qwen_tp's printed lines).

  --select-traces OUTDIR --rev R: write OUTDIR/trace_n3.txt and trace_n5.txt from the greedy
      free-running runs (free.log) whose output is not degenerate (distinct 4-gram share >=
      --distinct-min), in run order;
  otherwise: print the summary (markdown): model, teacher-forced acceptance at n-max 1..N,
      free-running acceptance (degenerate runs flagged, left out of the headline), sampled
      acceptance, the replayed-trace speed-ups at the large shapes, and a short table last.
"""
import argparse
import datetime
import re
import statistics

ACC = re.compile(r"draft acceptance[^=]* = ([0-9.]+) \((\d+) accepted / (\d+) generated\), per-token acceptance = "
                 r"([0-9.]+) \((\d+) accepted / (\d+) accepted \+ first rejections\), mean accepted length = ([0-9.]+) "
                 r"\((\d+) verify rounds")
TF = re.compile(r"teacher-forced n-max (\d+): accepted/drafted = ([0-9.]+) \((\d+) / (\d+)\), per-token acceptance = "
                r"([0-9.]+) .*mean accepted length = ([0-9.]+)")
EVAL = re.compile(r"^\s*eval time = .* ([0-9.]+) tokens per second\)")
ROUND = re.compile(r"draft step \(.*\) ([0-9.]+) ms = ([0-9.]+)% of a decode step.*a round of n-max (\d+) .* costs at "
                   r"least ([0-9.]+) ms = ([0-9.]+) decode steps, (\d+)% of it drafting")


def runs(log):
    """[(command line, [lines])] of a draft_session.sh log: blocks opened by '## HH:MM:SS' lines."""
    out = []
    for line in open(log, errors="replace"):
        if re.match(r"^## \d\d:\d\d:\d\d", line):
            out.append((line, []))
        elif out:
            out[-1][1].append(line)
    return out


def parse(cmd, lines):
    r = {"cmd": cmd, "n": int(m.group(1)) if (m := re.search(r"--spec-draft-n-max (\d+)", cmd)) else 0,
         "temp": float(m.group(1)) if (m := re.search(r"--temp ([0-9.]+)", cmd)) else 0.0,
         "trace": m.group(1) if (m := re.search(r"--trace-out (\S+)", cmd)) else None,
         "shape": m.group(1) if (m := re.search(r"--model-preset (\S+)", cmd)) else None,
         "ids": None, "acc": None, "tps": [], "round": None}
    for line in lines:
        if re.match(r"^output:( \d+)*( \.\.\.)?$", line.strip()):
            r["ids"] = line.split()[1:]
        elif m := ACC.search(line):
            r["acc"] = m.groups()
        elif m := EVAL.search(line):
            r["tps"].append(float(m.group(1)))
        elif m := ROUND.search(line):
            r["round"] = m.groups()
    ids = [i for i in (r["ids"] or []) if i != "..."]
    grams = [tuple(ids[i:i + 4]) for i in range(len(ids) - 3)]
    r["distinct"] = len(set(grams)) / len(grams) if grams else float("nan")
    return r


def free_runs(log):
    return [parse(c, l) for c, l in runs(log) if "--prompt-file" in c and "qwen_tp" in c]


def select_traces(args):
    keep, every = {3: [], 5: []}, {3: [], 5: []}
    for r in free_runs(args.free):
        if r["trace"] and r["n"] in keep and r["temp"] == 0 and r["ids"] is not None:
            every[r["n"]].append(r["trace"])
            if r["distinct"] >= args.distinct_min:
                keep[r["n"]].append(r["trace"])
    for n, files in keep.items():
        what = "non-degenerate"
        if not files and every[n]:  # every run degenerate: replay them all, and say so
            files, what = every[n], "(ALL DEGENERATE: no non-degenerate run)"
        with open("%s/trace_n%d.txt" % (args.select_traces, n), "w") as f:
            f.write("# commit %s\n# date %s\n# command: draft_session.sh (draft_summary.py --select-traces): the rounds "
                    "of %d %s greedy runs at n-max %d on held-out prefixes\n"
                    % (args.rev, datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       len(files), what, n))
            for p in files:
                f.write(open(p).read())
        print("trace n-max %d: %d %s runs" % (n, len(files), what))


def sums(rs):
    a = sum(int(r["acc"][1]) for r in rs)
    d = sum(int(r["acc"][2]) for r in rs)
    first = sum(int(r["acc"][5]) for r in rs)
    rounds = sum(int(r["acc"][7]) for r in rs)
    return a, d, first, rounds


def fmt_acc(rs):
    a, d, first, rounds = sums(rs)
    if not d:
        return "-", "-", "-"
    return "%.3f (%d/%d)" % (a / d, a, d), "%.3f" % (a / first if first else 0), "%.2f" % (1 + a / rounds)


def summary(args):
    p = print
    train = open(args.train, errors="replace").read().splitlines()
    pick = lambda key: [l.replace("[train] ", "") for l in train if key in l]
    p("## Model and corpus\n")
    for key in ("corpus:", "tokenizer:", "model:", "trained ", "deadline", "--keep-best: keeping", "held-out (",
                "probe at step"):
        for l in pick(key)[-1:]:
            p("- " + l)
    for l in pick("held-out MTP"):
        p("- " + l)
    tf = {int(m.group(1)): m.groups() for l in open(args.tf, errors="replace") if (m := TF.search(l))}
    head = [l.strip() for l in open(args.tf, errors="replace") if l.startswith("teacher-forced:")]
    p("\n## Teacher-forced acceptance (held-out text)\n")
    p(head[-1] if head else "(no teacher-forced result: see tf.log)")
    for l in open(args.tf, errors="replace"):
        if l.startswith("teacher-forced n-max") or l.startswith("teacher-forced draft i"):
            p("- " + l.strip())
    free = free_runs(args.free)
    greedy = [r for r in free if r["temp"] == 0 and r["acc"]]
    sampled = [r for r in free if r["temp"] > 0 and r["acc"]]
    nmax = sorted(set(tf) | {r["n"] for r in greedy})
    p("\n## Free-running (held-out prefixes, greedy); degenerate = distinct 4-gram share < %.2f\n" % args.distinct_min)
    p("| n-max | runs | degenerate | accepted/drafted (headline: non-degenerate) | per-token | mean length | "
      "accepted/drafted, all runs | distinct 4-grams lowest / mean |")
    p("|---|---|---|---|---|---|---|---|")
    free_rows = {}
    for n in nmax:
        rs = [r for r in greedy if r["n"] == n]
        if not rs:
            continue
        good = [r for r in rs if r["distinct"] >= args.distinct_min]
        free_rows[n] = fmt_acc(good)
        ds = [r["distinct"] for r in rs]
        p("| %d | %d | %d | %s | %s | %s | %s | %.2f / %.2f |" % (n, len(rs), len(rs) - len(good), *free_rows[n],
                                                               fmt_acc(rs)[0], min(ds), statistics.mean(ds)))
    own = [float(m.group(2)) for l in open(args.free, errors="replace")
           if (m := re.search(r"^## prefix\d+: .*the text's own next (\d+) tokens: distinct 4-gram share ([0-9.]+)", l))]
    if own:
        p("\nThe held-out files' own continuations of the same prompts (as many tokens as a run makes): distinct "
          "4-gram share lowest %.2f / mean %.2f, %d of %d under %.2f" % (min(own), statistics.mean(own),
                                                                     sum(d < args.distinct_min for d in own), len(own),
                                                                     args.distinct_min))
    prompts = {}
    for r in greedy:
        m = re.search(r"--prompt-file (\S+)", r["cmd"])
        prompts.setdefault(m.group(1) if m else "?", set()).add(" ".join(r["ids"] or []))
    same = sum(len(v) == 1 for v in prompts.values())
    p("\nGreedy speculation is greedy decoding: the output ids are the same at every n-max for %d of %d prompts%s"
      % (same, len(prompts), "" if same == len(prompts) else " (FAILED: a speculative run differs from the others)"))
    if sampled:
        good = [r for r in sampled if r["distinct"] >= args.distinct_min]
        p("\nSampled (--temp %.2f, n-max 3, seeds 1..%d): accepted/drafted %s, per-token %s, mean length %s over the %d "
          "non-degenerate of %d runs (all runs: %s)" % (sampled[0]["temp"], len(sampled), *fmt_acc(good), len(good),
                                                        len(sampled), fmt_acc(sampled)[0]))
    rep = [parse(c, l) for c, l in runs(args.replay) if "--model-preset" in c]
    p("\n## Replayed traces at the large shapes (TP=1, random weights, 512-token prompt)\n")
    p("| shape | n-max | MTP off tok/s (A runs; B's own) | MTP on tok/s | speed-up (on / mean off) | accepted/drafted | "
      "mean length | draft step, share of a round (profile) |")
    p("|---|---|---|---|---|---|---|---|")
    rep_rows = []
    for shape in dict.fromkeys(r["shape"] for r in rep):
        rs = [r for r in rep if r["shape"] == shape]
        offs = [r["tps"][0] for r in rs if r["n"] == 0 and r["tps"]]
        for n in sorted({r["n"] for r in rs if r["n"]}):
            bs = [r for r in rs if r["n"] == n and len(r["tps"]) >= 2]
            if not bs:
                continue
            own = [r["tps"][0] for r in bs]
            on = [r["tps"][1] for r in bs]
            off = statistics.mean(offs + own)
            prof = [r["round"] for r in bs if r["round"]]
            share = ("%s ms = %s%% of a decode step; round %s decode steps, %s%% drafting" % (prof[0][0], prof[0][1], prof[0][4],
                                                                                            prof[0][5]) if prof else "-")
            speed = statistics.mean(on) / off
            p("| %s | %d | %s; %s | %s | **%.2fx** | %s | %s | %s |" % (
                shape, n, " ".join("%.1f" % x for x in offs), " ".join("%.1f" % x for x in own),
                " ".join("%.1f" % x for x in on), speed, fmt_acc(bs)[0], fmt_acc(bs)[2], share))
            rep_rows.append((shape, n, speed))
    p("\n## Short table\n")
    p("| n-max | " + " | ".join(str(n) for n in nmax) + " |")
    p("|---" * (len(nmax) + 1) + "|")
    p("| teacher-forced accepted/drafted | " + " | ".join(tf[n][1] if n in tf else "-" for n in nmax) + " |")
    p("| teacher-forced per-token | " + " | ".join(tf[n][4] if n in tf else "-" for n in nmax) + " |")
    p("| teacher-forced mean length | " + " | ".join(tf[n][5] if n in tf else "-" for n in nmax) + " |")
    p("| free-running accepted/drafted (non-degenerate) | " +
      " | ".join(free_rows[n][0].split()[0] if n in free_rows else "-" for n in nmax) + " |")
    p("| free-running mean length | " + " | ".join(free_rows[n][2] if n in free_rows else "-" for n in nmax) + " |")
    for shape, n, speed in rep_rows:
        p("\n%s, n-max %d, replayed trace: %.2fx decode against MTP off" % (shape, n, speed), end="")
    p("")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train")
    ap.add_argument("--tf")
    ap.add_argument("--free", required=True)
    ap.add_argument("--replay")
    ap.add_argument("--distinct-min", type=float, default=0.5)
    ap.add_argument("--select-traces", metavar="OUTDIR")
    ap.add_argument("--rev", default="unknown")
    args = ap.parse_args()
    select_traces(args) if args.select_traces else summary(args)


if __name__ == "__main__":
    main()
