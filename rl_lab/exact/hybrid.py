"""The hybrid RL/IL objective's gradient estimators, exactly, on an enumerable two-token student.

A tabular student (one logit vector for the first token, one per first token for the second) over a
vocabulary of V, a fixed teacher q of the same shape, a reward on the V^2 answers, and the
objective J = E[R] - beta E[sum_t lambda_t] with lambda_t = log pi(y_t|c_t) - log q(y_t|c_t)
(chapter 12, "Hybrid RL and imitation").  `hybrid_estimators` enumerates every answer and returns
the exact mean and total variance of three unbiased estimators of grad J:

  "dense + sparse"        sum_t s_t (R - beta sum_{s>t} lambda_s) - beta sum_t grad KL(pi(.|c_t) || q(.|c_t)),
                          the current token's KL replaced by its exact gradient (the note's split)
  "usual Monte Carlo"     sum_t s_t (R - beta sum_{s>=t} lambda_s): REINFORCE on the KL-regularised
                          reward, what a KL-in-reward trainer computes
  "Monte Carlo + score"   the usual one plus -beta sum_t s_t, the gradient of lambda_t through its own
                          log pi: mean zero (E[s_t] = 0), so a control variate that can lower or raise
                          the variance

with s_t = grad log pi(y_t|c_t).  Which of the last two the dense estimator is compared with decides
how often it has the lower variance (lab 12 counts both).
"""
from __future__ import annotations

import itertools

import torch

from rl_lab.algos.hybrid import kl_logit_gradient, reverse_kl

ESTIMATORS = ("dense + sparse", "usual Monte Carlo", "Monte Carlo + score")


def hybrid_estimators(seed: int, V: int = 3, beta: float = 0.5) -> tuple[dict, torch.Tensor]:
    """A random student, teacher and reward (seeded) -> ({estimator: (exact mean, total variance)},
    grad J by autograd); means and gradient are flat over the (V + V*V) logits."""
    g = torch.Generator().manual_seed(seed)
    z0 = torch.randn(V, generator=g, dtype=torch.float64, requires_grad=True)
    z1 = torch.randn(V, V, generator=g, dtype=torch.float64, requires_grad=True)
    lq0 = torch.log_softmax(torch.randn(V, generator=g, dtype=torch.float64), -1)
    lq1 = torch.log_softmax(torch.randn(V, V, generator=g, dtype=torch.float64), -1)
    reward = torch.rand(V, V, generator=g, dtype=torch.float64)

    def flat_grad(value):
        """d value / d (z0, z1), flattened; zeros where value does not depend on a parameter."""
        grads = torch.autograd.grad(value, [z0, z1], retain_graph=True, materialize_grads=True)
        return torch.cat([gr.reshape(-1) for gr in grads])

    lp0, lp1 = torch.log_softmax(z0, -1), torch.log_softmax(z1, -1)
    answers = list(itertools.product(range(V), repeat=2))
    prob = torch.stack([(lp0[a] + lp1[a, b]).exp() for a, b in answers]).detach()
    J = sum((lp0[a] + lp1[a, b]).exp() * (reward[a, b] - beta * (lp0[a] - lq0[a] + lp1[a, b] - lq1[a, b]))
            for a, b in answers)
    dense_kl = [flat_grad(reverse_kl(lp0, lq0))] + [flat_grad(reverse_kl(lp1[a], lq1[a])) for a in range(V)]
    assert torch.allclose(dense_kl[0][:V], kl_logit_gradient(z0.detach(), lq0), atol=1e-12)   # the closed form
    estimates = {name: [] for name in ESTIMATORS}
    for a, b in answers:
        s0, s1 = flat_grad(lp0[a]), flat_grad(lp1[a, b])
        l0, l1 = (lp0[a] - lq0[a]).item(), (lp1[a, b] - lq1[a, b]).item()
        R = reward[a, b].item()
        usual = s0 * (R - beta * (l0 + l1)) + s1 * (R - beta * l1)
        estimates["dense + sparse"].append(s0 * (R - beta * l1) + s1 * R - beta * (dense_kl[0] + dense_kl[1 + a]))
        estimates["usual Monte Carlo"].append(usual)
        estimates["Monte Carlo + score"].append(usual - beta * (s0 + s1))
    out = {}
    for name, est in estimates.items():
        est = torch.stack(est)                                                           # (V^2, P)
        mean = prob @ est
        out[name] = (mean, (prob @ ((est - mean) ** 2)).sum().item())
    return out, flat_grad(J)


def variance_counts(n: int = 40, **kw) -> dict:
    """Over students 0..n-1: every estimator unbiased (checked to 1e-12), and on how many students the
    dense + sparse estimator has the lower total variance than each Monte Carlo one:
    {"students": n, "usual Monte Carlo": k1, "Monte Carlo + score": k2, "variances": [per student]}."""
    rows = []
    for seed in range(n):
        out, grad_J = hybrid_estimators(seed, **kw)
        for name, (mean, _) in out.items():
            if not torch.allclose(mean, grad_J, atol=1e-12):
                raise AssertionError(f"student {seed}: {name} is biased")
        rows.append({name: var for name, (_, var) in out.items()})
    counts = {"students": n, "variances": rows}
    for other in ESTIMATORS[1:]:
        counts[other] = sum(r["dense + sparse"] < r[other] for r in rows)
    return counts
