"""The surrogate error of Trust Region Masking, exactly, next to the TRM bound family.

The rollout policy pi_roll is the sampler mu and the trained policy pi_theta is pi (the
ExactProblem's policy).  With rewards in [0, 1] and rho_t = pi(y_t | c_t) / mu(y_t | c_t), the
surrogate of Li et al. (2025) is L(pi) = E_mu[R sum_t (rho_t - 1)] (a constant baseline only
shifts it by a theta-free constant), and its error is

    Error(pi) = J(pi) - J(mu) - L(pi).

Everything here is a sum over all V**T sequences: `surrogate_error` gives Error itself,
`error_identity` the same number by the telescoping identity behind the adaptive bound,
`trm_divergences` the per-context maxima and sequence-level divergences the bounds are stated
in (direction KL(mu || pi), the paper's KL(pi_roll || pi_theta)), and `trm_bound_table` puts
the exact |Error| next to every bound of `rl_lab.corrections.trust_region_bounds`.
"""
from __future__ import annotations

import torch

from rl_lab.corrections import trust_region_bounds
from rl_lab.errors import ConfigError
from rl_lab.exact.estimators import ExactProblem


def _check_full_support(problem: ExactProblem) -> None:
    if not torch.isfinite(problem.mu_logp).all():
        raise ConfigError("the TRM quantities need a sampler with full support (mu > 0 everywhere); "
                          "this problem's mu truncates (top_k / top_p): use another mechanism")


def trm_divergences(problem: ExactProblem) -> dict:
    """{'delta': max_c KL(mu_c || pi_c), 'eps': max_c TV(mu_c, pi_c) (over contexts mu reaches),
    'kl_seq': KL(P^mu || P^pi), 'tv_seq': TV(P^mu, P^pi),
    'tv_per_step': (T,) D_t = E_{c ~ d_t^mu} TV(mu_c, pi_c), t = 1..T}."""
    _check_full_support(problem)
    div, space = problem.div, problem.space
    reached = div.d_mu > 0                                                # (n_contexts,)
    return {"delta": float(div.kl_mu_pi[reached].max()), "eps": float(div.tv[reached].max()),
            "kl_seq": div.kl_seq_mu_pi, "tv_seq": div.tv_seq,
            "tv_per_step": div.by_depth(space, div.tv, div.d_mu)}


def surrogate_error(problem: ExactProblem) -> dict:
    """{'J_pi', 'J_mu', 'L' = E_mu[R sum_t (rho_t - 1)], 'error' = J_pi - J_mu - L}, exactly."""
    _check_full_support(problem)
    space = problem.space
    excess = space.path_sum(problem.log_rho_tab.exp() - 1)              # (N,) sum_t (rho_t - 1)
    J_mu = float((problem.p_mu * problem.reward).sum())
    L = float((problem.p_mu * problem.reward * excess).sum())
    return {"J_pi": problem.J, "J_mu": J_mu, "L": L, "error": problem.J - J_mu - L}


def error_identity(problem: ExactProblem) -> float:
    """-E_mu[R sum_t (rho_t - 1)(1 - prod_{j>t} rho_j)]: equal to Error by the telescoping
    identity prod_t rho_t - 1 = sum_t (rho_t - 1) prod_{j>t} rho_j.  Builds (N, T) tables."""
    _check_full_support(problem)
    lr = problem.space.per_token(problem.log_rho_tab)                    # (N, T) log rho_t
    after = lr.flip(1).cumsum(1).flip(1) - lr                            # (N, T) sum_{j>t} log rho_j
    terms = (lr.exp() - 1) * (1 - after.exp())                           # (N, T)
    return -float((problem.p_mu * problem.reward * terms.sum(1)).sum())


def trm_bound_table(problem: ExactProblem) -> dict:
    """The exact |Error| and every TRM bound evaluated at this problem's exact divergences:
    {'abs_error', 'T', 'delta', 'eps', 'kl_seq', 'tv_seq', <every trust_region_bounds key>}."""
    d = trm_divergences(problem)
    bounds = trust_region_bounds(problem.space.T, d["delta"], eps=d["eps"], kl_seq=d["kl_seq"],
                                 tv_seq=d["tv_seq"], tv_per_step=d["tv_per_step"])
    return {"abs_error": abs(surrogate_error(problem)["error"]), "T": problem.space.T,
            **{k: d[k] for k in ("delta", "eps", "kl_seq", "tv_seq")}, **bounds}
