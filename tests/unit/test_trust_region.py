"""rl_lab.exact.trust_region: the exact TRM surrogate error and the bounds next to it."""
import math

import numpy as np
import pytest

from rl_lab.config import ConfigError
from rl_lab.exact import (
    ExactProblem,
    SequenceSpace,
    behaviour_logits,
    error_identity,
    feedback_policy,
    loglog_slope,
    make_reward,
    surrogate_error,
    trm_bound_table,
    trm_divergences,
)

BOUND_KEYS = ("classical_kl", "classical_tv", "pm_kl", "pm_tv", "mixed_kl", "mixed_tv", "coupling",
              "adaptive_tv", "adaptive_kl", "adaptive", "unified")


def problem(T=6, mechanism="shift", size=-0.3, reward="majority", V=2, feedback=1.0):
    space = SequenceSpace(V, T)
    policy = feedback_policy(space, feedback=feedback)
    r = make_reward(space, reward)
    return ExactProblem(space, policy, behaviour_logits(space, policy, mechanism, size, reward=r), r)


def brute_force_error(pr):
    """J(pi) - J(mu) - sum_y mu(y) R(y) sum_t (rho_t - 1), one sequence at a time."""
    lr = pr.space.per_token(pr.log_rho_tab)                              # (N, T)
    total = 0.0
    for k in range(pr.space.N):
        total += float(pr.p_mu[k] * pr.reward[k] * (lr[k].exp() - 1).sum())
    return float((pr.p_pi * pr.reward).sum() - (pr.p_mu * pr.reward).sum()) - total


@pytest.mark.parametrize("mechanism,size", [("shift", -0.3), ("noise", 0.4), ("stale", 0.5),
                                            ("temperature", 0.7), ("bfloat16", 50.0)])
def test_error_matches_brute_force_and_the_telescoping_identity(mechanism, size):
    pr = problem(mechanism=mechanism, size=size, reward="random")
    err = surrogate_error(pr)["error"]
    assert err == pytest.approx(brute_force_error(pr), abs=1e-13)
    assert err == pytest.approx(error_identity(pr), abs=1e-13)
    assert abs(err) > 1e-6                                               # not trivially zero


def test_error_vanishes_on_policy_and_is_second_order():
    assert abs(surrogate_error(problem(size=0.0))["error"]) < 1e-15
    sizes = np.geomspace(0.01, 0.04, 4)
    errs = [abs(surrogate_error(problem(size=-s))["error"]) for s in sizes]
    assert 1.8 < loglog_slope(sizes, errs) < 2.2                         # L is a first-order expansion


def test_one_mismatched_context_per_path_makes_the_surrogate_exact():
    """With the mismatch at one context only, no path crosses two mismatched positions, and
    every term (rho_t - 1)(1 - prod_{j>t} rho_j) of the identity is zero."""
    pr = problem(T=8, mechanism="sparse", size=3.0)
    assert trm_divergences(pr)["delta"] > 0.1
    assert abs(surrogate_error(pr)["error"]) < 1e-14


def test_divergences_are_the_papers_quantities():
    pr = problem(T=7, mechanism="noise", size=0.5, V=3)
    d = trm_divergences(pr)
    div, space = pr.div, pr.space
    chain = float(div.by_depth(space, div.kl_mu_pi, div.d_mu).sum())   # KL chain rule
    assert d["kl_seq"] == pytest.approx(chain, rel=1e-10)
    assert d["kl_seq"] <= space.T * d["delta"] + 1e-12
    assert d["eps"] <= min(1.0, math.sqrt(d["delta"] / 2)) + 1e-12       # Pinsker
    assert d["tv_per_step"].shape == (space.T,)
    assert (d["tv_per_step"] <= d["eps"] + 1e-12).all()
    assert d["tv_seq"] <= float(d["tv_per_step"].sum()) + 1e-12          # simulation lemma
    assert d["tv_per_step"][0] == pytest.approx(float(div.tv[0]))         # depth 0: the root context


@pytest.mark.parametrize("mechanism,size", [("shift", -0.2), ("shift", -1.0), ("noise", 0.3), ("noise", 1.0),
                                            ("stale", 0.5), ("sparse", 3.0), ("temperature", 0.8)])
@pytest.mark.parametrize("reward", ["majority", "mean", "random"])
def test_every_bound_holds(mechanism, size, reward):
    for T in (2, 5, 9):
        tab = trm_bound_table(problem(T=T, mechanism=mechanism, size=size, reward=reward))
        for k in BOUND_KEYS:
            assert tab["abs_error"] <= tab[k] * (1 + 1e-9) + 1e-15, (T, k, tab)
        assert tab["unified"] <= tab["classical_kl"] + 1e-15


def test_truncated_sampler_is_refused_with_a_clear_error():
    pr = problem(V=3, mechanism="top_k", size=2)
    with pytest.raises(ConfigError, match="full support"):
        surrogate_error(pr)
    with pytest.raises(ConfigError, match="top_k"):
        trm_bound_table(pr)
