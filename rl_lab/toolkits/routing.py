"""Top-K routing in mixture-of-experts: gradient blackout, trust-region violation, routing mismatch.

A Top-K gate picks the K largest router logits h (ties broken towards the lower expert index)
and mixes the selected experts with a softmax over that set only:

    y = sum_{j in K(h)} softmax_{K(h)}(h)_j E_j(x),

or, with `norm_topk_prob=False` (softmax first, then Top-K, no renormalisation), with the weights
softmax(h)_j of the full softmax.

This module holds the pieces chapter 8 and lab 8 use:

* `topk_mask`, `topk_gate`, `soft_gate`: the gates (the renormalised Top-K gate has a zero gradient
  for every unselected logit; without renormalisation, `norm_topk_prob=False`, it is -p_u y);
* `mixture_logprobs`, `kl_along_direction`, `pg_ascent`, `count_switches`: a toy policy whose
  token logits are a gated mixture of fixed expert logit vectors, for the jump, the KL that does not
  vanish across a switching surface, and chattering under exact policy-gradient ascent;
  `population_kl`: the same KL over many contexts, whose mean is continuous while its max jumps;
* `TinyMoELM`, `token_logprobs`, `routing_flip_fraction`, `routing_mismatch`: a minimal causal MoE
  language model with an optional `forced_experts` argument (routing replay), run once in float32
  (trainer) and once in bfloat16 (sampler);
* `flip_probability`, `mc_flip_probability`: how often noise of a given size swaps the K-th and
  (K+1)-th experts.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------- gates


def topk_mask(h: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask of the K largest entries of h along the last axis, (..., N).

    Ties are broken towards the lower index (a stable sort), so a point exactly on a switching
    surface h_(K) = h_(K+1) has a well-defined selection and any push of the higher-index expert
    upwards flips it.
    """
    n = h.shape[-1]
    if not 1 <= k <= n:
        raise ValueError(f"topk_mask needs 1 <= k <= number of experts ({n}); got k={k}")
    order = torch.sort(h.detach(), dim=-1, descending=True, stable=True).indices[..., :k]   # (..., K)
    return torch.zeros_like(h, dtype=torch.bool).scatter(-1, order, True)


def topk_gate(h: torch.Tensor, k: int, temperature: float = 1.0,
              norm_topk_prob: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-K gate: weights (..., N), 0 off the selected set. Returns (weights, mask).

    norm_topk_prob=True (the default here; what Mixtral always does): softmax of h / temperature
    over the selected set only. Unselected logits enter through `masked_fill` with a constant, so their
    gradient is exactly 0 (gradient blackout).

    norm_topk_prob=False (the default of `transformers`' Qwen2MoeConfig, whose flag this is): softmax of
    h / temperature over *all* N experts, then the unselected weights set to 0; the selected
    weights sum to less than 1. An unselected logit h_u still sits in the softmax's normaliser, so
    d y / d h_u = -p_u y / temperature for any output y = sum_j w_j E_j: not zero, but the same
    direction -y for every unselected u and independent of what expert u would have computed.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    mask = topk_mask(h, k)                                                  # (..., N)
    if norm_topk_prob:
        weights = torch.softmax((h / temperature).masked_fill(~mask, float("-inf")), dim=-1)
    else:
        weights = torch.softmax(h / temperature, dim=-1) * mask             # (..., N), sum < 1
    return weights, mask


def soft_gate(h: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Dense softmax gate over all experts, (..., N): every logit gets a gradient."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    return torch.softmax(h / temperature, dim=-1)


# ---------------------------------------------------------------- a toy policy with a Top-K head


def mixture_logprobs(h: torch.Tensor, expert_logits: torch.Tensor, k: int | None,
                     temperature: float = 1.0, norm_topk_prob: bool = True) -> torch.Tensor:
    """log pi(.) of a policy whose token logits are a gated mixture of expert logit vectors.

    h: router logits (..., N); expert_logits: (N, V). k=None uses the dense softmax gate,
    otherwise the Top-K gate (`norm_topk_prob` as in `topk_gate`). Returns log-probabilities (..., V).
    """
    if expert_logits.ndim != 2 or expert_logits.shape[0] != h.shape[-1]:
        raise ValueError(f"expert_logits must be (N, V) with N = h.shape[-1] = {h.shape[-1]}; "
                         f"got {tuple(expert_logits.shape)}")
    g = soft_gate(h, temperature) if k is None else topk_gate(h, k, temperature, norm_topk_prob)[0]   # (..., N)
    return torch.log_softmax(g @ expert_logits, dim=-1)                                  # (..., V)


def kl_along_direction(h: torch.Tensor, v: torch.Tensor, eps, expert_logits: torch.Tensor,
                       k: int | None, norm_topk_prob: bool = True) -> torch.Tensor:
    """KL(pi_h || pi_{h + eps v}) for each eps, with the mixture policy of `mixture_logprobs`.

    h, v: (N,); eps: a 1-D sequence of step sizes. Returns KL values (len(eps),).
    """
    eps = torch.as_tensor(eps, dtype=h.dtype)
    if h.ndim != 1 or v.shape != h.shape or eps.ndim != 1:
        raise ValueError("kl_along_direction needs h and v of shape (N,) and a 1-D eps")
    logp = mixture_logprobs(h, expert_logits, k, norm_topk_prob=norm_topk_prob)               # (V,)
    logq = mixture_logprobs(h[None] + eps[:, None] * v[None], expert_logits, k,
                            norm_topk_prob=norm_topk_prob)                                    # (E, V)
    return (logp.exp() * (logp - logq)).sum(-1)


def population_kl(h: torch.Tensor, v: torch.Tensor, eps, expert_logits: torch.Tensor, k: int | None,
                  norm_topk_prob: bool = True) -> dict:
    """Per-context KL(pi_{h_c} || pi_{h_c + eps v_c}) over many contexts c, for each eps.

    h, v: (M, N) router logits of M contexts and the direction in which each moves (a parameter
    step moves every context's logits, each by its own amount). Returns numpy arrays over eps:
    mean (the population KL), max (the worst sampled context), switched (fraction of contexts
    whose Top-K set changed; 0 for the dense gate) and kl (len(eps), M).
    """
    eps = torch.as_tensor(eps, dtype=h.dtype)
    if h.ndim != 2 or v.shape != h.shape or eps.ndim != 1:
        raise ValueError("population_kl needs h and v of shape (M, N) and a 1-D eps")
    logp = mixture_logprobs(h, expert_logits, k, norm_topk_prob=norm_topk_prob)               # (M, V)
    kls, switched = [], []
    for e in eps:
        moved = h + e * v
        logq = mixture_logprobs(moved, expert_logits, k, norm_topk_prob=norm_topk_prob)       # (M, V)
        kls.append((logp.exp() * (logp - logq)).sum(-1))
        switched.append(0.0 if k is None else (topk_mask(moved, k) != topk_mask(h, k)).any(-1).double().mean().item())
    kl = torch.stack(kls).numpy()
    return {"mean": kl.mean(1), "max": kl.max(1), "switched": np.array(switched), "kl": kl}


def pg_ascent(theta0, router_matrix: torch.Tensor, router_offset: torch.Tensor, expert_logits: torch.Tensor,
              reward: torch.Tensor, k: int | None, lr: float, steps: int, temperature: float = 1.0) -> dict:
    """Exact policy-gradient ascent on J(theta) = sum_v pi_theta(v) r(v).

    Router logits are h = router_offset + router_matrix @ theta (router_matrix (N, d)); the policy
    is `mixture_logprobs`. Returns numpy arrays: theta (steps+1, d), objective (steps+1,),
    selected (steps+1, N) (the Top-K set; all True for the dense gate).
    """
    theta = torch.as_tensor(theta0, dtype=torch.float64).clone().reshape(-1)
    if router_matrix.shape != (expert_logits.shape[0], theta.numel()):
        raise ValueError(f"router_matrix must be (N, d) = ({expert_logits.shape[0]}, {theta.numel()}); "
                         f"got {tuple(router_matrix.shape)}")
    thetas, objs, sel = [], [], []
    for step in range(steps + 1):
        theta.requires_grad_(True)
        h = router_offset + router_matrix @ theta                             # (N,)
        J = (mixture_logprobs(h, expert_logits, k, temperature).exp() * reward).sum()
        thetas.append(theta.detach().clone().numpy())
        objs.append(J.item())
        sel.append(topk_mask(h, k).numpy() if k is not None else np.ones(h.shape[-1], dtype=bool))
        if step == steps:
            break
        (grad,) = torch.autograd.grad(J, theta)
        theta = (theta.detach() + lr * grad)
    return {"theta": np.stack(thetas), "objective": np.array(objs), "selected": np.stack(sel)}


def count_switches(selected: np.ndarray) -> int:
    """Number of steps at which the selected expert set changes; selected (steps, N) bool."""
    selected = np.asarray(selected, dtype=bool)
    return int((selected[1:] != selected[:-1]).any(axis=-1).sum())


# ---------------------------------------------------------------- a tiny MoE causal LM


class TinyMoELM(nn.Module):
    """Minimal causal MoE transformer: token + position embeddings, `n_layers` pre-norm blocks
    (causal scaled-dot-product attention, then an MoE MLP of `n_experts` experts with a Top-K
    router), a final RMS norm and a head tied to the embedding. Random init from `seed`.
    `norm_topk_prob` chooses the gate as in `topk_gate` (True: softmax over the selected set).

    Experts are computed densely and mixed with the gate weights (cheap at this size; the result
    equals the sparse computation because unselected experts get weight exactly 0).
    """

    def __init__(self, vocab: int = 64, d_model: int = 64, n_layers: int = 2, n_heads: int = 4,
                 n_experts: int = 8, k: int = 2, d_ff: int = 128, max_len: int = 64, seed: int = 0,
                 init_scale: float = 1.0, norm_topk_prob: bool = True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        if not 1 <= k <= n_experts:
            raise ValueError(f"need 1 <= k <= n_experts; got k={k}, n_experts={n_experts}")
        self.k, self.n_heads, self.n_experts = k, n_heads, n_experts
        self.norm_topk_prob = norm_topk_prob
        g = torch.Generator().manual_seed(seed)

        def rnd(*shape, fan_in):
            return nn.Parameter(init_scale * torch.randn(*shape, generator=g) / math.sqrt(fan_in))

        D, F_, N = d_model, d_ff, n_experts
        self.emb = nn.Parameter(torch.randn(vocab, D, generator=g))
        self.pos = nn.Parameter(0.5 * torch.randn(max_len, D, generator=g))
        self.blocks = nn.ModuleList()
        for _ in range(n_layers):
            blk = nn.Module()
            blk.qkv, blk.proj = rnd(D, 3 * D, fan_in=D), rnd(D, D, fan_in=D)
            blk.router = rnd(D, N, fan_in=D)
            blk.w1, blk.w2 = rnd(N, D, F_, fan_in=D), rnd(N, F_, D, fan_in=F_)
            self.blocks.append(blk)

    def forward(self, ids: torch.Tensor, forced_experts: torch.Tensor | None = None):
        """ids (B, T). forced_experts (L, B, T, K) replaces each layer's Top-K choice (routing replay;
        the gate weights are still computed from this model's own router logits, for the forced set).

        Returns logits (B, T, V) in float32, router logits (L, B, T, N) and experts (L, B, T, K)
        (sorted expert indices actually used).
        """
        B, T = ids.shape
        L = len(self.blocks)
        if forced_experts is not None and forced_experts.shape[:3] != (L, B, T):
            raise ValueError(f"forced_experts must be (L, B, T, K) = ({L}, {B}, {T}, K); "
                             f"got {tuple(forced_experts.shape)}")
        x = self.emb[ids] + self.pos[:T]                                      # (B, T, D)
        H, D = self.n_heads, x.shape[-1]
        all_h, all_e = [], []
        for layer, blk in enumerate(self.blocks):
            q, k_, v = (F.rms_norm(x, (D,)) @ blk.qkv).split(D, dim=-1)       # (B, T, D) each
            q, k_, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k_, v))
            a = F.scaled_dot_product_attention(q, k_, v, is_causal=True)      # (B, H, T, D/H)
            x = x + a.transpose(1, 2).reshape(B, T, D) @ blk.proj
            z = F.rms_norm(x, (D,))
            h = z @ blk.router                                                # (B, T, N)
            if forced_experts is None:
                mask = topk_mask(h, self.k)
            else:
                mask = torch.zeros_like(h, dtype=torch.bool).scatter(-1, forced_experts[layer], True)
            if self.norm_topk_prob:
                gate = torch.softmax(h.masked_fill(~mask, float("-inf")), dim=-1)     # (B, T, N)
            else:
                gate = torch.softmax(h, dim=-1) * mask                           # (B, T, N), sum < 1
            hid = F.gelu(torch.einsum("btd,ndf->btnf", z, blk.w1))              # (B, T, N, F)
            out = torch.einsum("btnf,nfd->btnd", hid, blk.w2)                   # (B, T, N, D)
            x = x + (gate.unsqueeze(-1) * out).sum(-2)
            all_h.append(h)
            all_e.append(mask.nonzero()[:, -1].view(B, T, -1))                 # (B, T, K) sorted
        logits = (F.rms_norm(x, (D,)) @ self.emb.T).float()                     # (B, T, V)
        return logits, torch.stack(all_h), torch.stack(all_e)


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log pi(ids[:, t+1] | ids[:, :t+1]) in float32: logits (B, T, V), ids (B, T) -> (B, T-1)."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return logp.gather(-1, ids[:, 1:, None]).squeeze(-1)


def routing_flip_fraction(experts_a: torch.Tensor, experts_b: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Fraction of routing decisions whose expert *sets* differ; experts_* (..., K) indices.

    Returns (fraction, flipped) with flipped (...) bool. Order inside a set does not matter.
    """
    if experts_a.shape != experts_b.shape:
        raise ValueError(f"expert index tensors must have the same shape; got {tuple(experts_a.shape)} "
                         f"and {tuple(experts_b.shape)}")
    flipped = (experts_a.sort(-1).values != experts_b.sort(-1).values).any(-1)
    return flipped.float().mean().item(), flipped


@torch.no_grad()
def routing_mismatch(model: TinyMoELM, ids: torch.Tensor, sampler_dtype=torch.bfloat16) -> dict:
    """Trainer (float32) vs sampler (`sampler_dtype`) on the same batch, and routing replay.

    Returns a dict with
      flip_fraction: fraction of (layer, token) routing decisions that differ;
      flipped: (B, T-1) bool, the predicting position had a flip in some layer;
      gap: (B, T-1) |log pi_fp32 - log pi_sampler| of the next token;
      gap_replay: the same with the fp32 forward forced onto the sampler's expert sets;
      replay_flip_fraction: flips left after replay (0 by construction);
      router_noise: std of (sampler - fp32) router logits; router_gap: (L, B, T) h_(K) - h_(K+1) in fp32.
    """
    sampler = copy.deepcopy(model).to(sampler_dtype)
    lg32, h32, e32 = model(ids)
    lg16, h16, e16 = sampler(ids)
    lg_rep, _, e_rep = model(ids, forced_experts=e16)
    frac, flipped_lt = routing_flip_fraction(e32, e16)                      # (L, B, T)
    lp32, lp16, lprep = (token_logprobs(x, ids) for x in (lg32, lg16, lg_rep))
    top = h32.topk(model.k + 1, dim=-1).values if model.k < model.n_experts else None
    return {"flip_fraction": frac,
            "flipped": flipped_lt.any(0)[:, :-1],
            "gap": (lp32 - lp16).abs(),
            "gap_replay": (lprep - lp16).abs(),
            "replay_flip_fraction": routing_flip_fraction(e_rep, e16)[0],
            "router_noise": (h16.float() - h32).std().item(),
            "router_gap": None if top is None else top[..., -2] - top[..., -1]}


# ---------------------------------------------------------------- flip probability


def flip_probability(gap, sigma):
    """Two-expert approximation: the K-th and (K+1)-th logits, `gap` apart, each get independent
    N(0, sigma^2) noise; they swap with probability Phi(-gap / (sqrt(2) sigma))."""
    if np.any(np.asarray(sigma) <= 0):
        raise ValueError("sigma must be > 0")
    z = np.asarray(gap, dtype=np.float64) / (math.sqrt(2.0) * np.asarray(sigma, dtype=np.float64))
    return 0.5 * np.vectorize(math.erfc)(z / math.sqrt(2.0))


def mc_flip_probability(h: torch.Tensor, sigma: float, k: int, n_draws: int = 200, seed: int = 0) -> float:
    """Monte-Carlo: fraction of (row, draw) pairs of router logits h (M, N) whose Top-K set changes
    when every logit gets independent N(0, sigma^2) noise."""
    if h.ndim != 2:
        raise ValueError(f"h must be (M, N); got {tuple(h.shape)}")
    g = torch.Generator().manual_seed(seed)
    base = topk_mask(h, k)                                                  # (M, N)
    noisy = h[None] + sigma * torch.randn(n_draws, *h.shape, generator=g, dtype=h.dtype)
    return (topk_mask(noisy, k) != base[None]).any(-1).double().mean().item()
