"""The algorithm core: advantages, per-token log-probs, policy losses, aggregation."""
from rl_lab.algos.grpo import (aggregate_loss, group_advantages, kl_k3, policy_loss,
                               sequence_logprobs)

__all__ = ["aggregate_loss", "group_advantages", "kl_k3", "policy_loss", "sequence_logprobs"]
