"""The bias and variance bounds of Parts 1-2 of the series, evaluated next to exact values.

With A(y) = R(y) - b, the per-token score phi_t(y) = A(y) grad log pi(y_t | y_<t) and the
sequence score f(y) = sum_t phi_t(y), let K = sup_y ||f(y)|| and K_t = sup_y ||phi_t(y)||.
Every bound below is a theorem (derivations in chapters 2-3); the series' own, looser
closed forms are reported next to the tighter intermediate ones.

A weight w that is at most C and at most C * rho/rho-like (min(rho, C), or rho 1{rho <= C}) has
E_mu[w^2] <= min(C, C^2): w^2 <= C min(rho, C) and E_mu[min(rho, C)] <= min(1, C).  So the
truncated and masked estimators' variance is at most K^2 min(C, C^2) (sequence level) or
min(C, C^2) (sum_t K_t)^2 (token level), a factor C tighter than the series' K^2 C^2 for C >= 1.
"""
from __future__ import annotations

import torch

from rl_lab.exact.estimators import Estimator, ExactProblem


def score_sups(problem: ExactProblem, baseline: float = 0.0):
    """(K, K_t (T,)): sup over all sequences of ||f(y)|| and of ||phi_t(y)||."""
    space = problem.space
    adv = (problem.reward - baseline).abs()                           # (N,)
    q = space.per_token(problem.q_tab)                                # (N, T) ||grad log pi||^2
    K_t = (adv[:, None] * q.sqrt()).max(0).values                     # (T,)
    if problem.tabular:                                               # orthogonal blocks
        return float((adv * space.path_sum(problem.q_tab).sqrt()).max()), K_t
    return float((adv * space.path_sum(problem.scores).norm(dim=-1)).max()), K_t


def _token_excess(problem: ExactProblem, est: Estimator) -> torch.Tensor:
    """(T,) E_{c ~ d_t^mu} of the pi-mass the token weight removes at c:
    token_tis: sum_a (pi - C mu)_+;  token_mis: pi-mass of tokens with rho outside [C_low, C]."""
    pi, mu = problem.pi_logp.exp(), problem.mu_logp.exp()              # (n_contexts, V)
    rho = torch.where(mu > 0, pi / mu.clamp(min=1e-300), torch.zeros_like(pi))
    if est.name in ("token_tis", "geo_token_tis"):
        per_ctx = torch.where(mu > 0, (pi - est.C * mu).clamp(min=0), torch.zeros_like(pi)).sum(-1)
    else:
        out = (rho > est.C) | (rho < est.lower)
        per_ctx = torch.where((mu > 0) & out, pi, torch.zeros_like(pi)).sum(-1)
    return problem.div.by_depth(problem.space, per_ctx, problem.div.d_mu)


def estimator_bounds(problem: ExactProblem, est: Estimator) -> dict:
    """{'bias': tightest bias bound, 'var': variance bound, plus the series' closed forms
    ('bias_series', 'var_series') where the series states one, and for seq_tis the chi^2 form
    of chapter 3 ('bias_chi2' = K (1 + chi2) / C + K P_pi(mu = 0), without Part 2's factor 2)}."""
    T, div = problem.space.T, problem.div
    K, K_t = score_sups(problem, est.baseline)
    sum_Kt = float(K_t.sum())
    p_pi, p_mu = problem.p_pi, problem.p_mu
    rho = torch.where(p_mu > 0, p_pi / p_mu.clamp(min=1e-300), torch.full_like(p_pi, float("inf")))
    uncovered = float(p_pi[p_mu == 0].sum())                          # P_pi(mu(y) = 0)
    one_chi2 = 1 + div.chi2_seq
    hybrid = 2 * T * div.delta_max * sum_Kt                           # token-level state-shift bias
    name, C = est.name, est.C
    w2 = min(C, C ** 2)                                               # sup of E_mu[w^2], see above
    if name == "on_policy":
        return {"bias": 0.0, "var": K ** 2}
    if name == "naive":
        return {"bias": 2 * K * div.tv_seq, "bias_series": 2 * K * T * div.delta_max, "var": K ** 2}
    if name == "token_is":
        return {"bias": hybrid, "var": (1 + div.chi2_max) * sum_Kt ** 2}
    if name in ("token_tis", "token_mis"):
        extra = float((K_t * _token_excess(problem, est)).sum())
        return {"bias": hybrid + extra, "var": w2 * sum_Kt ** 2, "var_series": C ** 2 * sum_Kt ** 2}
    if name == "seq_is":
        return {"bias": K * uncovered, "var": K ** 2 * one_chi2,
                "var_series": K ** 2 * (1 + div.chi2_max) ** T}
    if name == "seq_tis":
        tail = float(torch.where(p_mu > 0, (p_pi - C * p_mu).clamp(min=0), torch.zeros_like(p_pi)).sum())
        return {"bias": K * (tail + uncovered), "bias_chi2": K * one_chi2 / C + K * uncovered,
                "bias_series": 2 * K * one_chi2 / C + K * uncovered,
                "var": K ** 2 * w2, "var_series": K ** 2 * C ** 2}
    if name == "seq_mis":
        rejected = float(p_pi[(rho > C) | (rho < est.lower)].sum())  # both sides; includes mu(y) = 0
        return {"bias": K * rejected, "var": K ** 2 * w2, "var_series": K ** 2 * C ** 2}
    if name in ("geo_token_tis", "geo_seq_tis"):
        # gate G <= 1 times a truncated weight w: the second moment is at most the parent's, and
        # the gate removes E_mu[(1 - G) w f], of norm <= sum_t K_t C P_mu(G = 0) (token level) or
        # <= K E_mu[(1 - G) min(rho, C)] <= K P_pi(G = 0, mu > 0) (sequence level).
        parent = estimator_bounds(problem, Estimator(name.replace("geo_", ""), C=C, baseline=est.baseline))
        from rl_lab.exact.estimators import geo_gate
        out_gate = geo_gate(est, problem.log_rho_seq, T) == 0
        if name == "geo_token_tis":
            extra = sum_Kt * C * float(p_mu[out_gate].sum())
        else:
            extra = K * float(p_pi[out_gate & (p_mu > 0)].sum())
        return {"bias": parent["bias"] + extra, "var": parent["var"]}
    geo = torch.where(p_mu > 0, rho, torch.ones_like(rho)) ** (1 / T)
    rejected_mu = float(p_mu[(geo > C) | (geo < est.lower)].sum())   # geo_mask
    return {"bias": 2 * K * div.tv_seq + K * rejected_mu, "var": K ** 2}


def simulation_lemma(problem: ExactProblem) -> dict:
    """The chain TV(P^pi, P^mu) <= sum_t E_{d_t^mu} TV(pi_t, mu_t) <= T Delta_max, and the
    per-depth visitation gap TV(d_t^pi, d_t^mu) <= t Delta_max (t = prefix length)."""
    space, div = problem.space, problem.div
    expected_tv = div.by_depth(space, div.tv, div.d_mu)              # (T,)
    d_gap = torch.stack([0.5 * (space.level(div.d_pi, t) - space.level(div.d_mu, t)).abs().sum()
                         for t in range(space.T)])
    return {"tv_seq": div.tv_seq, "sum_expected_tv": float(expected_tv.sum()),
            "T_delta_max": space.T * div.delta_max, "visitation_tv": d_gap,
            "visitation_bound": torch.arange(space.T, dtype=d_gap.dtype) * div.delta_max}
