"""Dynamic Vocabulary Pruning (rl_lab.toolkits.pruning): the (1 - p) bound, the safe set, the price of pruning."""
import math

import numpy as np
import pytest
import torch

from rl_lab.engines.vocabulary import safe_vocabulary
from rl_lab.exact import NetworkPolicy, SequenceSpace, make_reward
from rl_lab.toolkits.pruning import (
    adversarial_logit_perturbation,
    binned_gap,
    centred_logit_gap,
    excluded_mass,
    logprob_shift_bound,
    pruned_divergences,
    pruned_log_softmax,
    pruning_bias_check,
)


def _shift(z, z_new, a):
    return (torch.log_softmax(z_new, -1) - torch.log_softmax(z, -1)).gather(-1, a[:, None]).squeeze(-1)


def test_bound_by_hand_and_first_order():
    assert logprob_shift_bound(1.0, 0.3).item() == 0.0                      # the mode of a point mass
    assert logprob_shift_bound(0.0, 0.1).item() == pytest.approx(0.2)      # the far tail: 2 eps
    assert logprob_shift_bound(0.5, 0.0).item() == 0.0
    assert logprob_shift_bound(0.25, 0.1).item() == pytest.approx(math.log(1 + 0.75 * (math.exp(0.2) - 1)))
    p = torch.linspace(0, 1, 11, dtype=torch.float64)
    b = logprob_shift_bound(p, 1e-4)
    torch.testing.assert_close(b, 2e-4 * (1 - p), rtol=1e-3, atol=1e-12)   # ~ 2 eps (1 - p)
    assert (torch.diff(b) < 0).all()                                        # shrinks as p grows
    assert (logprob_shift_bound(p, 0.3) >= 0.6 * (1 - p) - 1e-15).all()     # concavity: >= 2 eps (1 - p)
    with pytest.raises(ValueError, match="probability"):
        logprob_shift_bound(1.5, 0.1)
    with pytest.raises(ValueError, match="eps"):
        logprob_shift_bound(0.5, -0.1)


def test_bound_holds_for_random_perturbations_and_is_attained():
    g = torch.Generator().manual_seed(0)
    n, V, eps = 300, 200, 0.07
    z = 4 * torch.randn(n, V, generator=g, dtype=torch.float64)
    a = torch.randint(0, V, (n,), generator=g)
    bound = logprob_shift_bound(torch.softmax(z, -1).gather(-1, a[:, None]).squeeze(-1), eps)
    for _ in range(5):
        e = eps * (2 * torch.rand(n, V, generator=g, dtype=torch.float64) - 1)
        assert (_shift(z, z + e, a).abs() <= bound + 1e-12).all()
        e = eps * torch.sign(torch.randn(n, V, generator=g, dtype=torch.float64))
        assert (_shift(z, z + e, a).abs() <= bound + 1e-12).all()
    adv = adversarial_logit_perturbation(z, a, eps)
    assert ((adv - z).abs() <= eps + 1e-15).all()
    torch.testing.assert_close(-_shift(z, adv, a), bound, rtol=1e-9, atol=1e-12)   # attained, downwards


def test_adversarial_checks_shapes():
    with pytest.raises(ValueError, match="one index per row"):
        adversarial_logit_perturbation(torch.zeros(3, 5), torch.tensor([0, 1]), 0.1)
    with pytest.raises(ValueError, match="eps"):
        adversarial_logit_perturbation(torch.zeros(3, 5), torch.tensor([0, 1, 2]), -1.0)


def test_excluded_mass_is_tv_and_pruned_log_softmax_renormalises():
    g = torch.Generator().manual_seed(1)
    z = 3 * torch.randn(50, 40, generator=g, dtype=torch.float64)
    for min_p in (0.0, 1e-3, 0.05, 0.3):
        lp = pruned_log_softmax(z, min_p)
        keep = torch.isfinite(lp)
        torch.testing.assert_close(lp.exp().sum(-1), torch.ones(50, dtype=torch.float64))
        if min_p > 0:
            assert torch.equal(keep, safe_vocabulary(z, min_p))            # the trainer's and sampler's rule
        tv = 0.5 * (lp.exp() - torch.softmax(z, -1)).abs().sum(-1)
        torch.testing.assert_close(excluded_mass(z, min_p), tv)            # TV(pruned, full) = excluded mass
    assert (excluded_mass(z, 0.3) >= excluded_mass(z, 0.05)).all()
    torch.testing.assert_close(pruned_log_softmax(z, 0.0), torch.log_softmax(z, -1))
    with pytest.raises(ValueError, match="min_p"):
        excluded_mass(z, 1.0)


def test_pruned_log_softmax_gradient_flows_only_through_kept_logits():
    z = torch.tensor([[3.0, 0.0, -6.0]], requires_grad=True)
    lp = pruned_log_softmax(z, 1e-2)                    # p(-6) / p(3) = e^-9 < 1e-2: dropped
    assert torch.isneginf(lp[0, 2])
    (grad,) = torch.autograd.grad(lp[0, 0], z)
    assert grad[0, 2] == 0 and torch.isfinite(grad).all()
    two = torch.log_softmax(z.detach()[:, :2], -1)
    torch.testing.assert_close(grad[0, :2], torch.tensor([1.0, 0.0]) - two.exp()[0])


def test_binned_gap_by_hand():
    p = [0.005, 0.05, 0.5, 0.95, 0.96]
    gap = [-0.2, 0.1, -0.05, 0.001, -0.003]
    t = binned_gap(p, gap, [0, 0.01, 0.1, 0.9, 1.0 + 1e-9])
    assert t["count"].tolist() == [1, 1, 1, 2]
    assert t["mean_abs_gap"].iloc[-1] == pytest.approx(0.002)
    assert t["mean_gap"].iloc[-1] == pytest.approx(-0.001)
    assert t["max_abs_gap"].iloc[0] == pytest.approx(0.2)
    w = binned_gap(p, gap, [0, 0.01, 0.1, 0.9, 1.0 + 1e-9], weights=[1, 1, 1, 3, 1])
    assert w["mean_gap"].iloc[-1] == pytest.approx((3 * 0.001 - 0.003) / 4)
    assert np.isnan(binned_gap(p, gap, [0, 0.001, 1.1])["mean_gap"].iloc[0])   # empty bin
    with pytest.raises(ValueError, match="one gap"):
        binned_gap(p, gap[:3], [0, 1])
    with pytest.raises(ValueError, match="increasing"):
        binned_gap(p, gap, [0.5, 0.1])


def test_centred_logit_gap_ignores_a_common_shift_and_explains_the_gap():
    g = torch.Generator().manual_seed(2)
    z = 2 * torch.randn(200, 30, generator=g, dtype=torch.float64)
    e = 0.05 * (2 * torch.rand(200, 30, generator=g, dtype=torch.float64) - 1)
    lp, lq = torch.log_softmax(z + e + 7.0, -1), torch.log_softmax(z, -1)
    eps = centred_logit_gap(lp, lq)
    assert (eps <= 0.05 + 1e-12).all() and (eps > 0.03).all()
    gap = (lp - lq).abs()                                          # every token of every context
    assert (gap <= logprob_shift_bound(lq.exp(), eps[:, None]) + 1e-12).all()
    # a -inf (pruned) entry on either side is ignored
    lp2 = lp.clone()
    lp2[:, 0] = -math.inf
    assert (centred_logit_gap(lp2, lq) <= eps + 1e-12).all()


def test_pruned_divergences_identities():
    g = torch.Generator().manual_seed(3)
    z = 3 * torch.randn(100, 20, generator=g, dtype=torch.float64)
    lpi = torch.log_softmax(z, -1)
    lmu = torch.log_softmax(z + 0.2 * torch.randn(100, 20, generator=g, dtype=torch.float64), -1)
    d0 = pruned_divergences(lmu, lpi, 0.0)
    kl = (lmu.exp() * (lmu - lpi)).sum(-1)
    torch.testing.assert_close(d0["k3"], kl)                       # E_mu[k3] = KL(mu || pi) exactly
    chi2 = (lpi.exp() ** 2 / lmu.exp()).sum(-1) - 1
    torch.testing.assert_close(d0["chi2"], chi2)
    assert (d0["outside"] == 0).all() and (d0["excluded_pi"] == 0).all()
    d = pruned_divergences(lmu, lpi, 0.1)
    assert (d["k3"] >= 0).all() and (d["outside"] >= 0).all()
    assert (d["outside"] <= d["excluded_pi"] + d["excluded_mu"] + 1e-12).all()
    assert d["max_gap"].mean() < d0["max_gap"].mean()              # the lab's claim: the worst token improves
    same = pruned_divergences(lpi, lpi, 0.1)                       # no mismatch, nothing to report
    assert same["k3"].abs().max() < 1e-12 and same["max_gap"].abs().max() < 1e-12


def test_pruning_bias_check_bound_holds_and_grows_with_excluded_mass():
    space = SequenceSpace(4, 3)
    policy = NetworkPolicy(space, scale=3.0, seed=0)
    reward = make_reward(space, "majority")
    rows = [pruning_bias_check(space, policy, reward, mp) for mp in (0.0, 1e-2, 0.1, 0.3)]
    assert rows[0]["bias"] < 1e-12 and rows[0]["M"] == 0
    for r in rows:
        assert r["bias"] <= r["bound"] + 1e-12                    # the chapter's bound
        assert r["tv_seq"] <= r["M"] + 1e-12                      # simulation lemma
    bias, M = [r["bias"] for r in rows], [r["M"] for r in rows]
    assert all(np.diff(M) > 0) and all(np.diff(bias) > 0)
    # the bias is real: pruning the tail of a peaked policy changes the gradient
    assert rows[-1]["bias"] > 1e-3
