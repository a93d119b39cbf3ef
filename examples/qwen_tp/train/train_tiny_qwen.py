#!/usr/bin/env python3
"""train_tiny_qwen.py [--out DIR] [--corpus DIR] [--minutes 8] [--device cuda|cpu] [--preset P | --tiny] [--steps N]
    [--seed S] [--unlikelihood ALPHA] [--seq-unlikelihood BETA] [--ditto W] [--probe N] [--compile]
    [--fast-generate] [--time-steps N]

Trains, within a time budget, a small Qwen3 with a real MTP head for examples/qwen_tp, on a corpus
every machine has: the Python standard library's .py files (site-packages and dist-packages left
out; every 20th file, in sorted order, held out for evaluation). --extra-corpus MB adds up to MB
megabytes of the installed packages' .py files to the training set only (never to the held-out
or validation files, and none that shares a name or text with one of them). --corpus DIR reads
a corpus made by make_corpus.py instead (DIR/corpus.jsonl.xz with its train / valid / heldout
splits, DIR/tokenizer.json): the standard library, the Python documentation and permissively
licensed packages, prepared on a machine with the packages and carried to one without. Steps:

1. A byte-level BPE with Qwen2's pre-tokenizer settings (tests/tokenizer/make_reference.py's
   build_tokenizer, which qwen_tp's tokenizer is tested against), vocabulary --vocab-size
   (4096 ids in all: the trained merges, <|endoftext|>, <|im_start|>, <|im_end|>, <think>, </think>).
2. A Qwen3 (--preset base, the default: 8 layers, hidden 512, 8 query / 4 KV heads of 64, SwiGLU
   2048, untied lm_head; wide: 12 layers, hidden 768; small and tiny for CPU runs)
   plus an MTP head in the Qwen3-Next layout (qwen_tiny_model.py) trained to predict token t+2;
   loss = CE(next token) + --mtp-weight * CE(MTP, t+2). AdamW, warmup then cosine over the time
   budget (or over --steps when given), bf16 autocast on CUDA. --mtp-distill W mixes into the
   MTP loss, with weight W, the cross-entropy against the target's own (detached) distribution at
   the position the MTP predicts: speculation accepts a draft when it equals the target's token,
   not the text's, so the head learns the target (self-distillation, as Medusa-2 and EAGLE do).
   Against greedy loops (Welleck et al. 2019, "Neural text generation with unlikelihood
   training"): --unlikelihood ALPHA adds ALPHA x the token-level unlikelihood of the next-token
   head (-log(1 - p) of each token of the window so far that is not the next token), and
   --seq-unlikelihood BETA, every --seq-ul-every steps from --seq-ul-from of the run on, has the
   model continue --seq-ul-rows prefixes greedily and adds BETA x -log(1 - p) of each continuation
   token inside a repeated 4-gram. --ditto W (Xu et al. 2022, "Learning to break the loop")
   adds, on --ditto-rows rows that repeat a segment of the batch's text, W x a loss that pulls the
   probability of each further copy's token to --ditto-lambda x that of the copy before: no
   generation, one more forward and backward. None touches the MTP head's loss: its job is the
   target's greedy token, repeated or not, and --mtp-distill teaches it the target so trained.
3. DIR/config.json, DIR/model.safetensors (bf16), DIR/tokenizer.json, DIR/tokenizer_config.json,
   and DIR/heldout_files.txt (the evaluation files), in Hugging Face layout; held-out next-token and
   MTP (t+2) top-1 accuracy printed and written to DIR/train_metrics.json. --probe N: how many of
   N greedy continuations (64 tokens) of --probe-split prompts (validation by default), built as
   draft_session.sh builds its held-out ones, are loops (degeneracy_probe.py's measure), at the
   end (and at each validation with --probe-during); reported, never used to choose weights.

--keep-best guards against over-fitting (four GPU minutes are ~25 epochs of this corpus, and the
held-out loss then rises: bench/results/h200x1.md): every 10th file of the
training set (offset 10 of 20) becomes a validation set, the validation loss (next token plus
MTP) is measured every --eval-seconds (with --steps: every tenth of the steps, so the result
stays deterministic), and the weights of the best measurement are the ones saved. The held-out files stay untouched by that choice.

Deterministic for a given seed and step count (--steps): the same initialisation, batches and
schedule (a GPU's kernels may still round differently from run to run); with a time budget the
step count is what fits. --minutes bounds the whole script (tokenizer, encoding, training,
evaluation, save), with --steps too: a run cut short by it says so.
Speed (none of these changes a default run): --compile runs a training step's forward, MTP chain
and losses through torch.compile (static shapes, compiled once before the schedule's clock starts
but within --minutes; --compile-mode picks the mode; if compiling fails the run says so and stays
eager); the batch sampling, --seq-unlikelihood's generation, evaluation and probes stay eager.
--fast-generate runs the greedy continuations of --seq-unlikelihood and --probe against fixed
key/value buffers, the one-token step captured as a CUDA graph once per shape and replayed by every
later call of that shape (eager steps are hundreds of small kernels each); the same tokens up to
rounding, so not the default's bits.
--time-steps N is a calibration: the corpus and tokenizer as usual, 3 warm-up steps, N timed
ones, then ms per step and tokens/s printed, and an exit without evaluating or writing anything
to --out. It also prints the mean step time by kind (plain, with a sequence-level pass, with a
DITTO pass; each timed step synchronised at its end), so `--seq-unlikelihood 1 --seq-ul-from 0
--seq-ul-every 2` times both kinds of step in one process and one compile.
`--device cpu --minutes 0.5 --tiny` runs on a CPU in about half a minute (2 layers, hidden 64,
vocab 1024, 80 of the files): a checkpoint to try the pipeline with, not a useful model.
"""
import argparse
import hashlib
import json
import math
import os
import random
import sys
import sysconfig
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "tokenizer"))
from qwen_tiny_model import TinyQwen, TinyQwenConfig  # noqa: E402
from heldout_prompts import ordered, prefixes  # noqa: E402
from degeneracy_probe import greedy_runs  # noqa: E402

EOT = "<|endoftext|>"
# --preset: the model, and the training window, windows per step and peak learning rate it defaults to.
PRESETS = {
    # a CPU smoke run: 2 layers, hidden 64 (0.3M parameters), 80 files
    "tiny": (dict(vocab_size=1024, hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=1024), 128, 16, 3e-3),
    # CPU experiments at the corpus's 4096-token vocabulary: 4 layers, hidden 128 (2.3M parameters,
    # 1-2k tokens/s on one core with --mtp-chain 1)
    "small": (dict(hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32, max_position_embeddings=1024), 256, 16, 3e-3),
    # 8 layers, hidden 512 (40.1M parameters)
    "base": (dict(), 512, 64, 2e-3),
    # 12 layers, hidden 768 (120.0M parameters): about 2.85x base's training FLOPs per token
    "wide": (dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                  num_key_value_heads=4, head_dim=64), 512, 64, 1.5e-3),
}


def log(msg):
    print("[train] %s" % msg, flush=True)


def stdlib_files():
    """Sorted .py files of the standard library, without installed packages."""
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("site-packages", "dist-packages", "__pycache__"))
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
    return root, out


def package_files(limit_bytes, exclude_names, exclude_texts):
    """Up to limit_bytes of .py files from the installed packages (site-packages / dist-packages),
    for training only. Chosen in an order fixed by a hash of each file's path below its packages
    folder, so the choice is the same on every machine with the same packages. A file is left out
    when its name is that of a held-out or validation file (vendored copies of standard modules,
    for example a configparser backport) or its text equals one of theirs."""
    roots = []
    for key in ("purelib", "platlib"):
        roots.append(sysconfig.get_paths().get(key, ""))
    try:
        import site
        roots += site.getsitepackages()
    except AttributeError:  # some virtualenvs' site module
        pass
    seen, used, cands = set(), [], []
    for root in roots:
        if not root or not os.path.isdir(root) or os.path.realpath(root) in seen:
            continue
        seen.add(os.path.realpath(root))
        used.append(root)
        for d, dirs, files in os.walk(root):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for f in files:
                if f.endswith(".py") and f not in exclude_names:
                    full = os.path.join(d, f)
                    rel = os.path.relpath(full, root)
                    cands.append((hashlib.sha1(rel.encode()).hexdigest(), rel, full))
    cands.sort()
    out, total, rels = [], 0, set()
    for _, rel, full in cands:
        if rel in rels:  # the same package in two of the folders
            continue
        try:
            size = os.path.getsize(full)
        except OSError:
            continue
        if size == 0 or size > 2_000_000 or total + size > limit_bytes:
            continue
        text = read_texts([full])[0]
        if not text or text in exclude_texts:
            continue
        rels.add(rel)
        out.append(text)
        total += size
    return out, total, used


def load_corpus(folder, max_files, vocab_size):
    """make_corpus.py's folder: (train, valid, held-out texts, held-out names, tokenizer or None
    when its tokenizer.json does not fit vocab_size, description, {split: [(path, name, text)]}).
    max_files > 0 takes every n-th training file and every n-th held-out file of each split (the
    --tiny smoke run)."""
    import lzma
    from tokenizers import Tokenizer
    splits = {"train": [], "valid": [], "heldout": []}
    with lzma.open(os.path.join(folder, "corpus.jsonl.xz"), "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            splits[r["split"]].append((r["source"] + ":" + r["path"], r["text"], r["path"]))
    if max_files:
        for k in splits:
            splits[k] = splits[k][::max(1, len(splits[k]) // max(1, max_files // (20 if k != "train" else 1)))]
    tok = None
    tpath = os.path.join(folder, "tokenizer.json")
    if os.path.exists(tpath):
        tok = Tokenizer.from_file(tpath)
        if tok.get_vocab_size() > vocab_size:
            tok = None  # trained here instead, at the model's vocabulary
    nbytes = sum(len(t) for k in splits for _, t, _ in splits[k])
    return ([t for _, t, _ in splits["train"]], [t for _, t, _ in splits["valid"]],
            [t for _, t, _ in splits["heldout"]], [n for n, _, _ in splits["heldout"]], tok,
            "%s (%.0f MB of text)" % (folder, nbytes / 1e6), {k: [(p, n, t) for n, t, p in v] for k, v in splits.items()})


def read_texts(paths):
    texts = []
    for p in paths:
        try:
            with open(p, encoding="utf-8") as f:
                texts.append(f.read())
        except (UnicodeDecodeError, OSError):
            texts.append("")
    return texts


def encode_stream(tok, texts, eot_id):
    """One token stream: each text's ids, then <|endoftext|>. In slices, so a corpus of tens of
    millions of tokens never sits in Python lists."""
    parts = []
    texts = [t for t in texts if t]
    for i in range(0, len(texts), 512):
        for enc in tok.encode_batch(texts[i:i + 512]):
            parts.append(torch.tensor(enc.ids + [eot_id], dtype=torch.int32))
    return torch.cat(parts).long() if parts else torch.zeros(0, dtype=torch.long)


def batch_at(data, starts, length):
    return torch.stack([data[s:s + length] for s in starts])


class CrossEntropyUnlikelihood(torch.autograd.Function):
    """Next-token cross-entropy and token-level unlikelihood (Welleck et al. 2019, "Neural text
    generation with unlikelihood training") in one pass over the logits, a chunk of rows at a time.

    logits [B, T, V], targets [B, T] (the next tokens), inputs [B, T] (the tokens the rows read).
    Row (b, t)'s negative candidates are the tokens among inputs[b, :t+1] other than targets[b, t];
    unlikelihood = -sum over them of log(max(1 - p, 1e-5)), p the row's softmax. Returns (mean
    cross-entropy, mean unlikelihood) over the rows. Neither the [B, T, V] candidate mask nor the
    fp32 softmax is ever whole in memory: the candidates are "first position of token v in row b <=
    t" (a [B, V] table), and forward and backward recompute each chunk's softmax from the saved
    logits, so the extra memory is a chunk of fp32 rows plus the gradient in the logits' dtype.
    Deterministic: no atomics, each row's sums reduced in one kernel."""
    ROWS = 4096  # rows of fp32 [ROWS, V] temporaries per chunk

    @staticmethod
    def _chunk(z, tgt, first, backward):
        """fp32 pieces of the rows z [R, V] of whole windows whose first-occurrence tables are first
        [R / T, V]: forward (backward False): (log p of the target, unlikelihood per row); backward:
        (p, candidate weights w = m p / (1 - p) where 1 - p > 1e-5 else 0). Each pass computes only
        its own pieces: about five fewer [R, V] kernels in each, the same values."""
        logp = torch.log_softmax(z.float(), dim=-1)
        p = logp.exp()
        T = z.shape[0] // first.shape[0]
        cand = (first[:, None, :] <= torch.arange(T, device=z.device)[None, :, None]).reshape(z.shape)
        cand.scatter_(1, tgt[:, None], False)
        q = 1.0 - p
        qc = q.clamp_min(1e-5)
        if not backward:
            return logp.gather(1, tgt[:, None])[:, 0], -(torch.log(qc) * cand).sum(-1)
        live = q > 1e-5
        return p, torch.where(cand & live, p / qc, torch.zeros((), device=z.device))

    @staticmethod
    def _rows(logits, targets, inputs, rows):
        """[(batch rows, their logits [n, V], targets [n], first-occurrence table)], one a chunk of
        at most `rows` rows (whole windows)."""
        B, T, V = logits.shape
        first = torch.full((B, V), T, dtype=torch.int32, device=logits.device)
        pos = torch.arange(T, dtype=torch.int32, device=logits.device)
        first.scatter_reduce_(1, inputs, pos.expand(B, T).contiguous(), reduce="amin", include_self=True)
        step = max(1, rows // T)  # batch rows per chunk
        out = []
        for b0 in range(0, B, step):
            b1 = min(B, b0 + step)
            n = (b1 - b0) * T
            out.append((slice(b0, b1), logits[b0:b1].reshape(n, V), targets[b0:b1].reshape(n), first[b0:b1]))
        return out

    @staticmethod
    def forward(ctx, logits, targets, inputs, rows=0, weights=None):
        # rows: rows a chunk, 0 for ROWS. Under torch.compile the caller reads ROWS and passes it:
        # dynamo cannot trace a read of this class's attribute in here (a graph break). weights
        # [B, T] (or None: all 1): each row's cross-entropy weight (--rep-weight); the mean stays
        # over all rows, so weights of 1 give the unweighted loss.
        ctx.rows = rows = rows or CrossEntropyUnlikelihood.ROWS
        ce = torch.zeros((), device=logits.device)
        ul = torch.zeros((), device=logits.device)
        for rs, z, tgt, first in CrossEntropyUnlikelihood._rows(logits, targets, inputs, rows):
            lpt, u = CrossEntropyUnlikelihood._chunk(z, tgt, first, backward=False)
            ce = ce - (lpt.sum() if weights is None else (lpt * weights[rs].reshape(-1)).sum())
            ul = ul + u.sum()
        ctx.weighted = weights is not None
        ctx.save_for_backward(logits, targets, inputs, *(() if weights is None else (weights,)))
        n = targets.numel()
        return ce / n, ul / n

    @staticmethod
    def backward(ctx, g_ce, g_ul):
        logits, targets, inputs = ctx.saved_tensors[:3]
        weights = ctx.saved_tensors[3] if ctx.weighted else None
        B, T, V = logits.shape
        grad = torch.empty_like(logits)
        n = targets.numel()
        for rows, z, tgt, first in CrossEntropyUnlikelihood._rows(logits, targets, inputs, ctx.rows):
            p, w = CrossEntropyUnlikelihood._chunk(z, tgt, first, backward=True)
            # d CE / dz = p - onehot(target), times the row's weight; d UL / dz_j = w_j - p_j * sum_c w_c.
            gce = g_ce if weights is None else g_ce * weights[rows].reshape(-1, 1).to(p.dtype)
            gz = gce * p + g_ul * (w - p * w.sum(-1, keepdim=True))
            gz.scatter_add_(1, tgt[:, None], (-gce).expand(tgt.shape[0], 1).to(gz.dtype))
            grad[rows] = (gz / n).reshape(-1, T, V).to(grad.dtype)
        return grad, None, None, None, None


def later_ngrams(rows, n=4, vocab=1 << 15):
    """rows [B, L] of token ids -> bool [B, L - n + 1]: whether the n-gram starting at s occurred
    earlier in its row (every occurrence after the first). Vectorised, on the rows' device: the
    n-grams as integers (base `vocab`: n = 4 fits in 63 bits up to 2^15 ids), a stable sort per
    row, and each equal run's members after its first marked."""
    B, L = rows.shape
    if vocab ** n >= 2 ** 63:
        raise ValueError("later_ngrams: %d-grams of %d ids do not fit in 63 bits" % (n, vocab))
    if L < n:
        return torch.zeros((B, 0), dtype=torch.bool, device=rows.device)
    g = torch.zeros((B, L - n + 1), dtype=torch.int64, device=rows.device)
    for k in range(n):
        g = g * vocab + rows[:, k:L - n + 1 + k].long()
    srt, idx = torch.sort(g, dim=1, stable=True)
    later = torch.zeros_like(srt, dtype=torch.bool)
    later[:, 1:] = srt[:, 1:] == srt[:, :-1]
    return torch.zeros_like(later).scatter(1, idx, later)


def repeat_targets(x, n=4, vocab=1 << 15):
    """x [B, L] token ids -> bool [B, L - 1]: whether the target x[:, t + 1] ends an n-gram (of x)
    that already ended earlier in the same row (its first n - 1 targets never do)."""
    out = torch.zeros((x.shape[0], x.shape[1] - 1), dtype=torch.bool, device=x.device)
    out[:, n - 2:] = later_ngrams(x, n, vocab)  # the n-gram at s ends at x[s + n - 1], row s + n - 2's target
    return out


def losses(model, x, mtp_weight, chain=1, distill=0.0, unlikelihood=0.0, ul_rows=0, rep_weight=1.0):
    """x [B, T+2]: next-token CE over positions 0..T-1 and the MTP CE, averaged over `chain` steps;
    unlikelihood > 0 adds that weight times the next-token head's token-level unlikelihood
    (CrossEntropyUnlikelihood) to the first loss (the MTP head learns the target as trained, its
    lower probability for repeating the context included, through `distill`).
    Step 1 predicts t_{s+2} from (the target's hidden at s, t_{s+1}) for s = 0..T-1; step k >= 2
    predicts t_{s+k+1} from (step k-1's output hidden at s, t_{s+k}) for s = 0..T-k, as a draft
    chain feeds the head its own output. distill > 0: each step's loss is (1 - distill) * CE(text)
    + distill * CE(the target's distribution at the predicted position, detached); step k's rows
    s = 0..T-k-1 predict the token the target predicts at position s+k. Returns (loss, mtp_loss,
    logits, [(mtp logits, targets) per step], the unlikelihood term before its weight). ul_rows:
    CrossEntropyUnlikelihood's rows a chunk (0: its ROWS). rep_weight < 1 (--rep-weight): the
    next-token cross-entropy of each target that ends a 4-gram already ended earlier in its window
    (repeat_targets) is weighted rep_weight (the mean still over all rows): less of the text's own
    repetition learnt (Li et al. 2023, "Repetition In Repetition Out")."""
    T = x.shape[1] - 2
    inp, nxt, nxt2 = x[:, :-2], x[:, 1:-1], x[:, 2:]
    h, logits = model(inp)
    ul = torch.zeros((), device=x.device)
    weights = None
    if rep_weight != 1.0:
        rep = repeat_targets(x[:, :-1], vocab=logits.shape[-1])
        weights = torch.where(rep, torch.full((), rep_weight, device=x.device), torch.ones((), device=x.device))
    if unlikelihood > 0:
        loss, ul = CrossEntropyUnlikelihood.apply(logits, nxt, inp, ul_rows, weights)
        loss = loss + unlikelihood * ul
    elif weights is None:
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), nxt.reshape(-1))
    else:
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), nxt.reshape(-1), reduction="none")
        loss = (ce * weights.reshape(-1)).sum() / ce.numel()
    mtp_loss = torch.zeros((), device=x.device)
    steps = []
    if mtp_weight > 0:
        hk, m = model.mtp_forward(h, nxt, return_hidden=True)
        steps.append((m, nxt2))
        for k in range(2, chain + 1):
            hk, m = model.mtp_forward(hk[:, :-1], x[:, k:T + 1], pos0=k, return_hidden=True)
            steps.append((m, x[:, k + 1:T + 2]))
        mtp_loss = sum(F.cross_entropy(m.float().reshape(-1, m.shape[-1]), t.reshape(-1)) for m, t in steps) / len(steps)
        if distill > 0:
            soft = F.softmax(logits.detach().float(), dim=-1)
            kd = sum(-(soft[:, k:] * F.log_softmax(m[:, :T - k].float(), dim=-1)).sum(-1).mean()
                     for k, (m, _) in enumerate(steps, start=1)) / len(steps)
            mtp_loss = (1 - distill) * mtp_loss + distill * kd
    return loss, mtp_loss, logits, steps, ul


def repeated_ngrams(rows, n=4, vocab=1 << 15):
    """rows [R, N] of token ids -> bool [R, N]: the tokens inside an n-gram that occurred earlier in
    the same row (Welleck et al.'s sequence-level candidates)."""
    later = later_ngrams(rows, n, vocab)
    out = torch.zeros(rows.shape, dtype=torch.bool, device=rows.device)
    for k in range(n):  # an n-gram starting at s covers s .. s + n - 1
        out[:, k:k + later.shape[1]] |= later
    return out


def sequence_unlikelihood(model, prefix, n, graph=False):
    """Sequence-level unlikelihood (Welleck et al. 2019): the model continues each row of prefix
    [R, P] greedily for n tokens (no gradient), and every continuation token that lies inside a
    4-gram repeated earlier in its continuation has -log(max(1 - p, 1e-5)) added, p the model's
    probability of that token there. Returns (loss averaged over the R x n continuation tokens,
    the share of them that repeat). graph: generate_greedy's fixed-buffer steps (--fast-generate)."""
    P = prefix.shape[1]
    cont = model.generate_greedy(prefix, n, graph=graph)
    # The weights' casts autocast cached during the no-grad generation must not stand in for the
    # grad-enabled forward below (torch builds without pytorch#165068 reuse them, and the loss then
    # reaches no Linear weight): cast afresh.
    torch.clear_autocast_cache()
    mask = repeated_ngrams(cont, vocab=model.c.vocab_size)
    _, logits = model(torch.cat([prefix, cont], dim=1)[:, :-1])
    logp = F.log_softmax(logits[:, P - 1:].float(), dim=-1).gather(-1, cont[..., None])[..., 0]
    q = (1.0 - logp.exp()).clamp_min(1e-5)
    return -(torch.log(q) * mask).sum() / mask.numel(), mask.float().mean().item()


# --ditto: a repeated segment's length in tokens, drawn uniformly from this range (both ends in).
DITTO_SPAN = (8, 64)


def ditto_rows(x, rows, length, gen, span=DITTO_SPAN):
    """DITTO's pseudo-repetitive rows (Xu et al. 2022, "Learning to break the loop"): row r of the
    result is a segment of x's row r (L_r tokens from a drawn offset, L_r drawn from span) repeated
    to `length` tokens. x [B, W] on any device; the draws come from the CPU generator gen, so the
    training batches (another generator) are the same with and without --ditto. Returns (rows
    [min(rows, B), length] on x's device, L [R] on the CPU)."""
    R, W = min(rows, x.shape[0]), x.shape[1]
    L = torch.randint(span[0], min(span[1], W) + 1, (R,), generator=gen)
    off = (torch.rand(R, generator=gen, dtype=torch.float64) * (W - L + 1)).long()  # 0 .. W - L
    idx = off[:, None] + torch.arange(length)[None, :] % L[:, None]
    return x[:R].gather(1, idx.to(x.device)), L


def ditto_loss(model, y, L, lam):
    """DITTO's loss (Xu et al. 2022) on rows y [R, N] that repeat with period L [R]: p_j, the
    next-token probability of y_j (j >= 1), is pulled towards lam x the (detached) probability of
    the same token one copy earlier, p_{j - L}: -log(max(1 - |p_j - lam sg(p_{j-L})|, 1e-5)) for
    every j with j - L >= 1 (the second copy on). A greedy loop feeds itself: the more copies of a
    line in the context, the likelier the next copy; this makes the probability of one more copy
    fall by lam a copy instead. The next-token head only (the MTP head's job is the target's
    greedy token, repeated or not). Returns (loss averaged over those tokens, their mean p_j, a
    detached 0-d tensor: read when logged, so a step does not wait for it)."""
    _, logits = model(y[:, :-1])
    p = torch.log_softmax(logits.float(), dim=-1).gather(-1, y[:, 1:, None])[..., 0].exp()  # p[:, j - 1] = p_j
    j = torch.arange(1, y.shape[1], device=y.device)[None, :]
    back = j - L.to(y.device)[:, None]  # the same token's position one copy earlier
    mask = back >= 1
    prev = p.detach().gather(1, (back.clamp_min(1) - 1))
    q = (1.0 - (p - lam * prev).abs()).clamp_min(1e-5)
    n = mask.sum().clamp_min(1)
    return -(torch.log(q) * mask).sum() / n, (p.detach() * mask).sum() / n


@torch.no_grad()
def evaluate(model, data, seq, batch, device, autocast, max_windows=2048, chain=1):
    """Top-1 accuracy of the next token and of each MTP chain step (step 1: t+2), on
    non-overlapping windows."""
    model.eval()
    n = min((len(data) - 2) // seq, max_windows)
    hit = total = 0
    hits, totals = [0] * chain, [0] * chain
    agree, agree_n = [0] * chain, [0] * chain  # MTP step k's argmax against the target's at the same position
    loss_sum = mtp_sum = 0.0
    for a in range(0, n, batch):
        starts = [i * seq for i in range(a, min(n, a + batch))]
        x = batch_at(data, starts, seq + 2).to(device)
        with autocast():
            loss, mtp, logits, steps, _ = losses(model, x, 1.0, chain)
        hit += (logits.argmax(-1) == x[:, 1:-1]).sum().item()
        total += x[:, 2:].numel()
        greedy = logits.argmax(-1)
        for k, (m, t) in enumerate(steps):
            hits[k] += (m.argmax(-1) == t).sum().item()
            totals[k] += t.numel()
            agree[k] += (m[:, :m.shape[1] - 1].argmax(-1) == greedy[:, k + 1:]).sum().item()
            agree_n[k] += greedy[:, k + 1:].numel()
        loss_sum += loss.item() * len(starts)
        mtp_sum += mtp.item() * len(starts)
    model.train()
    out = {"next_token_top1": hit / max(total, 1), "mtp_top1": hits[0] / max(totals[0], 1),
           "next_token_loss": loss_sum / max(n, 1), "mtp_loss": mtp_sum / max(n, 1), "eval_tokens": total}
    out["mtp_agrees_with_target"] = [a / max(n, 1) for a, n in zip(agree, agree_n)]
    if chain > 1:
        out["mtp_chain_top1"] = [h / max(t, 1) for h, t in zip(hits, totals)]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                                   "qwen_tp", "draft"),
                    help="checkpoint directory (created; default ~/.cache/qwen_tp/draft, where the README's quick "
                         "start looks)")
    ap.add_argument("--corpus", default="", help="a make_corpus.py folder (default: this machine's standard library)")
    ap.add_argument("--mtp-distill", type=float, default=0.0,
                    help="weight of the target's own distribution in the MTP loss (0: the text alone)")
    ap.add_argument("--minutes", type=float, default=8.0, help="time budget of the whole script")
    ap.add_argument("--steps", type=int, default=0, help="train exactly this many steps (0: fill the budget)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="base",
                    help="model size: tiny (CPU smoke run, 0.3M parameters), small (CPU experiments, 2.3M), base "
                         "(40.1M), wide (120M)")
    ap.add_argument("--tiny", action="store_true", help="--preset tiny: 2 layers, hidden 64, vocab 1024, 80 files")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab-size", type=int, default=0, help="model vocab (default 4096, --tiny 1024)")
    ap.add_argument("--seq", type=int, default=0, help="training window (default 512, --tiny 128)")
    ap.add_argument("--batch", type=int, default=0, help="windows per step (default 64, --tiny 16)")
    ap.add_argument("--lr", type=float, default=0, help="peak learning rate (default 2e-3, --tiny 3e-3)")
    ap.add_argument("--mtp-weight", type=float, default=1.0, help="weight of the MTP (t+2) loss")
    ap.add_argument("--mtp-chain", type=int, default=1,
                    help="also train the MTP head on its own output for this many chained steps (1: t+2 only)")
    ap.add_argument("--max-files", type=int, default=0, help="use at most this many stdlib files (0: all)")
    ap.add_argument("--extra-corpus", type=float, default=0, metavar="MB",
                    help="also train on up to MB megabytes of .py files of the installed packages (never "
                         "evaluated on; the standard library's 3M tokens are ~30 epochs of a 5-minute run)")
    ap.add_argument("--tied", action="store_true", help="tie lm_head to the embedding")
    ap.add_argument("--keep-best", action="store_true",
                    help="hold out a validation set and save the weights of the best validation loss")
    ap.add_argument("--eval-seconds", type=float, default=0,
                    help="with --keep-best: seconds between validation measurements (default 15, --tiny 5)")
    ap.add_argument("--unlikelihood", type=float, default=0.0, metavar="ALPHA",
                    help="add ALPHA x the next-token head's token-level unlikelihood loss (the tokens of the window "
                         "so far that are not the next one; 0: off)")
    ap.add_argument("--rep-weight", type=float, default=1.0, metavar="W",
                    help="weight of the next-token loss on targets that end a 4-gram already seen in their "
                         "window (1: off; 0: those targets not learnt)")
    ap.add_argument("--seq-unlikelihood", type=float, default=0.0, metavar="BETA",
                    help="from --seq-ul-from of the steps on, every --seq-ul-every steps: the model continues "
                         "--seq-ul-rows prefixes of --seq-ul-prefix tokens (the batch's windows cut into pieces of "
                         "that length, in order) greedily for --seq-ul-tokens tokens, and BETA x the sequence-level "
                         "unlikelihood of the tokens of its repeated 4-grams joins that step's loss (0: off)")
    ap.add_argument("--seq-ul-from", type=float, default=0.5, metavar="FRAC")
    ap.add_argument("--seq-ul-every", type=int, default=8, metavar="K")
    ap.add_argument("--seq-ul-rows", type=int, default=64)
    ap.add_argument("--seq-ul-prefix", type=int, default=128)
    ap.add_argument("--seq-ul-tokens", type=int, default=64)
    ap.add_argument("--ditto", type=float, default=0.0, metavar="W",
                    help="from --ditto-from of the steps on, every --ditto-every steps: --ditto-rows rows of the "
                         "training window's length, each a segment of 8-64 tokens of one of the batch's windows "
                         "repeated, and W x DITTO's loss on them (Xu et al. 2022: the probability of one more "
                         "copy pulled to --ditto-lambda x that of the copy before) joins that step's loss (0: off)")
    ap.add_argument("--ditto-lambda", type=float, default=0.5, metavar="LAMBDA")
    ap.add_argument("--ditto-from", type=float, default=0.0, metavar="FRAC")
    ap.add_argument("--ditto-every", type=int, default=1, metavar="K")
    ap.add_argument("--ditto-rows", type=int, default=16)
    ap.add_argument("--init", default="", metavar="DIR",
                    help="start from this checkpoint's weights (a train_tiny_qwen.py output of the same preset) "
                         "instead of random ones; the tokenizer must be the same (it is with --corpus)")
    ap.add_argument("--probe", type=int, default=0, metavar="N",
                    help="with --corpus: after training, greedy-decode N prompts of the --probe-split as "
                         "draft_session.sh builds them and count the loops (degeneracy_probe.py)")
    ap.add_argument("--probe-split", default="valid", choices=("valid", "heldout"))
    ap.add_argument("--probe-during", action="store_true", help="--probe at every validation measurement too")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile a training step's forward, MTP chain and losses (static shapes, compiled "
                         "once before training starts; eager, with a note, when compiling fails)")
    ap.add_argument("--compile-mode", default="default",
                    choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
                    help="torch.compile's mode with --compile (reduce-overhead and max-autotune add CUDA graphs)")
    ap.add_argument("--fast-generate", action="store_true",
                    help="the greedy continuations of --seq-unlikelihood and --probe through generate_greedy(graph="
                         "True): fixed key/value buffers, one CUDA graph of the one-token step (the same tokens up "
                         "to rounding)")
    ap.add_argument("--time-steps", type=int, default=0, metavar="N",
                    help="calibration: the corpus as usual, then 3 warm-up steps and exactly N timed ones (not "
                         "cut by --minutes); prints ms per step and tokens/s and exits (no evaluation, nothing "
                         "written to --out)")
    args = ap.parse_args()
    if args.tiny:
        args.preset = "tiny"
    args.tiny = args.preset == "tiny"
    if args.probe and not args.corpus:
        ap.error("--probe needs --corpus")
    if args.seq_unlikelihood and args.seq_ul_every < 1:
        ap.error("--seq-ul-every %d: expected 1 or more" % args.seq_ul_every)
    if args.ditto and (args.ditto_every < 1 or args.ditto_rows < 1 or not 0 <= args.ditto_lambda <= 1):
        ap.error("--ditto: expected --ditto-every >= 1, --ditto-rows >= 1 and 0 <= --ditto-lambda <= 1 (got %d, %d, %g)"
                 % (args.ditto_every, args.ditto_rows, args.ditto_lambda))
    if args.mtp_chain < 1:
        ap.error("--mtp-chain %d: expected 1 or more" % args.mtp_chain)
    if args.time_steps < 0 or (args.time_steps and args.steps):
        ap.error("--time-steps N: expected N >= 1, without --steps")
    t_start = time.time()
    deadline = t_start + args.minutes * 60
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    shape, seq, batch, lr = PRESETS[args.preset]
    shape = dict(shape, tie_word_embeddings=args.tied)
    if args.vocab_size:
        shape["vocab_size"] = args.vocab_size
    cfg = TinyQwenConfig(**shape)
    seq, batch, lr = args.seq or seq, args.batch or batch, args.lr or lr
    if args.ditto and seq + 2 < DITTO_SPAN[0]:
        ap.error("--ditto: its segments take %d-%d tokens of a window; --seq %d is shorter" % (DITTO_SPAN + (seq,)))
    max_files = args.max_files or (80 if args.tiny else 0)
    writes = not args.time_steps  # --time-steps leaves --out (perhaps a checkpoint) untouched
    if writes:
        os.makedirs(args.out, exist_ok=True)

    # 1. corpus and tokenizer
    tok = None
    if args.corpus:
        train_texts, valid_texts, held_texts, held, tok, what, named = load_corpus(args.corpus, max_files,
                                                                                   cfg.vocab_size)
        if not args.keep_best:
            valid_texts = []
        log("corpus: %s: %d files for training, %d held out%s" % (what, len(train_texts), len(held),
            ", %d for validation (--keep-best)" % len(valid_texts) if valid_texts else ""))
    else:
        root, files = stdlib_files()
        if max_files:
            files = files[::max(1, len(files) // max_files)][:max_files]
        held = files[::20]
        train_files = [f for i, f in enumerate(files) if i % 20]
        # --keep-best: files 10, 30, 50, ... validate the checkpoint choice (never the held-out ones).
        valid_files = [f for i, f in enumerate(files) if i % 20 == 10] if args.keep_best else []
        train_files = [f for f in train_files if f not in set(valid_files)]
        log("corpus: %d .py files under %s (Python %s): %d for training, %d held out%s"
            % (len(files), root, sys.version.split()[0], len(train_files), len(held),
               ", %d for validation (--keep-best)" % len(valid_files) if valid_files else ""))
        train_texts, held_texts, valid_texts = read_texts(train_files), read_texts(held), read_texts(valid_files)
    if args.keep_best and not valid_texts:
        sys.exit("--keep-best: no validation files (use more files)")
    t0 = time.time()
    if tok is None:
        # build_tokenizer adds <think> and </think> after training: leave room for them.
        from make_reference import build_tokenizer  # Qwen2's pre-tokenizer settings; needs `tokenizers`
        tok = build_tokenizer(train_texts, cfg.vocab_size - 2)
    if tok.get_vocab_size() > cfg.vocab_size:
        sys.exit("tokenizer has %d ids > vocab_size %d" % (tok.get_vocab_size(), cfg.vocab_size))
    eot_id = tok.token_to_id(EOT)
    if writes:
        tok.save(os.path.join(args.out, "tokenizer.json"))
    extra_texts = []
    if args.extra_corpus > 0 and not args.corpus:
        t1 = time.time()
        names = {os.path.basename(f) for f in held + valid_files}
        extra_texts, extra_bytes, roots = package_files(int(args.extra_corpus * 1e6), names,
                                                        set(held_texts) | set(valid_texts))
        log("extra corpus: %d .py files, %.1f MB from %s (training only), %.1f s"
            % (len(extra_texts), extra_bytes / 1e6, ", ".join(roots) or "no package folder", time.time() - t1))
    train_data = encode_stream(tok, train_texts + extra_texts, eot_id)
    held_data = encode_stream(tok, held_texts, eot_id)
    valid_data = encode_stream(tok, valid_texts, eot_id) if valid_texts else None
    if valid_data is not None and len(valid_data) < seq + 2:
        sys.exit("--keep-best: the validation files hold %d tokens, fewer than one %d-token window" % (len(valid_data), seq + 2))
    log("tokenizer: %d ids (byte-level BPE, Qwen2 pre-tokenizer), %.1f s; %d training tokens, %d held-out tokens"
        % (tok.get_vocab_size(), time.time() - t0, len(train_data), len(held_data)))
    if writes:
        with open(os.path.join(args.out, "heldout_files.txt"), "w") as f:
            f.write("".join(p + "\n" for p in held))
        with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOT, "pad_token": EOT,
                       "model_max_length": cfg.max_position_embeddings}, f, indent=1)
    corpus_s = time.time() - t_start

    # 2. model
    model = TinyQwen(cfg)
    if args.init:
        from safetensors.torch import load_file
        model.load_state_dict({k: v.float() for k, v in load_file(os.path.join(args.init, "model.safetensors")).items()})
        log("weights from %s" % args.init)
    model = model.to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if dev.type == "cuda" else {}))

    def autocast():
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda")

    log("model: %d layers, hidden %d, heads %d/%d x %d, intermediate %d, vocab %d, MTP 1 layer: %.1fM parameters; "
        "device %s, %d x %d tokens per step, peak lr %g, MTP loss weight %g"
        % (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
           cfg.intermediate_size, cfg.vocab_size, nparams / 1e6, dev, batch, seq, lr, args.mtp_weight))

    ul_rows = CrossEntropyUnlikelihood.ROWS  # read here, outside what torch.compile traces

    def step_losses(x):
        # A training step's forward, MTP chain and losses, under the caller's autocast: what --compile
        # compiles. The batch sampling, --seq-unlikelihood (generation, other shapes), evaluation and
        # probes stay eager, so the compiled graph sees one shape and compiles once.
        loss, mtp_loss, _, _, ul = losses(model, x, args.mtp_weight, args.mtp_chain, args.mtp_distill,
                                          args.unlikelihood, ul_rows, args.rep_weight)
        return loss + args.mtp_weight * mtp_loss, loss, mtp_loss, ul

    compiled = "off"
    cudagraphs = args.compile and args.compile_mode in ("reduce-overhead", "max-autotune")
    if args.compile:
        # Compiled here, before the schedule's clock starts, on a batch of the training shape that the
        # batch generator does not draw (the batches stay those of an eager run); its gradients are
        # dropped. A failure (no C++ compiler, an unsupported op, ...) leaves the eager step.
        t1 = time.time()
        try:
            fn = torch.compile(step_losses, dynamic=False, mode=args.compile_mode)
            span = max(1, len(train_data) - seq - 2)
            xw = batch_at(train_data, [i * seq % span for i in range(batch)], seq + 2).to(dev)
            if cudagraphs:
                torch.compiler.cudagraph_mark_step_begin()
            with autocast():
                out = fn(xw)
            out[0].backward()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            del out
            step_losses, compiled = fn, args.compile_mode
            log("--compile: step compiled (mode %s, static shapes %d x %d) in %.1f s"
                % (args.compile_mode, batch, seq + 2, time.time() - t1))
        except Exception as e:  # noqa: BLE001 -- any compile failure: train eagerly
            cudagraphs = False
            compiled = "failed"
            msg = (str(e).strip().splitlines() or [""])[0][:300]
            log("--compile: torch.compile failed after %.1f s (%s: %s); training eagerly"
                % (time.time() - t1, type(e).__name__, msg))
        opt.zero_grad(set_to_none=True)
    # Keep time for the evaluation and the save: a share of the budget, at least 10 s.
    reserve = max(10.0, 0.04 * args.minutes * 60)
    train_start = time.time()
    train_budget = max(1.0, deadline - reserve - train_start)
    gen = torch.Generator().manual_seed(args.seed)
    warm = 100 if not args.tiny else 20
    step, tokens_seen, last_log = 0, 0, time.time()
    seq_ul_log = []  # the repeating share of each --seq-unlikelihood step's greedy continuations
    ditto_gen = torch.Generator().manual_seed(args.seed + 1)  # --ditto's segments: the batches stay an eager run's
    ditto_log = []  # the mean probability of a repeated token in each --ditto pass's rows
    # Validation every --eval-seconds, or with --steps every tenth of the steps (deterministic).
    eval_every = args.eval_seconds or (5.0 if args.tiny else 15.0)
    eval_steps = max(1, args.steps // 10) if args.steps else 0
    best = {"loss": float("inf"), "step": 0, "state": None}
    last_eval = time.time()
    probe_texts = [p[3] for p in prefixes(ordered(named[args.probe_split]), args.probe, 800)] if args.probe else []

    def probe():
        # Greedy continuations of the probe prompts (degeneracy_probe.py): how many are loops.
        with autocast():
            runs = greedy_runs(model, tok, probe_texts, 64, dev, graph=args.fast_generate)
        bad = sum(d < 0.5 for d, _ in runs)
        log("probe at step %d: %d of %d greedy continuations (64 tokens, %s prompts) degenerate (distinct 4-gram "
            "share < 0.5), mean share %.3f" % (step, bad, len(runs), args.probe_split,
                                                sum(d for d, _ in runs) / max(1, len(runs))))
        return bad, [round(d, 3) for d, _ in runs]

    def validate():
        # Next-token + MTP loss on a fixed slice of the validation set; the best weights kept on the host.
        m = evaluate(model, valid_data, seq, batch, dev, autocast, max_windows=32 if args.tiny else 128,
                     chain=args.mtp_chain)
        v = m["next_token_loss"] + args.mtp_weight * m["mtp_loss"]
        best["last"] = step
        improved = v < best["loss"]
        if improved:
            best.update(loss=v, step=step, state={k: t.detach().to("cpu", copy=True) for k, t in model.state_dict().items()})
        log("validation at step %d: loss %.3f (next %.3f, MTP %.3f)%s"
            % (step, v, m["next_token_loss"], m["mtp_loss"], "  best" if improved else ""))
        if args.probe_during and probe_texts:
            probe()

    timed_from = None
    step_kinds = {}  # --time-steps: the timed steps' seconds by the extra passes each ran
    while True:
        t_step = time.time()
        kind = []
        elapsed = time.time() - train_start
        if args.time_steps:  # calibration: 3 warm-up steps, then the timed ones; no deadline
            if step == 3:
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                timed_from = t_step = time.time()  # the warm-up's tail on the GPU counts in no step
            if step >= 3 + args.time_steps:
                break
            frac = step / (3 + args.time_steps)
        elif args.steps:
            if step >= args.steps:
                break
            if elapsed >= train_budget:  # --minutes still bounds the run: cut, and say so
                log("deadline: stopped at step %d of --steps %d (not the deterministic run of that many steps)"
                    % (step, args.steps))
                break
            frac = step / args.steps
        else:
            if elapsed >= train_budget:
                break
            frac = elapsed / train_budget
        cur_lr = lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
        for g in opt.param_groups:
            g["lr"] = cur_lr
        starts = torch.randint(0, len(train_data) - seq - 2, (batch,), generator=gen).tolist()
        x = batch_at(train_data, starts, seq + 2)
        # Pinned, the copy is truly asynchronous (from pageable memory it may wait for the GPU's queue).
        x = (x.pin_memory() if dev.type == "cuda" else x).to(dev, non_blocking=True)
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        with autocast():
            total, loss, mtp_loss, ul = step_losses(x)
            if args.seq_unlikelihood > 0 and frac >= args.seq_ul_from and step % args.seq_ul_every == 0:
                P = min(args.seq_ul_prefix, seq)
                prefix = x[:, :seq // P * P].reshape(-1, P)[:args.seq_ul_rows]
                seq_ul, rep_share = sequence_unlikelihood(model, prefix, args.seq_ul_tokens, args.fast_generate)
                total = total + args.seq_unlikelihood * seq_ul
                seq_ul_log.append(rep_share)
                kind.append("a sequence-level pass")
            if args.ditto > 0 and frac >= args.ditto_from and step % args.ditto_every == 0:
                y, L = ditto_rows(x, args.ditto_rows, seq + 1, ditto_gen)
                dl, p_rep = ditto_loss(model, y, L, args.ditto_lambda)
                total = total + args.ditto * dl
                ditto_log.append(p_rep)
                del ditto_log[:-10]
                kind.append("a DITTO pass")
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if args.time_steps and step >= 3:  # each timed step ends on the GPU before the next starts
            if dev.type == "cuda":
                torch.cuda.synchronize()
            step_kinds.setdefault(" and ".join(kind) or "plain", []).append(time.time() - t_step)
        step += 1
        tokens_seen += batch * seq
        if valid_data is not None and not args.time_steps and step > 0 and (
                step % eval_steps == 0 if eval_steps else time.time() - last_eval > eval_every):
            validate()
            last_eval = time.time()
        if time.time() - last_log > (30 if not args.tiny else 5) or step == 1:
            last_log = time.time()
            log("step %d  loss %.3f  mtp loss %.3f%s  lr %.2e  %.0f tok/s  %.0f s"
                % (step, loss.item() - args.unlikelihood * ul.item(), mtp_loss.item(),
                   ("  unlikelihood %.3f" % ul.item() if args.unlikelihood else "") +
                ("  greedy continuations repeating %.3f (last %d)" % (sum(seq_ul_log[-10:]) / len(seq_ul_log[-10:]),
                 len(seq_ul_log[-10:])) if seq_ul_log else "") +
                ("  p of a repeated copy %.3f (last %d)" % (torch.stack(ditto_log[-10:]).mean().item(),
                 len(ditto_log[-10:])) if ditto_log else ""), cur_lr,
                   tokens_seen / max(time.time() - train_start, 1e-9), time.time() - t_start))
    train_s = time.time() - train_start
    if args.time_steps:
        if dev.type == "cuda":
            torch.cuda.synchronize()
        dt = max(time.time() - timed_from, 1e-9)
        log("--time-steps: %d steps (after 3 warm-up ones) in %.2f s: %.1f ms per step, %.0f tokens/s; %d x %d tokens "
            "a step, compile %s, AdamW %s%s; corpus and tokenizer %.1f s, setup to the first step %.1f s"
            % (args.time_steps, dt, 1e3 * dt / args.time_steps, args.time_steps * batch * seq / dt, batch, seq,
               compiled, "fused" if dev.type == "cuda" else "unfused",
               ", peak GPU memory %.1f GiB" % (torch.cuda.max_memory_allocated() / 2**30) if dev.type == "cuda" else "",
               corpus_s, train_start - t_start))
        for k, ts in sorted(step_kinds.items()):
            log("--time-steps: %s: %d, %.1f ms each (mean; min %.1f, max %.1f)"
                % ("plain steps" if k == "plain" else "steps with " + k, len(ts), 1e3 * sum(ts) / len(ts),
                   1e3 * min(ts), 1e3 * max(ts)))
        return
    log("trained %d steps, %.1fM tokens (%.2f epochs) in %.1f s" % (step, tokens_seen / 1e6,
                                                                     tokens_seen / max(len(train_data), 1), train_s))
    last_step = step
    if valid_data is not None:
        if best.get("last") != step:  # not measured at this step yet
            validate()
        if best["state"] is None:
            sys.exit("--keep-best: no finite validation loss (training diverged)")
        model.load_state_dict(best["state"])
        log("--keep-best: keeping the weights of step %d of %d (validation loss %.3f)"
            % (best["step"], step, best["loss"]))

    # 3. evaluation and checkpoint
    metrics = evaluate(model, held_data, seq, batch, dev, autocast, max_windows=64 if args.tiny else 2048,
                       chain=args.mtp_chain)
    if valid_data is not None:
        metrics.update({"kept_step": best["step"], "validation_loss": round(best["loss"], 4)})
    if probe_texts:
        bad, shares = probe()
        metrics.update({"probe_split": args.probe_split, "probe_degenerate": bad, "probe_prompts": len(shares),
                        "probe_distinct4": shares})
    metrics.update({"steps": last_step, "train_tokens": tokens_seen, "train_seconds": round(train_s, 1),
                    "parameters": nparams, "seed": args.seed, "mtp_chain": args.mtp_chain, "mtp_distill": args.mtp_distill,
                    "preset": args.preset, "unlikelihood": args.unlikelihood,
                    **({"ditto": args.ditto, "ditto_lambda": args.ditto_lambda} if args.ditto else {}),
                    **({"compile": compiled} if args.compile else {}),
                    "corpus": args.corpus or "stdlib", "device": str(dev), "python": sys.version.split()[0],
                    "torch": torch.__version__})
    log("held-out (%d tokens, %d files): next-token top-1 %.4f, MTP (t+2) top-1 %.4f, next-token loss %.3f"
        % (metrics["eval_tokens"], len(held), metrics["next_token_top1"], metrics["mtp_top1"],
           metrics["next_token_loss"]))
    if args.mtp_chain > 1:
        log("held-out MTP top-1 per chained step (t+2, t+3, ...): %s"
            % ", ".join("%.4f" % a for a in metrics["mtp_chain_top1"]))
    log("held-out MTP argmax equal to the target's at the same position, per chained step (the text fed): %s"
        % ", ".join("%.4f" % a for a in metrics["mtp_agrees_with_target"]))
    from safetensors.torch import save_file
    save_file(model.checkpoint_tensors(), os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg.hf_config(eos_id=eot_id, bos_id=eot_id), f, indent=1)
    with open(os.path.join(args.out, "train_metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    took = time.time() - t_start
    log("wrote %s: config.json, model.safetensors (bf16), tokenizer.json; %.1f s in all%s"
        % (args.out, took, " (over the %.0f s budget: the steps before training took longer)" % (args.minutes * 60)
           if took > args.minutes * 60 + 5 else ""))


if __name__ == "__main__":
    main()
