"""research/tool_methods/summarize.py: the statistics behind chapter 12's method table (Student's t
p-value by quadrature, Holm, the spike rule) and the shipped results it reads."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from rl_lab.tools.stats import welch_t

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("tool_methods", ROOT / "research/tool_methods/summarize.py")
tm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tm)


@pytest.mark.parametrize("t, df, p", [(12.7062, 1, 0.05), (2.776445, 4, 0.05), (4.604095, 4, 0.01),
                                      (2.446912, 6, 0.05), (1.959964, 1e6, 0.05), (0.0, 3, 1.0)])
def test_student_t_two_sided_p_matches_table_quantiles(t, df, p):
    assert abs(tm.student_t_sf2(t, df) - p) < 2e-6
    assert abs(tm.student_t_sf2(-t, df) - p) < 2e-6


def test_student_t_refuses_df_below_one_and_inverts():
    with pytest.raises(ValueError, match="df >= 1"):
        tm.student_t_sf2(1.0, 0.5)
    assert abs(tm.student_t_quantile(0.05, 4) - 2.776445) < 1e-5


def test_welch_agrees_with_rl_lab_stats_and_its_interval_covers():
    a, b = [0.8, 0.78, 0.84, 0.81], [0.77, 0.78, 0.81, 0.78]
    w = tm.welch(a, b)
    assert abs(w["t"] - welch_t(a, b)) < 1e-12
    assert w["ci_lo"] < w["diff"] < w["ci_hi"]
    assert (w["ci_lo"] < 0) == (w["p"] > 0.05)     # the interval holds 0 exactly when p > 0.05


def test_holm_adjusts_step_down_and_keeps_order():
    assert np.allclose(tm.holm([0.01, 0.04, 0.03, 0.5]), [0.04, 0.09, 0.09, 0.5])
    assert np.allclose(tm.holm([0.3, 0.6]), [0.6, 0.6])


def test_spike_rule_counts_steps_above_five_medians():
    assert tm.spikes([1, 1, 1, 6, 0, 0]) == (1, 6.0)       # zeros are not in the median
    assert tm.spikes([1, 1, float("nan"), 1])[0] == 1      # a non-finite norm counts
    count, ratio = tm.spikes([0, 0])                       # no gradient at all: nothing to compare with
    assert count == 0 and np.isnan(ratio)


def test_shipped_table_has_every_cell_and_a_verdict():
    results = tm.table()
    assert len(results) == 10 and (results["seeds"] == 4).all()
    assert set(results["eval_reward_verdict"]) <= {"control", "gain", "loss", "null"}
    assert tm.simpletir_claim(tm.spike_table()) in ("reproduced", "not reproduced")


def test_fisher_one_sided_is_the_hypergeometric_tail():
    assert abs(tm.fisher_one_sided(0, 8, 4, 8, "less") - 70 / 1820) < 1e-15     # C(8,4) / C(16,4)
    assert abs(tm.fisher_one_sided(8, 8, 4, 8, "more") - 70 / 1820) < 1e-15     # the mirror table
    assert tm.fisher_one_sided(4, 8, 4, 8, "less") > 0.5 and tm.fisher_one_sided(2, 4, 2, 4, "more") > 0.5
    assert abs(tm.fisher_one_sided(5, 8, 0, 8, "less") - 1) < 1e-12              # the whole distribution
    with pytest.raises(ValueError, match="'less' or 'more'"):
        tm.fisher_one_sided(1, 2, 1, 2, "two-sided")


def test_shipped_followup_has_both_hypotheses_on_eight_fresh_seeds():
    followup = tm.followup_table()
    assert list(followup["method"]) == list(tm.FOLLOWUP)
    assert (followup["collapsed"].str.endswith("/8")).all() and (followup["p_holm"] >= followup["p"]).all()
    assert set(followup["verdict"]) <= {"supported", "not supported"}
