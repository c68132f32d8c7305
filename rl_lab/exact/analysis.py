"""Tables and sweeps built on the exact objects, for the labs: one row per estimator, a sweep
of the truncation level, fitted scaling exponents, exact expected-gradient ascent and
Monte-Carlo error curves."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from rl_lab.exact.bounds import estimator_bounds
from rl_lab.exact.estimators import Estimator, ExactProblem, exact_moments, monte_carlo
from rl_lab.exact.mismatch import behaviour_logits
from rl_lab.exact.policies import flat_params, set_flat_params
from rl_lab.exact.sga import sga_efficiency


def loglog_slope(x, y) -> float:
    """Least-squares slope of log y against log x: the exponent a in y ~ x^a."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def estimator_table(problem: ExactProblem, estimators, batch_size: int = 1) -> pd.DataFrame:
    """One row per estimator: exact ||bias||, relative bias, cos(E g_hat, grad J), variance
    (trace), MSE and SGA efficiency for a batch of batch_size, and the bounds next to them."""
    rows = []
    for est in estimators:
        m, b = exact_moments(problem, est), estimator_bounds(problem, est)
        rows.append({"estimator": est.label, "bias": m.bias_norm,
                     "bias / |grad J|": m.bias_norm / m.grad_norm, "cos": m.cosine,
                     "var": m.var, "mse": m.mse(batch_size),
                     "efficiency": sga_efficiency(m, batch_size),
                     "bias bound": b["bias"], "var bound": b["var"]})
    return pd.DataFrame(rows).set_index("estimator")


def threshold_sweep(problem: ExactProblem, name: str, thresholds, batch_size: int = 1,
                    baseline: float = 0.0) -> pd.DataFrame:
    """Exact bias^2, var / B, MSE and SGA efficiency of estimator `name` at every threshold C."""
    rows = []
    for C in thresholds:
        m = exact_moments(problem, Estimator(name, C=float(C), baseline=baseline))
        rows.append({"C": float(C), "bias2": m.bias_norm ** 2, "var/B": m.var / batch_size,
                     "mse": m.mse(batch_size), "second_moment": m.second_moment,
                     "efficiency": sga_efficiency(m, batch_size)})
    return pd.DataFrame(rows)


def expected_ascent(space, policy, reward, mechanism: str, size: float, est: Estimator,
                    eta: float, steps: int, restore: bool = True) -> list[float]:
    """Gradient ascent with the estimator's *exact expectation* as the update, the sampler
    re-derived from the current policy by `mechanism` at every step (noise-free, so only the
    bias acts).  Returns J before each step and after the last.  restore=False leaves the
    policy at its final parameters."""
    theta0, Js, done = flat_params(policy), [], False
    try:
        for _ in range(steps):
            problem = ExactProblem(space, policy, behaviour_logits(space, policy, mechanism, size,
                                                                   reward=reward), reward)
            Js.append(problem.J)
            set_flat_params(policy, flat_params(policy) + eta * exact_moments(problem, est).mean)
        Js.append(ExactProblem(space, policy, problem.mu_logp, reward).J)
        done = True
    finally:
        if restore or not done:
            set_flat_params(policy, theta0)
    return Js


def mc_errors(problem: ExactProblem, est: Estimator, batch_sizes, repeats: int = 30,
              seed: int = 0) -> pd.DataFrame:
    """For each batch size B, `repeats` Monte-Carlo estimates: their mean squared distance to
    the exact expectation (should be var / B) and their mean distance to grad J (which levels
    off at ||bias|| for a biased estimator)."""
    m = exact_moments(problem, est)
    g = torch.Generator().manual_seed(seed)
    rows = []
    for B in batch_sizes:
        draws = torch.stack([monte_carlo(problem, est, int(B), g) for _ in range(repeats)])
        rows.append({"B": int(B), "mse_to_mean": float((draws - m.mean).square().sum(-1).mean()),
                     "var/B": m.var / B,
                     "dist_to_grad": float((draws - problem.grad).norm(dim=-1).mean()),
                     "bias": m.bias_norm})
    return pd.DataFrame(rows)


def bound_optimal_threshold(chi2_seq: float, batch_size: int = 1, series: bool = False) -> float:
    """The C minimising a Seq-TIS MSE bound for a batch of B (chapter 3).

    Default: the bound derived in chapter 3, bias <= K (1+chi2)/C and Var <= K^2 C (C >= 1), so
    MSE <= K^2 (1+chi2)^2 / C^2 + K^2 C / B, minimised at C* = (2B)^(1/3) (1+chi2)^(2/3) (always
    >= 2^(1/3) > 1, where the variance bound K^2 C applies).
    series=True: Part 2's form, 4K^2(1+chi2)^2/C^2 + K^2 C^2 / B, minimised at
    C* = sqrt(2 sqrt(B) (1 + chi2)), i.e. Part 2's sqrt(2 (1 + chi2)) for a single sample."""
    if series:
        return math.sqrt(2 * math.sqrt(batch_size) * (1 + chi2_seq))
    return (2 * batch_size) ** (1 / 3) * (1 + chi2_seq) ** (2 / 3)


def seq_tis_mse_bound(C: float, chi2_seq: float, batch_size: int = 1, K: float = 1.0,
                      series: bool = False) -> float:
    """The Seq-TIS MSE bound that bound_optimal_threshold minimises, at threshold C >= 1."""
    if series:
        return 4 * K ** 2 * (1 + chi2_seq) ** 2 / C ** 2 + K ** 2 * C ** 2 / batch_size
    return K ** 2 * (1 + chi2_seq) ** 2 / C ** 2 + K ** 2 * C / batch_size
