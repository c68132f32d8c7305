"""The SGA lemma: expected progress of one stochastic gradient-ascent step.

For an L-smooth J and an update theta' = theta + eta * g_hat with E g_hat = grad J + b and
tr Cov(g_hat) = sigma^2 (for a batch of B samples, sigma^2 / B):

  E J(theta') - J(theta) >= eta (1 - L eta / 2) ||grad J||^2          (A: ideal progress)
                          + eta (1 - L eta) <grad J, b>               (B: bias, can be < 0)
                          - (L eta^2 / 2) (sigma^2 / B + ||b||^2)     (C: noise, always < 0)

It is the expectation of the descent lemma J(theta') >= J(theta) + eta <grad J, g_hat> -
(L eta^2 / 2) ||g_hat||^2, hence an identity when J is the quadratic with Hessian -L I.
"""
from __future__ import annotations

import torch

from rl_lab.errors import ConfigError
from rl_lab.exact.estimators import Estimator, ExactProblem, Moments, per_sequence_vectors
from rl_lab.exact.policies import flat_params, logits_at


def sga_terms(m: Moments, L: float, eta: float, batch_size: int = 1) -> dict:
    """The three terms of the lemma and their sum (a lower bound on expected progress)."""
    g2 = m.grad_norm ** 2
    inner = float((m.mean - m.bias) @ m.bias)                        # <grad J, b>
    ideal = eta * (1 - L * eta / 2) * g2
    bias = eta * (1 - L * eta) * inner
    noise = -(L * eta ** 2 / 2) * (m.var / batch_size + m.bias_norm ** 2)
    return {"ideal": ideal, "bias": bias, "noise": noise, "bound": ideal + bias + noise}


def best_step(m: Moments, L: float, batch_size: int = 1):
    """(eta*, bound*): the step size maximising the lemma's bound, and the bound there.
    The bound is eta <grad J, E g_hat> - (L eta^2 / 2) E||g_hat||^2, so
    eta* = <grad J, E g_hat> / (L E||g_hat||^2) and bound* = <grad J, E g_hat>^2 / (2 L E||g_hat||^2);
    if <grad J, E g_hat> <= 0 no step size guarantees progress: (0.0, 0.0)."""
    inner = float((m.mean - m.bias) @ m.mean)                        # <grad J, E g_hat>
    second = m.var / batch_size + float(m.mean @ m.mean)             # E||g_hat||^2 for batch B
    if inner <= 0:
        return 0.0, 0.0
    return inner / (L * second), inner ** 2 / (2 * L * second)


def sga_efficiency(m: Moments, batch_size: int = 1) -> float:
    """<grad J, E g_hat>_+^2 / (||grad J||^2 E||g_hat_B||^2), in [0, 1]: the best progress the
    lemma guarantees, as a fraction of what the exact gradient would (best_step's bound* times
    2L / ||grad J||^2).  Unlike the MSE it ignores the scale of g_hat, which the step size
    absorbs: an estimator shrunk towards 0 gains nothing here."""
    inner = float((m.mean - m.bias) @ m.mean)
    second = m.var / batch_size + float(m.mean @ m.mean)
    return max(inner, 0.0) ** 2 / (m.grad_norm ** 2 * second) if second > 0 else 0.0


def objective_at(problem: ExactProblem, thetas: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """(K, P) parameter vectors -> (K,) exact J at each, without touching the policy."""
    J = torch.func.vmap(lambda th: _objective(problem, th))
    return torch.cat([J(thetas[i:i + chunk]) for i in range(0, len(thetas), chunk)])


def smoothness(problem: ExactProblem, thetas: torch.Tensor | None = None, chunk: int = 256) -> float:
    """Largest |eigenvalue| of the Hessian of J at the current parameters, or, given (K, P)
    parameter vectors `thetas`, the largest over those points and the current one.

    The lemma needs L to bound the curvature along the *whole* step; the value at theta alone
    (the local L) is enough for small steps only."""
    theta = flat_params(problem.policy)
    if theta.numel() > 4000:
        raise ConfigError(f"smoothness: {theta.numel()} parameters is too many for a dense Hessian (max 4000)")
    points = theta[None] if thetas is None else torch.cat([theta[None], thetas])
    hess = torch.func.vmap(torch.func.hessian(lambda th: _objective(problem, th)))
    return max(float(torch.linalg.eigvalsh(hess(points[i:i + chunk])).abs().max())
               for i in range(0, len(points), chunk))


def _objective(problem: ExactProblem, theta: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits_at(problem.policy, theta), -1)
    return (problem.space.prefix_probs(logp)[1] * problem.reward).sum()


def per_sequence_estimates(problem: ExactProblem, est: Estimator) -> torch.Tensor:
    """(N, P): the single-sample estimate g_hat(y) for every sequence (0 where the sampler
    cannot produce y).  Dense: for small problems only."""
    space = problem.space
    P = flat_params(problem.policy).numel()
    if space.N * P > 5e7:
        raise ConfigError(f"per_sequence_estimates: N * P = {space.N} * {P} is too large (max 5e7)")
    coef = problem.coefficients(est)
    return torch.cat([g for _, g in per_sequence_vectors(space, problem.scores, coef)])


def expected_progress(problem: ExactProblem, est: Estimator, eta: float, batch_size: int = 1,
                      n_batches: int = 2000, seed: int = 0):
    """E J(theta + eta * g_hat_B) - J(theta), for g_hat_B the mean of batch_size single-sample
    estimates.  batch_size=1: an exact sum over all sequences (returns stderr 0).  Otherwise
    a Monte-Carlo mean over n_batches batches, each evaluated exactly.  -> (mean, stderr)."""
    p, _ = problem.sampler(est)
    G = per_sequence_estimates(problem, est)                          # (N, P)
    theta = flat_params(problem.policy)
    if batch_size == 1:
        J_new = objective_at(problem, theta + eta * G)                # (N,)
        return float((p * J_new).sum() - problem.J), 0.0
    g = torch.Generator().manual_seed(seed)
    codes = torch.multinomial(p, n_batches * batch_size, replacement=True, generator=g)
    codes = codes.view(n_batches, batch_size)
    vals = []
    for i in range(0, n_batches, 64):
        g_hat = G[codes[i:i + 64]].mean(1)                            # (k, P)
        vals.append(objective_at(problem, theta + eta * g_hat) - problem.J)
    vals = torch.cat(vals)
    return float(vals.mean()), float(vals.std() / n_batches ** 0.5)
