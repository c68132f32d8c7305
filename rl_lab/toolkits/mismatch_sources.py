"""Where the mismatch comes from (issue 49): measure one source's mismatch, and the sync check.

The sources, their dials and fixes are rows of rl_lab.mismatch_specs; a run turns one on with
`RLConfig(mismatch={...})` (the exact-zero engine, rl_lab.engines.exact).  This module holds what a
reader runs beside a training run:

  measure(config, steps)   the mismatch monitors of a few steps of `config` (k3, the largest
                           |log mu - log pi|, rho's range): a source's size without a long run
  sync_check(config)       one step at lr = 0 (nothing learns, so any mismatch is the engines' or
                           the sync's): k3 must be exactly 0 on the exact engine, at rounding level
                           on a real one; a weight-sync fault fails it (open-instruct #1473,
                           NeMo-RL #4243) when it changes the weights in transit (bf16); a layer
                           left unsynced shows only once the trainer's weights have moved, which
                           the weight_sync dial's `verify` (a bitwise comparison) catches
"""
from __future__ import annotations

MONITORS = {"k3": "rollout_corr/k3_kl", "logp_diff_max": "sampling/sampling_logp_difference/max",
            "rho_min": "sampling/importance_sampling_ratio/min",
            "rho_mean": "sampling/importance_sampling_ratio/mean",
            "rho_max": "sampling/importance_sampling_ratio/max"}


def measure(config, steps: int = 1) -> list[dict]:
    """The MONITORS of `steps` training steps of `config` (no output folder), one dict per step."""
    from rl_lab.trainer import Trainer
    trainer = Trainer(config.replace(output_dir=None, progress_bar=False, eval_steps=0))
    return [{k: m[key] for k, key in MONITORS.items()} for m in (trainer.step() for _ in range(steps))]


def sync_check(config, tolerance: float | None = None) -> dict:
    """One step of `config` at lr = 0: its monitors, and `passed` when the largest |log mu - log pi|
    is at most `tolerance` (default: 0 with RLConfig.mismatch set, the exact engine; 1e-5, float32
    rounding, otherwise)."""
    if tolerance is None:
        tolerance = 0.0 if config.mismatch is not None else 1e-5
    (result,) = measure(config.replace(learning_rate=0.0), steps=1)
    return {**result, "tolerance": tolerance, "passed": result["logp_diff_max"] <= tolerance}
