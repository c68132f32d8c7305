"""Compare named RL configurations over several seeds (chapter 5's lab; labs 4, 6, 7 and 9 train
their method x seed grids with run_grid too).

  run_grid            train every (method, seed) pair through the Trainer -> one long DataFrame
  summarize           per method: mean and std over seeds of each run's average of a metric
  format_mean_std     that summary as "mean ± std" strings, one column per metric
  plot_bands          metric vs step per method: the mean over seeds and a +-1 std band
  row_statistic       the per-sequence statistic a rollout_rs option thresholds, (B,)
  quantile_threshold  the threshold that keeps a given fraction of sequences of a batch

A method is a dict of RLConfig fields, e.g. `rl_lab.corrections.correction_preset("Seq-TIS")`.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from rl_lab.corrections import RS_OPTIONS, reduce_rows, token_divergences
from rl_lab.errors import ConfigError
from rl_lab.presets import get_preset


def run_grid(methods: dict[str, dict], seeds, preset: str | None = None, **base) -> pd.DataFrame:
    """Train each method with each seed: get_preset(preset, **base, **method, seed=s), where base
    and the methods may set any RLConfig field (task=, model=, sampler_dtype=, eval_steps=, ...).

    -> long DataFrame, one row per (method, seed, step), with columns `method`, `seed` and
    every logged metric.  Methods keep their order (a categorical column)."""
    from rl_lab.trainer import Trainer  # local import: the trainer imports corrections, this imports both
    if not methods:
        raise ConfigError("run_grid needs at least one method (name -> RLConfig overrides)")
    seeds = list(seeds)
    if not seeds:
        raise ConfigError("run_grid needs at least one seed")
    frames = []
    for name, overrides in methods.items():
        clash = set(overrides) & set(base)
        if clash:
            raise ConfigError(f"method {name!r} sets {sorted(clash)}, which the base settings set too; "
                              "set each field in one place")
        for seed in seeds:
            config = get_preset(preset, progress_bar=False, **{**base, **overrides, "seed": seed})
            frames.append(Trainer(config).train().assign(method=name, seed=seed))
    runs = pd.concat(frames, ignore_index=True)
    runs["method"] = pd.Categorical(runs["method"], categories=list(methods), ordered=True)
    return runs


def _check_metrics(runs: pd.DataFrame, metrics) -> list[str]:
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    missing = [m for m in metrics if m not in runs]
    if missing:
        raise ConfigError(f"metric(s) {missing} were not logged; choose from "
                          f"{sorted(c for c in runs.columns if c not in ('method', 'seed'))}")
    return metrics


def summarize(runs: pd.DataFrame, metrics, last: int | None = None) -> pd.DataFrame:
    """-> DataFrame indexed by method, columns (metric, "mean" | "std" | "n"): each run is
    reduced to its average over its `last` steps (all steps if None, NaNs ignored), then the
    runs of a method are averaged over seeds (std with ddof=1; 0 for a single seed)."""
    metrics = _check_metrics(runs, metrics)
    if last is not None:
        runs = runs[runs["step"] > runs.groupby(["method", "seed"], observed=True)["step"].transform("max") - last]
    per_run = runs.groupby(["method", "seed"], observed=True)[metrics].mean()
    grouped = per_run.groupby(level="method", observed=True)
    out = pd.concat({"mean": grouped.mean(), "std": grouped.std(ddof=1).fillna(0.0),
                     "n": grouped.count()}, axis=1)
    out = out.swaplevel(axis=1)[[(m, s) for m in metrics for s in ("mean", "std", "n")]]
    return out


def format_mean_std(summary: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """summarize()'s table as strings "m ± s" (general format, `digits` significant digits)."""
    metrics = list(dict.fromkeys(summary.columns.get_level_values(0)))
    return pd.DataFrame({m: [f"{a:.{digits}g} ± {b:.{digits - 1}g}" for a, b in
                             zip(summary[(m, "mean")], summary[(m, "std")])] for m in metrics},
                        index=summary.index)


def plot_bands(runs: pd.DataFrame, metrics, methods=None, window: int = 1, axes=None, logy=()):
    """One panel per metric: for each method the mean over seeds against step (after a
    centred rolling mean of `window` steps per run) and a +-1 std band across seeds."""
    import matplotlib.pyplot as plt  # local import: `import rl_lab` stays free of matplotlib
    metrics = _check_metrics(runs, metrics)
    methods = list(runs["method"].cat.categories if methods is None else methods)
    if axes is None:
        _, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 3.2), squeeze=False)
        axes = axes[0]
    for ax, metric in zip(np.atleast_1d(axes), metrics):
        for i, name in enumerate(methods):
            wide = runs[runs["method"] == name].pivot(index="step", columns="seed", values=metric)
            wide = wide.rolling(window, min_periods=1, center=True).mean()
            mean, std = wide.mean(axis=1), wide.std(axis=1, ddof=1).fillna(0.0)
            ax.plot(mean.index, mean, color=f"C{i}", lw=1.8, label=name)
            ax.fill_between(mean.index, mean - std, mean + std, color=f"C{i}", alpha=0.15, lw=0)
        ax.set(xlabel="step", title=metric, yscale="log" if metric in logy else "linear")
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].legend(fontsize=7)
    return np.atleast_1d(axes)[0].figure


@torch.no_grad()
def row_statistic(log_ratio, mask, option: str) -> torch.Tensor:
    """(B, T) log(pi/mu) -> (B,) the per-sequence statistic a sequence-level rollout_rs option
    compares with its threshold (seq_sum / seq_mean / seq_max of k1, k2 or k3)."""
    level, est = option.rsplit("_", 1) if option in RS_OPTIONS else ("", "")
    if not level.startswith("seq_") or est == "kl":
        raise ConfigError(f"option {option!r}: choose a sequence-level sample option from "
                          f"{[o for o in RS_OPTIONS if o.startswith('seq_') and not o.endswith('kl')]}")
    return reduce_rows(token_divergences(log_ratio)[est], mask, level)                      # (B,)


def quantile_threshold(log_ratio, mask, option: str, keep: float = 0.8) -> float:
    """The rollout_rs threshold under which a fraction `keep` of this batch's (non-empty)
    sequences pass `option`.  For k1 options it is the symmetric bound x (kept ratios in
    [1/x, x]) from the quantile of |statistic|; for k2/k3 the quantile of the statistic."""
    if not 0 < keep <= 1:
        raise ConfigError(f"keep={keep!r} is out of range; use a fraction in (0, 1]")
    stat = row_statistic(log_ratio, mask, option)[mask.sum(-1) > 0].double()               # (valid rows,)
    if stat.numel() == 0:
        raise ConfigError("quantile_threshold needs at least one sequence with a counted token")
    if option.endswith("k1"):
        return math.exp(torch.quantile(stat.abs(), keep).item())
    return torch.quantile(stat, keep).item()
