"""The length-triggered learning-rate schedule as the trainer's plug-in (RLConfig.lr_scheduler_type =
"length_triggered", knobs in RLConfig.length_triggered; chapter 7, rl_lab.schedules): the method
keeps every step's mean completion length and scales the scheduled learning rate by
`length_triggered_lr_factor` of the lengths before the step (none during warm-up)."""
from __future__ import annotations

from rl_lab.algos.method import Method, StepState
from rl_lab.schedules import length_triggered_lr_factor


class LengthTriggered(Method):
    name = "length_triggered"

    def __init__(self, config, spec=None):
        super().__init__(config, spec)
        self.mean_lengths: list[float] = []   # one per step taken, the step's mean completion length

    def lr_scale(self, step: int) -> float:
        if step < self.config.warmup_steps:
            return 1.0
        lt = self.knobs
        return length_triggered_lr_factor(step, self.mean_lengths, lt.baseline_steps, lt.surge_factor,
                                          lt.decay_period_factor, lt.min_lr_ratio)

    def metrics(self, s: StepState) -> dict:
        self.mean_lengths.append(s.batch.completion_mask.sum(-1).float().mean().item())
        return {}

    def state_dict(self) -> dict:
        return {"mean_lengths": [float(x) for x in self.mean_lengths]}

    def load_state_dict(self, state: dict) -> None:
        self.mean_lengths = list(state["mean_lengths"])
