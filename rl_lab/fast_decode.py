"""A static-cache decoder for Qwen2/Llama-family Hugging Face models (the HF engine's fast path).

For a tiny model, a call to the Hugging Face forward costs far more in Python (mask building,
cache objects, output dataclasses, keyword plumbing) than in arithmetic, and sampling calls it
once per generated token.  `StaticDecoder` runs the same modules of the same model -- embedding,
RMSNorms, q/k/v/o projections, rotary embedding, MLP, lm_head -- with the same attention math
(scaled dot-product attention over repeated KV heads) on a key/value cache preallocated for
prompt + completion, so a decode step is little more than the model's own operations.  The
weights are the model's, read at call time: a synced, quantised or stale sampler copy is used
as it is.  `supports(model)` says when it applies; `HFEngine` falls back to the Hugging Face
forward otherwise.  tests/test_rollout.py checks it against that forward (log-probs to 1e-5,
same tokens).

    dec = StaticDecoder(model, batch_size=B, max_len=P + T)
    logits = dec.prefill(prompt_ids, prompt_mask, positions)   # (B, V), last prompt position
    logits = dec.prefill(ids[::n], mask[::n], pos[::n], repeats=n)  # or each distinct prompt once
    logits = dec.step(tokens, positions[:, -1] + 1)            # (B, V), one new token per row
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

SUPPORTED = ("qwen2", "llama")


def supports(model) -> bool:
    """Qwen2/Llama layout (pre-norm blocks, rotary, GQA), no sliding window, no rope scaling
    that depends on the sequence length, plain causal attention implementation."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in SUPPORTED:
        return False
    if type(model).__name__ not in ("Qwen2ForCausalLM", "LlamaForCausalLM"):   # e.g. a PeftModel wrapper
        return False
    if getattr(cfg, "use_sliding_window", False):
        return False
    scaling = getattr(cfg, "rope_scaling", None) or {}
    if scaling.get("rope_type", scaling.get("type", "default")) not in ("default", None):
        return False
    return getattr(cfg, "_attn_implementation", "sdpa") in ("sdpa", "eager")


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _norm(module, x):
    """The layer's RMSNorm; in fp32 as one fused op (the same numbers, fewer calls)."""
    if x.dtype == torch.float32 and hasattr(module, "variance_epsilon"):
        return F.rms_norm(x, (x.shape[-1],), module.weight, module.variance_epsilon)
    return module(x)


def _linear(module, x):
    """module(x) for an nn.Linear, without the module-call machinery (hooks are not used here)."""
    return F.linear(x, module.weight, module.bias)


def _stack(*linears):
    """(weight, bias) of the linear maps side by side: one F.linear computes all of them."""
    weight = torch.cat([m.weight.detach() for m in linears])
    biases = [m.bias for m in linears]
    bias = None if all(b is None for b in biases) else torch.cat(
        [b.detach() if b is not None else m.weight.new_zeros(m.out_features) for b, m in zip(biases, linears)])
    return weight, bias


class StaticDecoder:
    """Prefill + one-token steps on a preallocated cache of shape (L, B, H_kv, max_len, D)."""

    def __init__(self, model, batch_size: int, max_len: int):
        if not supports(model):
            raise ValueError(f"StaticDecoder supports {SUPPORTED} models without sliding window; "
                             f"got model_type={getattr(model.config, 'model_type', None)!r}")
        self.model, self.core = model, model.model
        cfg = model.config
        self.layers = list(self.core.layers)
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.groups = self.n_heads // self.n_kv
        p = next(model.parameters())
        shape = (len(self.layers), batch_size, self.n_kv, max_len, self.head_dim)
        self.k = torch.zeros(shape, dtype=p.dtype, device=p.device)
        self.v = torch.zeros(shape, dtype=p.dtype, device=p.device)
        self.key_ok = torch.zeros(batch_size, max_len, dtype=torch.bool, device=p.device)  # (B, S)
        self.length = 0                                                   # cache positions filled
        # the weights as read now, q/k/v and gate/up stacked: one matrix product each instead of 3 + 2
        self.qkv = [_stack(l.self_attn.q_proj, l.self_attn.k_proj, l.self_attn.v_proj) for l in self.layers]
        self.gate_up = [_stack(l.mlp.gate_proj, l.mlp.up_proj) for l in self.layers]
        self.silu = getattr(cfg, "hidden_act", None) == "silu"
        # the model's rotary embedding at every position, looked up by position id
        every = torch.arange(max_len, device=p.device)[None]                             # (1, S)
        cos, sin = self.core.rotary_emb(self.k.new_zeros(1, max_len, 1), every)           # (1, S, D)
        self.cos, self.sin = cos[0], sin[0]                                               # (S, D)

    def _attend(self, i: int, layer, h, cos, sin, mask):
        """One attention block on h (B, q, E): writes its keys/values at [length, length+q)."""
        attn, H = layer.self_attn, self.n_heads
        B, q, _ = h.shape
        qkv = F.linear(h, *self.qkv[i]).view(B, q, -1, self.head_dim)    # (B, q, H + 2 Hkv, D)
        rot = qkv[:, :, : H + self.n_kv]                                  # query and key heads
        rot = rot * cos + _rotate_half(rot) * sin                        # cos, sin: (B, q, 1, D)
        qs = rot[:, :, :H].transpose(1, 2)                                # (B, H, q, D)
        ks = rot[:, :, H:].transpose(1, 2)                                # (B, Hkv, q, D)
        vs = qkv[:, :, H + self.n_kv:].transpose(1, 2)                    # (B, Hkv, q, D)
        end = self.length + q
        if self.length == 0:  # prefill of the distinct prompts: attend to their own keys, store
            keys, values = ks, vs                                         # them once per cache row
            repeats = self.k.shape[1] // B
            self.k[i, :, :, :q] = ks.repeat_interleave(repeats, 0)
            self.v[i, :, :, :q] = vs.repeat_interleave(repeats, 0)
        else:
            self.k[i, :, :, self.length:end] = ks
            self.v[i, :, :, self.length:end] = vs
            keys, values = self.k[i, :, :, :end], self.v[i, :, :, :end]   # (B, Hkv, S, D)
        if q == 1:  # decode: a KV head's query heads as its query rows, no copy of the cache
            qs = qs.reshape(B, self.n_kv, self.groups, self.head_dim)     # (B, Hkv, G, D)
            if qs.dtype == torch.float32:  # one query row per head: plain softmax attention is
                scores = (qs @ keys.transpose(-1, -2)) * attn.scaling     # faster than the fused
                scores = scores.masked_fill(~mask, float("-inf"))         # kernel on a CPU
                out = scores.softmax(-1) @ values                         # (B, Hkv, G, D)
            else:  # low precision: the fused kernel's fp32 accumulation, as the HF forward
                out = F.scaled_dot_product_attention(qs, keys, values, attn_mask=mask, scale=attn.scaling)
            return _linear(attn.o_proj, out.reshape(B, 1, -1))            # (B, 1, E)
        if self.groups > 1:
            keys = keys.repeat_interleave(self.groups, dim=1)             # (B, H, S, D)
            values = values.repeat_interleave(self.groups, dim=1)
        out = F.scaled_dot_product_attention(qs, keys, values, attn_mask=mask, scale=attn.scaling)
        return _linear(attn.o_proj, out.transpose(1, 2).reshape(B, q, -1))  # (B, q, E)

    def _mlp(self, i: int, mlp, x):
        gate, up = F.linear(x, *self.gate_up[i]).chunk(2, dim=-1)        # (B, q, I) each
        act = F.silu(gate) if self.silu else mlp.act_fn(gate)
        return _linear(mlp.down_proj, act * up)                           # (B, q, E)

    def _forward(self, ids, positions, mask):
        """ids, positions: (B, q); mask: (B, 1, q, length+q) bool, True = attend -> (B, V)
        logits of the last position."""
        h = F.embedding(ids, self.core.embed_tokens.weight)               # (B, q, E)
        cos, sin = self.cos[positions][:, :, None], self.sin[positions][:, :, None]  # (B, q, 1, D)
        for i, layer in enumerate(self.layers):
            h = h + self._attend(i, layer, _norm(layer.input_layernorm, h), cos, sin, mask)
            h = h + self._mlp(i, layer.mlp, _norm(layer.post_attention_layernorm, h))
        self.length += ids.shape[1]
        return _linear(self.model.lm_head, _norm(self.core.norm, h[:, -1:]))[:, 0]  # (B, V)

    @torch.no_grad()
    def prefill(self, prompt_ids, prompt_mask, positions, repeats: int = 1):
        """prompt_ids, prompt_mask, positions: (N, P), left-padded, N = B / repeats distinct
        prompts, each computed once and given to `repeats` consecutive rows -> (B, V) logits."""
        N, P = prompt_ids.shape
        if N * repeats != self.k.shape[1]:
            raise ValueError(f"prefill: {N} prompts x repeats={repeats} != batch size {self.k.shape[1]}")
        self.length = 0
        self.key_ok.zero_()
        self.key_ok[:, :P] = prompt_mask.bool().repeat_interleave(repeats, 0)
        causal = torch.ones(P, P, dtype=torch.bool, device=prompt_ids.device).tril()
        # a padding query sees itself only: no row is empty (an all-masked row would give NaN)
        eye = torch.eye(P, dtype=torch.bool, device=prompt_ids.device)
        mask = (causal & prompt_mask.bool()[:, None, :]) | eye            # (N, P, P)
        logits = self._forward(prompt_ids, positions, mask[:, None])      # (N, V)
        return logits.repeat_interleave(repeats, 0)                       # (B, V)

    @torch.no_grad()
    def step(self, tokens, positions):
        """tokens (B,), positions (B,) of the new tokens -> (B, V) next-token logits."""
        self.key_ok[:, self.length] = True
        mask = self.key_ok[:, None, None, : self.length + 1]              # (B, 1, 1, S)
        return self._forward(tokens[:, None], positions[:, None], mask)
