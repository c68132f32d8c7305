import numpy as np
import pytest

from rl_lab.tools.stats import one_sample_t, power_law_exponent, welch_t


def test_welch_by_hand():
    # means 2.5 and 4, variances 5/3 and 4: t = -1.5 / sqrt(5/12 + 4/3)
    assert welch_t([1, 2, 3, 4], [2, 4, 6]) == pytest.approx(-1.5 / np.sqrt(5 / 12 + 4 / 3))
    assert welch_t([2, 4, 6], [1, 2, 3, 4]) == pytest.approx(1.5 / np.sqrt(5 / 12 + 4 / 3))


def test_one_sample_by_hand():
    # mean 2.5, sd sqrt(5/3), n 4
    assert one_sample_t([1, 2, 3, 4]) == pytest.approx(2.5 / (np.sqrt(5 / 3) / 2))
    assert one_sample_t([1, 2, 3, 4], mu=2.5) == 0.0


def test_constant_samples_and_too_few_values():
    assert welch_t([1, 1], [0, 0]) == np.inf and welch_t([0, 0], [0, 0]) == 0.0
    assert one_sample_t([-1, -1]) == -np.inf
    with pytest.raises(ValueError, match="at least 2"):
        welch_t([1.0], [0.0, 1.0])


def test_wilson_interval_by_hand_and_at_the_edges():
    from rl_lab.tools.stats import wilson_interval
    lo, hi = wilson_interval(4, 6)      # p = 2/3: centre (p + z^2/12) / (1 + z^2/6), by hand below
    z2 = 1.96 ** 2
    centre = (4 / 6 + z2 / 12) / (1 + z2 / 6)
    half = 1.96 * np.sqrt((4 / 6) * (2 / 6) / 6 + z2 / 144) / (1 + z2 / 6)
    assert (lo, hi) == pytest.approx((centre - half, centre + half))
    assert 0.29 < lo < 0.31 and 0.90 < hi < 0.91
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(0, 10)[1] > 0.2     # not empty at k = 0
    assert wilson_interval(10, 10)[1] == 1.0 and wilson_interval(10, 10)[0] < 0.8
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_power_law_exponent_recovers_the_exponent_and_refuses_what_cannot_be_fitted():
    x = [16, 128, 512]
    assert power_law_exponent(x, [3 * v ** 1.5 for v in x]) == pytest.approx(1.5)
    assert power_law_exponent(x, [7.0] * 3) == pytest.approx(0.0)
    for bad_x, bad_y in (([16, 16], [1, 2]), ([16, 128], [1, 0]), ([16, 128], [1])):
        with pytest.raises(ValueError, match="power_law_exponent"):
            power_law_exponent(bad_x, bad_y)
