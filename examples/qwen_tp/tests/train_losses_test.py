#!/usr/bin/env python3
"""ctest qwen_train_losses: train/train_tiny_qwen.py's unlikelihood losses and qwen_tiny_model.py's
cached greedy decoding, on the CPU in a few seconds. Exit 77 (skipped) without torch, unless
TPCOMM_REQUIRE_TORCH=1 (ctest qwen_train_losses_torch, label torch: the torch venv of tests/python).

- CrossEntropyUnlikelihood (chunked, hand-written backward) against the same losses written
  plainly with autograd: values and gradients, at chunk sizes that split the batch unevenly;
- repeated_ngrams on a hand-made row;
- ditto_rows (periodic rows cut from the batch) and ditto_loss against the loss written as a loop
  over the tokens: values and gradients (none through the earlier copy's probability);
- generate_greedy (key/value cache) against greedy decoding that recomputes the whole sequence,
  and a left-padded batch against each prompt alone; its fixed-buffer steps (graph=True) against
  both, and reused for later calls of the same shape;
- --time-steps in a run of the script: the timed steps counted by kind (plain, with a
  sequence-level pass).
"""
import os
import sys

try:
    import torch
except ImportError:
    if os.environ.get("TPCOMM_REQUIRE_TORCH") == "1":  # the torch label: here it must run
        print("[qwen_train_losses] FAILED: TPCOMM_REQUIRE_TORCH=1 and this Python lacks torch")
        sys.exit(1)
    print("[qwen_train_losses] SKIPPED: this Python lacks torch")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
import train_tiny_qwen as tq  # noqa: E402
from qwen_tiny_model import TinyQwen, TinyQwenConfig  # noqa: E402
from checklist import Checklist  # noqa: E402

check = Checklist()


torch.manual_seed(0)
B, T, V = 3, 7, 11
for rows in (7, 14, 4096):
    tq.CrossEntropyUnlikelihood.ROWS = rows
    logits = (torch.randn(B, T, V, dtype=torch.float64) * 3).requires_grad_()
    inp = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))
    tgt[0, 3] = inp[0, 1]  # the next token is in the context: not a candidate
    ce, ul = tq.CrossEntropyUnlikelihood.apply(logits, tgt, inp)
    (ce + 0.7 * ul).backward()
    got = logits.grad.clone()
    logits.grad = None
    lp = torch.log_softmax(logits, -1)
    mask = torch.zeros(B, T, V, dtype=torch.bool)
    for b in range(B):
        for t in range(T):
            mask[b, t, inp[b, :t + 1]] = True
            mask[b, t, tgt[b, t]] = False
    ce2 = -lp.gather(2, tgt[..., None]).mean()
    ul2 = -(torch.log((1 - lp.exp()).clamp_min(1e-5)) * mask).sum(-1).mean()
    (ce2 + 0.7 * ul2).backward()
    check("CrossEntropyUnlikelihood, %d rows a chunk: values" % rows,
          abs(ce.item() - ce2.item()) < 1e-5 and abs(ul.item() - ul2.item()) < 1e-5)
    check("CrossEntropyUnlikelihood, %d rows a chunk: gradient" % rows,
          torch.allclose(got.float(), logits.grad.float(), atol=2e-5, rtol=1e-4))

    # Weighted rows (--rep-weight): the same against the weighted loss written plainly.
    wts = torch.where(torch.rand(B, T) < 0.4, torch.tensor(0.25), torch.tensor(1.0)).double()
    logits.grad = None
    ce, ul = tq.CrossEntropyUnlikelihood.apply(logits, tgt, inp, 0, wts)
    (ce + 0.7 * ul).backward()
    got = logits.grad.clone()
    logits.grad = None
    lp = torch.log_softmax(logits, -1)
    ce2 = -(lp.gather(2, tgt[..., None])[..., 0] * wts).mean()
    ul2 = -(torch.log((1 - lp.exp()).clamp_min(1e-5)) * mask).sum(-1).mean()
    (ce2 + 0.7 * ul2).backward()
    check("CrossEntropyUnlikelihood, weighted rows, %d rows a chunk: values and gradient" % rows,
          abs(ce.item() - ce2.item()) < 1e-5 and abs(ul.item() - ul2.item()) < 1e-5 and
          torch.allclose(got.float(), logits.grad.float(), atol=2e-5, rtol=1e-4))
    logits.grad = None

# repeat_targets against a loop: a target is marked when the 4-gram it ends ended earlier in the row.
gx = torch.Generator().manual_seed(5)
xs = torch.randint(0, 3, (4, 40), generator=gx)  # three ids: many repeats
xs[3] = torch.arange(40)  # none
ref = torch.zeros(4, 39, dtype=torch.bool)
for b in range(4):
    seen = set()
    for s in range(40 - 3):
        g = tuple(xs[b, s:s + 4].tolist())
        ref[b, s + 2] = g in seen
        seen.add(g)
rt = tq.repeat_targets(xs, vocab=3)
check("repeat_targets against a loop (%d of %d marked)" % (int(rt.sum()), rt.numel()),
      torch.equal(rt, ref) and rt[3].sum() == 0 and rt.sum() > 0)
row = torch.tensor([[5, 1, 2, 3, 4, 1, 2, 3, 4, 9]])  # targets x[1..9]: x[8] = 4 ends 1 2 3 4 again
check("repeat_targets on a hand-made row", tq.repeat_targets(row, vocab=10)[0].tolist() ==
      [False, False, False, False, False, False, False, True, False])
# losses() with --rep-weight 1 is the unweighted loss; 0 drops the repeated targets' terms.
cfg = TinyQwenConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64)
torch.manual_seed(1)
mdl = TinyQwen(cfg).double()
xb = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 5], [7, 8, 9, 10, 11, 12, 13, 14, 15, 1, 2, 3]])
for ul_w in (0.0, 1.0):
    l1 = tq.losses(mdl, xb, 0.0, unlikelihood=ul_w)[0]
    l2 = tq.losses(mdl, xb, 0.0, unlikelihood=ul_w, rep_weight=1.0)[0]
    l0 = tq.losses(mdl, xb, 0.0, unlikelihood=ul_w, rep_weight=0.0)[0]
    logit = mdl(xb[:, :-2])[1]
    ce_rows = torch.nn.functional.cross_entropy(logit.reshape(-1, 16), xb[:, 1:-1].reshape(-1), reduction="none")
    keep = ~tq.repeat_targets(xb[:, :-1], vocab=16).reshape(-1)
    ulv = tq.losses(mdl, xb, 0.0, unlikelihood=ul_w)[4]
    check("losses with --rep-weight 0 / 1, unlikelihood %g" % ul_w,
          torch.allclose(l1, l2) and
          torch.allclose(l0.double(), (ce_rows * keep).sum() / ce_rows.numel() + ul_w * ulv.double(), atol=1e-5) and
          int((~keep).sum()) == 4)

ref = torch.zeros(4, 40, dtype=torch.bool)  # repeated_ngrams against a loop over the same rows
for b in range(4):
    seen = set()
    for s in range(40 - 3):
        g = tuple(xs[b, s:s + 4].tolist())
        if g in seen:
            ref[b, s:s + 4] = True
        seen.add(g)
check("repeated_ngrams against a loop", torch.equal(tq.repeated_ngrams(xs, vocab=3), ref))
check("repeated_ngrams of a row shorter than an n-gram", tq.repeated_ngrams(torch.tensor([[1, 1, 1]])).sum() == 0)

row = torch.tensor([[5, 1, 2, 3, 4, 1, 2, 3, 4, 9, 1, 2, 3]])
check("repeated_ngrams", tq.repeated_ngrams(row)[0].tolist() ==
      [False, False, False, False, False, True, True, True, True, False, False, False, False])

x = torch.arange(100).reshape(4, 25)  # row b holds 25 b .. 25 b + 24: an element names its place
gen = torch.Generator().manual_seed(3)
y, L = tq.ditto_rows(x, 3, 40, gen, span=(2, 9))
periodic = all(torch.equal(y[r, L[r]:], y[r, :40 - L[r]]) for r in range(3))
segments = all(torch.equal(y[r, :L[r]], torch.arange(y[r, 0], y[r, 0] + L[r])) and y[r, 0] // 25 == r and
               (y[r, 0] + L[r] - 1) // 25 == r for r in range(3))
y2, L2 = tq.ditto_rows(x, 3, 40, torch.Generator().manual_seed(3), span=(2, 9))
check("ditto_rows: %d rows, each a segment of its own window repeated with period 2..9, the same for a seed"
      % y.shape[0], y.shape == (3, 40) and periodic and segments and bool(((L >= 2) & (L <= 9)).all()) and
      torch.equal(y, y2) and torch.equal(L, L2))


class FixedLogits:
    """A model whose next-token logits are one leaf tensor, for ditto_loss's gradient."""

    def __init__(self, logits):
        self.logits = logits

    def __call__(self, ids):
        assert ids.shape == self.logits.shape[:2]
        return None, self.logits


R, N, V = 3, 12, 7
yy = torch.randint(0, V, (R, N))
LL = torch.tensor([2, 3, 5])
for lam in (0.0, 0.5, 1.0):
    lg = (torch.randn(R, N - 1, V, dtype=torch.float64) * 2).requires_grad_()
    loss, p_mean = tq.ditto_loss(FixedLogits(lg), yy, LL, lam)
    loss.backward()
    got = lg.grad.clone()
    lg.grad = None
    prob = torch.softmax(lg, -1)
    terms, ps = [], []
    for r in range(R):
        for j in range(1, N):
            if j - LL[r] >= 1:
                pj = prob[r, j - 1, yy[r, j]]
                prev = prob[r, j - LL[r] - 1, yy[r, j - LL[r]]].detach()
                terms.append(-torch.log((1 - (pj - lam * prev).abs()).clamp_min(1e-5)))
                ps.append(pj.item())
    loss2 = torch.stack(terms).mean()
    loss2.backward()
    # ditto_loss works in fp32 (as on bf16 logits in training), the loop in fp64
    check("ditto_loss, lambda %.1f: value, mean probability and gradient against the loop" % lam,
          abs(loss.item() - loss2.item()) < 1e-5 and abs(p_mean.item() - sum(ps) / len(ps)) < 1e-6 and
          torch.allclose(got, lg.grad, atol=1e-6, rtol=1e-4))

m = TinyQwen(TinyQwenConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8)).eval()
with torch.no_grad():
    for p in m.parameters():
        p.mul_(5)  # sharper logits: fewer near ties
    ids = torch.randint(0, 50, (2, 9))
    x = ids
    for _ in range(12):
        x = torch.cat([x, m(x)[1][:, -1].argmax(-1, keepdim=True)], 1)
check("generate_greedy equals recomputed greedy decoding", torch.equal(m.generate_greedy(ids, 12), x[:, 9:]))
with torch.no_grad():
    short = ids[1:, 4:]  # the second prompt without its first 4 tokens, batched with the first (padded)
    alone = m.generate_greedy(short, 12)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[1, :4] = True
    both = m.generate_greedy(torch.cat([ids[:1], torch.cat([torch.zeros(1, 4, dtype=ids.dtype), short], 1)]), 12, pad)
check("generate_greedy, a left-padded batch, equals each prompt alone",
      torch.equal(both[0], x[0, 9:]) and torch.equal(both[1], alone[0]))
# The fixed-buffer steps (graph=True: a CUDA graph on a GPU, the same step eagerly here): the same
# tokens, unpadded and left-padded, and n = 1 (the prompt pass alone).
with torch.no_grad():
    static = m.generate_greedy(ids, 12, graph=True)
    static_both = m.generate_greedy(torch.cat([ids[:1], torch.cat([torch.zeros(1, 4, dtype=ids.dtype), short], 1)]), 12,
                                    pad, graph=True)
    one = m.generate_greedy(ids, 1, graph=True)
check("generate_greedy(graph=True) equals the cached steps", torch.equal(static, x[:, 9:]))
check("generate_greedy(graph=True), a left-padded batch", torch.equal(static_both, both))
check("generate_greedy(graph=True), one token", torch.equal(one, x[:, 9:10]))
# The buffers (and on CUDA the captured step) are kept per shape and refilled by every call: a
# second batch of the same shape, then the first again after the padded one, each equal to the
# cached steps, and the results handed out earlier untouched.
with torch.no_grad():
    ids2 = torch.randint(0, 50, (2, 9))
    second = m.generate_greedy(ids2, 12, graph=True)
    again = m.generate_greedy(ids, 12, graph=True)
check("generate_greedy(graph=True) reused: a second batch of the shape, the first again, earlier results kept",
      torch.equal(second, m.generate_greedy(ids2, 12)) and torch.equal(again, x[:, 9:]) and
      torch.equal(static, x[:, 9:]) and torch.equal(static_both, both) and len(m._static) == 1)

# --time-steps: the timed steps counted and timed by kind (here 4: steps 4 and 6 run a sequence-level
# pass, 3 and 5 do not), in a run of the script itself.
import importlib.util  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
if importlib.util.find_spec("tokenizers") is None and os.environ.get("TPCOMM_REQUIRE_TORCH") != "1":
    print("skip --time-steps: this Python lacks tokenizers (the torch label's environment has it)")
else:
    with tempfile.TemporaryDirectory() as d:
        args = ["--device", "cpu", "--tiny", "--max-files", "20", "--time-steps", "4", "--seq-unlikelihood", "1",
                "--seq-ul-from", "0", "--seq-ul-every", "2", "--seq-ul-rows", "2", "--seq-ul-prefix", "16",
                "--seq-ul-tokens", "4", "--out", os.path.join(d, "ckpt")]
        r = subprocess.run([sys.executable, os.path.join(HERE, "..", "train", "train_tiny_qwen.py")] + args,
                           capture_output=True, text=True, timeout=240)
        kinds = dict(re.findall(r"--time-steps: (plain steps|steps with a sequence-level pass): (\d+), [0-9.]+ ms each",
                                r.stdout))
        check("--time-steps 4 with a sequence-level pass every 2nd step: 2 plain steps and 2 with the pass, timed "
              "apart; nothing written to --out",
              r.returncode == 0 and kinds == {"plain steps": "2", "steps with a sequence-level pass": "2"} and
              not os.path.exists(os.path.join(d, "ckpt", "model.safetensors")))
        if r.returncode != 0 or len(kinds) != 2:
            print(r.stdout[-2000:], r.stderr[-2000:])

print("%d passed, %d failed" % (check.count - len(check.failed), len(check.failed)))
sys.exit(1 if check.failed else 0)
