"""Advantage estimators by name (RLConfig.advantage_estimator), as verl registers them
(`register_adv_est`): each takes the step's StepState and returns (B, T) advantages, 0 off the
mask.  They see the corrected mask and, for the optimal token baseline, the IS weights, like
verl's.  Adding an estimator: one function here (or anywhere) with @register_adv_est("name"),
and the name in rl_lab.config.ADV_ESTIMATORS."""
from __future__ import annotations

from typing import Callable

from rl_lab.algos.advantages import sum_pi_squared, token_advantages
from rl_lab.algos.method import StepState
from rl_lab.algos.trloo import task_turn_rewards

ADV_ESTIMATORS: dict[str, Callable[[StepState], object]] = {}


def register_adv_est(name: str, needs_full_logprobs: bool = False):
    """Decorator: register `fn(state) -> (B, T) advantages` under `name`."""
    def register(fn):
        fn.needs_full_logprobs = needs_full_logprobs
        ADV_ESTIMATORS[name] = fn
        return fn
    return register


def _outcome(name: str):
    def estimate(s: StepState):
        cfg = s.config
        return token_advantages(name, s.rewards, s.mask, s.batch.group_ids, s.trains, cfg.scale_rewards, cfg.gamma)
    return estimate


for _name in ("grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"):
    register_adv_est(_name)(_outcome(_name))


@register_adv_est("optimal_token_baseline", needs_full_logprobs=True)
def optimal_token_baseline(s: StepState):
    """Needs sum_v pi_v^2 per token, from pi's whole distribution (the first iteration's)."""
    cfg = s.config
    return token_advantages("optimal_token_baseline", s.rewards, s.mask, s.batch.group_ids, s.trains,
                            cfg.scale_rewards, cfg.gamma, s.old_logp_safe, sum_pi_squared(s.first_logp_all.detach()),
                            s.is_weights)


def _per_turn(name: str):
    def estimate(s: StepState):
        cfg, t = s.config, s.run
        turn_rewards = task_turn_rewards(t.task, t.reward_funcs, s.batch, s.rows, t.device)
        return token_advantages(name, s.rewards, s.mask, s.batch.group_ids, s.trains, cfg.scale_rewards, cfg.gamma,
                                turn_ids=s.batch.turn_ids, turn_rewards=turn_rewards)
    return estimate


# Per-turn estimators (rl_lab.algos.trloo), on the task's per-turn rewards when it gives them:
# trloo, a leave-one-out baseline per (prompt, turn); grpo_per_turn, GRPO per (prompt, turn)
for _name in ("trloo", "grpo_per_turn"):
    register_adv_est(_name)(_per_turn(_name))
