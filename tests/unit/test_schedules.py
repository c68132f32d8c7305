"""The length-triggered learning-rate decay (rl_lab.schedules) and its use by the trainer."""
import math

import pytest

from rl_lab import RLConfig, Trainer
from rl_lab.config import ConfigError
from rl_lab.schedules import length_surge_step, length_triggered_lr_factor


def test_surge_is_the_first_step_above_the_multiple_of_the_baseline():
    lengths = [2.0, 4.0, 3.0, 8.9, 9.1, 20.0]            # baseline over 3 steps = 3, threshold 9
    assert length_surge_step(lengths, baseline_steps=3, surge_factor=3.0) == 4
    assert length_surge_step(lengths[:4], baseline_steps=3, surge_factor=3.0) is None   # not yet
    assert length_surge_step(lengths[:3], baseline_steps=3) is None                     # baseline only
    assert length_surge_step([5.0] * 100, baseline_steps=10) is None                    # flat: never


def test_lr_halves_every_period_after_the_surge_down_to_the_floor():
    lengths = [2.0] * 10 + [7.0] * 200                   # baseline 2, surge at step 10 -> period 18
    f = [length_triggered_lr_factor(t, lengths, baseline_steps=10, surge_factor=3.0,
                                    period_factor=1.8, min_lr_ratio=0.1) for t in range(120)]
    assert f[:11] == [1.0] * 11                          # nothing seen yet at step 10 (its own length)
    assert f[11:18] == [1.0] * 7                         # surge known, but floor(t / 18) = 0
    assert f[18] == 0.5 and f[35] == 0.5 and f[36] == 0.25 and f[54] == 0.125
    assert f[72] == 0.1 and f[119] == 0.1                # 0.0625 is below the floor
    assert all(a >= b for a, b in zip(f, f[1:]))         # never goes back up


@pytest.mark.parametrize("kwargs,match", [
    (dict(baseline_steps=0), "baseline_steps"),
    (dict(surge_factor=1.0), "surge_factor"),
    (dict(min_lr_ratio=0.0), "min_lr_ratio"),
    (dict(period_factor=0.0), "period_factor"),
])
def test_bad_arguments_say_what_to_change(kwargs, match):
    with pytest.raises(ValueError, match=match):
        length_triggered_lr_factor(5, [1.0] * 5, **kwargs)


def test_config_fields_are_checked():
    with pytest.raises(ConfigError, match="LengthTriggeredConfig.surge_factor"):
        RLConfig(lr_scheduler_type="length_triggered", length_triggered={"surge_factor": 0.5})
    with pytest.raises(ConfigError, match="LengthTriggeredConfig.min_lr_ratio"):
        RLConfig(lr_scheduler_type="length_triggered", length_triggered={"min_lr_ratio": 0.0})
    assert RLConfig(lr_scheduler_type="length_triggered").length_triggered.baseline_steps == 50
    assert RLConfig().length_triggered is None


def test_trainer_applies_the_schedule_from_its_history():
    cfg = RLConfig(task="addition", model="0.3M", prompts_per_step=2, num_generations=2, max_completion_length=4,
                   max_steps=3, learning_rate=1e-3, lr_scheduler_type="length_triggered",
                   length_triggered={"baseline_steps": 1, "surge_factor": 1.5, "decay_period_factor": 1.0},
                   progress_bar=False)
    tr = Trainer(cfg)
    m = tr.step()
    assert m["learning_rate"] == pytest.approx(1e-3)
    # pretend the second step's completions were three times as long: surge at step 1, period 1
    lt = tr.method("length_triggered")
    assert lt.mean_lengths == [m["completions/mean_length"]]
    lt.mean_lengths = [1.0, 3.0]
    tr.global_step = 2
    m = tr.step()
    assert m["learning_rate"] == pytest.approx(1e-3 * 0.25)   # 0.5 ** floor(2 / 1)
    assert math.isfinite(m["loss"])


def test_a_resumed_run_keeps_the_schedule(tmp_path):
    """The lengths behind the schedule are in the checkpoint: a run resumed at step 3 decays its
    learning rate at the same steps as the uninterrupted run."""
    from rl_lab.utils import read_jsonl

    def cfg(out, steps):
        return RLConfig(task="addition", prompts_per_step=2, num_generations=4, max_completion_length=8,
                        max_steps=steps, learning_rate=1e-3, lr_scheduler_type="length_triggered",
                        length_triggered={"baseline_steps": 1, "surge_factor": 1.01, "decay_period_factor": 1.0,
                                          "min_lr_ratio": 0.01},
                        output_dir=str(out), save_steps=3, progress_bar=False)
    Trainer(cfg(tmp_path / "full", 6)).train()
    Trainer(cfg(tmp_path / "part", 3)).train()
    Trainer(cfg(tmp_path / "part", 6)).train(resume=True)
    lr_full = [r["learning_rate"] for r in read_jsonl(tmp_path / "full" / "metrics.jsonl")]
    lr_part = [r["learning_rate"] for r in read_jsonl(tmp_path / "part" / "metrics.jsonl")]
    assert lr_full == lr_part
    assert min(lr_full) < 1e-3                      # the schedule did fire in this run
