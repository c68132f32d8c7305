"""Advantage estimators by name (RLConfig.advantage_estimator), as verl registers them
(`register_adv_est`): each maps an `AdvantageInputs` to (B, T) advantages, 0 off the mask and on
invalid rows; `ADV_ESTIMATORS[name](inputs)` is the only dispatch.  `step_advantages` builds the
inputs from the trainer's StepState: like verl's, the estimators see the corrected mask and, for
the optimal token baseline, the IS weights.  Adding an estimator: one function here (or anywhere)
with @register_adv_est("name"), and the name in rl_lab.config.ADV_ESTIMATORS.

The maths lives in rl_lab.algos.losses (grpo, rloo), rl_lab.algos.advantages (REINFORCE++, the
optimal token baseline) and rl_lab.algos.trloo (the per-turn estimators)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from rl_lab.algos import advantages
from rl_lab.algos.losses import group_advantages
from rl_lab.algos.method import StepState
from rl_lab.algos.trloo import grpo_per_turn_advantages, task_turn_rewards, trloo_advantages


@dataclass
class AdvantageInputs:
    """What an estimator may read: B rows, T completion tokens, K model turns."""
    rewards: torch.Tensor                       # (B,) sequence rewards; NaN allowed on invalid rows
    mask: torch.Tensor                          # (B, T) bool: the tokens that count
    group_ids: torch.Tensor                     # (B,) the prompt each row answers
    valid: torch.Tensor                         # (B,) bool: the rows that train
    scale_rewards: str = "group"                # grpo's std scaling: "group", "batch" or "none"
    gamma: float = 1.0                          # discount of the returns (REINFORCE++, per-turn)
    old_logp: torch.Tensor | None = None        # (B, T) log pi_old (optimal_token_baseline)
    sum_pi_sq: torch.Tensor | None = None       # (B, T) sum_v pi_v^2 (optimal_token_baseline)
    is_weights: torch.Tensor | None = None      # (B, T) the correction's IS weights, or None
    turn_ids: torch.Tensor | None = None        # (B, T) the model turn of each token (multi-turn)
    turn_rewards: torch.Tensor | None = None    # (B, K) the task's per-turn rewards, if it gives them


ADV_ESTIMATORS: dict[str, Callable[[AdvantageInputs], torch.Tensor]] = {}


def register_adv_est(name: str, needs_full_logprobs: bool = False, needs_turn_rewards: bool = False):
    """Decorator: register `fn(inputs) -> (B, T) advantages` under `name`.  needs_full_logprobs: it
    reads sum_pi_sq (pi's whole distribution); needs_turn_rewards: it reads the task's turn_rewards."""
    def register(fn):
        fn.needs_full_logprobs, fn.needs_turn_rewards = needs_full_logprobs, needs_turn_rewards
        ADV_ESTIMATORS[name] = fn
        return fn
    return register


def step_advantages(s: StepState) -> torch.Tensor:
    """The run's estimator on the step's state: (B, T) advantages."""
    cfg, run = s.config, s.run
    estimate = ADV_ESTIMATORS[cfg.advantage_estimator]
    inputs = AdvantageInputs(s.rewards, s.mask, s.batch.group_ids, s.trains, cfg.scale_rewards, cfg.gamma,
                             old_logp=s.old_logp_safe, is_weights=s.is_weights, turn_ids=s.batch.turn_ids)
    if estimate.needs_full_logprobs:    # from pi's whole distribution (the first iteration's)
        inputs.sum_pi_sq = advantages.sum_pi_squared(s.first_logp_all.detach())
    if estimate.needs_turn_rewards:
        inputs.turn_rewards = task_turn_rewards(run.task, run.reward_funcs, s.batch, s.rows, run.device)
    return estimate(inputs)


@register_adv_est("grpo")
def grpo(x: AdvantageInputs) -> torch.Tensor:
    """A_i = (r_i - mean_g r) / (std_g r + eps), the same on every token of the row."""
    return group_advantages(x.rewards, x.group_ids, x.valid, "grpo", x.scale_rewards)[:, None] * x.mask


@register_adv_est("rloo")
def rloo(x: AdvantageInputs) -> torch.Tensor:
    """A_i = r_i - the mean of the group's other rewards, the same on every token of the row."""
    return group_advantages(x.rewards, x.group_ids, x.valid, "rloo", x.scale_rewards)[:, None] * x.mask


def outcome_tokens(x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """The valid rows' rewards on their last counted token, float64 (B, T), and their mask (B, T)."""
    m = x.mask & x.valid[:, None]
    r = torch.where(x.valid, x.rewards, torch.zeros_like(x.rewards)).double()      # (B,)
    return advantages.outcome_token_rewards(r, m), m


@register_adv_est("reinforce_plus_plus")
def reinforce_plus_plus(x: AdvantageInputs) -> torch.Tensor:
    """The discounted reward-to-go, whitened over the batch."""
    token_r, m = outcome_tokens(x)
    return advantages.reinforce_plus_plus(token_r, m, x.gamma)[0].to(x.rewards.dtype)


@register_adv_est("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline(x: AdvantageInputs) -> torch.Tensor:
    """(score - group mean) on every token, whitened over the batch."""
    token_r, m = outcome_tokens(x)
    return advantages.reinforce_plus_plus_baseline(token_r, m, x.group_ids)[0].to(x.rewards.dtype)


@register_adv_est("optimal_token_baseline", needs_full_logprobs=True)
def optimal_token_baseline(x: AdvantageInputs) -> torch.Tensor:
    """Return minus a baseline per group and position, weighted by the logit-gradient proxy."""
    if x.old_logp is None or x.sum_pi_sq is None:
        raise ValueError("optimal_token_baseline needs old_logp and sum_pi_sq (B, T)")
    token_r, m = outcome_tokens(x)
    is_weights = None if x.is_weights is None else x.is_weights.double()
    adv, _ = advantages.optimal_token_baseline(token_r, m, x.group_ids, x.old_logp.double(), x.sum_pi_sq.double(),
                                               is_weights)
    return adv.to(x.rewards.dtype)


# Per-turn estimators (rl_lab.algos.trloo), on the task's per-turn rewards when it gives them
@register_adv_est("trloo", needs_turn_rewards=True)
def trloo(x: AdvantageInputs) -> torch.Tensor:
    """Turn returns with a leave-one-out baseline per (prompt, turn)."""
    return trloo_advantages(x.rewards, x.mask, x.turn_ids, x.group_ids, x.valid, x.gamma, x.turn_rewards)


@register_adv_est("grpo_per_turn", needs_turn_rewards=True)
def grpo_per_turn(x: AdvantageInputs) -> torch.Tensor:
    """Turn returns, GRPO-normalised per (prompt, turn)."""
    return grpo_per_turn_advantages(x.rewards, x.mask, x.turn_ids, x.group_ids, x.valid, x.scale_rewards,
                                    x.gamma, x.turn_rewards)
