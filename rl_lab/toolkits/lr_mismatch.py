"""Learning rate against the mismatch (chapter 7): the SGA arithmetic of a smaller step, and
summaries of a run before and after a length-triggered decay.

Two halves:

* the SGA lemma on a quadratic J(theta) = -(L/2)||theta - theta*||^2, where it is an identity
  (`quadratic_progress_terms` gives the three terms, `quadratic_progress_mc` measures the same
  expectation by sampling the estimator);
* small helpers over a run's per-step history (`replay_length_schedule`, `first_decay_step`,
  `reward_collapse_step`, `phase_means`) for the lab's length-triggered experiment.

The schedule itself lives in `rl_lab.schedules`; this module only reads it.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from rl_lab.schedules import decay_period, length_surge_step, length_triggered_lr_factor


# ----------------------------------------------------------------------------- SGA on a quadratic
def quadratic_progress_terms(grad: torch.Tensor, bias: torch.Tensor, noise_trace: float, L: float,
                             eta: float) -> dict:
    """The SGA lemma's terms for one step theta' = theta + eta * g_hat on the quadratic with
    Hessian -L I, where E g_hat = grad + bias and tr Cov(g_hat) = noise_trace.

    grad, bias: (P,).  Returns floats: ideal = eta (1 - L eta / 2) ||grad||^2,
    bias = eta (1 - L eta) <grad, bias>, noise = -(L eta^2 / 2)(noise_trace + ||bias||^2), and
    total = their sum, which for this J *equals* E J(theta') - J(theta).  The last two terms are
    the only ones whose leading power of eta is 2: a smaller step shrinks them fastest.
    """
    if grad.shape != bias.shape or grad.dim() != 1:
        raise ValueError(f"grad {tuple(grad.shape)} and bias {tuple(bias.shape)} must be vectors of one shape")
    if L <= 0:
        raise ValueError(f"L={L}: the smoothness constant must be positive")
    if eta < 0:
        raise ValueError(f"eta={eta}: a step size is >= 0")
    if noise_trace < 0:
        raise ValueError(f"noise_trace={noise_trace}: a trace of a covariance is >= 0")
    g2 = float(grad @ grad)
    inner = float(grad @ bias)
    ideal = eta * (1 - L * eta / 2) * g2
    bias_term = eta * (1 - L * eta) * inner
    noise = -(L * eta ** 2 / 2) * (noise_trace + float(bias @ bias))
    return {"ideal": ideal, "bias": bias_term, "noise": noise, "total": ideal + bias_term + noise}


def quadratic_progress_mc(theta: torch.Tensor, theta_star: torch.Tensor, L: float, eta: float,
                          bias: torch.Tensor, noise_std: float, n: int = 100_000, seed: int = 0) -> tuple[float, float]:
    """Monte-Carlo E J(theta + eta g_hat) - J(theta) for J = -(L/2)||theta - theta*||^2 and
    g_hat = grad J(theta) + bias + noise_std * N(0, I) (so tr Cov = P noise_std^2).

    theta, theta_star, bias: (P,).  Returns (mean, standard error) over n draws (float64)."""
    if n < 2:
        raise ValueError(f"n={n}: need at least two draws for a standard error")
    theta, theta_star, bias = (x.double() for x in (theta, theta_star, bias))
    gen = torch.Generator().manual_seed(seed)
    grad = -L * (theta - theta_star)                                                 # (P,)
    g_hat = grad + bias + noise_std * torch.randn(n, theta.numel(), generator=gen, dtype=torch.float64)  # (n, P)
    new = theta + eta * g_hat                                                        # (n, P)
    J0 = -(L / 2) * float((theta - theta_star).square().sum())
    gains = -(L / 2) * (new - theta_star).square().sum(-1) - J0                      # (n,)
    return float(gains.mean()), float(gains.std() / math.sqrt(n))


def best_quadratic_step(grad: torch.Tensor, bias: torch.Tensor, noise_trace: float, L: float) -> float:
    """The eta maximising `quadratic_progress_terms(...)["total"]`:
    <grad, grad + bias> / (L E||g_hat||^2), or 0.0 when the expected update points downhill."""
    mean = grad + bias
    inner = float(grad @ mean)
    second = noise_trace + float(mean @ mean)
    if inner <= 0 or second <= 0:
        return 0.0
    return inner / (L * second)


# ----------------------------------------------------------------------------- run summaries
def replay_length_schedule(mean_lengths: Sequence[float], baseline_steps: int = 50, surge_factor: float = 3.0,
                           period_factor: float = 1.8, min_lr_ratio: float = 0.1) -> dict:
    """Replay `rl_lab.schedules` on a recorded length trace, as the trainer would have applied it.

    Returns {"factors": np.ndarray (len(mean_lengths),) of lr multipliers (step t sees the lengths of
    steps < t), "surge_step": int | None (on the whole trace), "period": int | None}.  Replaying a
    trace is exact only up to the first decay: after it, a real run's lengths would differ."""
    factors = np.array([length_triggered_lr_factor(t, mean_lengths, baseline_steps, surge_factor,
                                                   period_factor, min_lr_ratio)
                        for t in range(len(mean_lengths))])
    surge = length_surge_step(mean_lengths, baseline_steps, surge_factor)
    period = None if surge is None else decay_period(surge, period_factor)
    return {"factors": factors, "surge_step": surge, "period": period}


def first_decay_step(learning_rates: Sequence[float], rtol: float = 1e-9) -> int | None:
    """The first step whose learning rate is below the first step's (None if it never drops)."""
    lrs = np.asarray(learning_rates, dtype=float)
    if lrs.ndim != 1 or len(lrs) == 0:
        raise ValueError("learning_rates must be a non-empty 1-d sequence (one value per step)")
    below = np.nonzero(lrs < lrs[0] * (1 - rtol))[0]
    return int(below[0]) if len(below) else None


def reward_collapse_step(rewards: Sequence[float], fraction: float = 0.5, window: int = 3) -> int | None:
    """The first step t >= window at which the mean reward of steps (t - window, t] falls below
    `fraction` x the mean of the first `window` steps; None if it never does.  A rolling mean
    because one step's reward over a few dozen completions is noisy."""
    if window < 1:
        raise ValueError(f"window={window}: average over at least one step")
    if not 0 < fraction < 1:
        raise ValueError(f"fraction={fraction}: a collapse is a fall below a fraction in (0, 1) of the start")
    r = np.asarray(rewards, dtype=float)
    if len(r) < window:
        return None
    start = r[:window].mean()
    roll = np.convolve(r, np.ones(window) / window, mode="valid")                   # roll[i] = mean r[i:i+window]
    hits = np.nonzero(roll[1:] < fraction * start)[0]
    return int(hits[0]) + window if len(hits) else None


def phase_means(values: Sequence[float], split: int, skip: int = 0) -> tuple[float, float]:
    """(mean of values[skip:split], mean of values[split:]): a metric before and after a step
    (e.g. the first learning-rate decay).  NaNs are ignored."""
    v = np.asarray(values, dtype=float)
    if not skip < split < len(v):
        raise ValueError(f"need skip < split < len(values); got skip={skip}, split={split}, len={len(v)}")
    return float(np.nanmean(v[skip:split])), float(np.nanmean(v[split:]))
