import pytest
import torch

from rl_lab.algos.grpo import aggregate_loss, group_advantages, kl_k3, policy_loss


def test_grpo_advantages_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])   # two groups of 3
    g = torch.tensor([0, 0, 0, 1, 1, 1])
    adv = group_advantages(r, g, scale_rewards="none")
    assert torch.allclose(adv, torch.tensor([2 / 3, -1 / 3, -1 / 3, 0, 0, 0]))
    adv = group_advantages(r, g, scale_rewards="group")
    std = torch.tensor([1.0, 0.0, 0.0]).std()          # unbiased, as TRL and verl
    assert torch.allclose(adv[:3], torch.tensor([2 / 3, -1 / 3, -1 / 3]) / (std + 1e-4))
    assert torch.equal(adv[3:], torch.zeros(3))         # no spread, no signal


def test_batch_scaling_and_rloo():
    r = torch.tensor([1.0, 0.0, 3.0, 1.0])
    g = torch.tensor([0, 0, 1, 1])
    centred = torch.tensor([0.5, -0.5, 1.0, -1.0])
    assert torch.allclose(group_advantages(r, g, scale_rewards="batch"), centred / (centred.std() + 1e-4))
    # leave-one-out: r_i - mean of the others
    assert torch.allclose(group_advantages(r, g, estimator="rloo"), torch.tensor([1.0, -1.0, 2.0, -2.0]))


def test_invalid_rows_are_left_out_of_the_statistics():
    r = torch.tensor([1.0, 0.0, float("nan"), 5.0])
    g = torch.tensor([0, 0, 0, 0])
    valid = torch.tensor([True, True, False, False])
    adv = group_advantages(r, g, valid, scale_rewards="none")
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, 0.0, 0.0]))
    lonely = group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), torch.tensor([True, False]))
    assert torch.equal(lonely, torch.zeros(2))          # one valid member: no baseline, no signal


def test_aggregation_modes_by_hand():
    L = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])   # last row empty
    assert aggregate_loss(L, m, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate_loss(L, m, "token-sum").item() == pytest.approx(10)
    assert aggregate_loss(L, m, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate_loss(L, m, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate_loss(L, m, "seq-mean-token-sum-norm").item() == pytest.approx(10 / (2 * 3))
    assert aggregate_loss(L, m, "seq-mean-token-sum-norm", norm_length=5).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        aggregate_loss(L, m, "mean")


def test_on_policy_ppo_and_reinforce_have_the_same_gradient():
    torch.manual_seed(0)
    theta = torch.randn(4, 5, requires_grad=True)
    adv = torch.tensor([1.0, -0.5, 2.0, 0.0])
    mask = torch.ones(4, 5)
    grads = []
    for loss in ("reinforce", "ppo_clip"):
        logp = torch.log_softmax(theta, -1)
        per_tok, _ = policy_loss(logp, logp.detach(), adv, mask, loss)
        g, = torch.autograd.grad(aggregate_loss(per_tok, mask), theta)
        grads.append(g)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_ppo_clip_stops_the_gradient_outside_the_trust_region():
    logp = torch.tensor([[0.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-1.0, 0.0]])                   # token 0: ratio e > 1 + eps
    per_tok, info = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), "ppo_clip", 0.2)
    g, = torch.autograd.grad(per_tok.sum(), logp)
    assert g[0, 0] == 0 and g[0, 1] != 0
    assert info["clip_ratio/region_mean"] == 0.5


def test_is_weights_scale_each_token():
    logp = torch.zeros(1, 2, requires_grad=True)
    w = torch.tensor([[2.0, 0.5]])
    per_tok, _ = policy_loss(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2), "reinforce",
                             is_weights=w)
    g, = torch.autograd.grad(per_tok.sum(), logp)
    assert torch.allclose(g, -w)


def test_k3_is_nonnegative_and_zero_on_policy():
    lp = torch.log_softmax(torch.randn(3, 4), -1)
    assert torch.all(kl_k3(lp, lp) == 0)
    assert torch.all(kl_k3(lp, lp + torch.randn(3, 4)) >= 0)
