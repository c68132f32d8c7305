"""rl_lab.toolkits.lr_mismatch: the SGA arithmetic of a smaller step and the run summaries of chapter 7."""
import numpy as np
import pytest
import torch

from rl_lab.toolkits.lr_mismatch import (
    best_quadratic_step,
    first_decay_step,
    phase_means,
    quadratic_progress_mc,
    quadratic_progress_terms,
    replay_length_schedule,
    reward_collapse_step,
)

L = 2.0
THETA = torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)
STAR = torch.zeros(3, dtype=torch.float64)
GRAD = -L * (THETA - STAR)


@pytest.mark.parametrize("eta", [0.05, 0.2, 0.45])
@pytest.mark.parametrize("bias_scale", [0.0, -0.3, 0.5])
def test_lemma_is_an_identity_on_the_quadratic(eta, bias_scale):
    """Lab 7 section 1 asserts that the Monte-Carlo progress matches the three terms."""
    bias = bias_scale * GRAD + torch.tensor([0.0, 0.3, -0.2], dtype=torch.float64)
    noise_std = 0.4
    terms = quadratic_progress_terms(GRAD, bias, 3 * noise_std ** 2, L, eta)
    mc, se = quadratic_progress_mc(THETA, STAR, L, eta, bias, noise_std, n=40_000, seed=1)
    assert abs(mc - terms["total"]) < 5 * se + 1e-12
    # the exact expectation, computed another way: E||x||^2 = ||E x||^2 + tr Cov x for the new iterate
    mean_new = THETA + eta * (GRAD + bias)
    exact = -(L / 2) * (float((mean_new - STAR).square().sum()) + eta ** 2 * 3 * noise_std ** 2) \
        + (L / 2) * float((THETA - STAR).square().sum())
    assert terms["total"] == pytest.approx(exact, rel=1e-12, abs=1e-15)
    ideal = -(L / 2) * float((THETA + eta * GRAD - STAR).square().sum()) + (L / 2) * float((THETA - STAR).square().sum())
    assert terms["ideal"] == pytest.approx(ideal, rel=1e-12)                # the exact gradient's step


def test_noise_and_bias_squared_terms_scale_with_eta_squared():
    bias = torch.tensor([0.1, 0.2, -0.3], dtype=torch.float64)
    a = quadratic_progress_terms(GRAD, bias, 1.0, L, 0.1)
    b = quadratic_progress_terms(GRAD, bias, 1.0, L, 0.05)
    assert b["noise"] / a["noise"] == pytest.approx(0.25)          # halve the step: a quarter of the penalty
    assert a["noise"] < 0 and b["noise"] < 0


def test_an_opposing_bias_makes_every_step_lose_and_best_step_is_zero():
    bias = -1.2 * GRAD                                              # E g_hat = -0.2 grad: downhill
    for eta in np.linspace(0.01, 1.0, 20):
        assert quadratic_progress_terms(GRAD, bias, 0.5, L, float(eta))["total"] < 0
    assert best_quadratic_step(GRAD, bias, 0.5, L) == 0.0


def test_best_step_maximises_progress_and_shrinks_with_noise():
    bias = 0.1 * torch.ones(3, dtype=torch.float64)
    etas = np.linspace(0.0, 1.0, 2001)
    for noise in (0.0, 2.0, 20.0):
        best = best_quadratic_step(GRAD, bias, noise, L)
        grid = [quadratic_progress_terms(GRAD, bias, noise, L, float(e))["total"] for e in etas]
        assert abs(best - etas[int(np.argmax(grid))]) < 1e-3
    assert best_quadratic_step(GRAD, bias, 20.0, L) < best_quadratic_step(GRAD, bias, 2.0, L)


def test_quadratic_arguments_are_checked():
    with pytest.raises(ValueError, match="L="):
        quadratic_progress_terms(GRAD, GRAD, 0.0, 0.0, 0.1)
    with pytest.raises(ValueError, match="same shape|one shape"):
        quadratic_progress_terms(GRAD, GRAD[:2], 0.0, L, 0.1)
    with pytest.raises(ValueError, match="noise_trace"):
        quadratic_progress_terms(GRAD, GRAD, -1.0, L, 0.1)
    with pytest.raises(ValueError, match="n="):
        quadratic_progress_mc(THETA, STAR, L, 0.1, GRAD, 0.1, n=1)


def test_replay_matches_the_schedule_and_halves_at_the_period():
    lengths = [3.0] * 5 + [3.2, 3.5, 4.2, 4.0, 5.0] + [5.0] * 30     # baseline 3, x1.3 = 3.9: surge at 7
    out = replay_length_schedule(lengths, baseline_steps=5, surge_factor=1.3, period_factor=1.8, min_lr_ratio=0.1)
    assert out["surge_step"] == 7 and out["period"] == 13             # round(1.8 x 7)
    f = out["factors"]
    assert (f[:13] == 1.0).all()                                      # the clock runs from step 0
    assert f[13] == 0.5 and f[26] == 0.25 and f[39] == 0.125
    assert first_decay_step(f) == 13
    early = replay_length_schedule(lengths, baseline_steps=5, surge_factor=1.3, period_factor=1.0)["factors"]
    assert (early[:8] == 1.0).all() and early[8] == 0.5               # P = 7 < 8: halves as soon as it is seen
    assert early[14] == 0.25 and early[35] == 0.1                     # 0.5 ** 5 is below the floor
    flat = replay_length_schedule([3.0] * 20, baseline_steps=5, surge_factor=1.3)
    assert flat["surge_step"] is None and (flat["factors"] == 1.0).all()


def test_first_decay_step():
    assert first_decay_step([1e-3, 1e-3, 5e-4, 5e-4]) == 2
    assert first_decay_step([1e-3] * 4) is None
    with pytest.raises(ValueError, match="non-empty"):
        first_decay_step([])


def test_reward_collapse_step_uses_a_rolling_mean():
    r = [0.4, 0.3, 0.35, 0.3, 0.1, 0.05, 0.0, 0.0]                    # start mean 0.35, half = 0.175
    assert reward_collapse_step(r, fraction=0.5, window=3) == 5     # mean(0.3, 0.1, 0.05) = 0.15
    assert reward_collapse_step([0.4] * 10, window=3) is None
    assert reward_collapse_step([0.4, 0.0, 0.4, 0.0], fraction=0.5, window=1) == 1
    with pytest.raises(ValueError, match="fraction"):
        reward_collapse_step(r, fraction=1.5)


def test_phase_means():
    before, after = phase_means([1.0, 2.0, 3.0, 10.0, 20.0], split=3, skip=1)
    assert before == pytest.approx(2.5) and after == pytest.approx(15.0)
    with pytest.raises(ValueError, match="split"):
        phase_means([1.0, 2.0], split=2)
