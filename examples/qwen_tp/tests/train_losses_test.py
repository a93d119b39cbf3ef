#!/usr/bin/env python3
"""ctest qwen_train_losses: train/train_tiny_qwen.py's unlikelihood losses and qwen_tiny_model.py's
cached greedy decoding, on the CPU in a few seconds. Exit 77 (skipped) without torch, unless
TPCOMM_REQUIRE_TORCH=1 (ctest qwen_train_losses_torch, label torch: the torch venv of tests/python).

- CrossEntropyUnlikelihood (chunked, hand-written backward) against the same losses written
  plainly with autograd: values and gradients, at chunk sizes that split the batch unevenly;
- repeated_ngrams on a hand-made row;
- generate_greedy (key/value cache) against greedy decoding that recomputes the whole sequence,
  and a left-padded batch against each prompt alone; its fixed-buffer steps (graph=True) against
  both.
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

failed = []


def check(what, ok):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failed.append(what)


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

row = torch.tensor([[5, 1, 2, 3, 4, 1, 2, 3, 4, 9, 1, 2, 3]])
check("repeated_ngrams", tq.repeated_ngrams(row)[0].tolist() ==
      [False, False, False, False, False, True, True, True, True, False, False, False, False])

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

print("%d passed, %d failed" % (12 - len(failed), len(failed)))
sys.exit(1 if failed else 0)
