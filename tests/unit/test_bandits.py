"""rl_lab.toolkits.bandits: the closed forms behind chapter 11, determinism, shapes and error messages."""
import math

import numpy as np
import pytest
import torch

from rl_lab.config import ConfigError
from rl_lab.toolkits.bandits import (
    INDICES,
    PERTURBATIONS,
    EnsemblePlusPlus,
    EnsembleSampling,
    Greedy,
    LinearBandit,
    NeuralBandit,
    QuadraticBandit,
    ThompsonSampling,
    UnitBallBandit,
    bootstrap_ratios,
    covariance_spectrum,
    ensemble_size_grid,
    matches_ts,
    regret_quantiles,
    regret_table,
    run_bandit,
    smallest_matching_M,
    unit_noise,
)
from rl_lab.toolkits.bandits.lm import make_lm_bandit, odd_digit_class
from rl_lab.toolkits.bandits.neural import NeuralEnsemblePlusPlus, symmetrised_loss

D64 = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    """These tests run thousands of tiny ops: one thread is fastest (and not slowed down by
    other processes on a shared machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _feed(agent, X, Y):
    """Give every seed of `agent` the same observations X (T, d), Y (T,)."""
    S = agent.mu.shape[0]
    for x, y in zip(X, Y):
        agent.update(x.expand(S, -1).clone(), y.expand(S).clone())


def _data(T=30, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, d, generator=g, dtype=D64), torch.randn(T, generator=g, dtype=D64)


@pytest.mark.parametrize("Agent", [Greedy, ThompsonSampling, EnsembleSampling, EnsemblePlusPlus])
def test_posterior_is_bayesian_linear_regression(Agent):
    """mu_t is ridge regression with lambda = eta^2/sigma0^2, Sigma_t the exact posterior covariance."""
    X, Y = _data()
    prior_var, eta = 2.0, 0.7
    agent = Agent(d=4, prior_var=prior_var, noise_std=eta)
    agent.reset(3, torch.Generator().manual_seed(0))
    _feed(agent, X, Y)
    precision = torch.eye(4, dtype=D64) / prior_var + X.T @ X / eta ** 2
    Sigma = torch.linalg.inv(precision)
    ridge = torch.linalg.solve(X.T @ X + eta ** 2 / prior_var * torch.eye(4, dtype=D64), X.T @ Y)
    torch.testing.assert_close(agent.Sigma, Sigma.expand(3, 4, 4), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(agent.mu, ridge.expand(3, 4), rtol=1e-9, atol=1e-12)


def test_ensemblepp_incremental_update_equals_closed_form():
    """A_t = Sigma_t (Sigma_0^{-1} A_0 + eta^{-1} sum_s x_s z_s^T), with the z's the agent drew."""
    X, Y = _data(T=25, d=5)
    prior_var, eta, M = 3.0, 0.5, 6
    agent = EnsemblePlusPlus(d=5, M=M, prior_var=prior_var, noise_std=eta)
    drawn = []
    original = agent._perturbation

    def recording(batch):
        z = original(batch)
        drawn.append(z)
        return z
    agent._perturbation = recording
    agent.reset(2, torch.Generator().manual_seed(1))
    A0 = agent.A.clone()
    _feed(agent, X, Y)
    Z = torch.stack(drawn[1:], dim=1)                                    # (S, T, M): after B
    P = A0 / prior_var + X.T @ Z / eta                                   # (S, d, M)
    torch.testing.assert_close(agent.A, agent.Sigma @ P, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("perturbation", PERTURBATIONS)
def test_ensemblepp_factor_is_unbiased(perturbation):
    """E[A_t A_t^T] = Sigma_t for data chosen independently of the perturbations (Monte Carlo
    over 5,000 batched copies; the error is 1-2%); scaling z by 2 would make it 4 Sigma_t."""
    X, Y = _data(T=20, d=4, seed=3)
    agent = EnsemblePlusPlus(d=4, M=3, prior_var=2.0, noise_std=0.5, perturbation=perturbation)
    agent.reset(5_000, torch.Generator().manual_seed(2))
    _feed(agent, X, Y)
    mean_AAt = agent.sample_covariance().mean(0)
    Sigma = agent.Sigma[0]
    rel = (torch.linalg.norm(mean_AAt - Sigma) / torch.linalg.norm(Sigma)).item()
    assert rel < 0.05, f"E[A A^T] is off Sigma_t by {rel:.3f} (relative Frobenius)"
    eig = covariance_spectrum(mean_AAt[None], Sigma[None])
    assert eig.min() > 0.85 and eig.max() < 1.15


@pytest.mark.parametrize("kind", INDICES)
def test_unit_noise_has_identity_second_moment(kind):
    xi = unit_noise(kind, (40_000,), 5, torch.Generator().manual_seed(0))
    assert xi.shape == (40_000, 5) and xi.dtype == D64
    second = xi.T @ xi / len(xi)
    torch.testing.assert_close(second, torch.eye(5, dtype=D64), atol=0.05, rtol=0)
    if kind == "sphere":
        torch.testing.assert_close(xi.norm(dim=-1), torch.full((40_000,), math.sqrt(5), dtype=D64))
    if kind in ("coordinate", "onehot"):
        assert ((xi != 0).sum(-1) == 1).all()
    if kind == "onehot":
        assert (xi >= 0).all()


def test_ensemble_sampling_is_ensemblepp_with_onehot_index():
    """Classic ensemble sampling = Ensemble++ with Gaussian perturbations and a one-hot index:
    with the same seed the two make the same decisions (theta_m = mu + sqrt(M) A e_m)."""
    env = LinearBandit(d=6, num_actions=30)
    es = run_bandit(env, EnsembleSampling(d=6, M=4), steps=150, num_seeds=5, seed=3)
    epp = run_bandit(env, EnsemblePlusPlus(d=6, M=4, perturbation="gaussian", index="onehot"),
                     steps=150, num_seeds=5, seed=3)
    np.testing.assert_allclose(es.regret, epp.regret, atol=1e-9)
    other = run_bandit(env, EnsemblePlusPlus(d=6, M=4), steps=150, num_seeds=5, seed=3)
    assert not np.allclose(es.regret, other.regret)


def test_covariance_spectrum():
    A = torch.randn(3, 4, 4, dtype=D64, generator=torch.Generator().manual_seed(0))
    Sigma = A @ A.transpose(-1, -2) + torch.eye(4, dtype=D64)
    torch.testing.assert_close(covariance_spectrum(Sigma, Sigma), torch.ones(3, 4, dtype=D64))
    torch.testing.assert_close(covariance_spectrum(2 * Sigma, Sigma), 2 * torch.ones(3, 4, dtype=D64))
    low_rank = EnsemblePlusPlus(d=4, M=2)
    low_rank.reset(3, torch.Generator().manual_seed(0))
    eig = covariance_spectrum(low_rank.sample_covariance(), low_rank.Sigma)
    assert (eig[:, :2].abs() < 1e-9).all(), "rank M < d leaves d - M directions unexplored"


def test_symmetrised_loss_splits_into_mean_and_noise_regressions():
    g = torch.Generator().manual_seed(0)
    S, B, M, sigma = 2, 5, 3, 0.7
    mean, y = torch.randn(S, B, generator=g), torch.randn(S, B, generator=g)
    G, z = torch.randn(S, B, M, generator=g), torch.randn(S, B, M, generator=g)
    eye = math.sqrt(M) * torch.eye(M)
    coordinate = torch.cat([eye, -eye]).expand(S, B, 2 * M, M)
    closed = ((y - mean) ** 2).mean(1) + ((sigma * z - G) ** 2).sum(-1).mean(1)
    torch.testing.assert_close(symmetrised_loss(mean, G, y, z, coordinate, sigma), closed)
    # random pairs (zeta, -zeta): the cross term cancels, so the part beyond (y - mean)^2
    # does not depend on y
    zeta = torch.randn(S, B, 4, M, generator=g)
    pairs = torch.cat([zeta, -zeta], dim=2)
    extra = [symmetrised_loss(mean, G, yy, z, pairs, sigma) - ((yy - mean) ** 2).mean(1)
             for yy in (y, y + 10.0)]
    torch.testing.assert_close(extra[0], extra[1])
    one_sided = zeta                                                     # not symmetric
    extra = [symmetrised_loss(mean, G, yy, z, one_sided, sigma) - ((yy - mean) ** 2).mean(1)
             for yy in (y, y + 10.0)]
    assert not torch.allclose(extra[0], extra[1])


@pytest.mark.parametrize("make_agent", [
    lambda: ThompsonSampling(d=5), lambda: EnsembleSampling(d=5, M=3),
    lambda: EnsemblePlusPlus(d=5, M=3, index="coordinate"),
    lambda: NeuralEnsemblePlusPlus(d=5, M=3, hidden=(8,)),
])
def test_deterministic_per_seed(make_agent):
    env = LinearBandit(d=5, num_actions=10)
    a = run_bandit(env, make_agent(), steps=40, num_seeds=3, seed=7)
    b = run_bandit(env, make_agent(), steps=40, num_seeds=3, seed=7)
    c = run_bandit(env, make_agent(), steps=40, num_seeds=3, seed=8)
    np.testing.assert_array_equal(a.regret, b.regret)
    assert not np.array_equal(a.regret, c.regret)


@pytest.mark.parametrize("env", [
    LinearBandit(d=3, num_actions=7), LinearBandit(d=3, num_actions=7, contexts="varying", features="sphere"),
    QuadraticBandit(d=3, num_actions=7), NeuralBandit(d=3, num_actions=7, hidden=5),
])
def test_finite_env_shapes_and_regret(env):
    S = 4
    env.reset(S, torch.Generator().manual_seed(0))
    X = env.actions()
    assert X.shape == (S, 7, 3) and X.dtype == D64
    means = env.mean_reward(X)
    best = means.argmax(-1)
    reward, regret = env.pull(best)
    assert reward.shape == regret.shape == (S,)
    torch.testing.assert_close(regret, torch.zeros(S, dtype=D64))
    _, regret = env.pull(means.argmin(-1))
    assert (regret >= 0).all() and (regret > 0).any()


def test_unit_ball_env_and_linear_agents():
    env = UnitBallBandit(d=4)
    env.reset(3, torch.Generator().manual_seed(0))
    assert env.actions() is None
    best = env.theta / env.theta.norm(dim=-1, keepdim=True)
    _, regret = env.pull(best)
    torch.testing.assert_close(regret, torch.zeros(3, dtype=D64))
    run = run_bandit(env, EnsemblePlusPlus(d=4, M=4), steps=200, num_seeds=6)
    assert run.regret.shape == (6, 200) and (run.regret >= -1e-12).all()
    assert run.regret[:, -50:].mean() < run.regret[:, :50].mean(), "it should learn on the ball"


def test_linear_agents_learn():
    env = LinearBandit(d=5, num_actions=20)
    ts = run_bandit(env, ThompsonSampling(d=5), steps=300, num_seeds=16)
    assert ts.regret[:, -100:].mean() < 0.5 * ts.regret[:, :100].mean()
    epp = run_bandit(env, EnsemblePlusPlus(d=5, M=8), steps=300, num_seeds=16)
    assert epp.regret[:, -100:].mean() < 0.5 * epp.regret[:, :100].mean()
    table = regret_table([ts, epp])
    assert list(table.agent) == ["TS", "Ensemble++ M=8"]
    assert {"regret", "se", "median", "ms/step (all seeds)", "flops/step (per seed)"} <= set(table.columns)


def test_diagnostics_record_spectrum_over_time():
    env = LinearBandit(d=4, num_actions=10)
    run = run_bandit(env, EnsemblePlusPlus(d=4, M=8), steps=60, num_seeds=3, diagnose_every=20)
    assert list(run.diagnostics["t"]) == [20, 40, 60]
    assert run.diagnostics["eig_min"].shape == (3, 3)
    assert (run.diagnostics["eig_min"] <= run.diagnostics["eig_max"]).all()
    ts = run_bandit(env, ThompsonSampling(d=4), steps=20, num_seeds=2, diagnose_every=10)
    np.testing.assert_allclose(ts.diagnostics["eig_min"], 1.0)


def test_lm_bandit_features_and_labels():
    env = make_lm_bandit(num_strings=64, feature_dim=4)
    assert env.features.shape == (64, 5) and env.d == 10
    assert all(int(l) == odd_digit_class(s, 2) for s, l in zip(env.strings, env.labels))
    assert odd_digit_class("rev:13579=", 2) == 1 and odd_digit_class("rev:02468=", 2) == 0
    env.reset(3, torch.Generator().manual_seed(0))
    X = env.actions()
    assert X.shape == (3, 2, 10)
    assert (X[:, 0, :4] == 0).all() and (X[:, 0, 5:] == 0).all(), "skip: constant feature only"
    assert (X[:, 1, :5] == 0).all(), "publish: features in the second block"
    run = run_bandit(env, ThompsonSampling(d=10, prior_var=1.0, noise_std=0.5), steps=30, num_seeds=3)
    assert run.regret.shape == (3, 30)


def test_lm_features_carry_the_label():
    """A linear probe on the PCA'd hidden states of the random-init 0.3M model classifies the
    odd-digit majority well: the bandit is (nearly) realisable for a linear agent."""
    env = make_lm_bandit(num_strings=512, feature_dim=8)
    F, y = env.features, env.labels
    Y = torch.nn.functional.one_hot(y, 2).to(D64)
    W = torch.linalg.solve(F.T @ F + 1e-3 * torch.eye(F.shape[1], dtype=D64), F.T @ Y)
    assert ((F @ W).argmax(1) == y).double().mean() > 0.9


def test_neural_agent_shapes_and_learning():
    env = NeuralBandit(d=4, num_actions=10, contexts="fixed", noise_std=0.1)
    agent = NeuralEnsemblePlusPlus(d=4, M=4, hidden=(16,), learning_rate=1e-2)
    run = run_bandit(env, agent, steps=150, num_seeds=4)
    assert run.regret.shape == (4, 150)
    assert run.regret[:, -50:].mean() < run.regret[:, :50].mean()
    mean, g = agent.forward(torch.randn(4, 7, 4))
    assert mean.shape == (4, 7) and g.shape == (4, 7, 4)
    assert agent.W0.requires_grad is False and agent.W.requires_grad


@pytest.mark.parametrize("build, field", [
    (lambda: EnsemblePlusPlus(M=0), "M"),
    (lambda: EnsemblePlusPlus(perturbation="onehot"), "perturbation"),
    (lambda: EnsemblePlusPlus(index="uniform"), "index"),
    (lambda: ThompsonSampling(noise_std=0.0), "noise_std"),
    (lambda: EnsembleSampling(M=2.5), "M"),
    (lambda: LinearBandit(contexts="sometimes"), "contexts"),
    (lambda: LinearBandit(num_actions=1), "num_actions"),
    (lambda: UnitBallBandit(prior_var=-1.0), "prior_var"),
    (lambda: NeuralEnsemblePlusPlus(hidden=()), "hidden"),
    (lambda: NeuralEnsemblePlusPlus(update_index="onehot"), "update_index"),
    (lambda: make_lm_bandit(num_strings=64, feature_dim=0), "feature_dim"),
    (lambda: run_bandit(LinearBandit(), Greedy(), steps=0, num_seeds=2), "steps"),
    (lambda: run_bandit(LinearBandit(), Greedy(), steps=5, num_seeds=0), "num_seeds"),
])
def test_bad_arguments_name_the_field(build, field):
    with pytest.raises(ConfigError, match=field):
        build()


def test_mismatched_shapes_raise_clear_errors():
    env = LinearBandit(d=4, num_actions=5)
    with pytest.raises(ValueError, match="d=3 but the actions have 4 features"):
        run_bandit(env, EnsemblePlusPlus(d=3), steps=2, num_seeds=1)
    env.reset(2, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="action indices"):
        env.pull(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="unit ball is for the linear agents"):
        run_bandit(UnitBallBandit(d=3), NeuralEnsemblePlusPlus(d=3), steps=2, num_seeds=1)
    with pytest.raises(ConfigError, match="linear agent"):
        run_bandit(env, NeuralEnsemblePlusPlus(d=4), steps=2, num_seeds=1, diagnose_every=1)
    ball = UnitBallBandit(d=2)
    ball.reset(1, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="unit ball"):
        ball.pull(torch.tensor([[3.0, 0.0]], dtype=D64))


def test_regret_quantiles_match_numpy():
    f = np.arange(1.0, 11.0)                          # 1..10
    q = regret_quantiles(f, (0.5, 0.9))
    assert q[0.5] == pytest.approx(5.5) and q[0.9] == pytest.approx(9.1)
    with pytest.raises(ValueError, match="1-d array"):
        regret_quantiles(np.ones(1))


def test_matches_ts_checks_median_and_tail():
    ts = np.arange(1.0, 101.0)                        # median 50.5, q90 90.1
    assert matches_ts(1.4 * ts, ts)["matches"]
    r = matches_ts(1.6 * ts, ts)
    assert not r["matches"] and r["median_ratio"] == pytest.approx(1.6) and r["tail_ratio"] == pytest.approx(1.6)
    # a typical run as good as TS but a heavy tail: the median passes, the tail fails
    tail = ts.copy()
    tail[-15:] *= 10
    r = matches_ts(tail, ts)
    assert r["median_ratio"] == pytest.approx(1.0) and r["tail_ratio"] > 2 and not r["matches"]
    # the tail factor and quantile are parameters
    assert matches_ts(tail, ts, tail_quantile=0.8)["matches"]
    with pytest.raises(ConfigError):
        matches_ts(ts, ts, tail_quantile=1.0)


def test_smallest_matching_M_requires_every_larger_M():
    assert smallest_matching_M({1: False, 2: True, 4: True}) == 2
    assert smallest_matching_M({1: True, 2: False, 4: True, 8: True}) == 4
    assert smallest_matching_M({1: True, 2: True}) == 1
    assert smallest_matching_M({1: True, 2: False}) == math.inf


def test_ensemble_size_grid():
    assert ensemble_size_grid(10) == [1, 2, 4, 5, 8, 10, 16, 20, 32]
    assert ensemble_size_grid(80) == [1, 2, 4, 8, 16, 32, 40, 64, 80, 128, 160, 256]
    assert ensemble_size_grid(1) == [1, 2, 4]
    with pytest.raises(ConfigError):
        ensemble_size_grid(0)


def test_bootstrap_ratios_are_paired_resamples():
    ts = np.random.default_rng(0).exponential(size=100) + 1
    same = bootstrap_ratios(3 * ts, ts, size=24, resamples=200)
    assert same["median_ratio"].shape == (200,) and np.allclose(same["median_ratio"], 3)
    assert np.allclose(same["tail_ratio"], 3)                 # paired: a constant factor survives
    other = np.random.default_rng(1).exponential(size=100) + 1
    spread = bootstrap_ratios(other, ts, size=24, resamples=2000)["median_ratio"]
    full = matches_ts(other, ts)["median_ratio"]
    assert spread.min() < full < spread.max() and spread.std() > 0.02   # centred near the full-sample ratio
    with pytest.raises(ValueError, match="paired"):
        bootstrap_ratios(ts[:50], ts, size=10)
