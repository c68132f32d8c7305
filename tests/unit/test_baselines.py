"""rl_lab.exact.baselines: the logit-gradient identity, exact baseline variances, group estimators."""
import pytest
import torch

from rl_lab.exact import (
    BASELINES,
    NetworkPolicy,
    SequenceSpace,
    TabularPolicy,
    baseline_values,
    estimator_variance,
    exact_gradient,
    group_estimator_mse,
    log_probs,
    logit_grad_sqnorm,
    make_reward,
    per_token_proxy,
    per_token_scores,
    score_sqnorm,
    sequence_probs,
    variance_table,
)


def test_logit_grad_sqnorm_matches_autograd():
    g = torch.Generator().manual_seed(0)
    z = (3 * torch.randn(50, 7, generator=g, dtype=torch.float64)).requires_grad_()
    y = torch.randint(0, 7, (50,), generator=g)
    lp = torch.log_softmax(z, -1).gather(-1, y[:, None]).sum()
    (grad,) = torch.autograd.grad(lp, z)                         # row i: e_y - pi
    torch.testing.assert_close(logit_grad_sqnorm(z.detach(), y), grad.pow(2).sum(-1), rtol=0, atol=1e-12)
    assert torch.allclose(grad.sum(-1), torch.zeros(50, dtype=torch.float64), atol=1e-12)


def test_logit_grad_sqnorm_regimes_and_large_logits():
    z = torch.zeros(7, dtype=torch.float64)
    assert logit_grad_sqnorm(z, torch.tensor(0)).item() == pytest.approx(1 - 1 / 7)
    peaked = torch.tensor([1e4, 0.0, -1e4], dtype=torch.float64)
    assert logit_grad_sqnorm(peaked, torch.tensor(0)).item() == pytest.approx(0.0, abs=1e-12)
    assert logit_grad_sqnorm(peaked, torch.tensor(1)).item() == pytest.approx(2.0)


def test_proxy_is_exact_for_tabular_policy():
    space = SequenceSpace(3, 3)
    policy = TabularPolicy(space, scale=2.0, seed=1)
    w = per_token_proxy(space, policy)                              # (N, T)
    torch.testing.assert_close(w, space.per_token(score_sqnorm(policy)))
    torch.testing.assert_close(w, per_token_scores(space, policy).pow(2).sum(-1))


@pytest.mark.parametrize("make_policy", [lambda s: NetworkPolicy(s, scale=3.0, seed=0),
                                         lambda s: TabularPolicy(s, seed=2)])
def test_exact_variances_unbiased_and_oracle_is_smallest(make_policy):
    space = SequenceSpace(3, 4)
    policy = make_policy(space)
    reward = make_reward(space, "majority")
    s = per_token_scores(space, policy)
    p = sequence_probs(space, log_probs(policy)).detach()
    grad_j = exact_gradient(space, policy, reward)
    values = baseline_values(space, policy, reward, scores=s)
    for b in values.values():                                       # every constant b_t: unbiased
        g = torch.einsum("ntp,nt->np", s, reward[:, None] - b[None, :])
        torch.testing.assert_close((p[:, None] * g).sum(0), grad_j, rtol=0, atol=1e-10)
    table = variance_table(space, policy, reward)
    assert set(table) == set(BASELINES)
    assert all(table["oracle"] <= v + 1e-12 for v in table.values())
    assert table["mean"] < table["none"]
    # the oracle is a minimum: perturbing it raises the variance
    worse = estimator_variance(space, policy, reward, values["oracle"] + 0.05, scores=s)
    assert worse > table["oracle"]


def test_single_position_all_weighted_baselines_agree():
    space = SequenceSpace(4, 1)
    policy = NetworkPolicy(space, scale=2.0, seed=3)
    v = baseline_values(space, policy, make_reward(space, "last"))
    for name in ("OTB (proxy)", "OTB (exact)", "oracle"):
        torch.testing.assert_close(v[name], v["optimal scalar"])


def test_group_estimator_otb_beats_group_mean_on_peaked_policy():
    space = SequenceSpace(3, 2)
    policy = NetworkPolicy(space, scale=3.0, seed=0)
    reward = make_reward(space, "majority")
    grpo = group_estimator_mse(space, policy, reward, 4, 3000, "grpo", seed=0)
    otb = group_estimator_mse(space, policy, reward, 4, 3000, "otb", seed=0)
    assert otb < 0.85 * grpo


def test_group_estimator_rejects_bad_inputs():
    space = SequenceSpace(2, 2)
    policy = NetworkPolicy(space)
    reward = make_reward(space)
    with pytest.raises(ValueError, match="advantage"):
        group_estimator_mse(space, policy, reward, 4, 10, "rloo")
    with pytest.raises(ValueError, match="group_size"):
        group_estimator_mse(space, policy, reward, 1, 10)
