"""rl_lab.toolkits.compare: the seeds x methods grid, its summary, its figure, and threshold calibration."""
import math

import numpy as np
import pytest
import torch

from rl_lab.config import ConfigError
from rl_lab.corrections import correction_preset, rejection_mask
from rl_lab.toolkits.compare import format_mean_std, plot_bands, quantile_threshold, row_statistic, run_grid, summarize

TINY = dict(max_steps=2, prompts_per_step=2, num_generations=2, max_completion_length=4)


@pytest.fixture(scope="module")
def grid():
    methods = {"none": {}, "Token-TIS": correction_preset("Token-TIS")}
    return run_grid(methods, seeds=[0, 1], preset="smoke", sampler_logit_noise=0.5, **TINY)


def test_grid_has_one_row_per_method_seed_step(grid):
    assert len(grid) == 2 * 2 * 2
    assert list(grid["method"].cat.categories) == ["none", "Token-TIS"]
    assert set(grid.groupby(["method", "seed"], observed=True).size()) == {2}
    # the IS metrics appear only where IS is on
    assert grid.loc[grid.method == "none", "rollout_corr/rollout_is_mean"].isna().all()
    w = grid.loc[grid.method == "Token-TIS", "rollout_corr/rollout_is_max"]
    assert (w <= 2.0 + 1e-6).all()


def test_grid_is_deterministic_per_seed(grid):
    again = run_grid({"none": {}}, seeds=[1], preset="smoke", sampler_logit_noise=0.5, **TINY)
    ref = grid[(grid.method == "none") & (grid.seed == 1)].reset_index(drop=True)
    for key in ("reward", "grad_norm", "rollout_corr/k3_kl"):
        np.testing.assert_allclose(again[key].to_numpy(), ref[key].to_numpy(), rtol=1e-6)


def test_summarize_is_mean_and_std_over_seeds_of_per_run_means(grid):
    s = summarize(grid, ["reward", "grad_norm"])
    per_run = grid[grid.method == "Token-TIS"].groupby("seed")["grad_norm"].mean()
    assert s.loc["Token-TIS", ("grad_norm", "mean")] == pytest.approx(per_run.mean())
    assert s.loc["Token-TIS", ("grad_norm", "std")] == pytest.approx(per_run.std(ddof=1))
    assert s.loc["none", ("reward", "n")] == 2
    last = summarize(grid, "reward", last=1)
    final = grid[grid.step == 2].groupby("method", observed=True)["reward"].mean()
    assert last[("reward", "mean")].to_numpy() == pytest.approx(final.to_numpy())
    table = format_mean_std(s)
    assert list(table.columns) == ["reward", "grad_norm"] and "±" in table.iloc[0, 0]


def test_bad_names_raise_clear_errors(grid):
    with pytest.raises(ConfigError, match="not logged"):
        summarize(grid, "no_such_metric")
    with pytest.raises(ConfigError, match="set each field in one place"):
        run_grid({"a": {"max_steps": 3}}, seeds=[0], max_steps=2)
    with pytest.raises(ConfigError, match="at least one seed"):
        run_grid({"a": {}}, seeds=[])
    with pytest.raises(ConfigError, match="sequence-level"):
        row_statistic(torch.zeros(2, 3), torch.ones(2, 3), "token_k1")


def test_plot_bands_draws_a_mean_line_per_method(grid):
    fig = plot_bands(grid, ["reward", "grad_norm"])
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == 2
    import matplotlib.pyplot as plt
    plt.close(fig)


@pytest.mark.parametrize("option", ["seq_mean_k1", "seq_sum_k1", "seq_mean_k3", "seq_max_k2"])
def test_quantile_threshold_keeps_the_asked_fraction(option):
    g = torch.Generator().manual_seed(0)
    log_ratio = 0.3 * torch.randn(200, 7, generator=g)
    mask = (torch.rand(200, 7, generator=g) < 0.8).float()
    mask[:, 0] = 1
    thr = quantile_threshold(log_ratio, mask, option, keep=0.75)
    kept_mask, _ = rejection_mask(log_ratio, mask, option, thr)
    kept = (kept_mask.sum(-1) > 0).float().mean().item()
    assert kept == pytest.approx(0.75, abs=0.02)
    if option.endswith("k1"):
        assert thr > 1 and math.isfinite(thr)
