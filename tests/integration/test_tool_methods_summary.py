"""research/tool_methods/summarize.py: the statistics behind chapter 12's method table (Student's t,
Welch's and Fisher's tests from scipy, Holm, the spike rule) and the shipped results it reads.

With scipy (the `research` extra) the module computes with scipy.stats; without it (the labs-only
install and Binder, where lab 12 reads these tables) with rl_lab.tools.stats.  `tm` is the module as
loaded here, `variant` each of the two ways; the tests check both against scipy and each other."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from rl_lab.tools.stats import welch_t

ROOT = Path(__file__).resolve().parents[2]
SUMMARIZE = ROOT / "research/tool_methods/summarize.py"


def load(name="tool_methods"):
    spec = importlib.util.spec_from_file_location(name, SUMMARIZE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tm = load()


@pytest.fixture(params=["scipy", "no scipy"])
def variant(request, monkeypatch):
    if request.param == "scipy":
        pytest.importorskip("scipy", reason="the `research` extra (scipy) is not installed")
        return load("tool_methods_scipy")
    return load_without_scipy(monkeypatch)


def load_without_scipy(monkeypatch):
    with monkeypatch.context() as m:        # hidden while the module loads, back for the checks
        m.setitem(sys.modules, "scipy", None)               # `from scipy import stats` raises ImportError
        module = load("tool_methods_no_scipy")
    assert module.sps is None
    return module


def test_the_module_uses_scipy_when_it_is_installed():
    import rl_lab.tools.stats
    if importlib.util.find_spec("scipy") is None:
        assert tm.sps is None and tm.welch is rl_lab.tools.stats.welch
    else:
        assert tm.sps is not None and tm.welch is not rl_lab.tools.stats.welch


@pytest.mark.parametrize("t, df, p", [(12.7062, 1, 0.05), (2.776445, 4, 0.05), (4.604095, 4, 0.01),
                                      (1.959964, 1e6, 0.05), (0.0, 3, 1.0)])
def test_student_t_two_sided_p_matches_table_quantiles(variant, t, df, p):
    """Printed quantiles pin what the p-value means (two-sided), whichever way it is computed."""
    assert abs(variant.student_t_sf2(t, df) - p) < 2e-6
    assert abs(variant.student_t_sf2(-t, df) - p) < 2e-6


def test_student_t_agrees_with_scipy(variant):
    stats = pytest.importorskip("scipy.stats", reason="the `research` extra (scipy) is not installed")
    for df in (1, 2.5, 4, 7.3, 30, 1e4):
        for t in (0.0, 0.3, 1.0, 2.2, 5.0, 40.0):
            assert variant.student_t_sf2(t, df) == pytest.approx(2 * stats.t.sf(t, df), rel=1e-7, abs=1e-12)
        for p in (0.2, 0.05, 0.01):
            assert variant.student_t_quantile(p, df) == pytest.approx(stats.t.isf(p / 2, df), rel=1e-6)
    assert abs(variant.student_t_quantile(0.05, 4) - 2.776445) < 1e-5


def test_welch_agrees_with_scipy_and_rl_lab_stats_and_its_interval_covers(variant):
    a, b = [0.8, 0.78, 0.84, 0.81], [0.77, 0.78, 0.81, 0.78]
    w = variant.welch(a, b)
    assert abs(w["t"] - welch_t(a, b)) < 1e-12
    assert w["ci_lo"] < w["diff"] < w["ci_hi"]
    assert (w["ci_lo"] < 0) == (w["p"] > 0.05)     # the interval holds 0 exactly when p > 0.05
    stats = pytest.importorskip("scipy.stats", reason="the `research` extra (scipy) is not installed")
    r = stats.ttest_ind(a, b, equal_var=False)
    ci = r.confidence_interval(0.95)
    assert (w["t"], w["df"], w["p"], w["ci_lo"], w["ci_hi"]) == pytest.approx(
        (r.statistic, r.df, r.pvalue, ci.low, ci.high), rel=1e-9)


def test_welch_on_constant_samples(variant):
    """scipy's t is NaN when neither sample varies; the summary keeps rl_lab.tools.stats' rule."""
    assert variant.welch([0.0, 0.0], [0.0, 0.0])["p"] == 1.0
    w = variant.welch([0.0, 0.0, 0.0], [1.0, 1.0])
    assert w["p"] == 0.0 and w["t"] == -np.inf and w["ci_lo"] == w["ci_hi"] == -1.0
    assert variant.welch([0.0, 0.0, 0.0], [0.5, 1.0])["p"] > 0.05    # one constant side is an ordinary test
    with pytest.raises(ValueError, match="at least 2"):
        variant.welch([1.0], [0.0, 1.0])


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


def test_fisher_one_sided_is_the_hypergeometric_tail(variant):
    assert abs(variant.fisher_one_sided(0, 8, 4, 8, "less") - 70 / 1820) < 1e-12     # C(8,4) / C(16,4)
    assert abs(variant.fisher_one_sided(8, 8, 4, 8, "more") - 70 / 1820) < 1e-12     # the mirror table
    assert variant.fisher_one_sided(4, 8, 4, 8, "less") > 0.5 and variant.fisher_one_sided(2, 4, 2, 4, "more") > 0.5
    assert abs(variant.fisher_one_sided(5, 8, 0, 8, "less") - 1) < 1e-12              # the whole distribution
    with pytest.raises(ValueError, match="'less' or 'more'"):
        variant.fisher_one_sided(1, 2, 1, 2, "two-sided")


def test_fisher_agrees_with_scipy_on_every_small_table(variant):
    stats = pytest.importorskip("scipy.stats", reason="the `research` extra (scipy) is not installed")
    for n_a, n_b in ((4, 4), (8, 8), (5, 9)):
        for hits_a in range(n_a + 1):
            for hits_b in range(n_b + 1):
                table = [[hits_a, n_a - hits_a], [hits_b, n_b - hits_b]]
                for ours, theirs in (("less", "less"), ("more", "greater")):
                    expected = stats.fisher_exact(table, alternative=theirs).pvalue
                    assert variant.fisher_one_sided(hits_a, n_a, hits_b, n_b, ours) == pytest.approx(expected, abs=1e-12)


def test_shipped_tables_are_the_same_with_and_without_scipy(monkeypatch):
    """Lab 12 in the labs-only install (no scipy) prints what chapter 12 shows (scipy)."""
    pytest.importorskip("scipy", reason="the `research` extra (scipy) is not installed")
    with_scipy = load("tool_methods_scipy")
    without = load_without_scipy(monkeypatch)
    for name in ("table", "followup_table", "block3_table"):
        a, b = getattr(with_scipy, name)(), getattr(without, name)()
        assert list(a.columns) == list(b.columns), name
        for column in a.columns:
            if a[column].dtype.kind == "f":
                np.testing.assert_allclose(a[column], b[column], rtol=0, atol=1e-9, err_msg=f"{name}.{column}")
            else:
                assert (a[column] == b[column]).all(), f"{name}.{column}"


def test_shipped_followup_has_both_hypotheses_on_eight_fresh_seeds():
    followup = tm.followup_table()
    assert list(followup["method"]) == list(tm.FOLLOWUP)
    assert (followup["collapsed"].str.endswith("/8")).all() and (followup["p_holm"] >= followup["p"]).all()
    assert set(followup["verdict"]) <= {"supported", "not supported"}
