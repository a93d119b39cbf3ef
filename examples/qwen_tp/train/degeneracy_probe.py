#!/usr/bin/env python3
"""degeneracy_probe.py --model-dir CKPT --corpus DIR [--prompts 8] [--split heldout]: how often a
train_tiny_qwen.py checkpoint's greedy text is a loop, in PyTorch, without qwen_tp or a GPU.

The prompts are built as draft_session.sh builds its free-running prompts (heldout_prompts.py:
PREFIX_CHARS characters ending at a line break inside a long file of the split, the same cut
points), --prompts of them; each gets --predict greedy tokens (argmax, the first from the prompt),
and the run is degenerate when the share of distinct 4-grams among its ids is under --distinct-min,
as draft_summary.py counts it. Prints one line per prompt and the count; --show prints the text.
The checkpoint's bf16 weights run in fp32 here, and the prompts in one left-padded batch, so a
near tie can go the other way than in qwen_tp: the count is a cheap stand-in for the session's,
not its replacement.
"""
import argparse
import json
import os
import sys
from dataclasses import fields

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from heldout_prompts import distinct4, load_split, prefixes  # noqa: E402
from qwen_tiny_model import TinyQwen, TinyQwenConfig  # noqa: E402


def greedy_runs(model, tok, texts, n_predict, device, graph=False):
    """[(distinct 4-gram share, ids)] of each prompt's greedy continuation, the prompts in one
    batch, padded on the left (generate_greedy's pad; graph: its fixed-buffer steps)."""
    if not texts:
        return []
    enc = [tok.encode(t).ids for t in texts]
    T0 = max(len(e) for e in enc)
    ids = torch.tensor([[0] * (T0 - len(e)) + e for e in enc], device=device)
    pad = torch.tensor([[True] * (T0 - len(e)) + [False] * len(e) for e in enc], device=device)
    was_training = model.training
    model.eval()
    gen = model.generate_greedy(ids, n_predict, pad, graph=graph).tolist()
    model.train(was_training)
    return [(distinct4(g), g) for g in gen]


def load_checkpoint(folder, device):
    from safetensors.torch import load_file
    with open(os.path.join(folder, "config.json")) as f:
        hf = json.load(f)
    names = {f.name for f in fields(TinyQwenConfig)}
    cfg = TinyQwenConfig(**{k: v for k, v in hf.items() if k in names})
    if "rope_parameters" in hf:
        cfg.rope_theta = hf["rope_parameters"]["rope_theta"]
    model = TinyQwen(cfg)
    model.load_state_dict({k: v.float() for k, v in load_file(os.path.join(folder, "model.safetensors")).items()})
    return model.to(device)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--corpus", required=True, help="a make_corpus.py folder")
    ap.add_argument("--split", default="heldout", choices=("heldout", "valid", "train"))
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prefix-chars", type=int, default=800)
    ap.add_argument("--predict", type=int, default=64)
    ap.add_argument("--distinct-min", type=float, default=0.5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--show", action="store_true", help="print each continuation's text")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(args.model_dir, "tokenizer.json"))
    model = load_checkpoint(args.model_dir, args.device)
    ps = prefixes(load_split(os.path.join(args.corpus, "corpus.jsonl.xz"), args.split), args.prompts, args.prefix_chars)
    runs = greedy_runs(model, tok, [p[3] for p in ps], args.predict, args.device)
    for (name, start, end, _), (d, ids) in zip(ps, runs):
        print("%.2f%s  characters %d..%d of %s" % (d, " DEGENERATE" if d < args.distinct_min else "", start, end, name))
        if args.show:
            print("    " + tok.decode(ids).replace("\n", "\n    "))
    bad = sum(d < args.distinct_min for d, _ in runs)
    print("degenerate: %d of %d (distinct 4-gram share < %.2f over %d tokens); mean share %.3f"
          % (bad, len(runs), args.distinct_min, args.predict, sum(d for d, _ in runs) / max(1, len(runs))))


if __name__ == "__main__":
    main()
