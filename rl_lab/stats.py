"""The two t statistics the labs and tests use to say whether a difference is real."""
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
