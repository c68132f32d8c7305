"""The algorithm core: advantages, per-token log-probs, policy losses, aggregation, and verl's
decoupled / bypass operating modes."""
from rl_lab.algos.advantages import optimal_token_baseline, reinforce_plus_plus, reinforce_plus_plus_baseline
from rl_lab.algos.correction import bypass_policy_loss, decoupled_policy_loss
from rl_lab.algos.estimators import ADV_ESTIMATORS, AdvantageInputs
from rl_lab.algos.losses import (
    LogProbs,
    aggregate_loss,
    group_advantages,
    kl_k3,
    policy_loss,
    sequence_logprobs,
    token_logprobs,
)

__all__ = ["ADV_ESTIMATORS", "AdvantageInputs", "LogProbs", "aggregate_loss", "bypass_policy_loss",
           "decoupled_policy_loss", "group_advantages", "kl_k3", "optimal_token_baseline", "policy_loss",
           "reinforce_plus_plus", "reinforce_plus_plus_baseline", "sequence_logprobs", "token_logprobs"]
