"""rl_lab.exact: identities that a wrong enumeration, estimator or bound would break."""
import math

import numpy as np
import pytest
import torch

from rl_lab.config import ConfigError
from rl_lab.exact import (
    ESTIMATORS,
    MECHANISMS,
    Estimator,
    ExactProblem,
    NetworkPolicy,
    SequenceSpace,
    TabularPolicy,
    behaviour_logits,
    best_step,
    chi2,
    estimator_bounds,
    estimator_weights,
    exact_gradient,
    exact_moments,
    expected_progress,
    flat_params,
    kl,
    make_reward,
    monte_carlo,
    objective,
    per_sequence_estimates,
    score_table,
    set_flat_params,
    sga_terms,
    simulation_lemma,
    smoothness,
    standard_estimators,
    tv,
)
from rl_lab.exact.estimators import per_sequence_vectors

D = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    """Every tensor here is tiny: two threads cost more in start-up than they save."""
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(2)


def problem(policy_cls=TabularPolicy, V=2, T=6, mechanism="shift", size=0.4, reward="majority",
            seed=0, **kw):
    space = SequenceSpace(V, T)
    policy = policy_cls(space, seed=seed, **kw)
    R = make_reward(space, reward)
    mu = behaviour_logits(space, policy, mechanism, size, reward=R, seed=seed)
    return ExactProblem(space, policy, mu, R)


# ---------------------------------------------------------------- enumeration ----------

def test_space_layout_and_probabilities_sum_to_one():
    space = SequenceSpace(3, 4)
    assert space.N == 81 and space.n_contexts == 1 + 3 + 9 + 27
    toks = space.tokens()
    assert toks.shape == (81, 4) and toks[5].tolist() == [0, 0, 1, 2]   # 5 = 0*27+0*9+1*3+2
    for policy in (TabularPolicy(space, scale=2.0), NetworkPolicy(space, hidden=4)):
        logp = torch.log_softmax(policy().detach(), -1)
        reach, p = space.prefix_probs(logp)
        assert abs(float(p.sum()) - 1) < 1e-13
        for t in range(space.T):                      # visitation of each depth is a distribution
            assert abs(float(space.level(reach, t).sum()) - 1) < 1e-13
        # sequence probability = product of the per-token probabilities of its tokens
        assert torch.allclose(space.per_token(logp).sum(1).exp(), p, rtol=1e-12)
        assert torch.allclose(space.gather(logp, torch.arange(space.N)), space.per_token(logp))


def test_per_token_and_per_context_are_adjoint():
    space = SequenceSpace(3, 4)
    g = torch.Generator().manual_seed(1)
    A = torch.randn(space.n_contexts, 3, generator=g, dtype=D)
    B = torch.randn(space.N, 4, generator=g, dtype=D)
    lhs = (space.per_token(A) * B).sum()
    rhs = (A * space.per_context(B)).sum()
    assert abs(float(lhs - rhs)) < 1e-10


def test_sampling_matches_the_enumerated_probabilities():
    space = SequenceSpace(2, 4)
    logp = torch.log_softmax(TabularPolicy(space, scale=1.5, seed=3)().detach(), -1)
    p = space.prefix_probs(logp)[1]
    n = 200_000
    codes = space.sample(logp, n, torch.Generator().manual_seed(0))
    freq = torch.bincount(codes, minlength=space.N).to(D) / n
    assert torch.all((freq - p).abs() <= 5 * (p * (1 - p) / n).sqrt() + 1e-12)


def test_too_large_or_bad_spaces_raise_clear_errors():
    with pytest.raises(ConfigError, match="max_sequences"):
        SequenceSpace(2, 30)
    with pytest.raises(ConfigError, match="vocab_size"):
        SequenceSpace(1, 3)
    with pytest.raises(ConfigError, match="hidden"):
        NetworkPolicy(SequenceSpace(2, 3), hidden=-1)
    with pytest.raises(ConfigError, match="reward"):
        make_reward(SequenceSpace(2, 3), "nope")


def test_same_seed_same_policy_and_mismatch():
    a, b = problem(NetworkPolicy, mechanism="noise", hidden=3), problem(NetworkPolicy, mechanism="noise", hidden=3)
    assert torch.equal(a.mu_logp, b.mu_logp) and torch.equal(a.grad, b.grad)


# ---------------------------------------------------------------- exact quantities ----

@pytest.mark.parametrize("policy_cls,kw", [(TabularPolicy, {}), (NetworkPolicy, {"hidden": 5})])
def test_exact_gradient_matches_finite_differences(policy_cls, kw):
    space = SequenceSpace(2, 5)
    policy = policy_cls(space, seed=2, **kw)
    R = make_reward(space, "random")
    g = exact_gradient(space, policy, R)
    theta = flat_params(policy)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        v = torch.randn(theta.shape, generator=gen, dtype=D)
        h = 1e-5
        set_flat_params(policy, theta + h * v)
        plus = objective(space, policy, R).item()
        set_flat_params(policy, theta - h * v)
        minus = objective(space, policy, R).item()
        set_flat_params(policy, theta)
        assert abs((plus - minus) / (2 * h) - float(g @ v)) < 1e-8


def test_score_function_identity_on_policy_mean_is_grad_J():
    for policy_cls in (TabularPolicy, NetworkPolicy):
        pr = problem(policy_cls)
        m = exact_moments(pr, Estimator("on_policy"))
        assert m.bias_norm < 1e-13 * max(1.0, float(pr.grad.norm()))


def test_kl_chain_rule_both_directions():
    for mech in ("shift", "noise", "temperature", "sparse"):
        pr = problem(NetworkPolicy, V=3, T=4, mechanism=mech, size=0.7 if mech != "temperature" else 1.4,
                     hidden=4)
        d = pr.div
        assert abs(d.kl_seq_mu_pi - float((d.d_mu * d.kl_mu_pi).sum())) < 1e-12
        assert abs(d.kl_seq_pi_mu - float((d.d_pi * d.kl_pi_mu).sum())) < 1e-12


def test_sequence_chi2_is_a_product_for_state_independent_policies():
    space = SequenceSpace(3, 5)
    policy = TabularPolicy(space)
    with torch.no_grad():                                 # the same logits in every context
        policy.logits.copy_(torch.tensor([0.3, -0.5, 1.0], dtype=D).expand(space.n_contexts, 3))
    mu = behaviour_logits(space, policy, "shift", 0.6)
    div = ExactProblem(space, policy, mu, make_reward(space, "mean")).div
    per_token = float(div.chi2[0])
    assert abs((1 + div.chi2_seq) - (1 + per_token) ** space.T) < 1e-12
    # state-dependent: bounded by the worst context
    pr = problem(TabularPolicy, V=3, T=5, mechanism="noise", size=0.5)
    assert 1 + pr.div.chi2_seq <= (1 + pr.div.chi2_max) ** 5 * (1 + 1e-12)


def test_divergence_facts_on_categoricals():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        lp = torch.log_softmax(2 * torch.randn(7, generator=g, dtype=D), -1)
        lq = torch.log_softmax(2 * torch.randn(7, generator=g, dtype=D), -1)
        assert tv(lp, lq) <= math.sqrt(chi2(lp, lq) / 2) + 1e-15       # TV <= sqrt(chi^2 / 2)
        assert tv(lp, lq) <= math.sqrt(kl(lp, lq) / 2) + 1e-15         # Pinsker
    # small TV, chi^2 of order 1: mass 1e-3 under pi on an outcome mu gives 1e-6
    p = torch.tensor([1 - 1e-3, 1e-3], dtype=D).log()
    q = torch.tensor([1 - 1e-6, 1e-6], dtype=D).log()
    assert float(tv(p, q)) < 1e-3 and 0.99 < float(chi2(p, q)) < 1.0
    # support mismatch: KL(pi||mu) and chi^2 are infinite, TV is not
    q0 = torch.tensor([1.0, 0.0], dtype=D).log()
    assert math.isinf(float(chi2(p, q0))) and math.isinf(float(kl(p, q0)))
    assert abs(float(tv(p, q0)) - 1e-3) < 1e-15


def test_simulation_lemma_chain():
    for mech in MECHANISMS:
        size = {"shift": 0.5, "noise": 0.6, "bfloat16": 40.0, "float16": 400.0, "temperature": 0.6,
                "top_k": 2, "top_p": 0.8, "stale": 2.0, "sparse": 5.0}[mech]
        pr = problem(NetworkPolicy, V=3, T=5, mechanism=mech, size=size, hidden=4)
        s = simulation_lemma(pr)
        assert s["tv_seq"] <= s["sum_expected_tv"] + 1e-12 <= s["T_delta_max"] + 2e-12
        assert torch.all(s["visitation_tv"] <= s["visitation_bound"] + 1e-12)


def test_every_mismatch_mechanism_produces_a_valid_behaviour():
    for mech in MECHANISMS:
        size = {"top_k": 1, "top_p": 0.7, "temperature": 0.5, "bfloat16": 40.0, "float16": 400.0}.get(mech, 1.0)
        pr = problem(TabularPolicy, V=3, T=4, mechanism=mech, size=size)
        assert abs(float(pr.p_mu.sum()) - 1) < 1e-12
        assert pr.div.delta_max > 0, mech                          # every mechanism creates a gap
    with pytest.raises(ConfigError, match="mechanism"):
        problem(mechanism="vllm")
    with pytest.raises(ConfigError, match="top_k"):
        problem(mechanism="top_k", size=0)


def test_truncation_rules_match_the_rollout_engine():
    from rl_lab.config import SamplingConfig
    from rl_lab.engines.rollout import process_logits
    from rl_lab.exact.mismatch import top_k, top_p
    g = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(64, 11, generator=g)).to(D)
    for cfg, ours in ((SamplingConfig(top_k=3), top_k(logits, 3)), (SamplingConfig(top_p=0.8), top_p(logits, 0.8))):
        theirs = process_logits(logits.float(), cfg)
        assert torch.equal(torch.isinf(theirs), torch.isinf(ours))


# ---------------------------------------------------------------- estimators ------------

def test_estimator_weights_by_hand():
    log_rho = torch.tensor([[math.log(3.0), math.log(0.5)]], dtype=D)      # rho_t = 3, 0.5; rho = 1.5
    w = {n: estimator_weights(Estimator(n, C=2.0), log_rho)[0].tolist() for n in ESTIMATORS}
    close = lambda a, b: all(abs(x - y) < 1e-12 for x, y in zip(a, b))    # noqa: E731
    assert close(w["naive"], [1, 1]) and close(w["token_is"], [3, 0.5])
    assert close(w["token_tis"], [2, 0.5]) and close(w["token_mis"], [0, 0.5])
    assert close(w["seq_is"], [1.5, 1.5]) and close(w["seq_tis"], [1.5, 1.5])
    assert close(w["seq_mis"], [1.5, 1.5])
    assert close(w["geo_mask"], [1, 1])                                    # sqrt(1.5) in [1/2, 2]
    assert close(estimator_weights(Estimator("seq_tis", C=1.2), log_rho)[0].tolist(), [1.2, 1.2])
    assert close(estimator_weights(Estimator("seq_mis", C=1.2), log_rho)[0].tolist(), [0, 0])
    assert close(estimator_weights(Estimator("geo_mask", C=1.2), log_rho)[0].tolist(), [0, 0])
    with pytest.raises(ConfigError, match="Estimator.name"):
        Estimator("ppo")
    with pytest.raises(ConfigError, match="C_low"):
        Estimator("seq_mis", C=2.0, C_low=3.0)


def test_weights_follow_the_corrections_conventions():
    """Same weights and masks as rl_lab.corrections (verl semantics) wherever the log-ratio clamp
    is inactive: TIS, IcePop bands (MIS), Geo-Mask, and sequence-MIS as sequence IS times verl's
    seq_sum_k1 rejection (whose k1 bounds -log rho: kept ratios [1/hi, 1/lo])."""
    from rl_lab.corrections import geometric_mask, importance_weights, rejection_mask
    g = torch.Generator().manual_seed(0)
    lr = 0.4 * torch.randn(8, 6, generator=g, dtype=D)
    mask = torch.ones(8, 6, dtype=D)
    cases = [("token", 1.5, Estimator("token_tis", C=1.5)), ("sequence", 1.5, Estimator("seq_tis", C=1.5)),
             ("token", "0.8_1.3", Estimator("token_mis", C=1.3, C_low=0.8)),
             ("sequence", "0.5_1.5", Estimator("seq_mis", C=1.5, C_low=0.5))]
    for level, threshold, est in cases:
        theirs = importance_weights(lr, mask, level=level, threshold=threshold)[0]
        ours = estimator_weights(est, lr).expand_as(theirs)
        assert torch.allclose(ours, theirs, rtol=1e-12), est.label
        # the cases bite: some weights are truncated or zeroed, some pass unchanged
        raw = lr.exp() if level == "token" else lr.sum(-1, keepdim=True).exp().expand_as(lr)
        assert (ours != raw).any() and (ours == raw).any(), est.label
    keep = geometric_mask(lr, mask, 0.9, 1.1)
    ours = estimator_weights(Estimator("geo_mask", C=1.1, C_low=0.9), lr).expand_as(keep)
    assert torch.equal(ours, keep) and 0 < int(keep[:, 0].sum()) < len(keep)
    rs = rejection_mask(lr, mask, "seq_sum_k1", f"{1 / 1.5!r}_2")[0]               # ratios in [0.5, 1.5]
    seq_is = importance_weights(lr, mask, level="sequence", threshold=1e9)[0]
    mis = estimator_weights(Estimator("seq_mis", C=1.5, C_low=0.5), lr).expand_as(lr)
    assert torch.allclose(seq_is * rs, mis, rtol=1e-12) and 0 < int(rs[:, 0].sum()) < len(rs)


@pytest.mark.parametrize("mechanism,size", [("shift", 0.5), ("noise", 0.8), ("stale", 2.0),
                                            ("sparse", 6.0), ("bfloat16", 60.0)])
def test_sequence_is_is_unbiased_to_machine_precision(mechanism, size):
    for policy_cls in (TabularPolicy, NetworkPolicy):
        pr = problem(policy_cls, V=2, T=7, mechanism=mechanism, size=size, reward="majority")
        m = exact_moments(pr, Estimator("seq_is"))
        assert m.bias_norm < 1e-13 * max(1.0, float(pr.grad.norm()))
        assert exact_moments(pr, Estimator("naive")).bias_norm > 1e-6          # the gap is real


def test_sequence_is_under_truncation_misses_exactly_the_uncovered_mass():
    pr = problem(TabularPolicy, V=3, T=4, mechanism="top_k", size=2)
    assert float(pr.p_pi[pr.p_mu == 0].sum()) > 0
    m = exact_moments(pr, Estimator("seq_is"))
    uncovered = torch.where(pr.p_mu == 0, pr.p_pi * pr.reward, torch.zeros_like(pr.p_pi))
    expected_bias = -pr.expected_gradient(uncovered[:, None].expand(-1, pr.space.T))
    assert torch.allclose(m.bias, expected_bias, atol=1e-14)


def test_sequence_mis_bias_identity():
    pr = problem(NetworkPolicy, V=2, T=7, mechanism="noise", size=1.0, hidden=4)
    rho = pr.p_pi / pr.p_mu
    C = float(rho.quantile(0.8))                                            # reject ~20% of sequences
    m = exact_moments(pr, Estimator("seq_mis", C=C))
    rejected = torch.where(rho > C, pr.p_pi * pr.reward, torch.zeros_like(rho))
    assert torch.allclose(m.bias, -pr.expected_gradient(rejected[:, None].expand(-1, 7)), atol=1e-13)
    assert m.bias_norm > 1e-4


def test_which_estimators_a_constant_baseline_leaves_unchanged():
    pr = problem(TabularPolicy, V=2, T=6, mechanism="shift", size=0.6)
    b = float((pr.p_mu * pr.reward).sum())
    for name in ("on_policy", "token_is", "seq_is"):   # E[w * score] = 0 for these weights
        m0, mb = exact_moments(pr, Estimator(name)), exact_moments(pr, Estimator(name, baseline=b))
        assert torch.allclose(m0.mean, mb.mean, atol=1e-13)
    for name in ("naive", "seq_tis"):                  # but not for these
        est = Estimator(name, C=1.1)
        m0, mb = exact_moments(pr, est), exact_moments(pr, Estimator(name, C=1.1, baseline=b))
        assert (m0.mean - mb.mean).norm() > 1e-4


def test_large_threshold_limits():
    pr = problem(TabularPolicy, V=2, T=6, mechanism="noise", size=1.0)
    pairs = [("token_tis", "token_is"), ("token_mis", "token_is"), ("seq_tis", "seq_is"),
             ("seq_mis", "seq_is"), ("geo_mask", "naive")]
    for a, b in pairs:
        ma, mb = exact_moments(pr, Estimator(a, C=1e9)), exact_moments(pr, Estimator(b))
        assert torch.allclose(ma.mean, mb.mean, atol=1e-13) and abs(ma.var - mb.var) < 1e-9


@pytest.mark.parametrize("policy_cls", [TabularPolicy, NetworkPolicy])
def test_tree_sums_equal_the_literal_per_sequence_definition(policy_cls):
    """exact_moments (O(N) tree passes, the tabular orthogonality shortcut) against the literal
    sum over sequences of p(y) g_hat(y) and p(y) ||g_hat(y)||^2 built from estimator_weights."""
    pr = problem(policy_cls, V=3, T=4, mechanism="top_p", size=0.8,
                 **({"hidden": 3} if policy_cls is NetworkPolicy else {}))
    assert not bool((pr.p_mu > 0).all())                      # includes sequences mu cannot produce
    scores = score_table(pr.policy)
    for est in standard_estimators(C=1.5, baseline=0.2):
        m = exact_moments(pr, est)
        coef = pr.coefficients(est)
        p, _ = pr.sampler(est)
        literal_mean = pr.expected_gradient(p[:, None] * coef)
        literal_second = sum(float((p[k] * g.square().sum(-1)).sum()) for k, g in
                             per_sequence_vectors(pr.space, scores, coef, chunk=20))
        assert torch.allclose(m.mean, literal_mean, atol=1e-13), est.label
        assert abs(m.second_moment - literal_second) < 1e-11 * max(1.0, literal_second), est.label


def test_path_and_subtree_sums_are_adjoint():
    space = SequenceSpace(3, 4)
    g = torch.Generator().manual_seed(2)
    tab = torch.randn(space.n_contexts, 3, 2, generator=g, dtype=D)
    vals = torch.randn(space.N, 2, generator=g, dtype=D)
    assert torch.allclose(space.path_sum(tab[..., 0]), space.per_token(tab[..., 0]).sum(1))
    assert abs(float((space.path_sum(tab) * vals).sum() - (tab * space.subtree_sum(vals)).sum())) < 1e-10


def test_monte_carlo_on_given_samples_is_the_exact_formula_with_empirical_weights():
    pr = problem(NetworkPolicy, V=2, T=5, mechanism="noise", size=0.7, hidden=3)
    codes = pr.space.sample(pr.mu_logp, 300, torch.Generator().manual_seed(0))
    counts = torch.bincount(codes, minlength=pr.space.N).to(D) / len(codes)
    for est in standard_estimators(C=1.3, baseline=0.2):
        if est.samples_from == "pi":
            continue
        mc = monte_carlo(pr, est, len(codes), codes=codes)
        exact_on_sample = pr.expected_gradient(counts[:, None] * pr.coefficients(est))
        assert torch.allclose(mc, exact_on_sample, atol=1e-12)


@pytest.mark.parametrize("name", ["on_policy", "token_tis", "seq_is", "geo_mask"])
def test_monte_carlo_converges_to_the_exact_mean(name):
    pr = problem(TabularPolicy, V=2, T=5, mechanism="shift", size=0.5)
    m = exact_moments(pr, Estimator(name, C=1.2))
    B = 20_000
    mc = monte_carlo(pr, Estimator(name, C=1.2), B, torch.Generator().manual_seed(1))
    # ||mean of B - E||^2 has expectation var / B; 5 sigma in norm is generous but can fail
    assert float((mc - m.mean).norm()) < 5 * math.sqrt(m.var / B)
    assert float((mc - m.mean).norm()) > 0


@pytest.mark.parametrize("policy_cls", [TabularPolicy, NetworkPolicy])
def test_every_bound_holds(policy_cls):
    cases = [("shift", 0.8), ("noise", 1.0), ("top_k", 1), ("top_p", 0.8), ("sparse", 6.0),
             ("temperature", 0.6), ("stale", 2.0)]
    for i, (mech, size) in enumerate(cases):
        for reward in (("majority", "all") if policy_cls is TabularPolicy else (("majority", "all")[i % 2],)):
            pr = problem(policy_cls, V=3, T=4, mechanism=mech, size=size, reward=reward,
                         **({"hidden": 4} if policy_cls is NetworkPolicy else {}))
            for est in standard_estimators(C=1.5, baseline=0.3):
                m, b = exact_moments(pr, est), estimator_bounds(pr, est)
                assert m.bias_norm <= b["bias"] * (1 + 1e-9) + 1e-12, (mech, reward, est.label)
                assert m.var <= b["var"] * (1 + 1e-9) + 1e-12, (mech, reward, est.label)
                for key in ("bias_series", "var_series", "bias_chi2"):
                    if key in b:
                        assert b[key] >= b[key.split("_")[0]] - 1e-12
                if "bias_chi2" in b:                                   # chapter 3's form, no factor 2
                    assert b["bias_chi2"] <= b["bias_series"] + 1e-12


def test_truncated_and_masked_weights_have_second_moment_at_most_min_C_C2():
    # the lemma behind the K^2 min(C, C^2) variance bounds: E_mu[w^2] <= min(C, C^2)
    for mech, size in (("shift", 1.5), ("noise", 2.0), ("sparse", 8.0), ("top_k", 1)):
        pr = problem(TabularPolicy, V=3, T=4, mechanism=mech, size=size)
        for C in (0.5, 1.0, 1.5, 4.0, 30.0):
            for name in ("seq_tis", "seq_mis", "token_tis", "token_mis"):
                w = estimator_weights(Estimator(name, C=C), pr.lp_pi - pr.lp_mu)     # (N, T)
                second = (pr.p_mu[:, None] * w.square()).sum(0)                       # E_mu[w_t^2] per t
                assert (second <= min(C, C ** 2) * (1 + 1e-12)).all(), (mech, C, name)


# ---------------------------------------------------------------- SGA lemma -------------

def test_sga_lemma_is_an_identity_for_the_quadratic():
    pr = problem(TabularPolicy, V=2, T=4, mechanism="shift", size=0.7)
    L, eta = 3.0, 0.2
    for est in standard_estimators(C=1.2):
        m = exact_moments(pr, est)
        p, _ = pr.sampler(est)
        G = per_sequence_estimates(pr, est)                                   # (N, P)
        step = eta * G
        quad = step @ pr.grad - (L / 2) * step.square().sum(-1)              # J_q(theta+step) - J_q(theta)
        for B in (1, 4):
            exact = float((p * quad).sum()) if B == 1 else None
            if B == 1:
                assert abs(exact - sga_terms(m, L, eta)["bound"]) < 1e-12
        # batch B: E||mean of B||^2 = ||m||^2 + var / B
        t4 = sga_terms(m, L, eta, batch_size=4)
        direct = eta * float(pr.grad @ m.mean) - L * eta ** 2 / 2 * (float(m.mean @ m.mean) + m.var / 4)
        assert abs(t4["bound"] - direct) < 1e-12


def test_sga_bound_lower_bounds_the_exact_progress_for_small_steps():
    pr = problem(TabularPolicy, V=2, T=4, mechanism="shift", size=0.7, reward="majority")
    L = smoothness(pr)
    assert L > 0
    for est in (Estimator("on_policy"), Estimator("naive"), Estimator("seq_is")):
        m = exact_moments(pr, est)
        eta_star, bound_star = best_step(m, L)
        for eta in (0.25 * eta_star, eta_star):
            exact, _ = expected_progress(pr, est, eta)
            assert exact >= sga_terms(m, L, eta)["bound"] - 1e-12
    # a batch of 8 sampled exactly in J: Monte-Carlo mean within 4 standard errors of a positive value
    mean, se = expected_progress(pr, Estimator("on_policy"), 0.5, batch_size=8, n_batches=400)
    assert mean > 0 and se > 0


def test_bias_against_the_gradient_gives_no_safe_step():
    pr = problem(TabularPolicy, V=2, T=4, mechanism="shift", size=0.5)
    m = exact_moments(pr, Estimator("on_policy"))
    m.mean = -m.mean                                           # an estimator pointing downhill
    m.bias = m.mean - pr.grad
    assert best_step(m, L=1.0) == (0.0, 0.0)
    assert all(sga_terms(m, 1.0, eta)["bound"] < 0 for eta in (1e-4, 1e-2, 1.0))


# ---------------------------------------------------------------- analysis helpers ------

def test_sga_efficiency_ignores_scale_and_matches_best_step():
    from rl_lab.exact import Moments, sga_efficiency
    pr = problem(TabularPolicy, V=2, T=5, mechanism="noise", size=0.7)
    m = exact_moments(pr, Estimator("token_tis", C=1.5))
    L = 2.0
    _, bound = best_step(m, L, batch_size=8)
    assert abs(sga_efficiency(m, 8) - 2 * L * bound / m.grad_norm ** 2) < 1e-12
    scaled = Moments(m.estimator, 0.1 * m.mean, 0.1 * m.mean - pr.grad, 0.01 * m.second_moment, m.grad_norm)
    assert abs(sga_efficiency(scaled, 8) - sga_efficiency(m, 8)) < 1e-12
    assert scaled.mse(8) != m.mse(8)                               # the MSE does depend on scale
    assert abs(sga_efficiency(exact_moments(pr, Estimator("on_policy")), 1)
               - m.grad_norm ** 2 / (m.grad_norm ** 2 + exact_moments(pr, Estimator("on_policy")).var)) < 1e-12


def test_analysis_helpers():
    from rl_lab.exact import (
    bound_optimal_threshold,
    estimator_table,
    expected_ascent,
    feedback_policy,
    loglog_slope,
    mc_errors,
    seq_tis_mse_bound,
    threshold_sweep,
    )
    assert abs(loglog_slope([1, 2, 4, 8], [3, 12, 48, 192]) - 2) < 1e-12
    assert abs(bound_optimal_threshold(1.0, series=True) - 2.0) < 1e-12      # Part 2: sqrt(2 (1 + chi2))
    for chi2_seq, B in ((0.3, 1), (4.0, 64), (50.0, 1024)):                    # C* minimises its bound
        for series in (False, True):
            c = bound_optimal_threshold(chi2_seq, B, series=series)
            grid = np.geomspace(1.0, 1e4, 4001)
            best = grid[np.argmin([seq_tis_mse_bound(x, chi2_seq, B, series=series) for x in grid])]
            assert abs(best / c - 1) < 0.01, (chi2_seq, B, series)
    # the derived form grows like B^(1/3) (1 + chi2)^(2/3), the series' like B^(1/4) (1 + chi2)^(1/2)
    assert abs(bound_optimal_threshold(7.0, 8) / bound_optimal_threshold(7.0, 1) - 2.0) < 1e-12
    assert abs(bound_optimal_threshold(7.0, 1) / bound_optimal_threshold(0.0, 1) - 4.0) < 1e-12
    pr = problem(TabularPolicy, V=2, T=5, mechanism="noise", size=0.8)
    table = estimator_table(pr, standard_estimators(C=1.5), batch_size=16)
    assert list(table.index)[0] == "on-policy" and (table["bias"] <= table["bias bound"] + 1e-12).all()
    sweep = threshold_sweep(pr, "seq_tis", [0.5, 1, 2, 4, 1e9], batch_size=16)
    assert (sweep["second_moment"].diff().dropna() >= -1e-12).all()      # E||g||^2 grows with C
    assert sweep["bias2"].iloc[-1] < 1e-25                                  # C -> inf: sequence IS
    space = SequenceSpace(2, 5)
    R = make_reward(space, "mean")
    policy = feedback_policy(space, 0.0, 1.0)
    theta = flat_params(policy)
    on = expected_ascent(space, policy, R, "shift", -1.0, Estimator("on_policy"), 0.5, 6)
    assert torch.equal(flat_params(policy), theta) and len(on) == 7
    assert all(b > a for a, b in zip(on, on[1:]))                          # small exact steps climb
    again = expected_ascent(space, policy, R, "shift", -1.0, Estimator("on_policy"), 0.5, 6, restore=False)
    assert again == on and abs(objective(space, policy, R).item() - on[-1]) < 1e-12
    set_flat_params(policy, theta)
    errs = mc_errors(pr, Estimator("seq_tis", C=1.5), [64, 1024], repeats=10)
    assert ((errs["mse_to_mean"] / errs["var/B"]).between(0.2, 5)).all()


def test_feedback_policy_is_the_same_rule_at_every_horizon():
    from rl_lab.exact import feedback_policy
    for T in (3, 6):
        space = SequenceSpace(2, T)
        logits = feedback_policy(space, bias=0.3, feedback=2.0)().detach()
        skew = logits[:, 1] - logits[:, 0]
        assert abs(float(skew[0]) - (0.3 - 1.0)) < 1e-12                    # empty prefix: frequency 0
        ctx = space.offsets[2] + 3                                           # prefix (1, 1)
        assert abs(float(skew[ctx]) - (0.3 + 2.0 * 0.5)) < 1e-12


# ------------------------------------------ combined estimators (Part 3, issue 16) ------

@pytest.mark.parametrize("policy_cls", [TabularPolicy, NetworkPolicy])
def test_combined_estimators_tree_sums_equal_the_literal_sums(policy_cls):
    """Geo-Mask-Token-TIS and Geo-RS-Seq-TIS: the exact mean and second moment (tree sums with
    the gate) equal sum_y mu(y) g_hat(y) and sum_y mu(y) ||g_hat(y)||^2 from estimator_weights."""
    from rl_lab.exact import COMBINED
    pr = problem(policy_cls, V=3, T=4, mechanism="noise", size=0.6, reward="random")
    for name in COMBINED:
        for geo in (1.05, 1.3):
            est = Estimator(name, C=1.5, baseline=0.2, geo=geo)
            m = exact_moments(pr, est)
            mean = torch.zeros_like(m.mean)
            second = 0.0
            for k, v in per_sequence_vectors(pr.space, pr.scores, pr.coefficients(est)):
                mean += (pr.p_mu[k, None] * v).sum(0)
                second += float((pr.p_mu[k] * v.square().sum(-1)).sum())
            assert torch.allclose(m.mean, mean, atol=1e-12, rtol=0)
            assert abs(m.second_moment - second) < 1e-12
            b = estimator_bounds(pr, est)
            assert m.bias_norm <= b["bias"] * (1 + 1e-9) and m.var <= b["var"] * (1 + 1e-9)


def test_combined_estimators_reduce_to_their_parents_and_never_add_second_moment():
    """A band wide enough to keep every sequence gives the parent's mean exactly; a gate only
    removes samples, so the second moment never exceeds the parent's; a band that keeps nothing
    gives a zero mean."""
    pr = problem(TabularPolicy, V=2, T=6, mechanism="noise", size=0.8, reward="majority")
    for name, parent in (("geo_token_tis", "token_tis"), ("geo_seq_tis", "seq_tis")):
        p = exact_moments(pr, Estimator(parent, C=2.0))
        wide = exact_moments(pr, Estimator(name, C=2.0, geo=1e6))
        assert torch.allclose(wide.mean, p.mean, atol=1e-14, rtol=0)
        for geo in (1.01, 1.1, 1.5):
            g = exact_moments(pr, Estimator(name, C=2.0, geo=geo))
            assert g.second_moment <= p.second_moment * (1 + 1e-12)
        none = exact_moments(pr, Estimator(name, C=2.0, geo=1.0 + 1e-12))
        assert float(none.mean.abs().max()) < 1e-14 or pr.div.chi2_max == 0
    with pytest.raises(ConfigError):
        Estimator("geo_token_tis", C=2.0)                      # the gate needs its band
    with pytest.raises(ConfigError):
        Estimator("token_tis", C=2.0, geo=1.1)
