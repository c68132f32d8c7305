"""Plots of training metrics (matplotlib; static, so they survive in the built book)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

DEFAULT_PANELS = (
    ("reward", "reward (mean over completions)"),
    ("frac_reward_zero_std", "groups with no reward spread"),
    ("entropy", "entropy (nats/token)"),
    ("grad_norm", "gradient norm"),
    ("completions/mean_length", "completion length"),
    ("rollout_corr/k3_kl", "k3 KL(mu || pi) per token"),
)


def smooth(series: pd.Series, window: int | None = None) -> pd.Series:
    """Centred rolling mean; the window defaults to ~5% of the run."""
    window = window or max(1, len(series) // 20)
    return series.rolling(window, min_periods=1, center=True).mean()


def plot_training(df: pd.DataFrame, panels=DEFAULT_PANELS, ncols: int = 3, title: str | None = None):
    """A grid of metric curves (raw in light colour, smoothed on top) against step."""
    panels = [(k, label) for k, label in panels if k in df]
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 2.8 * nrows), squeeze=False)
    for ax, (key, label) in zip(axes.flat, panels):
        ax.plot(df["step"], df[key], color="C0", alpha=0.25, lw=1)
        ax.plot(df["step"], smooth(df[key]), color="C0", lw=2)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_reward_runs(runs: dict[str, pd.DataFrame], key: str = "reward", ax=None):
    """Smoothed `key` for several runs on one axis (e.g. seeds or settings)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for i, (name, df) in enumerate(runs.items()):
        ax.plot(df["step"], smooth(df[key]), color=f"C{i}", lw=2, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel(key)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax
