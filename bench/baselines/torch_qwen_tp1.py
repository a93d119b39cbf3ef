#!/usr/bin/env python3
"""torch_qwen_tp1.py: the plain PyTorch Qwen3 decoder a new user would write, one GPU (TP=1),
as the baseline for examples/qwen_tp (same shapes, random bf16 weights, same GPU, same call).

Prefill: the whole prompt in one forward, attention through
torch.nn.functional.scaled_dot_product_attention(is_causal=True, enable_gqa=True), the lm_head
for the last row only (what generation needs; qwen_tp does the same). Timed warm: one untimed
call of the same shape first, then the median of --reps calls (CUDA events); the first call of
the process is printed separately as "cold".

Decode: one token at position C. Variants, each the median of --steps replays/calls:
  eager     the step as plain PyTorch ops, attending to the cache sliced to its current length
            [:C + 1] (no mask over unused slots)
  graph     the same step captured once in a CUDA graph (static position C) and replayed
  compile   (only with --compile) one decoder layer as a function of (hidden, the layer's weights,
            its K/V cache, position) goes through torch.compile(fullgraph=True, dynamic=False,
            mode=--compile-mode) once and serves all L layers: weights and caches are inputs,
            not constants, so the layers share one compiled graph. The position is an int64
            tensor, so every position runs the same graph too. Shapes stay static: the layer
            attends over the first `bucket` slots of the preallocated cache (bucket = C + 1
            rounded up to a multiple of --compile-bucket, or the whole cache with 0) with a
            mask of the slots <= position, each KV head's group of query heads as that head's
            query rows (GQA without copying K/V); --compile-attention matmul (default: q K^T,
            masked softmax in fp32, @ V) or sdpa (SDPA, the mask as attn_mask, which rules out
            the flash kernel). The embedding lookup and the head (final norm, lm_head, argmax)
            stay plain ops. The whole step is then captured in a CUDA graph like "graph"
            ("compile+graph"; on CPU, timed uncaptured as "compile"). The first call (dynamo + inductor) is printed apart as compile_time,
            with the number of graphs compiled and any recompilation when other positions of
            the same bucket run; --compile-timeout N stops the process with "compile did not
            finish within N s" (exit 3) instead of waiting. --check-tokens N: the compiled step
            decodes N greedy tokens fed the eager step's tokens (positions C-N+1..C) and the
            argmaxes are compared (a differing one counts only at a near-tie, top-2 gap of the
            eager logits <= --check-tol x max |logit|).
tok/s = 1000 / step ms. Every line is printed as JSON too (one object per measurement).
--device cpu (fp32 by default) runs the same code without CUDA graphs, for the tests.
"""
import argparse
import json
import math
import os
import statistics
import sys
import threading
import time

import torch
import torch.nn.functional as F

PRESETS = {  # HF Qwen3 shapes (as examples/qwen_tp/config.cc's presets); tiny: CPU tests
    "qwen3-0.6b": dict(V=151936, H=1024, I=3072, L=28, hq=16, hk=8, D=128),
    "qwen3-8b": dict(V=151936, H=4096, I=12288, L=36, hq=32, hk=8, D=128),
    "qwen3-32b": dict(V=151936, H=5120, I=25600, L=64, hq=64, hk=8, D=128),
    "tiny": dict(V=512, H=64, I=192, L=3, hq=4, hk=2, D=16),
}
WEIGHTS = ("ln1", "wqkv", "qn", "kn", "wo", "ln2", "wgu", "wd")  # one layer's, in block()'s order
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")  # the CUDA graph is ours: no cudagraph modes


def rope(x, cos, sin):  # x [1, h, T, D]
    d = x.shape[-1] // 2
    rot = torch.cat([-x[..., d:], x[..., :d]], -1)
    return x * cos + rot * sin


def block(x, w, cos, sin, attend, dims):
    """One Qwen3 decoder layer on x [1, T, H] with weights w (WEIGHTS order). attend(q, k, v)
    (RoPE applied, [1, heads, T, D]) stores k, v in the layer's cache and returns [1, hq, T, D]."""
    ln1, wqkv, qn, kn, wo, ln2, wgu, wd = w
    hq, hk, D, eps = dims
    T = x.shape[1]
    h = F.rms_norm(x, (x.shape[-1],), ln1, eps)
    q, k, v = (h @ wqkv.t()).split([hq * D, hk * D, hk * D], -1)
    q = F.rms_norm(q.view(1, T, hq, D), (D,), qn, eps).transpose(1, 2)
    k = F.rms_norm(k.view(1, T, hk, D), (D,), kn, eps).transpose(1, 2)
    v = v.view(1, T, hk, D).transpose(1, 2)
    a = attend(rope(q, cos, sin), rope(k, cos, sin), v)
    x = x + a.transpose(1, 2).reshape(1, T, hq * D) @ wo.t()
    h = F.rms_norm(x, (x.shape[-1],), ln2, eps)
    g, u = (h @ wgu.t()).chunk(2, -1)
    return x + (F.silu(g) * u) @ wd.t()


def masked_layer(x, w, kc, vc, cos_all, sin_all, pos, bucket, attn, dims):
    """The compiled variant's layer: one token at position pos (int64 tensor [1]), its K/V
    written to slot pos of the preallocated cache kc/vc [1, hk, ctx, D], attention over the
    first `bucket` slots masked to those <= pos, each KV head's group of query heads as the rows
    of one attention (GQA without copying K/V). attn "matmul": scores = q K^T, masked softmax in
    fp32, @ V (two batched GEMMs around a fused softmax); "sdpa": SDPA with the mask as attn_mask.
    Static shapes: one graph for every layer and every position of a bucket."""
    hq, hk, D, _ = dims
    cos = cos_all.index_select(0, pos).view(1, 1, 1, D)
    sin = sin_all.index_select(0, pos).view(1, 1, 1, D)

    def attend(q, k, v):
        kc.index_copy_(2, pos, k)
        vc.index_copy_(2, pos, v)
        live = torch.arange(bucket, device=pos.device) <= pos  # [bucket]
        q, kb, vb = q.reshape(1, hk, hq // hk, D), kc[:, :, :bucket], vc[:, :, :bucket]
        if attn == "sdpa":
            a = F.scaled_dot_product_attention(q, kb, vb, attn_mask=live.view(1, 1, 1, bucket))
        else:
            s = (q * D ** -0.5) @ kb.transpose(-1, -2)  # [1, hk, group, bucket]
            a = s.float().masked_fill(~live, float("-inf")).softmax(-1).to(vb.dtype) @ vb
        return a.reshape(1, hq, 1, D)

    return block(x, w, cos, sin, attend, dims)


class Model:
    def __init__(self, p, ctx, dev, dtype=torch.bfloat16, seed=1):
        g = torch.Generator(device=dev)
        g.manual_seed(seed)
        self.p, self.ctx = p, ctx
        V, H, I, L, hq, hk, D = (p[k] for k in ("V", "H", "I", "L", "hq", "hk", "D"))

        def w(*shape, scale):
            return (torch.rand(*shape, device=dev, dtype=dtype, generator=g) - 0.5) * (2 * scale)

        ones = lambda n: torch.ones(n, device=dev, dtype=dtype)  # noqa: E731
        self.embed = w(V, H, scale=0.05)
        self.lm_head = w(V, H, scale=1 / math.sqrt(H))
        self.final_norm = ones(H)
        self.layers = []
        for _ in range(L):
            l = dict(ln1=ones(H), ln2=ones(H), qn=ones(D), kn=ones(D),
                     wqkv=w((hq + 2 * hk) * D, H, scale=1 / math.sqrt(H)), wo=w(H, hq * D, scale=1 / math.sqrt(hq * D)),
                     wgu=w(2 * I, H, scale=1 / math.sqrt(H)), wd=w(H, I, scale=1 / math.sqrt(I)),
                     k=torch.zeros(1, hk, ctx, D, device=dev, dtype=dtype),
                     v=torch.zeros(1, hk, ctx, D, device=dev, dtype=dtype))
            l["w"] = tuple(l[k] for k in WEIGHTS)
            self.layers.append(l)
        inv = 1.0 / (1e6 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
        t = torch.arange(ctx, device=dev, dtype=torch.float32)
        f = torch.outer(t, inv)
        self.cos = torch.cat([f.cos(), f.cos()], -1).to(dtype)  # [ctx, D]
        self.sin = torch.cat([f.sin(), f.sin()], -1).to(dtype)
        self.eps = 1e-6
        self.dims = (hq, hk, D, self.eps)

    def weight_bytes(self):
        n = self.embed.numel() + self.lm_head.numel()
        for l in self.layers:
            n += sum(l[k].numel() for k in ("wqkv", "wo", "wgu", "wd"))
        return n * self.embed.element_size()

    def forward(self, tokens, pos, decode_len=None, logits=False):
        """tokens [T] at positions pos..pos+T-1; returns the greedy token after the last one (its
        logits with logits=True). Prefill (pos == 0): causal SDPA over the call's own keys. Decode
        (T == 1): attends to the cache sliced to decode_len = pos + 1 slots."""
        D = self.p["D"]
        T = tokens.shape[0]
        x = self.embed[tokens].unsqueeze(0)  # [1, T, H]
        cos = self.cos[pos:pos + T].view(1, 1, T, D)
        sin = self.sin[pos:pos + T].view(1, 1, T, D)
        for l in self.layers:
            def attend(q, k, v, l=l):
                l["k"][:, :, pos:pos + T] = k
                l["v"][:, :, pos:pos + T] = v
                if decode_len is None:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                return F.scaled_dot_product_attention(q, l["k"][:, :, :decode_len], l["v"][:, :, :decode_len],
                                                      enable_gqa=True)
            x = block(x, l["w"], cos, sin, attend, self.dims)
        return self.head(x, logits)

    def masked_step(self, tok, pos, bucket, attn, layer_fn, logits=False):
        """One decode token tok [1] at position pos (int64 tensor [1]) through layer_fn
        (masked_layer, compiled or not) for every layer."""
        x = self.embed[tok].unsqueeze(0)
        for l in self.layers:
            x = layer_fn(x, l["w"], l["k"], l["v"], self.cos, self.sin, pos, bucket, attn, self.dims)
        return self.head(x, logits)

    def head(self, x, logits=False):
        x = F.rms_norm(x[:, -1:], (x.shape[-1],), self.final_norm, self.eps)
        y = x @ self.lm_head.t()
        return y.view(-1) if logits else y.argmax(-1).view(-1)


def time_samples(fn, reps, cuda=True):
    """reps calls of fn, each timed alone (CUDA events, or the wall clock on CPU); ms each."""
    ts = []
    for _ in range(reps):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
    return ts


def time_ms(fn, reps, cuda=True):
    return statistics.median(time_samples(fn, reps, cuda))


def capture(fn):
    """fn captured in a CUDA graph after two warm-up calls on a side stream, replayed once."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    return g


def emit(rec):
    print(json.dumps(rec), flush=True)


def graphs_compiled():
    """How many graphs dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def compiled_layer(mode, n_buckets):
    import torch._dynamo as dyn

    for knob in ("recompile_limit", "cache_size_limit"):  # one entry per bucket is expected
        if hasattr(dyn.config, knob):
            setattr(dyn.config, knob, max(getattr(dyn.config, knob), n_buckets + 8))
    return torch.compile(masked_layer, fullgraph=True, dynamic=False, mode=mode)


def watchdog(seconds, rec):
    """After `seconds`, say so and end the process (exit 3): a compile is not interruptible."""
    def fire():
        print("compile did not finish within %g s" % seconds, flush=True)
        emit(dict(rec, what="compile_timeout", seconds=seconds))
        os._exit(3)
    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()
    return t


def bucket_for(C, step, ctx):
    return ctx if step == 0 else -(-(C + 1) // step) * step


def run_compiled(m, a, C, dev, cuda, layer_c):
    """The compile variant at position C: compile_time (and compile_check) records; returns
    (variant name, step ms)."""
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    bucket = bucket_for(C, a.compile_bucket, m.ctx)
    info = dict(preset=a.preset, pos=C, mode=a.compile_mode, bucket=bucket,
                attention="%s, masked over the first %d cache slots" % (a.compile_attention, bucket))
    tok, pos = torch.tensor([5], device=dev), torch.tensor([C], device=dev)
    step = lambda: m.masked_step(tok, pos, bucket, a.compile_attention, layer_c)  # noqa: E731
    n0 = graphs_compiled()
    dog = watchdog(a.compile_timeout, info) if a.compile_timeout > 0 else None
    t0 = time.perf_counter()
    step()
    sync()
    compile_s = time.perf_counter() - t0
    if dog:
        dog.cancel()
    n1 = graphs_compiled()
    others = sorted({max(C - 1, 0), C, bucket - 1})  # positions of the same bucket: no recompile
    for q in others:
        pos.fill_(q)
        step()
    sync()
    emit(dict(info, what="compile_time", seconds=compile_s, graphs_compiled=n1 - n0,
              recompiles_across_positions=graphs_compiled() - n1, positions_run=others))
    if a.check_tokens:
        check_tokens(m, a, C, bucket, dev, layer_c, info)
    pos.fill_(C)
    if cuda:
        g = capture(step)
        ms = time_ms(g.replay, a.steps)
        del g
        return "compile+graph", ms
    step()
    return "compile", time_ms(step, a.steps, cuda)


def check_tokens(m, a, C, bucket, dev, layer_c, info):
    """The eager step decodes N greedy tokens at positions s..s+N-1 (s = C-N+1 or 0); the
    compiled step, fed the same tokens at the same positions, must give the same argmaxes but
    at near-ties (eager top-2 gap <= --check-tol x max |eager logit|: bf16 steps that sum in a
    different order differ by a few bf16 ulps of the logits' scale)."""
    n = min(a.check_tokens, bucket)
    s = max(0, min(C - n + 1, bucket - n))
    toks, gaps, scales = [5], [], []
    for i in range(n):
        lg = m.forward(torch.tensor([toks[-1]], device=dev), s + i, decode_len=s + i + 1, logits=True).float()
        top = lg.topk(2).values
        toks.append(int(lg.argmax()))
        gaps.append(float(top[0] - top[1]))
        scales.append(float(lg.abs().max()))
    pos = torch.tensor([s], device=dev)
    n0 = graphs_compiled()
    got = []
    for i in range(n):
        pos.fill_(s + i)
        got.append(int(m.masked_step(torch.tensor([toks[i]], device=dev), pos, bucket, a.compile_attention, layer_c)))
    differ = [dict(step=i, pos=s + i, eager=toks[i + 1], compiled=got[i], eager_top2_gap=gaps[i],
                   max_abs_logit=scales[i]) for i in range(n) if got[i] != toks[i + 1]]
    ok = all(d["eager_top2_gap"] <= a.check_tol * d["max_abs_logit"] for d in differ)
    emit(dict(info, what="compile_check", positions=[s, s + n - 1], eager=toks[1:], compiled=got,
              same=not differ, differ=differ, tol=a.check_tol, ok=ok, recompiles=graphs_compiled() - n0))
    if not ok:
        a.failed.append("compile_check at position %d: %s" % (C, differ))


def positions(s, what):
    try:
        v = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        sys.exit("%s: %r is not a comma-separated list of whole numbers" % (what, s))
    if any(x < 0 for x in v):
        sys.exit("%s: %r has a negative number" % (what, s))
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="qwen3-8b", choices=sorted(PRESETS))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--dtype", choices=("bf16", "fp32"), help="default bf16 on cuda, fp32 on cpu")
    ap.add_argument("--prefill", default="512,2048,8192", help="prompt lengths ('' for none)")
    ap.add_argument("--decode", default="512,8192", help="decode positions C ('' for none)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--compile", action="store_true", help="also the torch.compile decode step")
    ap.add_argument("--compile-mode", default="default", choices=COMPILE_MODES)
    ap.add_argument("--compile-attention", default="matmul", choices=("matmul", "sdpa"),
                    help="the compiled layer's masked attention (see the top of this file)")
    ap.add_argument("--compile-bucket", type=int, default=256,
                    help="the compiled step attends over C + 1 slots rounded up to a multiple of this (0: the whole cache)")
    ap.add_argument("--compile-timeout", type=float, default=120,
                    help="seconds the first compiled call may take before the process gives up (exit 3; 0: no limit)")
    ap.add_argument("--check-tokens", type=int, default=0,
                    help="with --compile: compare N greedy tokens of the compiled step with the eager step's")
    ap.add_argument("--check-tol", type=float,
                    help="near-tie top-2 gap relative to max |logit| (default 1e-4 fp32, 0.03 bf16, the bound of "
                         "qwen_tp's GPU-vs-fp32 logits test)")
    ap.add_argument("--no-eager-decode", action="store_true")
    a = ap.parse_args()
    for name in ("reps", "steps"):
        if getattr(a, name) < 1:
            ap.error("--%s must be at least 1" % name)
    if a.compile_bucket < 0 or a.check_tokens < 0 or a.compile_timeout < 0:
        ap.error("--compile-bucket, --check-tokens and --compile-timeout cannot be negative")
    if (a.check_tokens or a.compile_mode != "default" or a.compile_attention != "matmul"
            or a.check_tol is not None) and not a.compile:
        ap.error("--check-tokens, --check-tol, --compile-mode and --compile-attention go with --compile")
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("--device cuda: torch %s sees no CUDA device (--device cpu runs on the host)" % torch.__version__)
    dev = torch.device(a.device)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype or ("bf16" if cuda else "fp32")]
    if a.check_tol is None:
        a.check_tol = 0.03 if dtype == torch.bfloat16 else 1e-4
    a.failed = []
    prefill = positions(a.prefill, "--prefill")
    decode = positions(a.decode, "--decode")
    if 0 in prefill:
        ap.error("--prefill: a prompt has at least one token")
    ctx = max(prefill + [c + 1 for c in decode] + [16])
    if a.compile and a.compile_bucket:
        ctx = max([ctx] + [bucket_for(c, a.compile_bucket, ctx) for c in decode])
    p = PRESETS[a.preset]
    torch.manual_seed(0)
    m = Model(p, ctx, dev, dtype)
    if cuda:
        torch.cuda.synchronize()
    emit(dict(what="setup", preset=a.preset, torch=torch.__version__,
              gpu=torch.cuda.get_device_name() if cuda else "none (cpu)", dtype=str(dtype).replace("torch.", ""),
              weights_gb=m.weight_bytes() / 1e9, ctx=ctx))
    layer_c = compiled_layer(a.compile_mode, len(decode)) if a.compile else None
    first = True
    with torch.inference_mode():
        for P in prefill:
            toks = (torch.arange(P, device=dev) * 7919 + 13) % p["V"]
            t0 = time.perf_counter()
            m.forward(toks, 0)
            if cuda:
                torch.cuda.synchronize()
            cold = (time.perf_counter() - t0) * 1e3
            ms = time_ms(lambda: m.forward(toks, 0), a.reps, cuda)
            emit(dict(what="prefill", preset=a.preset, tokens=P, warm_ms=ms, tok_s=P / ms * 1e3,
                      cold_ms=cold, cold_is_first_call_of_process=first))
            first = False
        for C in decode:
            tok = torch.tensor([5], device=dev)
            step = lambda: m.forward(tok, C, decode_len=C + 1)  # noqa: E731
            es = m.embed.element_size()
            kv_bytes = 2 * es * (C + 1) * p["hk"] * p["D"] * p["L"]
            step_bytes = m.weight_bytes() - es * m.embed.numel() + es * p["H"] + kv_bytes

            def report(name, ms):
                emit(dict(what="decode", preset=a.preset, pos=C, variant=name, step_ms=ms, tok_s=1e3 / ms,
                          step_gb=step_bytes / 1e9))
            if not a.no_eager_decode:
                step()
                report("eager", time_ms(step, a.steps, cuda))
            if cuda:
                g = capture(step)
                report("graph", time_ms(g.replay, a.steps))
                del g
            if a.compile:
                try:
                    report(*run_compiled(m, a, C, dev, cuda, layer_c))
                except Exception as e:  # report, keep the other positions
                    emit(dict(what="compile_failed", preset=a.preset, pos=C, error=repr(e)[:300]))
                    a.failed.append("compile at position %d: %r" % (C, e))
    if cuda:
        emit(dict(what="peak_memory", preset=a.preset, gb=torch.cuda.max_memory_allocated() / 1e9))
    if a.failed:
        sys.exit("failed: " + "; ".join(a.failed))


if __name__ == "__main__":
    sys.exit(main())
