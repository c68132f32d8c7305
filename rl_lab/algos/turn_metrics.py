"""Per-turn metrics of multi-turn episodes: rewards/turn_<k>/mean where the task gives them, and
the per-turn group sizes (turns/varying_groups, turns/shrink_spread; rl_lab.algos.trloo)."""
from __future__ import annotations

from rl_lab.algos.method import Method, StepState
from rl_lab.algos.trloo import turn_group_metrics
from rl_lab.tasks import turn_reward_metrics


class TurnRewardMetrics(Method):
    name = "turn_reward_metrics"

    def metrics(self, s: StepState) -> dict:
        env, out = s.run.environment, {}
        if s.batch.turn_ids is not None and getattr(env, "max_turns", 2) > 1:   # per-turn group sizes
            out.update(turn_group_metrics(s.counted, s.batch.turn_ids, s.batch.group_ids))
        if env is not None:
            columns = {k: [r[k] for r in s.rows] for k in s.rows[0] if k != "prompt"}
            out.update(turn_reward_metrics(s.run.task, s.batch.completions, columns, env.max_turns))
        return out
