"""Mismatch monitors: how far the sampler (mu) is from the trainer (pi) on the sampled tokens.

All take (B, T) log-probs of the same tokens and a (B, T) mask, and follow verl's
`compute_offpolicy_metrics` definitions.  With lr = log pi - log mu on tokens drawn from mu:
  kl        mean(log mu - log pi)          k1 estimate of KL(mu || pi)
  k3_kl     mean(e^lr - lr - 1)            k3 estimate of KL(mu || pi): >= 0, low variance
  log_ppl_diff  mean_i [ mean_t log mu - mean_t log pi ]   per-sequence log-perplexity gap
  chi2_token    mean(rho^2) - 1,  chi2_seq = mean_i(prod_t rho)^2 - 1
"""
from __future__ import annotations

import torch

SAFETY_BOUND = 20.0  # verl clamps log-ratios to [-20, 20] before exp


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1)


def _row_mean(x, m):
    return (x * m).sum(-1) / m.sum(-1).clamp(min=1)


@torch.no_grad()
def mismatch_metrics(logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> dict:
    m = mask.to(torch.float64)
    lp, lp_roll = logp.double(), rollout_logp.double()
    lr = lp - lp_roll                                                                   # (B, T)
    d = _row_mean(lp_roll, m) - _row_mean(lp, m)                                        # (B,)
    lr_safe = lr.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    seq = (lr * m).sum(-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)                           # (B,)
    return {
        "training_log_ppl": (-_row_mean(lp, m)).mean().item(),
        "rollout_log_ppl": (-_row_mean(lp_roll, m)).mean().item(),
        "kl": masked_mean(lp_roll - lp, m).item(),
        "k3_kl": masked_mean(torch.exp(lr) - lr - 1, m).item(),
        "log_ppl_diff": d.mean().item(),
        "log_ppl_abs_diff": d.abs().mean().item(),
        "ppl_ratio": torch.exp(d).mean().item(),
        "chi2_token": (masked_mean(torch.exp(lr_safe) ** 2, m) - 1).item(),
        "chi2_seq": (torch.exp(2 * seq).mean() - 1).item(),
        "max_abs_logprob_diff": (lr.abs() * m).max().item() if m.numel() else 0.0,
    }
