"""rl_lab.exact.variance: Q-values, policy variance, the return-variance decomposition and the
Gini bound of "The Variance of Thought", against brute-force enumeration."""
import itertools

import pytest
import torch

from rl_lab.exact import NetworkPolicy, SequenceSpace, log_probs, make_reward, sequence_probs
from rl_lab.exact.variance import gini_bound, policy_variance, q_values


def random_problem(V=3, T=3, seed=0, scale=2.0):
    space = SequenceSpace(V, T)
    g = torch.Generator().manual_seed(seed)
    logp = torch.log_softmax(scale * torch.randn(space.n_contexts, V, generator=g, dtype=torch.float64), -1)
    return space, logp, make_reward(space, "random", seed=seed)


def test_q_values_by_brute_force():
    space, logp, reward = random_problem()
    q = q_values(space, logp, reward)
    p = sequence_probs(space, logp)
    tokens = space.tokens()
    for t in range(space.T):
        for prefix in itertools.product(range(space.V), repeat=t + 1):
            through = (tokens[:, :t + 1] == torch.tensor(prefix)).all(1)
            expected = (p[through] * reward[through]).sum() / p[through].sum()
            code = sum(a * space.V ** (t - i) for i, a in enumerate(prefix))          # code of y_<=t
            assert q[space.offsets[t] + code // space.V, code % space.V] == pytest.approx(expected.item(), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_return_variance_is_the_reach_weighted_policy_variance(seed):
    space, logp, reward = random_problem(V=3, T=4, seed=seed)
    p = sequence_probs(space, logp)
    var_r = (p * reward ** 2).sum() - (p * reward).sum() ** 2
    value, sigma2, reach = policy_variance(space, logp, reward)
    assert (reach * sigma2).sum().item() == pytest.approx(var_r.item(), rel=1e-10)
    assert value[0].item() == pytest.approx((p * reward).sum().item(), rel=1e-12)   # V(root) = J


def test_gini_bound_holds_and_is_tight_on_a_two_point_fork():
    space, logp, reward = random_problem(V=4, T=3, seed=3, scale=3.0)
    _, sigma2, _ = policy_variance(space, logp, reward)
    assert (sigma2 <= gini_bound(logp) + 1e-15).all()
    fork = SequenceSpace(2, 1)                                          # one choice, Q in {0, 1}
    logp2 = torch.log(torch.tensor([[0.3, 0.7]], dtype=torch.float64))
    _, s2, _ = policy_variance(fork, logp2, make_reward(fork, "last", token=1))
    assert s2.item() == pytest.approx(gini_bound(logp2).item()) == pytest.approx(0.21)


def test_cantelli_discovery_bound_on_every_node():
    space, logp, reward = random_problem(V=3, T=3, seed=4)
    q = q_values(space, logp, reward)
    value, sigma2, _ = policy_variance(space, logp, reward)
    p = logp.exp()
    adv = q - value[:, None]                                            # (n_contexts, V)
    for c in range(space.n_contexts):
        for a in range(space.V):
            if adv[c, a] > 0:
                tail = p[c][adv[c] >= adv[c, a]].sum()
                assert tail <= sigma2[c] / (sigma2[c] + adv[c, a] ** 2) + 1e-12


def test_a_trained_shape_policy_works_too():
    space = SequenceSpace(3, 3)
    policy = NetworkPolicy(space, hidden=8, scale=2.0, seed=0)
    logp = log_probs(policy).detach()
    reward = make_reward(space, "majority")
    _, sigma2, reach = policy_variance(space, logp, reward)
    p = sequence_probs(space, logp)
    var_r = (p * reward ** 2).sum() - (p * reward).sum() ** 2
    assert (reach * sigma2).sum().item() == pytest.approx(var_r.item(), rel=1e-10)
