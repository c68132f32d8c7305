"""Run an agent on a batch of seeds, and the diagnostics of chapter 11: cumulative regret
(mean +- standard error over seeds), how well the agent's sampling covariance matches the
exact posterior covariance, and compute per step."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from rl_lab.errors import ConfigError
from rl_lab.presets import preset_name
from rl_lab.toolkits.bandits.envs import Bandit

# Sizes of the bandit experiments per RL_LAB_PRESET (lab 11 and bench/bench_bandits.py).
BANDIT_PRESETS: dict[str, dict] = {
    "smoke": dict(steps=500, seeds=24, neural_steps=300, neural_seeds=6, lm_steps=400, lm_seeds=12),
    "laptop": dict(steps=1000, seeds=50, neural_steps=1000, neural_seeds=10, lm_steps=1000, lm_seeds=20),
    "gpu": dict(steps=2000, seeds=200, neural_steps=2000, neural_seeds=20, lm_steps=2000, lm_seeds=40),
}


def bandit_preset(name: str | None = None) -> dict:
    """Horizons and seed counts for the preset in force (`name`, else $RL_LAB_PRESET)."""
    return dict(BANDIT_PRESETS[preset_name(name)])


@dataclass
class BanditRun:
    """One agent on one environment over `num_seeds` seeds."""
    label: str
    regret: np.ndarray
    """(S, T) expected regret of each decision."""
    seconds_per_step: float
    """Wall time of one decision + update for all S seeds together."""
    flops_per_step: float | None = None
    diagnostics: dict = field(default_factory=dict)

    @property
    def cumulative(self) -> np.ndarray:
        return np.cumsum(self.regret, axis=1)                           # (S, T)

    @property
    def final(self) -> np.ndarray:
        return self.cumulative[:, -1]                                   # (S,)

    def mean_se(self) -> tuple[float, float]:
        """Mean and standard error over seeds of the final cumulative regret."""
        f = self.final
        se = f.std(ddof=1) / math.sqrt(len(f)) if len(f) > 1 else float("nan")
        return float(f.mean()), float(se)


def covariance_spectrum(C: torch.Tensor, Sigma: torch.Tensor) -> torch.Tensor:
    """Eigenvalues of Sigma^{-1/2} C Sigma^{-1/2}, ascending: (S, d, d), (S, d, d) -> (S, d).
    All equal 1 iff C = Sigma; the smallest says how much of the posterior's spread the
    agent misses in its worst direction (0 when C has rank < d)."""
    L = torch.linalg.cholesky(Sigma)                                     # Sigma = L L^T
    X = torch.linalg.solve_triangular(L, C, upper=False)                 # L^{-1} C
    W = torch.linalg.solve_triangular(L, X.transpose(-1, -2), upper=False)   # L^{-1} C L^{-T}
    return torch.linalg.eigvalsh(0.5 * (W + W.transpose(-1, -2)))


def run_bandit(env: Bandit, agent, steps: int, num_seeds: int, seed: int = 0,
               diagnose_every: int = 0, label: str | None = None,
               num_threads: int | None = 1) -> BanditRun:
    """Run `agent` on `num_seeds` independent problems of `env` for `steps` rounds, all seeds
    in one batch.  The environment draws from generator `seed`, the agent from `seed + 1e6`, so
    every agent run with the same seed meets the same problems and noise.  The result depends
    only on (seed, num_seeds) and the arguments: deterministic on CPU.

    diagnose_every > 0 records, every that many steps, the spectrum of the agent's sampling
    covariance against the exact posterior covariance (linear agents only).

    num_threads: CPU threads for the loop, restored afterwards.  The loop is thousands of
    small batched operations, which run fastest on one thread (on a busy 2-core machine,
    two threads made the neural agent 25 times slower); None keeps torch's setting."""
    if not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"steps={steps!r} must be an integer >= 1")
    if not isinstance(num_seeds, int) or num_seeds < 1:
        raise ConfigError(f"num_seeds={num_seeds!r} must be an integer >= 1")
    if diagnose_every and not hasattr(agent, "sample_covariance"):
        raise ConfigError(f"diagnose_every={diagnose_every}: {type(agent).__name__} has no "
                          "sample_covariance(); the covariance diagnostic needs a linear agent")
    previous_threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        regret, elapsed, diag = _loop(env, agent, steps, num_seeds, seed, diagnose_every)
    finally:
        torch.set_num_threads(previous_threads)
    diagnostics = {k: np.asarray(v) for k, v in diag.items()} if diagnose_every else {}
    actions = env.actions()
    num_actions = actions.shape[1] if actions is not None else 1
    flops = agent.flops_per_step(num_actions) if hasattr(agent, "flops_per_step") else None
    return BanditRun(label or agent.label, regret.numpy(), elapsed / steps, flops, diagnostics)


def _loop(env, agent, steps, num_seeds, seed, diagnose_every):
    env_gen = torch.Generator().manual_seed(seed)
    agent_gen = torch.Generator().manual_seed(seed + 1_000_000)
    env.reset(num_seeds, env_gen)
    agent.reset(num_seeds, agent_gen)
    regret = torch.empty(num_seeds, steps, dtype=torch.float64)
    diag: dict[str, list] = {"t": [], "eig_min": [], "eig_max": []}
    elapsed = 0.0
    for t in range(steps):
        actions = env.actions()
        start = time.perf_counter()
        x, index = agent.act(actions)
        elapsed += time.perf_counter() - start
        reward, regret[:, t] = env.pull(x if index is None else index)
        start = time.perf_counter()
        agent.update(x, reward)
        elapsed += time.perf_counter() - start
        if diagnose_every and (t + 1) % diagnose_every == 0:
            eig = covariance_spectrum(agent.sample_covariance(), agent.Sigma)   # (S, d)
            diag["t"].append(t + 1)
            diag["eig_min"].append(eig[:, 0].numpy())
            diag["eig_max"].append(eig[:, -1].numpy())
    return regret, elapsed, diag


def regret_table(runs: list[BanditRun]) -> pd.DataFrame:
    """One row per run: final cumulative regret (mean, s.e., median over seeds) and compute."""
    rows = []
    for r in runs:
        mean, se = r.mean_se()
        rows.append({"agent": r.label, "regret": mean, "se": se, "median": float(np.median(r.final)),
                     "seeds": r.regret.shape[0], "steps": r.regret.shape[1],
                     "ms/step (all seeds)": 1e3 * r.seconds_per_step,
                     "flops/step (per seed)": r.flops_per_step})
    return pd.DataFrame(rows)


def ensemble_size_grid(d: int) -> list[int]:
    """The ensemble sizes of chapter 11's dimension study: powers of two up to 4d, plus d/2,
    d and 2d (sorted, distinct)."""
    if not isinstance(d, int) or d < 1:
        raise ConfigError(f"ensemble_size_grid: d={d!r} must be an integer >= 1")
    grid = {2 ** k for k in range(int(math.log2(4 * d)) + 1)} | {max(1, d // 2), d, 2 * d}
    return sorted(grid)


def regret_quantiles(final, quantiles=(0.5, 0.9)) -> dict[float, float]:
    """Quantiles across seeds of final cumulative regrets (S,) -> {q: value} (numpy's default,
    linear interpolation).  Exploration failures are rare and expensive, so the upper
    quantiles, not the mean alone, say whether an agent fails on some seeds."""
    f = np.asarray(final, dtype=float)
    if f.ndim != 1 or len(f) < 2:
        raise ValueError(f"regret_quantiles expects a 1-d array of >= 2 seeds, got shape {f.shape}")
    return {float(q): float(np.quantile(f, q)) for q in quantiles}


def matches_ts(final, ts_final, median_factor: float = 1.5, tail_quantile: float = 0.9,
               tail_factor: float = 2.0) -> dict:
    """Chapter 11's criterion: an agent *matches TS* if, over the same seeds, its median final
    regret is at most `median_factor` times TS's and its `tail_quantile` quantile at most
    `tail_factor` times TS's.  Returns the two ratios and the verdict."""
    if not (median_factor > 0 and tail_factor > 0 and 0.5 < tail_quantile < 1):
        raise ConfigError(f"matches_ts: need factors > 0 and 0.5 < tail_quantile < 1, got "
                          f"{median_factor}, {tail_factor}, {tail_quantile}")
    a, b = regret_quantiles(final, (0.5, tail_quantile)), regret_quantiles(ts_final, (0.5, tail_quantile))
    median_ratio, tail_ratio = a[0.5] / b[0.5], a[tail_quantile] / b[tail_quantile]
    return {"median_ratio": median_ratio, "tail_ratio": tail_ratio,
            "matches": bool(median_ratio <= median_factor and tail_ratio <= tail_factor)}


def bootstrap_ratios(final, ts_final, size: int, resamples: int = 2000, seed: int = 0,
                     tail_quantile: float = 0.9) -> dict[str, np.ndarray]:
    """The seed spread of `matches_ts`'s two ratios for a run of `size` seeds: draw `size`
    seeds with replacement from paired arrays (S,) (same seeds, common random numbers), and
    recompute the median and tail ratios, `resamples` times -> {"median_ratio": (resamples,),
    "tail_ratio": (resamples,)}.  A fresh run of `size` seeds should land inside this spread."""
    f, ts = np.asarray(final, dtype=float), np.asarray(ts_final, dtype=float)
    if f.shape != ts.shape or f.ndim != 1:
        raise ValueError(f"bootstrap_ratios: paired 1-d arrays needed, got {f.shape} and {ts.shape}")
    idx = np.random.default_rng(seed).integers(0, len(f), size=(resamples, size))
    a, b = f[idx], ts[idx]
    return {"median_ratio": np.median(a, 1) / np.median(b, 1),
            "tail_ratio": np.quantile(a, tail_quantile, axis=1) / np.quantile(b, tail_quantile, axis=1)}


def smallest_matching_M(matches: dict[int, bool]) -> float:
    """The smallest ensemble size M in the grid such that M and every larger M in the grid
    match ({M: verdict}); math.inf if the largest M does not."""
    Ms = sorted(matches)
    for i, M in enumerate(Ms):
        if all(matches[m] for m in Ms[i:]):
            return M
    return math.inf


def plot_regret(runs: list[BanditRun], ax=None, title: str | None = None):
    """Cumulative regret, mean +- one standard error over seeds, one line per run."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for r in runs:
        c = r.cumulative
        mean = c.mean(0)
        se = c.std(0, ddof=1) / math.sqrt(len(c)) if len(c) > 1 else np.zeros_like(mean)
        steps = np.arange(1, c.shape[1] + 1)
        line, = ax.plot(steps, mean, label=r.label)
        ax.fill_between(steps, mean - se, mean + se, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("step t")
    ax.set_ylabel("cumulative regret")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax
