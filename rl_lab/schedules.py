"""Learning-rate schedules: the trainer's fixed ones (`scheduled_lr_factor`: warm-up, then constant,
linear or cosine) and one that reacts to the run, the length-triggered decay of chapter 7 (its
factor multiplies the fixed schedule's; rl_lab.algos.length_triggered applies it).

*Beyond Precision* (Li et al.) argues that the training-inference mismatch is not a fixed rounding
artefact: it grows with the optimisation, and shrinking the update size suppresses it.  Their fix
decays the learning rate when the mean response length surges, an early warning that comes before
the collapse.  The paper's own detector and constants were not available to us; this module
implements the rule as third-party notes and a public verl reproduction describe it:

* the *surge step* t_s is the first step t >= `baseline_steps` whose mean completion length exceeds
  `surge_factor` x the mean over the first `baseline_steps` steps;
* from then on the decay period is P = round(`period_factor` x t_s), and the learning rate is
  halved every P steps, counted from step 0, down to `min_lr_ratio` x the initial one:
  lr(t) = lr_0 * max(min_lr_ratio, 0.5 ** floor(t / P)).

The factor is a pure function of the step and the lengths seen before it, so a run resumed from a
checkpoint (whose metrics history holds the lengths) continues on the same schedule.
"""
from __future__ import annotations

import math
from typing import Sequence


def scheduled_lr_factor(config, step: int) -> float:
    """Multiplier of RLConfig.learning_rate at `step` from the fixed schedule: linear warm-up over
    warmup_steps (from 1/W), then constant, linear to 0 or cosine to 0 at max_steps.  A schedule that
    reacts to the run ("length_triggered") is constant here; its method scales this factor."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    frac = (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps)
    if config.lr_scheduler_type == "linear":
        return max(0.0, 1.0 - frac)
    if config.lr_scheduler_type == "cosine":
        return 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))
    return 1.0


def length_surge_step(mean_lengths: Sequence[float], baseline_steps: int = 50,
                      surge_factor: float = 3.0) -> int | None:
    """The first step t >= baseline_steps with mean_lengths[t] > surge_factor x mean(mean_lengths[:baseline_steps]);
    None if there is none yet (or fewer than baseline_steps + 1 steps were seen)."""
    if baseline_steps < 1:
        raise ValueError(f"baseline_steps={baseline_steps}: need at least one step to define the baseline length")
    if surge_factor <= 1:
        raise ValueError(f"surge_factor={surge_factor}: a surge is a length above the baseline, use a factor > 1")
    if len(mean_lengths) <= baseline_steps:
        return None
    baseline = sum(mean_lengths[:baseline_steps]) / baseline_steps
    for t in range(baseline_steps, len(mean_lengths)):
        if mean_lengths[t] > surge_factor * baseline:
            return t
    return None


def decay_period(surge_step: int, period_factor: float = 1.8) -> int:
    """Steps between halvings once a surge was seen at `surge_step`: round(period_factor x surge_step), at least 1."""
    return max(1, round(period_factor * surge_step))


def length_triggered_lr_factor(step: int, mean_lengths: Sequence[float], baseline_steps: int = 50,
                               surge_factor: float = 3.0, period_factor: float = 1.8,
                               min_lr_ratio: float = 0.1) -> float:
    """Multiplier of the initial learning rate at `step`, given the mean completion lengths of the
    steps before it: 1 until a surge is detected, then 0.5 ** floor(step / P) with
    P = round(period_factor x surge step), never below min_lr_ratio."""
    if not 0 < min_lr_ratio <= 1:
        raise ValueError(f"min_lr_ratio={min_lr_ratio}: choose a floor in (0, 1]")
    if period_factor <= 0:
        raise ValueError(f"period_factor={period_factor}: the decay period must be positive")
    surge = length_surge_step(mean_lengths[:step], baseline_steps, surge_factor)
    if surge is None:
        return 1.0
    return max(min_lr_ratio, 0.5 ** (step // decay_period(surge, period_factor)))
