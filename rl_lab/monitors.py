"""Mismatch monitors: how far the sampler (mu) is from the trainer (pi) on the sampled tokens.

All take (B, T) log-probs of the same tokens and a (B, T) mask, and follow verl 0.9.1's
`compute_offpolicy_metrics` definitions.  With lr = log pi - log mu on tokens drawn from mu:
  kl        mean(log mu - log pi)          k1 estimate of KL(mu || pi)
  k3_kl     mean(e^lr - lr - 1)            k3 estimate of KL(mu || pi): >= 0, low variance
  log_ppl_diff  mean_i [ mean_t log mu - mean_t log pi ]   per-sequence log-perplexity gap
  chi2_token    mean(rho^2) - 1,  chi2_seq = mean_i(prod_t rho)^2 - 1
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
    }
