"""rl_lab.tools.stats against scipy.stats.  rl_lab.tools.stats has no scipy (the labs-only install and Binder
have none; book/stats_primer.md reads it), so its procedures are checked here against scipy's,
which the `research` extra installs (`make setup` does).  Holm has no scipy counterpart (see
research/tool_methods/summarize.py); tests/integration/test_tool_methods_summary.py checks it by hand."""
import numpy as np
import pytest

from rl_lab.tools import stats as ours

stats = pytest.importorskip("scipy.stats", reason="scipy (the `research` extra) is not installed: "
                                                  "rl_lab.tools.stats is checked against it only where it is")

RNG = np.random.default_rng(0)
SAMPLES = [([1, 2, 3, 4], [2, 4, 6]), ([0.8, 0.78, 0.84, 0.81], [0.77, 0.78, 0.81, 0.78]),
           ([0.0, 0.0, 0.0, 0.0], [0.1, 0.5, 0.3, 0.9]),        # one side constant (a collapsed arm)
           (RNG.normal(0, 1, 8).tolist(), RNG.normal(0.5, 3, 5).tolist()),
           (RNG.normal(0, 1, 40).tolist(), RNG.normal(0.1, 0.2, 3).tolist())]


@pytest.mark.parametrize("a, b", SAMPLES)
def test_welch_t_and_welch_are_scipys_welch_test(a, b):
    r = stats.ttest_ind(a, b, equal_var=False)
    ci = r.confidence_interval(0.95)
    assert ours.welch_t(a, b) == pytest.approx(r.statistic, rel=1e-12)
    w = ours.welch(a, b)
    assert (w["t"], w["df"]) == pytest.approx((r.statistic, r.df), rel=1e-12)
    assert w["p"] == pytest.approx(r.pvalue, rel=1e-7, abs=1e-12)     # Simpson's rule, error < 1e-9
    assert (w["ci_lo"], w["ci_hi"]) == pytest.approx((ci.low, ci.high), rel=1e-7)   # bisection


@pytest.mark.parametrize("x", [s[0] for s in SAMPLES[:2] + SAMPLES[3:]])
def test_one_sample_t_is_scipys(x):
    assert ours.one_sample_t(x) == pytest.approx(stats.ttest_1samp(x, 0.0).statistic, rel=1e-12)
    assert ours.one_sample_t(x, mu=0.7) == pytest.approx(stats.ttest_1samp(x, 0.7).statistic, rel=1e-12)


@pytest.mark.parametrize("df", [1, 2, 2.5, 3.7, 4, 10, 63.2, 1e3, 1e4])
def test_student_t_p_and_quantile_are_scipys(df):
    for t in (0.0, 0.1, 0.5, 1.0, 1.96, 2.5, 4.0, 10.0, 100.0):
        assert ours.student_t_sf2(t, df) == pytest.approx(2 * stats.t.sf(t, df), rel=1e-9, abs=1e-10)
        assert ours.student_t_sf2(-t, df) == pytest.approx(2 * stats.t.sf(t, df), rel=1e-9, abs=1e-10)
    for p in (0.5, 0.1, 0.05, 0.01, 0.001):
        assert ours.student_t_quantile(p, df) == pytest.approx(stats.t.isf(p / 2, df), rel=1e-9)


@pytest.mark.parametrize("df", [1.01, 1.1, 1.5, 1.9, 1e5, 1e6])
def test_student_t_quadrature_is_coarser_below_two_and_at_huge_df(df):
    """Measured, as student_t_sf2's docstring states: for 1 < df < 2 the integrand
    cos(u)^(df-1) has an infinite slope at pi/2 (p off by up to 5e-6 near df = 1.1), and at df >~ 1e5
    its peak is narrower than Simpson's step (2e-7 at 1e6).  A Welch df falls below 2 only with a
    2-value sample that dominates the variance; p-values are quoted to 3 decimals."""
    worst = max(abs(ours.student_t_sf2(t, df) - 2 * stats.t.sf(t, df)) for t in np.linspace(0, 10, 101))
    assert worst < 1e-5
    for p in (0.1, 0.05, 0.01):
        assert ours.student_t_quantile(p, df) == pytest.approx(stats.t.isf(p / 2, df), rel=2e-4)


def test_fisher_one_sided_is_scipys_fisher_exact():
    for n_a, n_b in ((3, 3), (8, 8), (4, 9), (12, 7)):
        for hits_a in range(n_a + 1):
            for hits_b in range(n_b + 1):
                table = [[hits_a, n_a - hits_a], [hits_b, n_b - hits_b]]
                for direction, alternative in (("less", "less"), ("more", "greater")):
                    assert ours.fisher_one_sided(hits_a, n_a, hits_b, n_b, direction) == pytest.approx(
                        stats.fisher_exact(table, alternative=alternative).pvalue, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("k, n", [(0, 10), (1, 10), (4, 6), (9, 9), (37, 100), (500, 1000)])
def test_wilson_interval_is_scipys(k, n):
    z = stats.norm.isf(0.025)                    # scipy's 95%; rl_lab.tools.stats' default rounds it to 1.96
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert ours.wilson_interval(k, n, z=z) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert ours.wilson_interval(k, n) == pytest.approx((ci.low, ci.high), abs=1e-4)


def test_power_law_exponent_is_the_slope_scipy_fits_on_logs():
    x = np.array([16, 128, 512, 2048])
    y = 3 * x ** 1.4 * np.exp(RNG.normal(0, 0.1, len(x)))
    assert ours.power_law_exponent(x, y) == pytest.approx(stats.linregress(np.log(x), np.log(y)).slope, rel=1e-12)


@pytest.mark.parametrize("table", [(8, 8, 3, 8), (0, 8, 4, 8), (6, 8, 4, 8), (5, 8, 5, 8), (0, 8, 0, 8), (2, 5, 7, 9)])
def test_fisher_two_sided_is_scipys(table):
    ha, na, hb, nb = table
    want = stats.fisher_exact([[ha, na - ha], [hb, nb - hb]], alternative="two-sided").pvalue
    assert ours.fisher_two_sided(*table) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("a, b", [([0.8, 0.0, 0.7, 0.75, 0.01, 0.8, 0.0, 0.78], [0.0, 0.01, 0.7, 0.0, 0.0, 0.6, 0.02, 0.0]),
                                  ([1, 2, 3], [2, 4, 6, 8]), ([0.5] * 4, [0.5] * 4)])
def test_permutation_test_is_scipys_exact_test(a, b):
    """Two-sided as |difference| >= observed (scipy's "two-sided" doubles the smaller tail instead,
    which differs for unequal group sizes): scipy's exact test of |mean(x) - mean(y)|, "greater"."""
    r = stats.permutation_test((a, b), lambda x, y: abs(np.mean(x) - np.mean(y)), permutation_type="independent",
                               alternative="greater", n_resamples=np.inf)
    assert ours.permutation_test(a, b) == pytest.approx(r.pvalue, rel=1e-9)
