"""The rollout correction of a run as one component: verl's two operating modes for an off-policy
batch, the correction modes the RLConfig turns on (rl_lab.corrections.CORRECTION_MODES), and what
they need from the engine and the trainer's forward, built once from the config.

decoupled (bypass_mode=False), three policies: mu (sampler), pi_old (the trainer's frozen
    copy at the start of the update) and pi_theta.  The correction (rho = pi_old / mu) runs
    once per batch; the loss is w_t * PPO(pi_theta / pi_old) on the corrected mask.
bypass (bypass_mode=True), two policies: pi_old := mu.  The correction is recomputed from
    rho = pi_theta / mu at every iteration, without gradient.  ppo_clip: the clipped ratio
    pi_theta / mu already is the importance correction, so no weight multiplies it (only the
    mask applies); reinforce: -A * w * log pi_theta.

In both modes the weights w and the corrected mask come from one function,
`rl_lab.corrections.rollout_correction`; the losses below only consume them.  The trainer calls
`Correction.per_batch` once and `Correction.policy_loss` at every iteration, and reads the needs
(`needs_sampler_logprobs`, `needs_distributions`) when it is built.

Chapter 5 (book/ch05_rollout_correction.md) derives both modes.
"""
from __future__ import annotations

import torch

from rl_lab.algos.losses import policy_loss
from rl_lab.corrections import active_modes, rollout_correction, token_kl
from rl_lab.errors import ConfigError


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


class Correction:
    """The run's rollout correction (RLConfig.rollout_correction, a CorrectionConfig), with PPO's
    clip settings from the RLConfig."""

    def __init__(self, config):
        self.config, rc = config, config.rollout_correction
        self.bypass = bool(rc.bypass_mode)
        self.modes = active_modes(rc)
        self.needs_distributions = any(m.needs_distributions(rc) for m in self.modes)
        """The exact-KL modes read mu's and pi's full (B, T, V) distributions."""
        self.needs_sampler_logprobs = bool(self.modes) or self.bypass

    def sampler_logprobs(self, batch, old_logp: torch.Tensor) -> torch.Tensor:
        """mu's (B, T) log-probs; an engine that reports none is allowed only when no correction
        reads them (then mu := pi_old and the monitors read zero)."""
        if batch.sampler_logprobs is not None:
            return batch.sampler_logprobs
        if self.needs_sampler_logprobs:
            raise ConfigError(f"rollout_correction ({', '.join(m.name for m in self.modes) or 'bypass_mode'}) needs "
                              "the sampler's log-probs, but the engine returned RolloutBatch.sampler_logprobs=None; "
                              "turn its options off (rollout_is / rollout_rs / rollout_token_veto_threshold None, "
                              "bypass_mode false) or use an engine that reports log-probs")
        return old_logp

    def _call(self, logp, s) -> tuple:
        kl = None
        if self.needs_distributions and s.batch.sampler_logprobs_full is not None:
            kl = token_kl(s.batch.sampler_logprobs_full, s.logp_all.detach())                # (B, T)
        return rollout_correction(logp, s.rollout_logp, s.mask, token_kl=kl, config=self.config.rollout_correction,
                                  batch=s.batch)

    def per_batch(self, s) -> dict:
        """Decoupled mode: weights and mask from rho = pi_old / mu, once per batch (s.is_weights,
        s.mask).  Returns the rollout_corr/ metrics ({} in bypass mode)."""
        if self.bypass:
            return {}
        s.is_weights, s.mask, metrics = self._call(s.old_logp_safe, s)
        return metrics

    def policy_loss(self, s, corr_metrics: dict):
        """(B, T) PPO/REINFORCE loss of this iteration, its metrics, and the correction's metrics;
        sets s.loss_mask.  Bypass: pi_old := mu, weights and mask recomputed from pi_theta / mu."""
        cfg = self.config
        clip = dict(loss=cfg.policy_loss, epsilon=cfg.epsilon, epsilon_high=cfg.epsilon_high,
                    clip_ratio_c=cfg.clip_ratio_c)
        if self.bypass:
            weights, s.loss_mask, corr_metrics = self._call(s.logp_safe.detach(), s)
            per_token, pg_metrics = bypass_policy_loss(s.logp_safe, s.rollout_logp, s.advantages, s.loss_mask,
                                                       weights, **clip)
        else:
            s.loss_mask = s.mask
            per_token, pg_metrics = decoupled_policy_loss(s.logp_safe, s.old_logp_safe, s.advantages, s.mask,
                                                          s.is_weights, **clip)
        return per_token, pg_metrics, corr_metrics
