import math

import pytest
import torch

from rl_lab.config import ConfigError, RLConfig
from rl_lab.corrections import (
    CORRECTION_PRESETS,
    RS_OPTIONS,
    correction_preset,
    geometric_mask,
    importance_weights,
    parse_is_threshold,
    parse_rs,
    rejection_mask,
    rollout_correction,
    token_divergences,
    token_kl,
    token_veto_mask,
    trust_region_mask,
)
from rl_lab.monitors import masked_mean, mismatch_metrics


def _log(x):
    return torch.log(torch.tensor(x, dtype=torch.float64))


def test_token_and_sequence_tis_by_hand():
    lr = _log([[2.0, 0.5, 4.0], [1.5, 1.0, 1.0]])
    m = torch.tensor([[1, 1, 1], [1, 1, 0]])
    w, _ = importance_weights(lr, m, "token", 3.0)
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 3.0], [1.5, 1.0, 0.0]], dtype=w.dtype))
    w, info = importance_weights(lr, m, "sequence", 3.0)
    assert torch.allclose(w, torch.tensor([[3.0, 3.0, 3.0], [1.5, 1.5, 0.0]], dtype=w.dtype))  # 2*.5*4=4 -> 3
    assert info["rollout_is_ratio_fraction_high"] == pytest.approx(0.5)  # one row of two above C
    assert info["rollout_is_max"] == pytest.approx(4.0)                   # raw sequence ratio


def test_icepop_zeroes_weights_outside_the_band_and_keeps_the_mask():
    lr = _log([[0.2, 1.0, 3.0, 9.0]])
    m = torch.ones(1, 4)
    w, info = importance_weights(lr, m, "token", "0.5_5.0")
    assert torch.allclose(w, torch.tensor([[0.0, 1.0, 3.0, 0.0]], dtype=w.dtype))
    assert info["rollout_is_oob_ratio"] == pytest.approx(0.5)
    _, mask, _ = rollout_correction(lr, torch.zeros_like(lr), m, "token", "0.5_5.0")
    assert torch.equal(mask, m)


def test_batch_normalised_weights_have_mean_one():
    torch.manual_seed(0)
    lr = 0.3 * torch.randn(5, 7, dtype=torch.float64)
    m = (torch.rand(5, 7) > 0.3).double()
    m[2] = 0
    w, info = importance_weights(lr, m, "token", 2.0, batch_normalize=True)
    assert masked_mean(w, m).item() == pytest.approx(1.0, abs=1e-7)
    w, info = importance_weights(lr, m, "sequence", 10.0, batch_normalize=True)
    rows = m.sum(-1) > 0
    assert masked_mean(w, m, -1)[rows].mean().item() == pytest.approx(1.0, abs=1e-7)
    assert info["rollout_is_batch_norm_factor"] > 0


def test_log_ratios_are_clamped_so_weights_stay_finite():
    lr = torch.tensor([[500.0, -500.0], [float("inf"), 0.0]], dtype=torch.float64)
    m = torch.ones(2, 2)
    w, _ = importance_weights(lr, m, "token", 1e12)
    assert torch.isfinite(w).all() and w.max().item() == pytest.approx(math.exp(20))
    w, _ = importance_weights(lr[:1], m[:1], "sequence", 1e12)      # 500 - 500 = 0 -> 1
    assert torch.allclose(w, torch.ones_like(w))


def test_detaching_the_weights_is_what_makes_the_gradient_unbiased():
    """Exact expectations over a 5-token categorical: E_mu[w grad log pi A] equals the true
    gradient grad E_pi[A] only when w is detached; differentiating through w adds
    E_mu[log pi grad w A] = E_pi[log pi grad log pi A], which is not zero."""
    torch.manual_seed(1)
    theta = torch.randn(5, dtype=torch.float64, requires_grad=True)
    mu = torch.softmax(torch.randn(5, dtype=torch.float64), -1)
    A = torch.randn(5, dtype=torch.float64)
    true, = torch.autograd.grad((torch.softmax(theta, -1) * A).sum(), theta)
    grads = {}
    for detach in (True, False):
        logp = torch.log_softmax(theta, -1)
        w = torch.exp(logp - mu.log())
        w = w.detach() if detach else w
        surrogate = (mu * w * logp * A).sum()                       # E_mu[w log pi A], exactly
        grads[detach], = torch.autograd.grad(surrogate, theta)
    assert torch.allclose(grads[True], true, atol=1e-12)
    assert (grads[False] - true).abs().max() > 1e-2
    # and rl_lab's weights carry no graph
    logp = torch.zeros(1, 3, requires_grad=True)
    w, _, _ = rollout_correction(logp, torch.full((1, 3), -0.1), torch.ones(1, 3), "token")
    assert not w.requires_grad


def test_k1_rejection_orientation_follows_verl():
    """k1 = -log rho is compared with [log lo, log hi], so "0.6_1.4" keeps rho in [1/1.4, 1/0.6]."""
    lr = _log([[1.5], [0.65], [1.0]])
    m = torch.ones(3, 1)
    mask, _ = rejection_mask(lr, m, "token_k1", "0.6_1.4")
    assert mask.squeeze(-1).tolist() == [1.0, 0.0, 1.0]
    mask, _ = rejection_mask(lr, m, "token_k1", 1.4)                 # symmetric: [1/1.4, 1.4]
    assert mask.squeeze(-1).tolist() == [0.0, 0.0, 1.0]


def test_sequence_options_by_hand_and_combination():
    lr = _log([[2.0, 2.0, 1.0], [1.1, 1.0, 0.0]])                    # row 1: last token is padding
    lr[1, 2] = float("nan")                                          # ... holding garbage
    m = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    k2 = token_divergences(lr)["k2"]
    mask, info = rejection_mask(lr, m, "seq_max_k2", 0.2)            # max k2 row0 = 0.24 > 0.2
    assert mask.tolist() == [[0, 0, 0], [1, 1, 0]]
    assert info["rollout_rs_seq_max_k2_max"] == pytest.approx(k2[0, 0].item())
    mask, _ = rejection_mask(lr, m, "seq_sum_k1", "0.2_5.0")          # prod rho: 4 and 1.1: both kept
    assert mask.tolist() == m.tolist()
    mask, _ = rejection_mask(lr, m, "seq_sum_k1", "0.3_5.0")          # -log 4 < log 0.3 -> reject row 0
    assert mask.tolist() == [[0, 0, 0], [1, 1, 0]]
    both, info = rejection_mask(lr, m, "token_k3,seq_mean_k1,token_k3", "0.2,0.5_2.0")
    assert "rollout_rs_token_k3_mean" in info and "rollout_rs_seq_mean_k1_mean" in info
    a, _ = rejection_mask(lr, m, "token_k3", 0.2)
    b, _ = rejection_mask(lr, m, "seq_mean_k1", "0.5_2.0")
    assert torch.equal(both, a * b)
    assert info["rollout_rs_seq_masked_fraction"] == pytest.approx(0.5)


def test_the_length_trap_and_the_geometric_gate():
    """Per-token ratio 1.001: the sequence product leaves [1/5, 5] past T* = log 5 / log 1.001
    ~ 1610 tokens, while the geometric mean stays 1.001 at every length."""
    for T, kept in ((1000, 1.0), (2000, 0.0)):
        lr = torch.full((1, T), math.log(1.001), dtype=torch.float64)
        m = torch.ones(1, T)
        sum_mask, _ = rejection_mask(lr, m, "seq_sum_k1", 5.0)
        geo_mask, _ = rejection_mask(lr, m, "seq_mean_k1", 1.01)
        assert sum_mask.max().item() == kept and geo_mask.min().item() == 1.0


def test_geometric_mask_matches_verl_seq_mean_k1_when_bounds_are_reciprocal():
    torch.manual_seed(2)
    lr = 0.05 * torch.randn(64, 12, dtype=torch.float64)
    m = torch.ones(64, 12)
    ours = geometric_mask(lr, m, 0.99, 1 / 0.99)
    verl_style, _ = rejection_mask(lr, m, "seq_mean_k1", f"0.99_{1 / 0.99}")
    assert torch.equal(ours, verl_style)
    # asymmetric bounds: verl's option keeps rho_geo in [1/hi, 1/lo], Part 3's gate [lo, hi]
    lr = torch.full((1, 4), math.log(1.3), dtype=torch.float64)
    assert geometric_mask(lr, torch.ones(1, 4), 0.9, 1.5).min() == 1
    assert rejection_mask(lr, torch.ones(1, 4), "seq_mean_k1", "0.9_1.5")[0].max() == 0


def test_token_veto_drops_the_whole_sequence():
    lr = _log([[1.0, 1e-5, 1.0], [1.0, 0.5, 1.0]])
    mask, info = token_veto_mask(lr, torch.ones(2, 3), 1e-4)
    assert mask.tolist() == [[0, 0, 0], [1, 1, 1]]
    assert info["rollout_is_veto_fraction"] == 0.5
    with pytest.raises(ConfigError, match="rollout_token_veto_threshold"):
        token_veto_mask(lr, torch.ones(2, 3), 2.0)


def test_k_estimators_match_the_table_and_trm_uses_max_and_average():
    lr = _log([0.5, 2.0, 10.0, 100.0, 0.01])
    k = token_divergences(lr)
    assert [round(v, 3) for v in k["k3"].tolist()] == [0.193, 0.307, 6.697, 94.395, 3.615]
    assert k["k2"][3].item() == pytest.approx(k["k2"][4].item())      # k2 is symmetric in log rho
    lr = _log([[1.0, 1.0, 1.0, 1.0], [1.05, 1.05, 1.05, 1.05], [1.0, 1.0, 1.0, 3.0]])
    m = torch.ones(3, 4)
    mask, _ = trust_region_mask(lr, m, max_threshold=0.05, avg_threshold=0.01)
    assert mask[:, 0].tolist() == [1, 1, 0]                          # one spike is enough to drop row 2
    same, _ = rejection_mask(lr, m, "seq_max_k2,seq_mean_k3", "0.05,0.01")
    assert torch.equal(mask, same)


def test_exact_kl_trust_region_uses_the_full_distributions():
    torch.manual_seed(3)
    mu_all = torch.log_softmax(torch.randn(4, 5, 7, dtype=torch.float64), -1)
    pi_all = torch.log_softmax(mu_all + 0.3 * torch.randn(4, 5, 7, dtype=torch.float64), -1)
    kl = token_kl(mu_all, pi_all)
    expected = (mu_all.exp() * (mu_all - pi_all)).sum(-1)
    assert torch.allclose(kl, expected) and (kl >= 0).all()
    m = torch.ones(4, 5)
    lr = torch.zeros(4, 5, dtype=torch.float64)                     # samples say nothing ...
    mask, info = trust_region_mask(lr, m, max_threshold=kl.max(-1).values.median().item(), token_kl=kl)
    assert 0 < mask[:, 0].sum() < 4                                  # ... the exact KL does
    assert "rollout_rs_seq_max_kl_max" in info
    with pytest.raises(ConfigError, match="full distributions"):
        rejection_mask(lr, m, "seq_max_kl", 0.1)


def test_masks_only_remove_and_metrics_are_prefixed():
    torch.manual_seed(4)
    old, roll = torch.randn(6, 8), torch.randn(6, 8)
    m = torch.rand(6, 8) > 0.2
    w, mask, metrics = rollout_correction(old, roll, m, "sequence", 2.0, False, "token_k2,seq_mean_k3",
                                          "1.0,0.5", rollout_token_veto_threshold=1e-3)
    assert not (mask.bool() & ~m).any()
    assert all(k.startswith("rollout_corr/") for k in metrics)
    for key in ("kl", "k3_kl", "chi2_token", "chi2_seq", "rollout_is_eff_sample_size",
                "rollout_rs_masked_fraction", "rollout_is_veto_fraction", "log_ppl_abs_diff"):
        assert f"rollout_corr/{key}" in metrics, key
    w, mask, metrics = rollout_correction(old, roll, torch.zeros_like(m), "token")
    assert metrics == {} and torch.equal(w, torch.zeros_like(w))   # an empty batch does not crash
    with pytest.raises(ConfigError, match="sampler's log-probs"):
        rollout_correction(old, None, m, "token")


@pytest.mark.parametrize("call,match", [
    (lambda: parse_is_threshold(0.0), "rollout_is_threshold"),
    (lambda: parse_is_threshold("5.0_0.5"), "lo <= hi"),
    (lambda: parse_is_threshold(True), "rollout_is_threshold"),
    (lambda: parse_rs("seq_max_k1", 2.0), "seq_max_k2"),
    (lambda: parse_rs("token_k2", None), "needs rollout_rs_threshold"),
    (lambda: parse_rs("token_k2", "0.5_2"), "one number"),
    (lambda: parse_rs("token_k1", "2_0.5"), "lo <= hi"),
    (lambda: parse_rs("token_k1,token_k2,seq_mean_k3", "1,2"), "give 1"),
    (lambda: RLConfig(rollout_rs="geometric", rollout_rs_threshold=1.001), "rollout_rs option"),
    (lambda: RLConfig(rollout_rs="seq_mean_k3"), "rollout_rs_threshold"),
    (lambda: RLConfig(rollout_is_threshold=-1), "rollout_is_threshold"),
    (lambda: RLConfig(rollout_token_veto_threshold=5.0), "rollout_token_veto_threshold"),
    (lambda: RLConfig(bypass_mode="yes"), "bypass_mode"),
])
def test_bad_correction_configs_name_the_field_and_the_allowed_values(call, match):
    with pytest.raises(ConfigError, match=match):
        call()


def test_every_option_is_accepted():
    for o in RS_OPTIONS:
        assert list(parse_rs(o, "0.5_2.0" if o.endswith("k1") else 0.1)) == [o]


def test_presets_are_valid_configs():
    assert {"Token-TIS", "Seq-TIS", "Seq-MIS", "Geo-RS", "K3-RS", "TRM", "Token-IcePop",
            "Bypass-PPO-clip", "Bypass-PG-Seq-TIS"} <= set(CORRECTION_PRESETS)
    for name, preset in CORRECTION_PRESETS.items():
        RLConfig(**preset["config"])                                  # validates
        assert preset["source"]
    assert correction_preset("Seq-MIS", rollout_is_threshold=3.0)["rollout_correction"]["rollout_is_threshold"] == 3.0
    assert correction_preset("Seq-MIS", rollout_is_threshold=3.0)["rollout_correction"]["rollout_rs"] == "seq_sum_k1"
    with pytest.raises(ConfigError, match="Seq-TIS"):
        correction_preset("seq-tis")


def test_monitors_are_zero_on_policy_and_positive_off_policy():
    lp = torch.log_softmax(torch.randn(4, 6), -1)
    m = torch.ones(4, 6)
    on = mismatch_metrics(lp, lp, m)
    assert on["k3_kl"] == 0 and on["log_ppl_diff"] == 0 and abs(on["chi2_token"]) < 1e-8  # +1e-8 in masked_mean
    off = mismatch_metrics(lp, lp + 0.1 * torch.randn(4, 6), m)
    assert off["k3_kl"] > 0 and off["log_ppl_abs_diff"] > 0 and off["max_abs_logprob_diff"] > 0
    mu = lp - 0.2   # k1 per-token: mean(log mu - log pi) over the mask
    assert abs(mismatch_metrics(lp, mu, m)["kl"] + 0.2) < 1e-6
    assert mismatch_metrics(lp, mu, m)["ppl_ratio"] == pytest.approx(math.exp(-0.2), rel=1e-6)


def test_trust_region_bounds_reproduce_the_paper_table():
    """T = 4096: KL-only column (delta = 1e-4, Pinsker for the rest) and small-divergence
    column (eps = 5e-3, D_KL^seq = 0.01, D_TV^seq = 0.05) of Li et al. (2025)."""
    from rl_lab.corrections import trust_region_bounds
    kl_only = trust_region_bounds(4096, 1e-4, kl_seq=0.01)
    small = trust_region_bounds(4096, 1e-4, eps=5e-3, kl_seq=0.01, tv_seq=0.05)
    assert kl_only["classical_kl"] == pytest.approx(1677.3, abs=0.05)
    assert small["classical_tv"] == pytest.approx(838.7, abs=0.05)
    assert kl_only["pm_kl"] == pytest.approx(34.95, abs=0.01) and small["pm_tv"] == pytest.approx(24.71, abs=0.01)
    assert kl_only["mixed_kl"] == pytest.approx(8.19, abs=0.01) and small["mixed_tv"] == pytest.approx(4.10, abs=0.01)
    assert kl_only["coupling"] == pytest.approx(113.8, abs=0.1) and small["coupling"] == pytest.approx(79.9, abs=0.1)
    assert kl_only["unified"] == pytest.approx(8.19, abs=0.01) and small["unified"] == pytest.approx(4.10, abs=0.01)
    # the adaptive bound's TV route recovers the coupling bound when every position has D_t = eps
    adaptive = trust_region_bounds(4096, 1e-4, eps=5e-3, tv_per_step=[5e-3] * 4096)
    assert adaptive["adaptive_tv"] == pytest.approx(small["coupling"], rel=1e-12)
    assert adaptive["adaptive"] <= min(adaptive["adaptive_tv"], adaptive["adaptive_kl"])
