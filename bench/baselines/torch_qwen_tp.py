#!/usr/bin/env python3
"""torch_qwen_tp.py: a Qwen3-shaped tensor-parallel decoder in plain PyTorch, the same model with
each all-reduce a PyTorch engine can use. Launch with torchrun:

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 torchrun --nproc_per_node=2 \\
        bench/baselines/torch_qwen_tp.py --preset qwen3-32b --allreduce nccl,symm,tpcomm,tpcomm_fused

Tensor parallelism as Megatron and vLLM do it: qkv and gate_up column-parallel (each rank owns
hq/N query heads, hk/N key-value heads, I/N of the MLP), o_proj and down row-parallel, each
followed by one all-reduce of the [tokens, hidden] partial sums: 2 per layer. The embedding is
replicated (no collective); the lm_head is vocabulary-parallel and greedy decoding takes each
rank's local (max, index) and gathers them with dist.all_gather_into_tensor, one small call per
step that is the same for every backend. Weights are random (seeded, generated whole and sliced,
so every TP degree holds the same model); bf16 on CUDA, fp32 on CPU.

The backends change only what follows o_proj and down (`reduce_add_norm`):
  nccl          y = a @ W.T; dist.all_reduce(y); x = x + y; h = rms_norm(x)   (gloo on --device cpu)
  symm          y = mm(a, W.T, out=symmetric buffer); torch.ops.symm_mem.one_shot_all_reduce
                (<= --symm-one-shot-max bytes) or two_shot_all_reduce_ (above); two buffers used
                in turn; multicast off. CUDA only (skipped on CPU with a message).
  tpcomm        y = a @ W.T; tpcomm.torch Communicator.all_reduce(y) (in place); add; rms_norm
  tpcomm_fused  y = a @ W.T; h = comm.all_reduce_residual_rmsnorm(y, x, w): the all-reduce, the
                residual add (x updated in place) and the next RMSNorm in one call
Each all-reduce is followed by the residual add and the next RMSNorm (ln2, the next layer's ln1,
or the final norm), so all 2L all-reduces of a step are fused in tpcomm_fused.

Measured, every backend in one process with the same weights, in alternating order (A..D, D..A)
over --rounds rounds; the slowest rank's median is reported:
  decode   batch B (--decode-batch, default 1,8) at position C (--decode-pos): one token per
           sequence attending to the static KV cache sliced to C + 1 slots. Modes (--modes):
           eager (plain ops), graph (the step captured once in a CUDA graph and replayed),
           compile (each layer through torch.compile(fullgraph=True, dynamic=False), then the
           step captured in a CUDA graph; on CPU without the graph). tok/s = B * 1000 / step ms.
  prefill  one sequence of P tokens (--prefill, default 512,4096), eager, causal SDPA, lm_head on
           the last row. Warm: CUDA events (wall clock on CPU), median of --reps per round.
Cold (the first call of each backend for that shape, wall clock with a sync) is reported apart;
the very first call of the process also pays torch's lazy initialisation.
Greedy check: each backend prefills a --gen-prompt-token prompt and decodes --generate tokens
eagerly; rank 0 prints the tokens and whether they equal the first backend's (fp32 on 2 ranks:
the sums are the same, so the tokens must be; the fused norm may round differently in its last
bits, which changes a token only at a near-tie). The timed decode steps are checked the same
way: each backend's tokens from its last timed call (graph replay or compiled step) are printed
and compared, per mode and batch.
Rank 0 prints a table and one JSON object per measurement; --results FILE writes both there after
a header `# commit ...; date ...; command: ...` (COMMIT from the environment first).
"""
import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time

BACKENDS = ("nccl", "symm", "tpcomm", "tpcomm_fused")
MULTICAST_OFF = (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"))


def check_multicast_off():
    """Multicast must stay off on the shared H200 machines (docs/multicast.md): refuse otherwise."""
    for var, want in MULTICAST_OFF:
        if os.environ.get(var) != want:
            sys.exit("%s=%s must be set (multicast stays off): NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1"
                     % (var, want))
    if os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1") != "1":
        sys.exit("NVSHMEM_DISABLE_NVLS must be 1 (or unset) (multicast stays off)")
    os.environ.setdefault("TPCOMM_MULTICAST", "0")


check_multicast_off()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from torch_qwen_tp1 import PRESETS, capture, time_samples  # noqa: E402  (this script's folder; tiny: CPU tests)


def rope(x, cos, sin):  # x [B, h, T, D]
    d = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., d:], x[..., :d]], -1) * sin


def layer_forward(ar, x, h, wqkv, qn, kn, wo, ln2, wgu, wd, next_norm, kc, vc, cos, sin, pos, decode_len, dims):
    """One decoder layer on this rank's shard. x [B, T, H] is the residual stream, h = its RMSNorm
    (ln1). Returns (x, h) with h normed by next_norm (the next layer's ln1 or the final norm).
    decode_len None: prefill (causal over the call's own keys); else attend to the cache's first
    decode_len slots."""
    hq, hk, D, eps = dims
    B, T, _ = x.shape
    q, k, v = (h @ wqkv.t()).split([hq * D, hk * D, hk * D], -1)
    q = F.rms_norm(q.reshape(B, T, hq, D), (D,), qn, eps).transpose(1, 2)
    k = F.rms_norm(k.reshape(B, T, hk, D), (D,), kn, eps).transpose(1, 2)
    v = v.reshape(B, T, hk, D).transpose(1, 2)
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    kc[:B, :, pos:pos + T] = k
    vc[:B, :, pos:pos + T] = v
    if decode_len is None:
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:
        a = F.scaled_dot_product_attention(q, kc[:B, :, :decode_len], vc[:B, :, :decode_len], enable_gqa=True)
    x, h = ar.reduce_add_norm(a.transpose(1, 2).reshape(B, T, hq * D), wo, x, ln2, eps)
    g, u = (h @ wgu.t()).chunk(2, -1)
    return ar.reduce_add_norm(F.silu(g) * u, wd, x, next_norm, eps)


# ---- the all-reduce backends: identical but for the lines after the row-parallel GEMM ----

class UnfusedAR:
    """nccl (dist.all_reduce) and tpcomm (Communicator.all_reduce): the GEMM, the in-place
    all-reduce, the residual add, the next RMSNorm; only `all_reduce` differs."""

    def __init__(self, name, all_reduce, comm=None):
        self.name, self.all_reduce, self.comm = name, all_reduce, comm

    def reduce_add_norm(self, a, w, x, norm_w, eps):
        y = a @ w.t()
        self.all_reduce(y)
        x = x + y
        return x, F.rms_norm(x, (x.shape[-1],), norm_w, eps)


class TpcommFusedAR:
    name = "tpcomm_fused"

    def __init__(self, comm):
        self.comm = comm

    def reduce_add_norm(self, a, w, x, norm_w, eps):
        y = a @ w.t()
        h = self.comm.all_reduce_residual_rmsnorm(y, x, norm_w, eps)  # x += sum(y) in place
        return x, h


class SymmAR:
    """torch symmetric memory: the GEMM writes into a symmetric buffer, then torch's one-shot
    (small) or two-shot (large, in place) all-reduce kernel. Two buffers are used in turn, so a
    GEMM never overwrites a buffer a peer may still be reading (each kernel starts with a
    barrier: by the time the next call's barrier passes, every rank finished the previous one)."""
    name = "symm"

    def __init__(self, max_numel, dtype, dev, one_shot_max):
        import torch.distributed._symmetric_memory as sm

        self.group = dist.group.WORLD.group_name
        if hasattr(sm, "enable_symm_mem_for_group"):
            try:
                sm.enable_symm_mem_for_group(self.group)
            except Exception:  # newer torch: not needed
                pass
        self.bufs = []
        for _ in range(2):
            b = sm.empty(max_numel, dtype=dtype, device=dev)
            sm.rendezvous(b, self.group)
            self.bufs.append(b)
        self.turn, self.one_shot_max = 0, one_shot_max
        self.es = self.bufs[0].element_size()

    def reduce_add_norm(self, a, w, x, norm_w, eps):
        n, H = x.numel(), x.shape[-1]
        buf = self.bufs[self.turn][:n]
        self.turn ^= 1
        torch.mm(a.reshape(-1, a.shape[-1]), w.t(), out=buf.view(-1, H))
        if n * self.es <= self.one_shot_max:
            y = torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", self.group)
        else:
            torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", self.group)
            y = buf
        x = x + y.view_as(x)
        return x, F.rms_norm(x, (H,), norm_w, eps)


# ---- the model ----

class TPModel:
    def __init__(self, p, ctx, bmax, rank, world, dev, dtype, seed=1):
        for key in ("hq", "hk", "I", "V"):
            if p[key] % world:
                sys.exit("%s = %d is not a multiple of the %d ranks" % (key, p[key], world))
        self.p, self.rank, self.world, self.dev = p, rank, world, dev
        V, H, I, L, hq, hk, D = (p[k] for k in ("V", "H", "I", "L", "hq", "hk", "D"))
        self.hql, self.hkl, self.Il, self.Vl = hq // world, hk // world, I // world, V // world
        self.eps = 1e-6
        g = torch.Generator(device=dev)
        g.manual_seed(seed)
        r = rank

        def w(*shape, scale):  # the whole matrix, the same on every rank
            return ((torch.rand(*shape, device=dev, dtype=torch.float32, generator=g) - 0.5) * (2 * scale)).to(dtype)

        def rows(t, n):  # this rank's n-row block
            return t[r * n:(r + 1) * n]

        ones = lambda n: torch.ones(n, device=dev, dtype=dtype)  # noqa: E731
        self.embed = w(V, H, scale=0.05)  # replicated
        self.lm_head = rows(w(V, H, scale=1 / math.sqrt(H)), self.Vl).contiguous()
        self.final_norm = ones(H)
        self.layers = []
        for _ in range(L):
            qkv = w((hq + 2 * hk) * D, H, scale=1 / math.sqrt(H))
            q, k, v = qkv.split([hq * D, hk * D, hk * D], 0)
            wo = w(H, hq * D, scale=1 / math.sqrt(hq * D))
            gu = w(2 * I, H, scale=1 / math.sqrt(H))
            wd = w(H, I, scale=1 / math.sqrt(I))
            self.layers.append(dict(
                ln1=ones(H), ln2=ones(H), qn=ones(D), kn=ones(D),
                wqkv=torch.cat([rows(q, self.hql * D), rows(k, self.hkl * D), rows(v, self.hkl * D)]),
                wo=rows(wo.t(), self.hql * D).t().contiguous(),
                wgu=torch.cat([rows(gu[:I], self.Il), rows(gu[I:], self.Il)]),
                wd=rows(wd.t(), self.Il).t().contiguous(),
                k=torch.zeros(bmax, self.hkl, ctx, D, device=dev, dtype=dtype),
                v=torch.zeros(bmax, self.hkl, ctx, D, device=dev, dtype=dtype)))
            del qkv, q, k, v, wo, gu, wd
        inv = 1.0 / (1e6 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
        f = torch.outer(torch.arange(ctx, device=dev, dtype=torch.float32), inv)
        self.cos = torch.cat([f.cos(), f.cos()], -1).to(dtype)  # [ctx, D]
        self.sin = torch.cat([f.sin(), f.sin()], -1).to(dtype)
        self.dims = (self.hql, self.hkl, D, self.eps)

    def weight_bytes(self):
        """Bytes of weights this rank holds (the replicated embedding included)."""
        n = self.embed.numel() + self.lm_head.numel()
        for l in self.layers:
            n += sum(l[k].numel() for k in ("wqkv", "wo", "wgu", "wd"))
        return n * self.embed.element_size()

    def step_bytes(self, batch, pos):
        """Bytes one decode step reads on this rank: weights but the embedding, one embedding row
        per sequence, K/V of slots 0..pos."""
        es = self.embed.element_size()
        kv = 2 * batch * (pos + 1) * self.hkl * self.p["D"] * self.p["L"] * es
        return self.weight_bytes() - self.embed.numel() * es + batch * self.p["H"] * es + kv

    def forward(self, ar, tokens, pos, decode_len=None, layer_fn=layer_forward):
        """tokens [B, T] at positions pos..pos+T-1; returns the greedy next token of each row [B]."""
        B, T = tokens.shape
        D = self.p["D"]
        x = self.embed[tokens]  # [B, T, H], a new tensor (the residual stream)
        cos = self.cos[pos:pos + T].view(1, 1, T, D)
        sin = self.sin[pos:pos + T].view(1, 1, T, D)
        h = F.rms_norm(x, (x.shape[-1],), self.layers[0]["ln1"], self.eps)
        for i, l in enumerate(self.layers):
            nxt = self.layers[i + 1]["ln1"] if i + 1 < len(self.layers) else self.final_norm
            x, h = layer_fn(ar, x, h, l["wqkv"], l["qn"], l["kn"], l["wo"], l["ln2"], l["wgu"], l["wd"], nxt,
                            l["k"], l["v"], cos, sin, pos, decode_len, self.dims)
        return self.greedy(h[:, -1])

    def greedy(self, hlast):
        """hlast [B, H], already final-normed: argmax over the vocabulary shards of all ranks."""
        val, idx = (hlast @ self.lm_head.t()).float().max(-1)
        mine = torch.stack([val, (idx + self.rank * self.Vl).float()], -1)  # [B, 2]; ids < 2^24
        every = torch.empty(self.world * mine.shape[0], 2, device=mine.device, dtype=mine.dtype)
        dist.all_gather_into_tensor(every, mine)
        every = every.view(self.world, -1, 2)
        best = every[..., 0].argmax(0, keepdim=True)  # the lowest rank wins a tie
        return every[..., 1].gather(0, best).view(-1).long()


# ---- timing ----

class Clock:
    def __init__(self, cuda):
        self.cuda = cuda

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def samples(self, fn, n):
        """n calls of fn, each timed alone (CUDA events, or wall clock on CPU); ms each."""
        return time_samples(fn, n, self.cuda)

    def cold(self, fn):
        self.sync()
        t0 = time.perf_counter()
        r = fn()
        self.sync()
        return (time.perf_counter() - t0) * 1e3, r


def agree(ok, dev):
    """True on every rank only if ok on every rank (so no rank waits in a collective the others skip)."""
    t = torch.tensor([0 if ok else 1], device=dev)
    dist.all_reduce(t)
    return t.item() == 0


def compiled_layer():
    import torch._dynamo as dyn

    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(dyn.config, knob):
            setattr(dyn.config, knob, max(getattr(dyn.config, knob), 256))
    return torch.compile(layer_forward, fullgraph=True, dynamic=False)


def commit_id():
    c = os.environ.get("COMMIT", "")  # the caller's: a copied tree's .git may be stale
    if not c:
        try:
            c = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                               cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
        except OSError:
            c = ""
    return c or "unknown"


def ints(s):
    return [int(v) for v in s.split(",") if v.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="qwen3-32b", choices=sorted(PRESETS))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--allreduce", default="nccl,symm,tpcomm,tpcomm_fused",
                    help="comma-separated, run side by side in one process: " + ",".join(BACKENDS))
    ap.add_argument("--modes", default="", help="decode modes: eager,graph,compile (default graph on cuda, eager on cpu)")
    ap.add_argument("--decode-batch", default="1,8")
    ap.add_argument("--decode-pos", type=int, default=512, help="decode position C (the prompt length before it)")
    ap.add_argument("--prefill", default="512,4096", help="prompt lengths ('' for none)")
    ap.add_argument("--steps", type=int, default=50, help="decode calls timed per backend and round")
    ap.add_argument("--reps", type=int, default=2, help="prefill calls timed per backend and round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, the backends' order reversed every other one")
    ap.add_argument("--generate", type=int, default=8, help="greedy tokens per backend for the check (0: none)")
    ap.add_argument("--gen-prompt", type=int, default=16, help="prompt tokens of the greedy check")
    ap.add_argument("--symm-one-shot-max", type=int, default=128 << 10,
                    help="symm: one_shot_all_reduce up to this many bytes, two_shot_all_reduce_ above")
    ap.add_argument("--dtype", default="", choices=("", "bf16", "f32"), help="default bf16 on cuda, f32 on cpu")
    ap.add_argument("--results", default="")
    a = ap.parse_args()

    cuda = a.device == "cuda"
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=dev)
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[a.dtype or ("bf16" if cuda else "f32")]
    modes = [m for m in (a.modes or ("graph" if cuda else "eager")).split(",") if m]
    for m in modes:
        if m not in ("eager", "graph", "compile"):
            sys.exit("--modes: %r is not eager, graph or compile" % m)
        if m == "graph" and not cuda:
            sys.exit("--modes graph needs --device cuda")
    wanted = [b for b in a.allreduce.split(",") if b]
    for b in wanted:
        if b not in BACKENDS:
            sys.exit("--allreduce: %r is not one of %s" % (b, ", ".join(BACKENDS)))
    batches, prefills = ints(a.decode_batch), ints(a.prefill)
    p = PRESETS[a.preset]
    gen_len = a.gen_prompt + a.generate if a.generate else 0
    ctx = max(prefills + [a.decode_pos + 1, gen_len, 16])
    bmax = max(batches + [1])

    lines = []

    def out(s=""):
        if rank == 0:
            print(s, flush=True)
            lines.append(s)

    def emit(rec):
        out(json.dumps(rec))

    cmd = "torchrun --nproc_per_node=%d %s" % (world, " ".join(sys.argv))
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    out("# commit %s; date %s; command: %s" % (commit_id(), date, cmd))
    out("# torch %s, %s, %d rank(s), %s, preset %s, %s" % (
        torch.__version__, ("NCCL " + ".".join(map(str, torch.cuda.nccl.version()))) if cuda else "gloo",
        world, torch.cuda.get_device_name(dev) if cuda else "cpu", a.preset, str(dtype).replace("torch.", "")))

    torch.manual_seed(0)
    t0 = time.perf_counter()
    model = TPModel(p, ctx, bmax, rank, world, dev, dtype)
    clock = Clock(cuda)
    clock.sync()
    emit(dict(what="setup", preset=a.preset, world=world, weights_gb_per_rank=model.weight_bytes() / 1e9,
              ctx=ctx, init_s=time.perf_counter() - t0))

    # Backends; one that cannot be set up on some rank is skipped on all, with the reason.
    backends, comm = [], None
    for name in wanted:
        why, ar = None, None
        try:
            if name == "nccl":
                ar = UnfusedAR("nccl", dist.all_reduce)
            elif name == "symm":
                if not cuda:
                    raise RuntimeError("torch symmetric memory needs CUDA tensors; skipped on --device cpu")
                max_rows = max([bmax] + prefills + [a.gen_prompt])
                ar = SymmAR(max_rows * p["H"], dtype, dev, a.symm_one_shot_max)
            else:
                if comm is None:
                    import tpcomm.torch as tt

                    comm = tt.Communicator.from_process_group()
                ar = UnfusedAR("tpcomm", comm.all_reduce, comm) if name == "tpcomm" else TpcommFusedAR(comm)
        except Exception as e:
            why = "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:200])
        if not agree(why is None, dev) and why is None:
            why = "failed on another rank"
        if why:
            out("# %s: skipped (%s)" % (name, why))
            emit(dict(what="skipped", allreduce=name, why=why))
        else:
            backends.append(ar)
    if not backends:
        sys.exit("no backend left to run")
    names = [b.name for b in backends]

    def slowest(v):  # the slowest rank's value
        allv = [None] * world
        dist.all_gather_object(allv, v)
        return max(allv)

    def alternate(calls, n):
        """calls {name: fn}: --rounds rounds in A..D, D..A order, n timed calls each; median ms."""
        got = {k: [] for k in calls}
        order = list(calls)
        for rnd in range(a.rounds):
            for k in (order if rnd % 2 == 0 else order[::-1]):
                dist.barrier()
                got[k] += clock.samples(calls[k], n)
        return {k: slowest(statistics.median(v)) for k, v in got.items()}

    table = {}  # (phase, mode, size) -> {backend: tok/s, or cold ms}
    algos = {}  # (mode or "prefill", size, backend) -> tpcomm's algorithm for that shape

    def algorithm(ar):  # what tpcomm chose for the shape just run (captured graphs keep it)
        c = getattr(ar, "comm", None)
        return c.last_algorithm if c is not None else None
    gen = {}  # backend -> greedy tokens
    checks = []  # per decode mode and batch: do the backends' step tokens agree
    with torch.inference_mode():
        # Greedy check first (eager): every backend decodes the same tokens.
        if a.generate:
            prompt = ((torch.arange(a.gen_prompt, device=dev) * 7919 + 13) % p["V"]).view(1, -1)
            first = None
            for ar in backends:
                tok = model.forward(ar, prompt, 0)
                toks = [int(tok.item())]
                for i in range(a.generate - 1):
                    tok = model.forward(ar, tok.view(1, 1), a.gen_prompt + i, decode_len=a.gen_prompt + i + 1)
                    toks.append(int(tok.item()))
                first = toks if first is None else first
                gen[ar.name] = toks
                emit(dict(what="tokens", allreduce=ar.name, tokens=toks, same_as=names[0], same=toks == first))

        # Prefill, eager.
        for P in prefills:
            toks = ((torch.arange(P, device=dev) * 7919 + 13) % p["V"]).view(1, -1)
            calls, cold = {}, {}
            for ar in backends:
                fn = (lambda ar=ar: model.forward(ar, toks, 0))
                cold[ar.name] = slowest(clock.cold(fn)[0])
                calls[ar.name] = fn
                algos[("prefill", P, ar.name)] = algorithm(ar)
            ms = alternate(calls, a.reps)
            row = table.setdefault(("prefill", "eager", P), {})
            for k in calls:
                row[k] = P / ms[k] * 1e3
                emit(dict(what="prefill", allreduce=k, tokens=P, warm_ms=ms[k], tok_s=P / ms[k] * 1e3,
                          cold_ms=cold[k], algorithm=algos[("prefill", P, k)]))
            table.setdefault(("prefill cold ms", "eager", P), {}).update(cold)

        # Decode at position C, batch B, each mode.
        C = a.decode_pos
        layer_c = compiled_layer() if "compile" in modes else None
        for B in batches:
            tok = ((torch.arange(B, device=dev) * 31 + 5) % p["V"]).view(B, 1)
            for mode in modes:
                calls, graphs, cold, res = {}, [], {}, {}
                for ar in backends:
                    def fn(ar=ar, lf=(layer_c if mode == "compile" else layer_forward), res=res):
                        # the step's tokens; under capture, the graph's output that replays refresh
                        res[ar.name] = model.forward(ar, tok, C, decode_len=C + 1, layer_fn=lf)
                    ok, why = True, None
                    try:
                        c_ms, _ = clock.cold(fn)  # eager: first call; compile: includes compiling
                        cold[ar.name] = c_ms
                        if mode == "graph" or (mode == "compile" and cuda):
                            g = capture(fn)
                            graphs.append(g)
                            fn = g.replay
                        fn()
                        calls[ar.name] = fn
                        algos[(mode, B, ar.name)] = algorithm(ar)
                    except Exception as e:
                        ok, why = False, "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:200])
                        clock.sync()
                    if not agree(ok, dev):
                        calls.pop(ar.name, None)
                        why = why or "failed on another rank"
                        out("# %s, %s, batch %d: failed (%s)" % (ar.name, mode, B, why))
                        emit(dict(what="decode_failed", allreduce=ar.name, mode=mode, batch=B, error=why))
                    else:
                        cold[ar.name] = slowest(cold[ar.name])
                if not calls:
                    continue
                ms = alternate(calls, a.steps)
                row = table.setdefault(("decode", mode, B), {})
                for k in calls:
                    row[k] = B * 1e3 / ms[k]
                    emit(dict(what="decode", allreduce=k, mode=mode, batch=B, pos=C, step_ms=ms[k],
                              tok_s=B * 1e3 / ms[k], step_gb=model.step_bytes(B, C) / 1e9,
                              cold_ms=cold[k], cold_includes="compile" if mode == "compile" else "first call",
                              algorithm=algos[(mode, B, k)]))
                table.setdefault(("decode cold ms", mode, B), {}).update({k: cold[k] for k in calls})
                step_toks = {k: res[k].tolist() for k in calls}  # the last timed call's tokens
                ref = step_toks[next(iter(calls))]
                for k in calls:
                    emit(dict(what="step_tokens", allreduce=k, mode=mode, batch=B, tokens=step_toks[k],
                              same=step_toks[k] == ref))
                checks.append("%s batch %d: %s" % (mode, B, "same" if all(v == ref for v in step_toks.values())
                                                   else "DIFFERENT %s" % step_toks))
                del graphs

    # The table: tok/s per backend, speed-up over nccl in the same mode.
    out()
    out("# tok/s (decode: batch x 1000 / step ms at position %d; prefill: tokens / warm ms), slowest rank's median of"
        " %d rounds (order alternating); cold rows: ms of the first call (compile: includes compiling)" % (
            C, a.rounds))
    ratios = [n for n in names if n != "nccl"] if "nccl" in names else []
    head = "%-16s%-8s%7s" % ("phase", "mode", "size") + "".join("%14s" % n for n in names)
    head += "".join("%20s" % ("%s/nccl" % n) for n in ratios)
    out(head)
    for (phase, mode, size), row in table.items():
        s = "%-16s%-8s%7d" % (phase, mode, size)
        s += "".join("%14s" % ("%.1f" % row[n] if n in row else "-") for n in names)
        if "cold" not in phase:
            base = row.get("nccl")
            s += "".join("%20s" % ("%.3f" % (row[n] / base) if base and n in row else "-") for n in ratios)
        out(s)
    if comm is not None:
        out("# tpcomm's algorithms: " + ", ".join("%s %s %d: %s" % (k[2], k[0], k[1], v)
                                                   for k, v in algos.items() if v))
    if checks:
        out("# decode step tokens across backends (last timed call): " + "; ".join(checks))
    if gen:
        ref = gen[names[0]]
        out("# greedy tokens (%d-token prompt, eager): %s %s; " % (a.gen_prompt, names[0], ref) + "; ".join(
            "%s %s" % (n, "same" if gen[n] == ref else "DIFFERENT %s" % gen[n]) for n in names[1:]))
    if rank == 0 and a.results:
        with open(a.results, "w") as f:
            f.write("\n".join(lines) + "\n")
    dist.barrier()
    if comm is not None:
        comm.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
