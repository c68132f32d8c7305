"""The correction hook: importance weights and masks between the trainer's log-probs (pi)
and the sampler's (mu).

The trainer calls `rollout_correction(old_logp, rollout_logp, mask, ...)` once per batch,
after both log-probs are known and before the loss.  It returns detached per-token weights
(or None), a mask that can only remove tokens, and metrics under `rollout_corr/`.
Semantics follow verl's `compute_rollout_correction_and_rejection_mask`; this module holds
the truncated-IS part (token and sequence level), the rest of the suite builds on it.
"""
from __future__ import annotations

import torch

from rl_lab.monitors import SAFETY_BOUND, masked_mean, mismatch_metrics


def truncated_is_weights(log_ratio: torch.Tensor, mask: torch.Tensor, level: str = "token",
                         threshold: float = 2.0):
    """(B, T) log(pi/mu) -> (B, T) weights min(rho, C), detached, 0 on padding.

    token:    rho_t = pi(y_t|.)/mu(y_t|.)
    sequence: rho   = prod_t pi/mu over the row, broadcast to every valid token.
    """
    if threshold <= 0:
        raise ValueError(f"rollout_is_threshold={threshold} must be > 0")
    m = mask.to(log_ratio.dtype)
    if level == "token":
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)) * m
    elif level == "sequence":
        seq = (log_ratio * m).sum(-1, keepdim=True)                                   # (B, 1)
        raw = torch.exp(seq.clamp(-SAFETY_BOUND, SAFETY_BOUND)) * m                    # (B, T)
    else:
        raise ValueError(f"rollout_is={level!r}: choose 'token' or 'sequence'")
    weights = raw.clamp(max=threshold).detach()
    metrics = {
        "rollout_is_mean": masked_mean(weights, mask).item(),
        "rollout_is_max": weights[mask.bool()].max().item() if mask.any() else 0.0,
        "rollout_is_ratio_fraction_high": masked_mean((raw > threshold).to(m.dtype), mask).item(),
    }
    return weights, metrics


def rollout_correction(old_logp, rollout_logp, mask, rollout_is: str | None = None,
                       rollout_is_threshold: float = 2.0):
    """Weights (or None), mask and `rollout_corr/*` metrics for one batch (all (B, T))."""
    old_logp = old_logp.detach()
    metrics = mismatch_metrics(old_logp, rollout_logp, mask)
    weights = None
    if rollout_is is not None:
        weights, is_metrics = truncated_is_weights(old_logp - rollout_logp, mask, rollout_is,
                                                   rollout_is_threshold)
        metrics.update(is_metrics)
    return weights, mask, {f"rollout_corr/{k}": v for k, v in metrics.items()}
