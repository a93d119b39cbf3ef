#!/usr/bin/env python3
"""train_tiny_qwen.py [--out DIR] [--corpus DIR] [--minutes 8] [--device cuda|cpu] [--tiny] [--steps N] [--seed S]

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
2. A Qwen3 (default 8 layers, hidden 512, 8 query / 4 KV heads of 64, SwiGLU 2048, untied lm_head)
   plus an MTP head in the Qwen3-Next layout (qwen_tiny_model.py) trained to predict token t+2;
   loss = CE(next token) + --mtp-weight * CE(MTP, t+2). AdamW, warmup then cosine over the time
   budget (or over --steps when given), bf16 autocast on CUDA. --mtp-distill W mixes into the
   MTP loss, with weight W, the cross-entropy against the target's own (detached) distribution at
   the position the MTP predicts: speculation accepts a draft when it equals the target's token,
   not the text's, so the head learns the target (self-distillation, as Medusa-2 and EAGLE do).
3. DIR/config.json, DIR/model.safetensors (bf16), DIR/tokenizer.json, DIR/tokenizer_config.json,
   and DIR/heldout_files.txt (the evaluation files), in Hugging Face layout; held-out next-token and
   MTP (t+2) top-1 accuracy printed and written to DIR/train_metrics.json.

--keep-best guards against over-fitting (four GPU minutes are ~25 epochs of this corpus, and the
held-out loss then rises: bench/results/h200x1.md): every 10th file of the
training set (offset 10 of 20) becomes a validation set, the validation loss (next token plus
MTP) is measured every --eval-seconds (with --steps: every tenth of the steps, so the result
stays deterministic), and the weights of the best measurement are the ones saved. The held-out files stay untouched by that choice.

Deterministic for a given seed and step count (--steps): the same initialisation, batches and
schedule (a GPU's kernels may still round differently from run to run); with a time budget the
step count is what fits. --minutes bounds the whole script (tokenizer, encoding, training,
evaluation, save), with --steps too: a run cut short by it says so.
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
from make_reference import build_tokenizer  # noqa: E402  (Qwen2's pre-tokenizer settings)
from qwen_tiny_model import TinyQwen, TinyQwenConfig  # noqa: E402

EOT = "<|endoftext|>"


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
    when its tokenizer.json does not fit vocab_size, description). max_files > 0 takes every
    n-th training file and every n-th held-out file of each split (the --tiny smoke run)."""
    import lzma
    from tokenizers import Tokenizer
    splits = {"train": [], "valid": [], "heldout": []}
    with lzma.open(os.path.join(folder, "corpus.jsonl.xz"), "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            splits[r["split"]].append((r["source"] + ":" + r["path"], r["text"]))
    if max_files:
        for k in splits:
            splits[k] = splits[k][::max(1, len(splits[k]) // max(1, max_files // (20 if k != "train" else 1)))]
    tok = None
    tpath = os.path.join(folder, "tokenizer.json")
    if os.path.exists(tpath):
        tok = Tokenizer.from_file(tpath)
        if tok.get_vocab_size() > vocab_size:
            tok = None  # trained here instead, at the model's vocabulary
    nbytes = sum(len(t) for k in splits for _, t in splits[k])
    return ([t for _, t in splits["train"]], [t for _, t in splits["valid"]], [t for _, t in splits["heldout"]],
            [n for n, _ in splits["heldout"]], tok, "%s (%.0f MB of text)" % (folder, nbytes / 1e6))


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


def losses(model, x, mtp_weight, chain=1, distill=0.0):
    """x [B, T+2]: next-token CE over positions 0..T-1 and the MTP CE, averaged over `chain` steps.
    Step 1 predicts t_{s+2} from (the target's hidden at s, t_{s+1}) for s = 0..T-1; step k >= 2
    predicts t_{s+k+1} from (step k-1's output hidden at s, t_{s+k}) for s = 0..T-k, as a draft
    chain feeds the head its own output. distill > 0: each step's loss is (1 - distill) * CE(text)
    + distill * CE(the target's distribution at the predicted position, detached); step k's rows
    s = 0..T-k-1 predict the token the target predicts at position s+k. Returns (loss, mtp_loss,
    logits, [(mtp logits, targets) per step])."""
    T = x.shape[1] - 2
    inp, nxt, nxt2 = x[:, :-2], x[:, 1:-1], x[:, 2:]
    h, logits = model(inp)
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), nxt.reshape(-1))
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
    return loss, mtp_loss, logits, steps


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
            loss, mtp, logits, steps = losses(model, x, 1.0, chain)
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
    ap.add_argument("--tiny", action="store_true", help="2 layers, hidden 64, vocab 1024, 80 files (CPU smoke run)")
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
    args = ap.parse_args()
    if args.mtp_chain < 1:
        ap.error("--mtp-chain %d: expected 1 or more" % args.mtp_chain)
    t_start = time.time()
    deadline = t_start + args.minutes * 60
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    if args.tiny:
        cfg = TinyQwenConfig(vocab_size=args.vocab_size or 1024, hidden_size=64, intermediate_size=192,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                             max_position_embeddings=1024, tie_word_embeddings=args.tied)
        seq, batch, lr, max_files = args.seq or 128, args.batch or 16, args.lr or 3e-3, args.max_files or 80
    else:
        cfg = TinyQwenConfig(vocab_size=args.vocab_size or 4096, tie_word_embeddings=args.tied)
        seq, batch, lr, max_files = args.seq or 512, args.batch or 64, args.lr or 2e-3, args.max_files
    os.makedirs(args.out, exist_ok=True)

    # 1. corpus and tokenizer
    tok = None
    if args.corpus:
        train_texts, valid_texts, held_texts, held, tok, what = load_corpus(args.corpus, max_files, cfg.vocab_size)
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
        tok = build_tokenizer(train_texts, cfg.vocab_size - 2)
    if tok.get_vocab_size() > cfg.vocab_size:
        sys.exit("tokenizer has %d ids > vocab_size %d" % (tok.get_vocab_size(), cfg.vocab_size))
    eot_id = tok.token_to_id(EOT)
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
    with open(os.path.join(args.out, "heldout_files.txt"), "w") as f:
        f.write("".join(p + "\n" for p in held))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOT, "pad_token": EOT,
                   "model_max_length": cfg.max_position_embeddings}, f, indent=1)

    # 2. model
    model = TinyQwen(cfg).to(dev)
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
    # Keep time for the evaluation and the save: a share of the budget, at least 10 s.
    reserve = max(10.0, 0.04 * args.minutes * 60)
    train_start = time.time()
    train_budget = max(1.0, deadline - reserve - train_start)
    gen = torch.Generator().manual_seed(args.seed)
    warm = 100 if not args.tiny else 20
    step, tokens_seen, last_log = 0, 0, time.time()
    # Validation every --eval-seconds, or with --steps every tenth of the steps (deterministic).
    eval_every = args.eval_seconds or (5.0 if args.tiny else 15.0)
    eval_steps = max(1, args.steps // 10) if args.steps else 0
    best = {"loss": float("inf"), "step": 0, "state": None}
    last_eval = time.time()

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

    while True:
        elapsed = time.time() - train_start
        if args.steps:
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
        x = batch_at(train_data, starts, seq + 2).to(dev, non_blocking=True)
        with autocast():
            loss, mtp_loss, _, _ = losses(model, x, args.mtp_weight, args.mtp_chain, args.mtp_distill)
            total = loss + args.mtp_weight * mtp_loss
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += batch * seq
        if valid_data is not None and step > 0 and (
                step % eval_steps == 0 if eval_steps else time.time() - last_eval > eval_every):
            validate()
            last_eval = time.time()
        if time.time() - last_log > (30 if not args.tiny else 5) or step == 1:
            last_log = time.time()
            log("step %d  loss %.3f  mtp loss %.3f  lr %.2e  %.0f tok/s  %.0f s"
                % (step, loss.item(), mtp_loss.item(), cur_lr, tokens_seen / max(time.time() - train_start, 1e-9),
                   time.time() - t_start))
    train_s = time.time() - train_start
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
    metrics.update({"steps": last_step, "train_tokens": tokens_seen, "train_seconds": round(train_s, 1),
                    "parameters": nparams, "seed": args.seed, "mtp_chain": args.mtp_chain, "mtp_distill": args.mtp_distill,
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
