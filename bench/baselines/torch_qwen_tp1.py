#!/usr/bin/env python3
"""torch_qwen_tp1.py: the plain PyTorch Qwen3 decoder a new user would write, one GPU (TP=1),
as the baseline for examples/qwen_tp (same shapes, random bf16 weights, same GPU, same call).

Prefill: the whole prompt in one forward, attention through
torch.nn.functional.scaled_dot_product_attention(is_causal=True, enable_gqa=True), the lm_head
for the last row only (what generation needs; qwen_tp does the same). Timed warm: one untimed
call of the same shape first, then the median of --reps calls (CUDA events); the first call of
the process is printed separately as "cold".

Decode: one token at position C attends to the cache sliced to its current length [:C + 1]
(no mask over unused slots). Three variants, each the median of --steps replays/calls:
  eager     the step as plain PyTorch ops
  graph     the same step captured once in a CUDA graph (static position C) and replayed
  compile   torch.compile(mode="max-autotune-no-cudagraphs", fullgraph) then captured in a CUDA
            graph the same way (only with --compile; it costs minutes of compile time)
tok/s = 1000 / step ms. Every line is printed as JSON too (one object per measurement).
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

PRESETS = {  # HF Qwen3 shapes (as examples/qwen_tp/config.cc's presets)
    "qwen3-0.6b": dict(V=151936, H=1024, I=3072, L=28, hq=16, hk=8, D=128),
    "qwen3-8b": dict(V=151936, H=4096, I=12288, L=36, hq=32, hk=8, D=128),
    "qwen3-32b": dict(V=151936, H=5120, I=25600, L=64, hq=64, hk=8, D=128),
}


class Model:
    def __init__(self, p, ctx, dev, seed=1):
        g = torch.Generator(device=dev)
        g.manual_seed(seed)
        self.p = p
        V, H, I, L, hq, hk, D = (p[k] for k in ("V", "H", "I", "L", "hq", "hk", "D"))
        bf = torch.bfloat16

        def w(*shape, scale):
            return (torch.rand(*shape, device=dev, dtype=bf, generator=g) - 0.5) * (2 * scale)

        self.embed = w(V, H, scale=0.05)
        self.lm_head = w(V, H, scale=1 / math.sqrt(H))
        self.final_norm = torch.ones(H, device=dev, dtype=bf)
        self.layers = []
        for _ in range(L):
            self.layers.append(dict(
                ln1=torch.ones(H, device=dev, dtype=bf), ln2=torch.ones(H, device=dev, dtype=bf),
                qn=torch.ones(D, device=dev, dtype=bf), kn=torch.ones(D, device=dev, dtype=bf),
                wqkv=w((hq + 2 * hk) * D, H, scale=1 / math.sqrt(H)), wo=w(H, hq * D, scale=1 / math.sqrt(hq * D)),
                wgu=w(2 * I, H, scale=1 / math.sqrt(H)), wd=w(H, I, scale=1 / math.sqrt(I)),
                k=torch.zeros(1, hk, ctx, D, device=dev, dtype=bf), v=torch.zeros(1, hk, ctx, D, device=dev, dtype=bf)))
        inv = 1.0 / (1e6 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
        t = torch.arange(ctx, device=dev, dtype=torch.float32)
        f = torch.outer(t, inv)
        self.cos = torch.cat([f.cos(), f.cos()], -1).to(bf)  # [ctx, D]
        self.sin = torch.cat([f.sin(), f.sin()], -1).to(bf)
        self.eps = 1e-6

    def weight_bytes(self):
        n = self.embed.numel() + self.lm_head.numel()
        for l in self.layers:
            n += sum(l[k].numel() for k in ("wqkv", "wo", "wgu", "wd"))
        return 2 * n

    @staticmethod
    def rope(x, cos, sin):  # x [1, h, T, D]
        d = x.shape[-1] // 2
        rot = torch.cat([-x[..., d:], x[..., :d]], -1)
        return x * cos + rot * sin

    def forward(self, tokens, pos, decode_len=None):
        """tokens [T] at positions pos..pos+T-1; returns the greedy token after the last one.
        Prefill (pos == 0): causal SDPA over the call's own keys. Decode (T == 1): attends to the
        cache sliced to decode_len = pos + 1 slots."""
        p = self.p
        hq, hk, D = p["hq"], p["hk"], p["D"]
        T = tokens.shape[0]
        x = self.embed[tokens].unsqueeze(0)  # [1, T, H]
        cos = self.cos[pos:pos + T].view(1, 1, T, D)
        sin = self.sin[pos:pos + T].view(1, 1, T, D)
        for l in self.layers:
            h = F.rms_norm(x, (x.shape[-1],), l["ln1"], self.eps)
            qkv = h @ l["wqkv"].t()
            q, k, v = qkv.split([hq * D, hk * D, hk * D], -1)
            q = F.rms_norm(q.view(1, T, hq, D), (D,), l["qn"], self.eps).transpose(1, 2)
            k = F.rms_norm(k.view(1, T, hk, D), (D,), l["kn"], self.eps).transpose(1, 2)
            v = v.view(1, T, hk, D).transpose(1, 2)
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            l["k"][:, :, pos:pos + T] = k
            l["v"][:, :, pos:pos + T] = v
            if decode_len is None:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                a = F.scaled_dot_product_attention(q, l["k"][:, :, :decode_len], l["v"][:, :, :decode_len],
                                                   enable_gqa=True)
            x = x + a.transpose(1, 2).reshape(1, T, hq * D) @ l["wo"].t()
            h = F.rms_norm(x, (x.shape[-1],), l["ln2"], self.eps)
            g, u = (h @ l["wgu"].t()).chunk(2, -1)
            x = x + (F.silu(g) * u) @ l["wd"].t()
        x = F.rms_norm(x[:, -1:], (x.shape[-1],), self.final_norm, self.eps)
        return (x @ self.lm_head.t()).argmax(-1).view(-1)


def time_ms(fn, reps):
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="qwen3-8b", choices=sorted(PRESETS))
    ap.add_argument("--prefill", default="512,2048,8192", help="prompt lengths ('' for none)")
    ap.add_argument("--decode", default="512,8192", help="decode positions C ('' for none)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--compile", action="store_true", help="also the torch.compile decode step")
    ap.add_argument("--no-eager-decode", action="store_true")
    a = ap.parse_args()
    dev = torch.device("cuda")
    prefill = [int(x) for x in a.prefill.split(",") if x]
    decode = [int(x) for x in a.decode.split(",") if x]
    ctx = max(prefill + [c + 1 for c in decode] + [16])
    p = PRESETS[a.preset]
    torch.manual_seed(0)
    m = Model(p, ctx, dev)
    torch.cuda.synchronize()
    emit(dict(what="setup", preset=a.preset, torch=torch.__version__, gpu=torch.cuda.get_device_name(),
              weights_gb=m.weight_bytes() / 1e9, ctx=ctx))
    first = True
    with torch.inference_mode():
        for P in prefill:
            toks = (torch.arange(P, device=dev) * 7919 + 13) % p["V"]
            t0 = time.perf_counter()
            m.forward(toks, 0)
            torch.cuda.synchronize()
            cold = (time.perf_counter() - t0) * 1e3
            ms = time_ms(lambda: m.forward(toks, 0), a.reps)
            emit(dict(what="prefill", preset=a.preset, tokens=P, warm_ms=ms, tok_s=P / ms * 1e3,
                      cold_ms=cold, cold_is_first_call_of_process=first))
            first = False
        for C in decode:
            tok = torch.tensor([5], device=dev)
            step = lambda: m.forward(tok, C, decode_len=C + 1)
            variants = []
            if not a.no_eager_decode:
                step()
                variants.append(("eager", time_ms(step, a.steps)))
            g = capture(step)
            variants.append(("graph", time_ms(g.replay, a.steps)))
            del g
            if a.compile:
              try:
                t0 = time.perf_counter()
                cstep = torch.compile(lambda: m.forward(tok, C, decode_len=C + 1),
                                      mode="max-autotune-no-cudagraphs", fullgraph=True, dynamic=False)
                for _ in range(3):
                    cstep()
                torch.cuda.synchronize()
                compile_s = time.perf_counter() - t0
                gc = capture(cstep)
                variants.append(("compile+graph", time_ms(gc.replay, a.steps)))
                emit(dict(what="compile_time", preset=a.preset, pos=C, seconds=compile_s))
                del gc
              except Exception as e:  # report, keep the other variants
                emit(dict(what="compile_failed", preset=a.preset, pos=C, error=repr(e)[:300]))
            kv_bytes = 2 * 2 * (C + 1) * p["hk"] * p["D"] * p["L"]
            step_bytes = m.weight_bytes() - 2 * m.embed.numel() + 2 * p["H"] + kv_bytes
            for name, ms in variants:
                emit(dict(what="decode", preset=a.preset, pos=C, variant=name, step_ms=ms, tok_s=1e3 / ms,
                          step_gb=step_bytes / 1e9))
    emit(dict(what="peak_memory", preset=a.preset, gb=torch.cuda.max_memory_allocated() / 1e9))


if __name__ == "__main__":
    sys.exit(main())
