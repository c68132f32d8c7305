"""Per-turn rewards of multi-turn episodes (rewards/turn_<k>/mean), where the task gives them."""
from __future__ import annotations

from rl_lab.algos.method import Method, StepState
from rl_lab.tasks import turn_reward_metrics


class TurnRewardMetrics(Method):
    name = "turn_reward_metrics"

    @staticmethod
    def active(config) -> bool:
        return True                     # logs only when the run has an environment

    def metrics(self, s: StepState) -> dict:
        env = s.trainer.environment
        if env is None:
            return {}
        columns = {k: [r[k] for r in s.rows] for k in s.rows[0] if k != "prompt"}
        return turn_reward_metrics(s.trainer.task, s.batch.completions, columns, env.max_turns)
