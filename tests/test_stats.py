import numpy as np
import pytest

from rl_lab.stats import one_sample_t, welch_t


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
