"""Mismatch monitors: how far the sampler (mu) is from the trainer (pi) on the sampled tokens.

All take (B, T) log-probs of the same tokens and a (B, T) mask, and follow verl 0.9.1's
`compute_offpolicy_metrics` definitions.  With lr = log pi - log mu on tokens drawn from mu:
  kl        mean(log mu - log pi)          k1 estimate of KL(mu || pi)
  k3_kl     mean(e^lr - lr - 1)            k3 estimate of KL(mu || pi): >= 0, low variance
  log_ppl_diff  mean_i [ mean_t log mu - mean_t log pi ]   per-sequence log-perplexity gap
  chi2_token    mean(rho^2) - 1,  chi2_seq = mean_i(prod_t rho)^2 - 1
  tokens_differ the share of tokens whose two log-probs are not bitwise equal (0 only when the
                sampler and the trainer compute the same bits: the exact-zero control)

Chapter "When speed kills stability" (book/ch_when_speed_kills.md) and chapter 5 explain the monitors.
"""
from __future__ import annotations

import torch

SAFETY_BOUND = 20.0  # verl clamps log-ratios to [-20, 20] before exp


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Sum of x where mask is set; values outside the mask (even NaN/inf) never count."""
    m = mask.to(x.dtype)
    kept = torch.where(mask.bool(), x, torch.zeros_like(x)) * m
    return kept.sum() if dim is None else kept.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """verl's masked mean: sum(x m) / (sum(m) + 1e-8), so an empty mask gives 0."""
    m = mask.to(x.dtype)
    return masked_sum(x, mask, dim) / ((m.sum() if dim is None else m.sum(dim)) + 1e-8)


@torch.no_grad()
def mismatch_metrics(logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> dict:
    m = mask.to(torch.float64)
    lp, lp_roll = logp.double(), rollout_logp.double()
    lr = lp - lp_roll                                                                   # (B, T)
    mean_lp, mean_lp_roll = masked_mean(lp, m, -1), masked_mean(lp_roll, m, -1)         # (B,)
    d = mean_lp_roll - mean_lp                                                          # (B,)
    lr_safe = lr.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    seq = masked_sum(lr, m, -1).clamp(-SAFETY_BOUND, SAFETY_BOUND)                      # (B,)
    return {
        "training_ppl": torch.exp(-mean_lp).mean().item(),
        "training_log_ppl": (-mean_lp).mean().item(),
        "rollout_ppl": torch.exp(-mean_lp_roll).mean().item(),
        "rollout_log_ppl": (-mean_lp_roll).mean().item(),
        "kl": masked_mean(lp_roll - lp, m).item(),
        "k3_kl": masked_mean(torch.exp(lr) - lr - 1, m).item(),
        "log_ppl_diff": d.mean().item(),
        "log_ppl_abs_diff": d.abs().mean().item(),
        "log_ppl_diff_max": d.max().item() if d.numel() else 0.0,
        "log_ppl_diff_min": d.min().item() if d.numel() else 0.0,
        "ppl_ratio": torch.exp(d).mean().item(),
        "chi2_token": (masked_mean(torch.exp(lr_safe) ** 2, m) - 1).item(),
        "chi2_seq": (torch.exp(2 * seq).mean() - 1).item(),
        "max_abs_logprob_diff": lr.abs()[m.bool()].max().item() if m.any() else 0.0,
        "tokens_differ": masked_mean((lr != 0).double(), m).item(),
    }


# ---------------------------------------------------------------- where the mismatch lives
MISMATCH_BINS = (0.0, 1e-3, 1e-2, 0.1, 0.5, 0.9, 1.0)


@torch.no_grad()
def logit_gradient_norm(logp_full: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Norm of the gradient of log p_a with respect to the logits, for each sampled token a.

    With p = softmax(z), d log p_a / dz = e_a - p, whose squared norm is
    (1 - p_a)^2 + sum_{v != a} p_v^2 = 1 - 2 p_a + sum_v p_v^2, so the norm lies in
    [1 - p_a, sqrt(2) (1 - p_a)].  It is 0 for a token of probability 1 and tends to
    sqrt(1 + sum_v p_v^2) (between 1 and sqrt(2)) as p_a -> 0: the rare sampled tokens are the
    ones that push the logits hardest per unit of advantage.

    logp_full: (B, T, V) the trainer's log-probabilities; tokens: (B, T) the sampled ids.
    Returns (B, T), in logp_full's dtype.
    """
    idx = tokens.long()[..., None]                                                   # (B, T, 1)
    one_minus = -torch.expm1(logp_full.gather(-1, idx).squeeze(-1))                  # (B, T) 1 - p_a
    others = logp_full.exp().scatter(-1, idx, 0.0)                                   # (B, T, V) p, p_a -> 0
    # (1 - p_a)^2 + sum_{v != a} p_v^2: no cancellation near p_a = 1, unlike 1 - 2 p_a + sum p^2
    return (one_minus.square() + others.square().sum(-1)).sqrt()                     # (B, T)


def mismatch_by_bin(mu_prob, log_ratio, grad_norm=None, bins=MISMATCH_BINS):
    """The training-inference gap per bin of the sampler's probability mu(y_t) of the sampled token.

    mu_prob, log_ratio (= log pi - log mu) and optional grad_norm are 1-D, one entry per sampled
    token (already masked); tensors or arrays.  Bins are [lo, hi) except the last, which
    includes its upper edge.  Returns a pandas DataFrame, one row per bin (index: "lo-hi"):
      tokens               number of tokens in the bin
      token_share          tokens / all tokens
      mean_log_ratio       mean of log pi - log mu (signed: < 0 where pi < mu)
      frac_negative        fraction of tokens with log pi - log mu < 0
      mean_abs_log_ratio   mean |log pi - log mu|
      gap_share            the bin's share of sum |log pi - log mu| over all tokens
      k3_share             the bin's share of sum (e^r - r - 1), the k3 estimate of KL(mu || pi)
      mean_grad_norm       mean logit-gradient norm ||e_a - p||  (this and the next: only
      grad_gap_share       the bin's share of sum |log pi - log mu| * ||e_a - p||   with grad_norm)
    (|rho - 1| ~ |log pi - log mu| for a small gap, so grad_gap_share is, to first order, the
    bin's share of the error that ignoring the mismatch puts into the logit gradients.)
    An empty bin has 0 tokens and NaN means.
    """
    import numpy as np
    import pandas as pd

    def as_np(x):
        return (x.detach().double().cpu().numpy() if isinstance(x, torch.Tensor)
                else np.asarray(x, dtype=np.float64)).ravel()

    mu, r = np.clip(as_np(mu_prob), 0.0, 1.0), as_np(log_ratio)                      # (N,); clip rounding past 1
    g = None if grad_norm is None else as_np(grad_norm)
    if len(mu) != len(r) or (g is not None and len(g) != len(r)):
        raise ValueError("mu_prob, log_ratio and grad_norm must have one entry per token")
    edges = np.asarray(bins, dtype=np.float64)
    if edges.ndim != 1 or len(edges) < 2 or np.any(np.diff(edges) <= 0):
        raise ValueError(f"bins must be increasing edges, got {bins}")
    idx = np.searchsorted(edges, mu, side="right") - 1                               # (N,)
    idx[mu == edges[-1]] = len(edges) - 2                                            # last bin is closed
    inside = (idx >= 0) & (idx < len(edges) - 1)
    absr, k3 = np.abs(r), np.expm1(r) - r                                            # (N,)
    total_abs, total_k3, n_all = absr[inside].sum(), k3[inside].sum(), int(inside.sum())
    total_ag = None if g is None else (absr * g)[inside].sum()
    rows, labels = [], []
    for b in range(len(edges) - 1):
        sel = inside & (idx == b)
        n = int(sel.sum())
        mean = (lambda x: float(x[sel].mean()) if n else float("nan"))
        row = {"tokens": n,
               "token_share": n / n_all if n_all else float("nan"),
               "mean_log_ratio": mean(r),
               "frac_negative": mean((r < 0).astype(np.float64)),
               "mean_abs_log_ratio": mean(absr),
               "gap_share": float(absr[sel].sum() / total_abs) if total_abs > 0 else float("nan"),
               "k3_share": float(k3[sel].sum() / total_k3) if total_k3 > 0 else float("nan")}
        if g is not None:
            row["mean_grad_norm"] = mean(g)
            row["grad_gap_share"] = float((absr * g)[sel].sum() / total_ag) if total_ag > 0 else float("nan")
        rows.append(row)
        labels.append(f"{edges[b]:g}-{edges[b + 1]:g}")
    return pd.DataFrame(rows, index=pd.Index(labels, name="mu bin"))
