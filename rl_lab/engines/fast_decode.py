"""A static-cache decoder for Qwen2/Llama-family Hugging Face models (the HF engine's fast path).

For a tiny model, a call to the Hugging Face forward costs far more in Python (mask building,
cache objects, output dataclasses, keyword plumbing) than in arithmetic, and sampling calls it
once per generated token.  `StaticDecoder` runs the same weights of the same model -- embedding,
RMSNorms, q/k/v/o projections, rotary embedding, MLP, lm_head -- with the same attention math
on a key/value cache preallocated for prompt + completion.  A decode step is one pure function,
`decode_step`: it attends over the filled part of the cache, rounded up to a block of
`KEY_BLOCK` positions, under a key mask (the positions not yet written are masked), through views
of the cache (no slice is ever copied), so a step costs the current length, not the cache size, and
a step's tensors keep their shapes for `KEY_BLOCK` steps at a time.  For a model too big for the
CPU's cache, a step multiplies each weight by the rows rather than the rows by the weight
(`WEIGHTS_FIRST_BYTES`: the same products, in half the time at 30M).  The weights
are the model's, read when the decoder is built: a synced, quantised or stale sampler copy is
used as it is.  `supports(model)` says when it applies; `HFEngine` falls back to the Hugging Face
forward otherwise (`rl_lab.engines.rollout.HFCacheDecoder`, the same `Decoder` interface).
tests/unit/test_rollout.py checks it against that forward (log-probs to 1e-5, same tokens, fp32 and
bf16, Qwen2 and Llama).

    dec = StaticDecoder(model, batch_size=B, max_len=P + T)
    logits = dec.prefill(prompt_ids, prompt_mask, positions)   # (B, V), last prompt position
    logits = dec.prefill(ids[::n], mask[::n], pos[::n], repeats=n)  # or each distinct prompt once
    logits = dec.step(tokens, positions[:, -1] + 1)            # (B, V), one new token per row

BENCHMARKS.md measures it; chapter 1 shows the plain step it must match (rl_lab.reference_step).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

SUPPORTED = ("qwen2", "llama")
KEY_BLOCK = 64
"""A decode step attends over the first ceil((filled + 1) / KEY_BLOCK) * KEY_BLOCK cache positions
(at most the cache size): attention costs the length so far, as in a growing cache, while shapes
change only once per block.  Masked positions add exp(-inf) = 0, so the block size changes the
log-probs only in float rounding (tests/unit/test_rollout.py)."""

WEIGHTS_FIRST_BYTES = 32 * 2**20
"""On a CPU, a decode step of a model whose layers hold at least this many bytes multiplies
weight @ rows^T instead of rows @ weight^T (F.linear): the same products (on the machine measured
the same bits, for a batch of rows; across machines not promised), but for a few rows and weights
read from memory rather than cache the matrix library runs the first 2-3x faster (16 rows by the
30M model's 512 x 2048 weights; BENCHMARKS.md section 10).  Below it (the weights in cache, as for
the 0.3M and 3M models) the two orders take the same time, and the tiny models keep F.linear's."""


def supports(model) -> bool:
    """Qwen2/Llama layout (pre-norm blocks, rotary, GQA), no sliding window, no rope scaling
    that depends on the sequence length, plain causal attention implementation, no adapters."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in SUPPORTED:
        return False
    if type(model).__name__ not in ("Qwen2ForCausalLM", "LlamaForCausalLM"):   # e.g. a PeftModel wrapper
        return False
    # adapters injected in place (peft's inject_adapter_in_model, rl_lab.toolkits.lora): a LoRA layer's
    # `.weight` is its base layer's, so the static cache would sample from the model without its
    # adapters, an off-policy sampler whose gap grows as the adapters train
    if any(hasattr(m, "lora_A") for m in model.modules()):
        return False
    if getattr(cfg, "use_sliding_window", False):
        return False
    scaling = getattr(cfg, "rope_scaling", None) or {}
    if scaling.get("rope_type", scaling.get("type", "default")) not in ("default", None):
        return False
    return getattr(cfg, "_attn_implementation", "sdpa") in ("sdpa", "eager")


class Layer(NamedTuple):
    """One decoder block's weights; q/k/v and gate/up stacked (one matrix product each)."""
    input_norm: torch.Tensor      # (E,)
    qkv_weight: torch.Tensor      # ((H + 2 Hkv) D, E)
    qkv_bias: torch.Tensor | None
    o_weight: torch.Tensor        # (E, H D)
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor       # (E,)
    gate_up_weight: torch.Tensor  # (2 I, E)
    gate_up_bias: torch.Tensor | None
    down_weight: torch.Tensor     # (E, I)
    down_bias: torch.Tensor | None


class Weights(NamedTuple):
    """What a forward reads: the model's tensors as they are now, and its shape constants."""
    embed: torch.Tensor           # (V, E)
    layers: tuple[Layer, ...]
    final_norm: torch.Tensor      # (E,)
    lm_head: torch.Tensor         # (V, E), the embedding itself when tied
    lm_head_bias: torch.Tensor | None
    cos: torch.Tensor             # (S, D) rotary table at every cache position
    sin_signed: torch.Tensor      # (S, D) sin with its first half negated (see `_rotate`)
    n_heads: int
    n_kv: int
    head_dim: int
    eps: float
    scale: float
    act: Callable
    weights_first: bool = False   # a decode step multiplies weight @ rows^T (`_linear`)


def rms_norm(x, weight, eps: float):
    """The Hugging Face Qwen2/Llama RMSNorm: in fp32 one fused op (the same numbers, fewer
    calls); in low precision normalised in fp32 and cast back before the weight, as HF does."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _detached(t):
    return None if t is None else t.detach()


def _stack(*linears):
    """(weight, bias) of the linear maps side by side: one F.linear computes all of them."""
    weight = torch.cat([m.weight.detach() for m in linears])
    biases = [m.bias for m in linears]
    bias = None if all(b is None for b in biases) else torch.cat(
        [b.detach() if b is not None else m.weight.new_zeros(m.out_features) for b, m in zip(biases, linears)])
    return weight, bias


def read_weights(model, max_len: int) -> Weights:
    """The model's weights (no copy, except the stacked q/k/v and gate/up) and rotary table."""
    core, cfg = model.model, model.config
    H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    D = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    layers = []
    for layer in core.layers:
        attn, mlp = layer.self_attn, layer.mlp
        qkv_w, qkv_b = _stack(attn.q_proj, attn.k_proj, attn.v_proj)
        gate_up_w, gate_up_b = _stack(mlp.gate_proj, mlp.up_proj)
        layers.append(Layer(layer.input_layernorm.weight.detach(), qkv_w, qkv_b,
                            attn.o_proj.weight.detach(), _detached(attn.o_proj.bias),
                            layer.post_attention_layernorm.weight.detach(), gate_up_w, gate_up_b,
                            mlp.down_proj.weight.detach(), _detached(mlp.down_proj.bias)))
    p = core.embed_tokens.weight
    every = torch.arange(max_len, device=p.device)[None]                         # (1, S)
    cos, sin = core.rotary_emb(p.new_zeros(1, max_len, 1), every)                # (1, S, D)
    sin_signed = torch.cat([-sin[0, :, : D // 2], sin[0, :, D // 2:]], -1)
    act = F.silu if getattr(cfg, "hidden_act", None) == "silu" else core.layers[0].mlp.act_fn
    head = model.lm_head
    size = sum(t.numel() * t.element_size() for layer in layers for t in layer if t is not None)
    weights_first = p.device.type == "cpu" and size >= WEIGHTS_FIRST_BYTES
    return Weights(p.detach(), tuple(layers), core.norm.weight.detach(), head.weight.detach(),
                   _detached(head.bias), cos[0], sin_signed, H, Hkv, D,
                   core.norm.variance_epsilon, core.layers[0].self_attn.scaling, act, weights_first)


def _rotate(x, cos, sin_signed):
    """HF's rotary embedding x * cos + rotate_half(x) * sin, where rotate_half(x) = (-x2, x1)
    for the halves (x1, x2) of the head dimension; (-x2, x1) is roll(x) = (x2, x1) with the first
    half negated, so one roll and a sign folded into the table replace a chunk, a neg and a cat."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin_signed


def _project_qkv(w: Weights, layer: Layer, h, cos, sin_signed):
    """h (..., E), cos/sin_signed (..., 1, D) -> rotated queries (..., H, D), rotated keys
    (..., Hkv, D) and values (..., Hkv, D)."""
    qkv = _linear(w, rms_norm(h, layer.input_norm, w.eps), layer.qkv_weight, layer.qkv_bias)
    qkv = qkv.view(*h.shape[:-1], -1, w.head_dim)                         # (..., H + 2 Hkv, D)
    rot = _rotate(qkv[..., : w.n_heads + w.n_kv, :], cos, sin_signed)     # query and key heads
    return rot[..., : w.n_heads, :], rot[..., w.n_heads:, :], qkv[..., w.n_heads + w.n_kv:, :]


def _linear(w: Weights, x, weight, bias):
    """F.linear(x, weight, bias); the decode step's (B, in) rows of a model with
    `w.weights_first` as (weight @ x^T)^T, the same numbers, see `WEIGHTS_FIRST_BYTES`."""
    if not (w.weights_first and x.dim() == 2):
        return F.linear(x, weight, bias)
    return _columns(weight, x.t(), bias).t().contiguous()                 # (B, out)


def _columns(weight, x_t, bias):
    """weight @ x_t (+ bias per output row) for columns x_t (in, B) -> (out, B)."""
    return torch.mm(weight, x_t) if bias is None else torch.addmm(bias[:, None], weight, x_t)


def _plus_linear(w: Weights, h, x, weight, bias):
    """h + F.linear(x, weight, bias); in fp32 without a bias as one addmm (2-D h and x)."""
    if bias is None and h.dtype == torch.float32 and h.dim() == 2:
        if w.weights_first:
            return torch.addmm(h.t(), weight, x.t()).t().contiguous()
        return torch.addmm(h, x, weight.t())
    return h + _linear(w, x, weight, bias)


def _plus_mlp(w: Weights, layer: Layer, h):
    """h + MLP(norm(h)) for h (..., E)."""
    x = rms_norm(h, layer.post_norm, w.eps)
    if w.weights_first and h.dim() == 2 and layer.down_bias is None and h.dtype == torch.float32:
        return _plus_mlp_columns(w, layer, h, x)
    gate, up = _linear(w, x, layer.gate_up_weight, layer.gate_up_bias).chunk(2, dim=-1)  # (..., I) each
    return _plus_linear(w, h, w.act(gate) * up, layer.down_weight, layer.down_bias)        # (..., E)


def _plus_mlp_columns(w: Weights, layer: Layer, h, x):
    """`_plus_mlp` weight-first with the hidden activations as columns: (2 I, B) from the first
    product splits into gate and up without transposing back, and the second product takes the
    (I, B) activations as they are; the same numbers as `_linear`'s weight-first products (each
    element the same product, the same elementwise operations), without the (B, 2 I) copy."""
    gate_up = _columns(layer.gate_up_weight, x.t(), layer.gate_up_bias)    # (2 I, B)
    gate, up = gate_up.chunk(2, dim=0)                                    # (I, B) each, contiguous
    return torch.addmm(h.t(), layer.down_weight, w.act(gate) * up).t().contiguous()  # (B, E)


def _logits(w: Weights, h):
    """h (B, E) -> (B, V)."""
    return _linear(w, rms_norm(h, w.final_norm, w.eps), w.lm_head, w.lm_head_bias)


def decode_step(w: Weights, k_cache, v_cache, key_ok, index, tokens, positions):
    """One new token per row, written at cache position `index`, attending to every cache
    position that `key_ok` allows.  The keys are the first S positions of the cache, S =
    key_ok.shape[1] (a view: pass `key_ok[:, :S]` to attend over a prefix that holds `index`).

    k_cache, v_cache: (L, B, Hkv, S_max, D), written in place; key_ok: (B, S) bool, True = a key
    to attend to (position `index` included); index: (1,) long; tokens, positions: (B,)
    -> (B, V) next-token logits."""
    B, S = key_ok.shape
    Hkv, G, D = w.n_kv, w.n_heads // w.n_kv, w.head_dim
    fp32 = w.embed.dtype == torch.float32
    if fp32:  # the mask as an additive bias (0 or -inf), one row per KV head
        bias = torch.zeros(B, S, device=key_ok.device).masked_fill_(~key_ok, float("-inf"))
        bias = bias.repeat_interleave(Hkv, 0)[:, None]                    # (B Hkv, 1, S)
    h = F.embedding(tokens, w.embed)                                      # (B, E)
    cos, sin = w.cos[positions][:, None], w.sin_signed[positions][:, None]  # (B, 1, D)
    for i, layer in enumerate(w.layers):
        qs, ks, vs = _project_qkv(w, layer, h, cos, sin)                  # (B, H|Hkv, D)
        k_cache[i].index_copy_(2, index, ks[:, :, None])
        v_cache[i].index_copy_(2, index, vs[:, :, None])
        keys, values = k_cache[i, :, :, :S], v_cache[i, :, :, :S]         # (B, Hkv, S, D) views
        if fp32:  # plain softmax attention (on a CPU faster than the fused kernel for one query
            # row per head), a KV head's G query heads as the rows of one small matrix product
            qs = qs.reshape(B * Hkv, G, D)
            keys, values = keys.flatten(0, 1), values.flatten(0, 1)       # (B Hkv, S, D), no copy
            scores = torch.baddbmm(bias, qs, keys.transpose(1, 2), alpha=w.scale)  # (B Hkv, G, S)
            out = torch.bmm(scores.softmax(-1), values)                   # (B Hkv, G, D)
        else:  # low precision: the fused kernel's fp32 accumulation, as the HF forward
            out = F.scaled_dot_product_attention(qs.reshape(B, Hkv, G, D), keys, values,
                                                 attn_mask=key_ok[:, None, None, :], scale=w.scale)
        h = _plus_linear(w, h, out.reshape(B, -1), layer.o_weight, layer.o_bias)  # (B, E)
        h = _plus_mlp(w, layer, h)
    return _logits(w, h)                                                  # (B, V)


def prefill_forward(w: Weights, k_cache, v_cache, ids, positions, mask, repeats: int):
    """The prompts' forward from an empty cache: ids, positions (N, P), mask (N, 1, P, P) bool.
    Each prompt's keys/values are stored for its `repeats` consecutive cache rows -> (N, V)."""
    N, P = ids.shape
    h = F.embedding(ids, w.embed)                                         # (N, P, E)
    cos, sin = w.cos[positions][:, :, None], w.sin_signed[positions][:, :, None]  # (N, P, 1, D)
    G = w.n_heads // w.n_kv
    for i, layer in enumerate(w.layers):
        qs, ks, vs = (x.transpose(1, 2) for x in _project_qkv(w, layer, h, cos, sin))  # (N, H|Hkv, P, D)
        k_cache[i, :, :, :P] = ks.repeat_interleave(repeats, 0)
        v_cache[i, :, :, :P] = vs.repeat_interleave(repeats, 0)
        if G > 1:
            ks, vs = ks.repeat_interleave(G, dim=1), vs.repeat_interleave(G, dim=1)   # (N, H, P, D)
        out = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=w.scale)
        h = _plus_linear(w, h, out.transpose(1, 2).reshape(N, P, -1), layer.o_weight, layer.o_bias)  # (N, P, E)
        h = _plus_mlp(w, layer, h)
    return _logits(w, h[:, -1:])[:, 0]     # (N, V); 3-D: the prompts' logits as F.linear computes them


class StaticDecoder:
    """Prefill + one-token steps on a preallocated cache of shape (L, B, Hkv, max_len, D)
    (rl_lab.engines.rollout.Decoder).
    key_block: a step attends over the filled positions rounded up to this many (`KEY_BLOCK`);
    key_block >= max_len attends over the whole cache at every step."""

    def __init__(self, model, batch_size: int, max_len: int, key_block: int = KEY_BLOCK):
        if not supports(model):
            raise ValueError(f"StaticDecoder supports {SUPPORTED} models without sliding window; "
                             f"got model_type={getattr(model.config, 'model_type', None)!r}")
        self.weights = w = read_weights(model, max_len)
        shape = (len(w.layers), batch_size, w.n_kv, max_len, w.head_dim)
        self.k = w.embed.new_zeros(shape)
        self.v = w.embed.new_zeros(shape)
        self.key_ok = torch.zeros(batch_size, max_len, dtype=torch.bool, device=w.embed.device)  # (B, S)
        self.indices = torch.arange(max_len, device=w.embed.device)[:, None]  # (S, 1): row t is index t
        self.length = 0                                                   # cache positions filled
        if key_block < 1:
            raise ValueError(f"StaticDecoder: key_block={key_block} must be >= 1")
        self.key_block = key_block

    @torch.no_grad()
    def prefill(self, prompt_ids, prompt_mask, positions, repeats: int = 1):
        """prompt_ids, prompt_mask, positions: (N, P), left-padded, N = B / repeats distinct
        prompts, each computed once and given to `repeats` consecutive rows -> (B, V) logits."""
        N, P = prompt_ids.shape
        if N * repeats != self.k.shape[1]:
            raise ValueError(f"prefill: {N} prompts x repeats={repeats} != batch size {self.k.shape[1]}")
        self.key_ok.zero_()
        self.key_ok[:, :P] = prompt_mask.bool().repeat_interleave(repeats, 0)
        causal = torch.ones(P, P, dtype=torch.bool, device=prompt_ids.device).tril()
        # a padding query sees itself only: no row is empty (an all-masked row would give NaN)
        eye = torch.eye(P, dtype=torch.bool, device=prompt_ids.device)
        mask = (causal & prompt_mask.bool()[:, None, :]) | eye            # (N, P, P)
        logits = prefill_forward(self.weights, self.k, self.v, prompt_ids, positions, mask[:, None], repeats)
        self.length = P
        return logits.repeat_interleave(repeats, 0)                       # (B, V)

    @torch.no_grad()
    def step(self, tokens, positions):
        """tokens (B,), positions (B,) of the new tokens -> (B, V) next-token logits."""
        if self.length >= self.k.shape[3]:
            raise ValueError(f"StaticDecoder: the cache holds {self.k.shape[3]} positions; all are written")
        self.key_ok[:, self.length] = True
        n_keys = min(self.k.shape[3], -(-(self.length + 1) // self.key_block) * self.key_block)
        logits = decode_step(self.weights, self.k, self.v, self.key_ok[:, :n_keys],
                             self.indices[self.length], tokens, positions)
        self.length += 1
        return logits

    def close(self) -> None:
        """Nothing to restore: the decoder reads the weights and calls no dropout."""
