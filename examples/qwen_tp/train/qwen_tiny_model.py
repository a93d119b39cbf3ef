"""qwen_tiny_model.py: a small Qwen3 with an MTP head in the Qwen3-Next layout, in plain PyTorch.

The math is Hugging Face's modeling_qwen3 (what examples/qwen_tp implements): RMSNorm in fp32
(weight * normed, normed cast back), per-head q/k RMSNorm before rotate-half rotary, GQA
attention with scale head_dim^-0.5, SwiGLU, final norm, lm_head (tied or not). Parameter names
are the Hugging Face tensor names, so state_dict() is the checkpoint as qwen_tp reads it
(weights.cc: modelTensorSpecs).

The MTP head (qwen_tp engine.h, vLLM's Qwen3-Next MTP): for position s it takes the target's final
hidden state h_s *after* model.norm and the embedding of token t_{s+1}, computes
fc([pre_fc_norm_embedding(e); pre_fc_norm_hidden(h)]) (embedding first), runs one decoder layer
mtp.layers.0 (causal over the MTP positions, rotary position s+1), mtp.norm, then the shared
lm_head: it predicts t_{s+2}.
"""
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TinyQwenConfig:
    vocab_size: int = 4096
    hidden_size: int = 512
    intermediate_size: int = 2048
    num_hidden_layers: int = 8
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    head_dim: int = 64
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    mtp_num_hidden_layers: int = 1

    def hf_config(self, eos_id, bos_id):
        """config.json as transformers 5 writes a Qwen3 config (rope_theta inside rope_parameters;
        qwen_tp reads this form and the older top-level rope_theta), plus mtp_num_hidden_layers."""
        c = asdict(self)
        theta = c.pop("rope_theta")
        c.update({
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu",
            "attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
            "rope_parameters": {"rope_type": "default", "rope_theta": theta},
            "use_cache": True, "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": self.num_hidden_layers, "bos_token_id": bos_id, "eos_token_id": eos_id,
            "torch_dtype": "bfloat16", "dtype": "bfloat16",
        })
        return c


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_cos_sin(positions, head_dim, theta, device):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def _compiling():
    """True while torch.compile traces (torch.compiler.is_compiling, torch._dynamo's before 2.3)."""
    f = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if f is None:
        f = getattr(getattr(torch, "_dynamo", None), "is_compiling", None)
    return bool(f is not None and f())


def _autocast_state():
    """The caller's CUDA autocast state: (enabled, dtype)."""
    try:
        return torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    except (TypeError, AttributeError):  # before torch 2.4
        return torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()


def _autocast_like_caller(cache_enabled):
    """A CUDA autocast context with the caller's state (enabled, dtype) and the given cache setting."""
    enabled, dtype = _autocast_state()
    return torch.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        H, D = c.hidden_size, c.head_dim
        self.q_proj = nn.Linear(H, c.num_attention_heads * D, bias=False)
        self.k_proj = nn.Linear(H, c.num_key_value_heads * D, bias=False)
        self.v_proj = nn.Linear(H, c.num_key_value_heads * D, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * D, H, bias=False)
        self.q_norm = RMSNorm(D, c.rms_norm_eps)
        self.k_norm = RMSNorm(D, c.rms_norm_eps)

    def forward(self, x, cos, sin, cache=None, mask=None):
        """cache: None (training: causal over x), or a list that holds this layer's [k, v] (empty
        before the prompt): x's keys and values are appended, and x attends to every cached
        position (a prompt, causal, into an empty cache; then one token at a time). mask: a bool
        attention mask (True: attend) broadcast to [B, heads, queries, keys], in place of those rules."""
        B, T, _ = x.shape
        c = self.c
        q = self.q_norm(self.q_proj(x).view(B, T, c.num_attention_heads, c.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, c.num_key_value_heads, c.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        causal = True
        if cache is not None:
            if cache:
                if T != 1:
                    raise ValueError("a cached attention call after the prompt takes one token")
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
                causal = False
            cache[:] = [k, v]
        group = c.num_attention_heads // c.num_key_value_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        # Under autocast the normed q/k come out fp32 (weight * x) and v bf16: one dtype for SDPA.
        o = F.scaled_dot_product_attention(q.to(v.dtype), k.to(v.dtype), v, attn_mask=mask,
                                           is_causal=causal and mask is None)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))

    def forward_static(self, x, cos, sin, kbuf, vbuf, pos, valid):
        """One token a row (x [B, 1, H]) against fixed-size key/value buffers [B, kv heads, L, D]:
        its key and value written at position pos (a 0-d long tensor), then attention to the keys
        valid [B, L] allows. Every shape is fixed, so a CUDA graph can replay it."""
        B = x.shape[0]
        c = self.c
        q = self.q_norm(self.q_proj(x).view(B, 1, c.num_attention_heads, c.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, 1, c.num_key_value_heads, c.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(B, 1, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # The buffers hold v's dtype: forward() casts k to it before SDPA too.
        kbuf.index_copy_(2, pos.view(1), k.to(kbuf.dtype))
        vbuf.index_copy_(2, pos.view(1), v.to(vbuf.dtype))
        group = c.num_attention_heads // c.num_key_value_heads
        o = F.scaled_dot_product_attention(q.to(vbuf.dtype), kbuf.repeat_interleave(group, dim=1),
                                           vbuf.repeat_interleave(group, dim=1), attn_mask=valid[:, None, None, :])
        return self.o_proj(o.transpose(1, 2).reshape(B, 1, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, cache=None, mask=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, mask)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_static(self, x, cos, sin, kbuf, vbuf, pos, valid):
        x = x + self.self_attn.forward_static(self.input_layernorm(x), cos, sin, kbuf, vbuf, pos, valid)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):  # "model." in the tensor names
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class MtpHead(nn.Module):  # "mtp." in the tensor names (Qwen3-Next layout)
    def __init__(self, c):
        super().__init__()
        self.pre_fc_norm_embedding = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.pre_fc_norm_hidden = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.fc = nn.Linear(2 * c.hidden_size, c.hidden_size, bias=False)
        self.layers = nn.ModuleList([DecoderLayer(c)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class TinyQwen(nn.Module):
    _graph_failed = False  # a CUDA graph capture of generate_greedy(graph=True) failed once: eager after

    def __init__(self, c: TinyQwenConfig):
        super().__init__()
        self.c = c
        self._rope_cache = {}  # (first position, length, device) -> (cos, sin); see _rope
        self._static = {}  # generate_greedy(graph=True)'s buffers and captured step per shape
        self.model = Backbone(c)
        if not c.tie_word_embeddings:
            self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if c.mtp_num_hidden_layers:
            self.mtp = MtpHead(c)
        self.apply(self._init)
        # GPT-2 style: the residual branches' output projections scaled by depth.
        for name, p in self.named_parameters():
            if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * c.num_hidden_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def _rope(self, pos0, T, device):
        """rope_cos_sin of positions pos0..pos0+T-1. A training step asks for the same few windows
        every time (the backbone's, each MTP chain step's), so each is computed once and kept: the
        same values, a dozen fewer kernels a step. Inside torch.compile it stays in the graph (a
        dict filled while tracing would be a guard and a graph break; inductor folds it anyway)."""
        if _compiling():
            return rope_cos_sin(torch.arange(pos0, pos0 + T, device=device), self.c.head_dim, self.c.rope_theta, device)
        key = (pos0, T, device)
        if key not in self._rope_cache:
            if len(self._rope_cache) >= 16:  # training, evaluation, --seq-unlikelihood: a few windows
                self._rope_cache.clear()
            # Plain tensors even under inference_mode: they multiply activations autograd saves.
            with torch.inference_mode(False), torch.no_grad():
                self._rope_cache[key] = rope_cos_sin(torch.arange(pos0, pos0 + T, device=device), self.c.head_dim,
                                                     self.c.rope_theta, device)
        return self._rope_cache[key]

    def logits(self, h):
        w = self.model.embed_tokens.weight if self.c.tie_word_embeddings else self.lm_head.weight
        return F.linear(h, w)

    def forward(self, ids):
        """ids [B, T] -> (final hidden after model.norm [B, T, H], logits [B, T, V])."""
        cos, sin = self._rope(0, ids.shape[1], ids.device)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        h = self.model.norm(x)
        return h, self.logits(h)

    @torch.no_grad()
    def generate_greedy(self, ids, n, pad=None, graph=False):
        """ids [B, T0] (every row a prompt of T0 tokens) -> [B, n]: the greedy continuation (argmax
        at each step), with a key/value cache; the backbone only (the MTP head drafts, it does not
        choose tokens). pad [B, T0] (bool, True at padding) batches prompts of other lengths, padded
        on the left: no token attends to padding (a padding position to itself only, so that its
        row stays finite), and rotary embeddings depend only on the distance between positions, so
        a row computes what its prompt alone would, up to rounding.
        graph: after the prompt, the one-token steps run against fixed-size key/value buffers
        (_generate_static), on CUDA as one captured graph replayed n - 1 times: the eager steps are
        hundreds of small kernels each. The same tokens up to rounding (a masked attention over the
        buffers instead of one over the concatenated cache)."""
        if n < 1:
            raise ValueError("generate_greedy: n = %d, expected 1 or more tokens" % n)
        if graph and n > 1:
            return self._generate_static(ids, n, pad)
        caches = [[] for _ in self.model.layers]
        nxt, keep = self._prompt(ids, pad, caches)
        out, pos = [nxt], ids.shape[1]
        for _ in range(n - 1):  # one token a step, attending to the concatenated cache
            cos, sin = rope_cos_sin(torch.arange(pos, pos + 1, device=ids.device), self.c.head_dim,
                                    self.c.rope_theta, ids.device)
            mask = None
            if keep is not None:
                keep = torch.cat([keep, torch.ones(keep.shape[0], 1, dtype=torch.bool, device=ids.device)], dim=1)
                mask = keep[:, None, None, :]
            x = self.model.embed_tokens(nxt)
            for layer, cache in zip(self.model.layers, caches):
                x = layer(x, cos, sin, cache, mask)
            nxt = self.logits(self.model.norm(x[:, -1:])).argmax(-1)
            out.append(nxt)
            pos += 1
        return torch.cat(out, dim=1)

    def _prompt(self, ids, pad, caches):
        """generate_greedy's prompt pass: fills caches (a [] per layer) with the prompt's keys and
        values and returns (the first greedy token [B, 1], the keys that may be attended to [B, T0]
        or None without padding)."""
        T = ids.shape[1]
        cos, sin = rope_cos_sin(torch.arange(0, T, device=ids.device), self.c.head_dim, self.c.rope_theta, ids.device)
        keep, mask = None, None
        if pad is not None:
            keep = ~pad
            eye = torch.eye(T, dtype=torch.bool, device=ids.device)
            mask = ((keep[:, None, :] | eye) & torch.ones(T, T, dtype=torch.bool, device=ids.device).tril())[:, None]
        x = self.model.embed_tokens(ids)
        for layer, cache in zip(self.model.layers, caches):
            x = layer(x, cos, sin, cache, mask)
        return self.logits(self.model.norm(x[:, -1:])).argmax(-1), keep

    def _generate_static(self, ids, n, pad):
        """generate_greedy(graph=True): the prompt pass (_prompt), then its keys and
        values copied into buffers of T0 + n positions and the n - 1 one-token steps through
        DecoderLayer.forward_static. Each step reads the token and its position from buffers and
        leaves the next ones there (the argmax into out[:, pos - T0 + 1], pos + 1), so on CUDA one
        captured step replays n - 1 times with no host work between; elsewhere, or when the capture
        fails (said once), the same step runs eagerly. Under the caller's autocast, as the eager
        path; the capture with autocast's weight cache off, as CUDA graphs require.
        The buffers and the captured step are kept per (batch, prompt length, n, dtypes, device,
        autocast state) and reused by the next call of that shape (--seq-unlikelihood asks for
        the same shape every time): a call refills them and replays, with no new capture (each
        capture synchronises, collects garbage and empties the allocator's cache). The step reads
        the weights where they live, so it follows an optimizer's in-place updates."""
        B, T0 = ids.shape
        caches = [[] for _ in self.model.layers]
        nxt, keep = self._prompt(ids, pad, caches)
        st = self._static_state(B, T0, n, caches, ids)
        for (k, v), (kb, vb) in zip(caches, st["bufs"]):
            # Slots past the prompt hold the previous call's keys: each step writes its own slot
            # before it reads, and the mask hides those after it.
            kb[:, :, :T0] = k.to(v.dtype)
            vb[:, :, :T0] = v
        st["prompt_keys"][:, :T0] = True if keep is None else keep
        st["out"].zero_()
        st["out"][:, :1] = nxt
        st["x_buf"].copy_(nxt)
        st["pos"].fill_(T0)
        dev = ids.device
        if dev.type == "cuda" and not TinyQwen._graph_failed:
            try:
                if st["graph"] is None:
                    with _autocast_like_caller(cache_enabled=False):
                        # A warm-up on a side stream (as torch.cuda.graphs asks), the state put back,
                        # then the capture (which runs nothing).
                        side = torch.cuda.Stream()
                        side.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(side):
                            st["step"]()
                        torch.cuda.current_stream().wait_stream(side)
                        st["x_buf"].copy_(nxt)
                        st["pos"].fill_(T0)
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g):
                            st["step"]()
                        st["graph"] = g
                for _ in range(n - 1):
                    st["graph"].replay()
                return st["out"].clone()
            except Exception as e:  # noqa: BLE001 -- any capture failure: the eager steps below
                TinyQwen._graph_failed = True
                self._static.clear()
                # torch.cuda.graph's exit stops at a failing capture_end, leaving the capture's
                # stream current: the default stream again, and everything queued finished (the
                # warm-up too) before the eager steps reset the buffers.
                torch.cuda.set_stream(torch.cuda.default_stream(dev))
                torch.cuda.synchronize(dev)
                print("[qwen_tiny_model] generate_greedy(graph=True): CUDA graph capture failed (%s: %s); "
                      "the one-token steps run eagerly" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else ""),
                      flush=True)
                st["x_buf"].copy_(nxt)
                st["pos"].fill_(T0)
                st["out"][:, 1:] = 0
        for _ in range(n - 1):
            st["step"]()
        return st["out"].clone()

    def _static_state(self, B, T0, n, caches, ids):
        """_generate_static's buffers and its step function (and, on CUDA, the captured graph once
        made) for this shape, made on first use; at most a few shapes are kept."""
        ac = _autocast_state()
        k0, v0 = caches[0]
        dev = ids.device
        key = (B, T0, n, ids.dtype, k0.shape[1], k0.shape[3], v0.dtype, str(dev), ac)
        st = self._static.get(key)
        if st is not None:
            return st
        if len(self._static) >= 4:  # training's sequence-level shape and the probes'
            self._static.clear()
        L = T0 + n
        bufs = [(torch.zeros(B, k.shape[1], L, k.shape[3], dtype=v.dtype, device=dev),
                 torch.zeros(B, k.shape[1], L, k.shape[3], dtype=v.dtype, device=dev)) for k, v in caches]
        idx = torch.arange(L, device=dev)
        prompt_keys = torch.zeros(B, L, dtype=torch.bool, device=dev)
        out = torch.zeros(B, n, dtype=ids.dtype, device=dev)
        x_buf = torch.zeros(B, 1, dtype=ids.dtype, device=dev)
        pos = torch.full((), T0, dtype=torch.long, device=dev)

        def step():
            valid = prompt_keys | ((idx >= T0) & (idx <= pos))
            cos, sin = rope_cos_sin(pos.view(1), self.c.head_dim, self.c.rope_theta, dev)
            x = self.model.embed_tokens(x_buf)
            for layer, (kb, vb) in zip(self.model.layers, bufs):
                x = layer.forward_static(x, cos, sin, kb, vb, pos, valid)
            t = self.logits(self.model.norm(x)).argmax(-1)
            out.index_copy_(1, (pos - T0 + 1).view(1), t)
            x_buf.copy_(t)
            pos.add_(1)

        st = dict(bufs=bufs, prompt_keys=prompt_keys, out=out, x_buf=x_buf, pos=pos, step=step, graph=None)
        self._static[key] = st
        return st

    def mtp_forward(self, hidden, next_ids, pos0=1, return_hidden=False):
        """MTP over pairs (hidden[:, s], next_ids[:, s] = t_{s+pos0}) -> logits predicting
        t_{s+pos0+1}. Rotary positions s+pos0, as qwen_tp's MTP cache holds them (engine.h): pos0
        = 1 for pairs with the target's hidden, k for the k-th step of a draft chain, whose hidden
        is the previous step's output (after mtp.norm, as qwen_tp's mtpChain feeds it).
        return_hidden: (that normed output hidden, logits)."""
        cos, sin = self._rope(pos0, next_ids.shape[1], hidden.device)
        e = self.model.embed_tokens(next_ids)
        x = self.mtp.fc(torch.cat([self.mtp.pre_fc_norm_embedding(e), self.mtp.pre_fc_norm_hidden(hidden)], dim=-1))
        for layer in self.mtp.layers:
            x = layer(x, cos, sin)
        h = self.mtp.norm(x)
        return (h, self.logits(h)) if return_hidden else self.logits(h)

    def checkpoint_tensors(self, dtype=torch.bfloat16):
        """The tensors qwen_tp and transformers read, by Hugging Face name (lm_head omitted when tied)."""
        return {k: v.detach().to(dtype).contiguous().cpu() for k, v in self.state_dict().items()}
