"""verl's two operating modes for an off-policy batch, as loss functions on (B, T) tensors.

decoupled (bypass_mode=False), three policies: mu (sampler), pi_old (the trainer's frozen
    copy at the start of the update) and pi_theta.  The correction (rho = pi_old / mu) runs
    once per batch; the loss is w_t * PPO(pi_theta / pi_old) on the corrected mask.
bypass (bypass_mode=True), two policies: pi_old := mu.  The correction is recomputed from
    rho = pi_theta / mu at every iteration, without gradient.  ppo_clip: the clipped ratio
    pi_theta / mu already is the importance correction, so no weight multiplies it (only the
    mask applies); reinforce: -A * w * log pi_theta.

In both modes the weights w and the corrected mask come from one function,
`rl_lab.corrections.rollout_correction`, which the trainer calls (once per batch in decoupled
mode, once per iteration in bypass mode); these losses only consume them.

Chapter 5 (book/ch05_rollout_correction.md) derives both modes.
"""
from __future__ import annotations

from rl_lab.algos.grpo import policy_loss


def decoupled_policy_loss(logp, old_logp, advantages, mask, is_weights=None, loss: str = "ppo_clip",
                          epsilon: float = 0.2, epsilon_high: float | None = None,
                          clip_ratio_c: float | None = None):
    """(B, T) per-token loss w_t * PPO(r_t = pi_theta / pi_old, A_t), and metrics.  `mask` and
    `is_weights` come from `rollout_correction(old_logp, rollout_logp, ...)`."""
    return policy_loss(logp, old_logp, advantages, mask, loss, epsilon, epsilon_high, is_weights, clip_ratio_c)


def bypass_policy_loss(logp, rollout_logp, advantages, mask, is_weights=None, loss: str = "ppo_clip",
                       epsilon: float = 0.2, epsilon_high: float | None = None,
                       clip_ratio_c: float | None = None):
    """(B, T) per-token loss with pi_old := mu, and metrics.  `mask` and `is_weights` come from
    `rollout_correction(logp.detach(), rollout_logp, ...)`, recomputed at every iteration.
    ppo_clip ignores the weights (the clipped ratio pi_theta / mu already is the correction:
    applying w would count rho twice); reinforce: -A * w * log pi_theta."""
    weights = None if loss == "ppo_clip" else is_weights
    return policy_loss(logp, rollout_logp, advantages, mask, loss, epsilon, epsilon_high, weights, clip_ratio_c)
