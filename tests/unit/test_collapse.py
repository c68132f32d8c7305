"""The collapse criteria on hand-built series (rl_lab.toolkits.collapse)."""
import math

import numpy as np
import pytest

from rl_lab.toolkits import collapse
from rl_lab.toolkits.collapse import detect_collapse, detect_grad_blowup, first_crossing, lead_time, moving_average


def test_defaults_are_module_constants_and_stated():
    assert (collapse.WINDOW, collapse.DROP, collapse.RECOVER, collapse.NAN_REWARD) == (20, 0.5, 0.8, 0.0)
    assert (collapse.GRAD_EARLY, collapse.GRAD_FACTOR, collapse.GRAD_PATIENCE) == ((0, 50), 10.0, 5)
    assert "20-step" in collapse.CRITERION and "0.5" in collapse.CRITERION and "0.8" in collapse.CRITERION


def test_moving_average_is_trailing_over_full_windows():
    np.testing.assert_allclose(moving_average([1, 2, 3, 4], 2), [1.5, 2.5, 3.5])
    assert len(moving_average([1, 2], 3)) == 0


def test_a_clean_collapse():
    # learns to 0.8 over 40 steps, holds 30 steps, then drops to 0.05 for good
    r = np.concatenate([np.linspace(0.1, 0.8, 40), np.full(30, 0.8), np.full(50, 0.05)])
    out = detect_collapse(r)
    assert out["collapsed"] and out["evaluated"] and out["dips"] == 0
    assert out["peak"] == pytest.approx(0.8)
    # the peak of the moving average is first reached when the window holds only 0.8s: positions 39-58
    assert out["peak_step"] == 58
    # the first full window whose mean is < 0.4 after the drop at position 70: k new values of
    # 0.05 and 20 - k of 0.8 -> 0.8 - 0.75 k / 20 < 0.4 once k >= 11 -> position 80
    assert out["fall_step"] == 80
    assert out["final"] == pytest.approx(0.05)


def test_steps_map_positions_to_labels():
    r = np.concatenate([np.full(30, 0.8), np.full(40, 0.0)])
    out = detect_collapse(r, steps=range(1, 71))                    # the trainer's 1-based steps
    assert out["collapsed"] and out["fall_step"] == detect_collapse(r)["fall_step"] + 1


def test_a_dip_that_recovers_is_not_a_collapse():
    r = np.concatenate([np.full(40, 0.8), np.full(25, 0.1), np.full(60, 0.75)])
    out = detect_collapse(r)
    assert not out["collapsed"] and out["dips"] == 1 and out["fall_step"] is None
    assert out["peak"] == pytest.approx(0.8)


def test_a_recovery_below_the_recover_line_is_still_a_collapse():
    r = np.concatenate([np.full(40, 0.8), np.full(25, 0.1), np.full(60, 0.6)])   # 0.6 < 0.8 x 0.8
    out = detect_collapse(r)
    assert out["collapsed"] and out["fall_step"] is not None


def test_a_second_fall_after_a_recovery_is_reported():
    r = np.concatenate([np.full(40, 0.8), np.full(25, 0.1), np.full(40, 0.8), np.full(40, 0.0)])
    out = detect_collapse(r)
    assert out["collapsed"] and out["dips"] == 1 and out["fall_step"] > 105


def test_a_monotone_learner_never_collapses():
    out = detect_collapse(np.linspace(0.0, 1.0, 300))
    assert not out["collapsed"] and out["dips"] == 0
    assert out["peak"] == pytest.approx(1.0 - 19 / 2 / 299) and out["peak_step"] == 299


def test_a_run_that_never_learned_cannot_collapse():
    assert not detect_collapse(np.zeros(100))["collapsed"]


def test_a_run_too_short_for_the_window_is_not_judged():
    out = detect_collapse([0.9, 0.0, 0.0], window=20)
    assert out == dict(collapsed=False, fall_step=None, peak=None, peak_step=None, dips=0, final=None,
                       evaluated=False)
    assert detect_collapse([0.9] * 20)["evaluated"]


def test_nan_rewards_count_as_zero():
    # a run that degenerates into NaN rewards collapses (NaN-ignoring means would hide it)
    r = np.concatenate([np.full(40, 0.8), np.full(40, np.nan)])
    out = detect_collapse(r)
    assert out["collapsed"] and out["final"] == 0.0
    assert out == detect_collapse(np.concatenate([np.full(40, 0.8), np.zeros(40)]))
    # scattered NaN steps pull the average down by their share, like zero-reward steps
    r = np.full(60, 0.8)
    r[::4] = np.nan
    out = detect_collapse(r)
    assert not out["collapsed"] and out["peak"] == pytest.approx(0.6)
    assert detect_collapse([math.inf] * 30)["peak"] == 0.0


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        detect_collapse([1.0] * 30, drop=1.5)
    with pytest.raises(ValueError):
        detect_collapse([1.0] * 30, drop=0.5, recover=0.3)
    with pytest.raises(ValueError):
        detect_collapse(np.ones((3, 30)))
    with pytest.raises(ValueError):
        detect_collapse([1.0] * 30, steps=range(3))


def test_grad_blowup():
    g = np.concatenate([np.full(60, 1.0), np.full(4, 50.0), np.full(10, 1.0), np.full(20, 30.0)])
    out = detect_grad_blowup(g)
    assert out["blowup"] and out["baseline"] == 1.0
    assert out["step"] == 74                                        # the 4-step spike was too short
    assert not detect_grad_blowup(g, factor=60)["blowup"]
    assert detect_grad_blowup(g, patience=4)["step"] == 60


def test_grad_blowup_baseline_skips_zero_and_nonfinite_norms_and_nan_counts_as_above():
    g = np.array([0.0, 2.0, np.nan, 2.0, 0.0, 2.0] + [np.nan] * 5)
    out = detect_grad_blowup(g, early=(0, 6))
    assert out["baseline"] == 2.0 and out["blowup"] and out["step"] == 6
    assert detect_grad_blowup([0.0] * 10) == dict(blowup=False, step=None, baseline=None, evaluated=False)


def test_first_crossing_and_lead_time():
    k3 = np.array([1e-4, np.nan, 2e-4, 5e-3, 1e-2, 3e-2])
    assert first_crossing(k3, 1e-3) == 3
    assert first_crossing(k3, 1.0) is None
    assert first_crossing(k3, 1e-3, start=4) == 4
    assert first_crossing([1.0, 0.9, 0.2], 0.5, above=False) == 2
    assert first_crossing(k3, 1e-3, steps=range(1, 7)) == 4
    assert lead_time(k3, 1e-3, fall_step=10) == 7
    assert lead_time(k3, 1e-3, fall_step=2) == -1
    assert lead_time(k3, 1e-3, fall_step=None) is None
    assert lead_time(k3, 1.0, fall_step=10) is None


def test_warning_threshold_is_a_percentile_of_the_smoothed_healthy_runs():
    healthy = [np.arange(30.0), np.full(25, 100.0)]
    # window 20: smoothed values 9.5 .. 19.5 (11 of them) and 100 (6 of them)
    smoothed = np.concatenate([np.arange(9.5, 20.0), np.full(6, 100.0)])
    assert collapse.warning_threshold(healthy, percentile=50) == pytest.approx(np.percentile(smoothed, 50))
    assert collapse.warning_threshold(healthy, percentile=99) == pytest.approx(np.percentile(smoothed, 99))
    with pytest.raises(ValueError):
        collapse.warning_threshold([np.arange(5.0)])            # no full window


def test_early_warning_counts_leads_and_false_alarms():
    w = 20
    rising = np.r_[np.zeros(40), np.full(60, 10.0)]            # smoothed crosses 5 at position 49
    late = np.r_[np.zeros(80), np.full(20, 10.0)]              # crosses at position 89
    flat = np.zeros(100)
    steps = np.arange(1, 101)                                   # the trainer's 1-based step labels
    out = collapse.early_warning(5.0, [(rising, steps, 70), (late, steps, 70), (flat, steps, 70)],
                                 [flat, rising], window=w)
    # rising: smoothed position p covers raw [p-19, p]; mean >= 5 first at p = 49 -> step 50 -> lead 20
    assert out["leads"][0] == 20 and out["leads"][1] == 70 - 90 and np.isnan(out["leads"][2])
    assert (out["warned"], out["collapses"], out["median_lead"]) == (1, 3, 20.0)
    assert (out["false_alarms"], out["healthy"]) == (1, 2)
