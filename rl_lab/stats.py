"""The statistics the labs and tests use to say whether a difference is real: Welch's and the
one-sample t, and the Wilson interval of a proportion (k successes out of n)."""
from __future__ import annotations

import numpy as np


def welch_t(a, b) -> float:
    """Welch's t of mean(a) - mean(b) for two independent samples with unequal variances.
    +inf/-inf when both samples are constant and differ; 0 when they are constant and equal."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"welch_t needs at least 2 values per sample, got {len(a)} and {len(b)}")
    diff = a.mean() - b.mean()
    se = np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    return float(diff / se) if se > 0 else float(np.sign(diff) * np.inf if diff else 0.0)


def one_sample_t(x, mu: float = 0.0) -> float:
    """t of mean(x) - mu (e.g. paired differences against 0)."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2:
        raise ValueError(f"one_sample_t needs at least 2 values, got {len(x)}")
    diff = x.mean() - mu
    se = x.std(ddof=1) / np.sqrt(len(x))
    return float(diff / se) if se > 0 else float(np.sign(diff) * np.inf if diff else 0.0)


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion k / n (95% for z = 1.96); unlike the normal
    approximation it stays inside [0, 1] and is not empty at k = 0 or k = n."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"wilson_interval needs 0 <= k <= n and n > 0, got k={k}, n={n}")
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def power_law_exponent(x, y) -> float:
    """b of the least-squares line log y = log a + b log x (y ~ a x^b): how a cost y grows with a
    size x (1: linearly, 2: quadratically).  Needs two or more distinct positive x and positive y."""
    x, y = np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float))
    if len(x) != len(y) or len(np.unique(x)) < 2 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("power_law_exponent needs two or more distinct positive x and positive y of the "
                         f"same length, got x={np.exp(x).tolist()}, y={np.exp(y).tolist()}")
    xc = x - x.mean()
    return float((xc * (y - y.mean())).sum() / (xc * xc).sum())
