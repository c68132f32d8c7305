"""rl_lab's corrections, losses and advantages against verl 0.9.1's own functions.

Install verl with `bash tools/install_verl.sh` (verl --no-deps plus its few import-time
packages); without it this module is skipped, or fails with RL_LAB_REQUIRE_VERL=1 (CI).  Inputs are float64 on both sides: random,
extreme log-ratios (beyond the +-20 safety clamp), NaN/inf at padding and at counted tokens,
empty rows, a single row, length-1 and long sequences.

Deliberate differences, each asserted below rather than hidden:
  * padding: rl_lab's weights are 0 on padding even when the inputs there are NaN
    (verl's token-level weights are NaN there); only counted tokens are compared.
  * IcePop with every weight outside the band: verl raises ZeroDivisionError computing the
    effective sample size; rl_lab reports 0.
  * an entirely empty mask: verl raises; rl_lab returns no metrics (a failed batch must not
    crash a run).  Aggregating over an empty mask (e.g. rejection removed every token of the
    batch): verl's loss is 0/0 = NaN, rl_lab's is 0.
  * GRPO/RLOO on a one-member group: verl keeps the raw score (mean 0, std 1); rl_lab gives 0.
  * rl_lab logs one extra monitor, max_abs_logprob_diff.
"""
import math
import os
import types

import pytest
import torch

# CI (.ci/run) sets RL_LAB_REQUIRE_VERL=1: there a missing or wrong verl fails the run instead of
# skipping the whole suite.
REQUIRE = os.environ.get("RL_LAB_REQUIRE_VERL", "") == "1"


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"{reason} (RL_LAB_REQUIRE_VERL=1 makes this a failure)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


try:
    import verl  # noqa: F401
except ImportError as exc:
    _unavailable(f"verl does not import ({exc}): run `bash tools/install_verl.sh` "
                 "(the conformance suite needs 0.9.1)")
from importlib.metadata import version  # noqa: E402

if version("verl") != "0.9.1":
    _unavailable(f"conformance is pinned to verl 0.9.1, found {version('verl')}")

from verl.trainer.config.algorithm import RolloutCorrectionConfig  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo import rollout_corr_helper as H  # noqa: E402
from verl.utils.torch_functional import calculate_sum_pi_squared_from_logits  # noqa: E402
from verl.workers.config.actor import ActorConfig, PolicyLossConfig  # noqa: E402

from rl_lab.algos.advantages import (  # noqa: E402
    optimal_token_baseline,
    reinforce_plus_plus,
    reinforce_plus_plus_baseline,
    sum_pi_squared,
)
from rl_lab.algos.correction import bypass_policy_loss  # noqa: E402
from rl_lab.algos.estimators import ADV_ESTIMATORS, AdvantageInputs  # noqa: E402
from rl_lab.algos.losses import aggregate_loss, group_advantages, policy_loss  # noqa: E402
from rl_lab.corrections import (  # noqa: E402
    CORRECTION_PRESETS,
    VERL_RS_OPTIONS,
    importance_weights,
    rejection_mask,
    rollout_correction,
)
from rl_lab.monitors import mismatch_metrics  # noqa: E402

D = torch.float64
# rl_lab monitors with no verl counterpart (the share of tokens whose log-probs differ: issue 49)
RL_LAB_ONLY_KEYS = {"max_abs_logprob_diff", "tokens_differ"}
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                  "seq-mean-token-sum-norm")


def _mask(B, T, g, p=0.75):
    m = (torch.rand(B, T, generator=g) < p).to(D)
    m[:, 0] = 1.0
    return m


def cases():
    """(name, old_logp, rollout_logp, mask), all (B, T) float64, at least one counted token."""
    g = torch.Generator().manual_seed(0)
    out = []
    for name, B, T, scale in (("random", 8, 12, 0.3), ("tiny-mismatch", 6, 10, 1e-3),
                              ("extreme", 8, 12, 30.0), ("length-1", 7, 1, 0.5),
                              ("long", 4, 512, 0.05), ("one-row", 1, 9, 0.4)):
        lp = -torch.rand(B, T, generator=g, dtype=D) * 3
        old = lp + scale * torch.randn(B, T, generator=g, dtype=D)
        m = _mask(B, T, g)
        if B > 2:
            m[1] = 0.0                                   # an empty row
        out.append((name, old, lp, m))
    name, old, lp, m = out[0]
    old, lp = old.clone(), lp.clone()
    old[m == 0] = float("nan")                           # garbage at padding
    lp[(m == 0) & (torch.arange(12) % 2 == 0)] = float("inf")
    out.append(("nonfinite-padding", old, lp, m))
    old2 = out[0][1].clone()
    old2[0, 0] = float("nan")                            # garbage at a counted token
    out.append(("nan-counted", old2, out[0][2], out[0][3]))
    return out


CASES = cases()
IDS = [c[0] for c in CASES]


def assert_metrics_equal(ours: dict, theirs: dict, prefix: str = ""):
    extra = {k for k in ours if k.removeprefix(prefix) in RL_LAB_ONLY_KEYS}
    assert set(ours) - extra == set(theirs), (set(ours) - extra) ^ set(theirs)
    for k, v in theirs.items():
        v = float(v)
        a = ours[k]
        if math.isnan(v):
            assert math.isnan(a), (k, a, v)
        else:
            assert a == pytest.approx(v, rel=1e-9, abs=1e-12), (k, a, v)


def assert_on_mask(ours, theirs, m):
    sel = m.bool()
    torch.testing.assert_close(ours[sel], theirs[sel], rtol=1e-12, atol=0, equal_nan=True)
    assert (ours[~sel] == 0).all()


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_importance_weights(case):
    _, old, roll, m = case
    lr = old - roll
    for level in ("token", "sequence"):
        for thr in (2.0, "1.5", "0.5_5.0", "1.0_1.0"):
            for bn in (False, True):
                w, metrics = importance_weights(lr, m, level, thr, bn)
                try:
                    w_v, metrics_v = H.compute_rollout_correction_weights(lr, m, level, thr, bn)
                except ZeroDivisionError:    # every weight zeroed by IcePop: ESS 1/0 in verl
                    assert metrics["rollout_is_eff_sample_size"] == 0.0 and (w == 0).all()
                    continue
                assert_on_mask(w, w_v, m)
                assert_metrics_equal(metrics, metrics_v)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rejection_options(case):
    _, old, roll, m = case
    lr = old - roll
    specs = [(o, t) for o in VERL_RS_OPTIONS
             for t in (("0.6_1.4", "0.999_1.001", 2.0) if o.endswith("k1") else ("0.01", 2.5))]
    specs += [("token_k1,seq_max_k2", "0.6_1.6,2.5"), ("seq_mean_k3,seq_max_k2", "0.002,0.1"),
              ("seq_sum_k1,token_k3,seq_sum_k1", "0.5_2.0,0.3"), ("seq_mean_k2,seq_sum_k3", 1.0)]
    for option, thr in specs:
        mask, metrics = rejection_mask(lr, m, option, thr)
        mask_v, metrics_v = H.compute_rollout_rejection_mask(lr, m, option, thr)
        assert torch.equal(mask, mask_v), (option, thr)
        assert_metrics_equal(metrics, metrics_v)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_offpolicy_metrics(case):
    _, old, roll, m = case
    assert_metrics_equal(mismatch_metrics(old, roll, m), H.compute_offpolicy_metrics(old, roll, m))


def _verl_presets():
    return {p["verl"]: name for name, p in CORRECTION_PRESETS.items() if p["verl"]}


def _flat(fields: dict) -> dict:
    """A preset's RLConfig fields with rollout_correction's knobs at the top level, as verl's names."""
    return {**{k: v for k, v in fields.items() if k != "rollout_correction"}, **fields.get("rollout_correction", {})}


def test_presets_match_verl():
    """Every named preset that cites a verl preset sets exactly verl's fields."""
    presets = _verl_presets()
    verl_names = [n for n in dir(RolloutCorrectionConfig) if n.startswith(("decoupled_", "bypass_", "disabled"))
                  and callable(getattr(RolloutCorrectionConfig, n))]
    assert set(verl_names) == set(presets), set(verl_names) ^ set(presets)
    for verl_name, ours in presets.items():
        v = getattr(RolloutCorrectionConfig, verl_name)()
        c = _flat(CORRECTION_PRESETS[ours]["config"])
        assert c.get("rollout_is") == v.rollout_is, verl_name
        if v.rollout_is is not None:
            assert str(c["rollout_is_threshold"]) == str(v.rollout_is_threshold), verl_name
        assert c.get("rollout_rs") == v.rollout_rs, verl_name
        if v.rollout_rs is not None:
            assert str(c["rollout_rs_threshold"]) == str(v.rollout_rs_threshold), verl_name
        assert c.get("rollout_is_batch_normalize", False) == v.rollout_is_batch_normalize
        assert c.get("bypass_mode", False) == v.bypass_mode, verl_name
        if v.bypass_mode:
            assert c["policy_loss"] == v.loss_type, verl_name


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rollout_correction_entry_point_for_every_verl_preset(case):
    _, old, roll, m = case
    for verl_name, ours in _verl_presets().items():
        v = getattr(RolloutCorrectionConfig, verl_name)()
        c = _flat(CORRECTION_PRESETS[ours]["config"])
        kw = {k: c[k] for k in ("rollout_is", "rollout_is_threshold", "rollout_rs", "rollout_rs_threshold")
              if k in c}
        w, mask, metrics = rollout_correction(old, roll, m, **kw)
        proto, mask_v, metrics_v = H.compute_rollout_correction_and_rejection_mask(
            old, roll, m, v.rollout_is, v.rollout_is_threshold, v.rollout_is_batch_normalize,
            v.rollout_rs, v.rollout_rs_threshold)
        assert torch.equal(mask, mask_v) and (w is None) == (proto is None), verl_name
        if w is not None:
            assert_on_mask(w, proto.batch["rollout_is_weights"], m)
        assert_metrics_equal(metrics, metrics_v, "rollout_corr/")


def _actor(loss_type="ppo_clip", correction=None, clip_low=0.2, clip_high=0.28):
    rc = correction or RolloutCorrectionConfig(rollout_is=None, loss_type=loss_type, bypass_mode=True)
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size=2, clip_ratio_low=clip_low,
                       clip_ratio_high=clip_high, clip_ratio_c=3.0,
                       policy_loss=PolicyLossConfig(loss_mode="bypass_mode", rollout_correction=rc))


def _grad(loss, x):
    g, = torch.autograd.grad(loss, x, allow_unused=True)
    return g


@pytest.mark.parametrize("case", [c for c in CASES if c[0] not in ("nan-counted", "nonfinite-padding")],
                         ids=[i for i in IDS if i not in ("nan-counted", "nonfinite-padding")])
def test_decoupled_ppo_dual_clip_and_reinforce_losses(case):
    _, old, roll, m = case
    g = torch.Generator().manual_seed(1)
    A = torch.randn(old.shape, generator=g, dtype=D) * 2
    w, _ = importance_weights(old - roll, m, "token", 2.0)
    cfg = _actor()
    for mode in LOSS_AGG_MODES:
        for weights in (None, w):
            lp = (old + 0.5 * torch.randn(old.shape, generator=g, dtype=D)).requires_grad_(True)
            per_tok, info = policy_loss(lp, old, A, m, "ppo_clip", 0.2, 0.28, weights, clip_ratio_c=3.0)
            ours = aggregate_loss(per_tok, m, mode)
            theirs, info_v = core_algos.compute_policy_loss_vanilla(old, lp, A, m, mode, cfg, weights)
            assert ours.item() == pytest.approx(theirs.item(), rel=1e-10, abs=1e-12), mode
            torch.testing.assert_close(_grad(ours, lp), _grad(theirs, lp), rtol=1e-9, atol=1e-12)
            for k in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"):
                assert info[k] == pytest.approx(info_v[k], rel=1e-9, abs=1e-12), k
            per_tok, _ = policy_loss(lp, roll, A, m, "reinforce", is_weights=weights)
            ours = aggregate_loss(per_tok, m, mode)
            theirs, _ = core_algos.compute_policy_loss_reinforce(roll, lp, A, m, mode, cfg, weights)
            assert ours.item() == pytest.approx(theirs.item(), rel=1e-10, abs=1e-12), mode
            torch.testing.assert_close(_grad(ours, lp), _grad(theirs, lp), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in ("random", "extreme", "long", "length-1")],
                         ids=["random", "extreme", "length-1", "long"])
def test_bypass_mode(case):
    _, old, roll, m = case
    A = torch.randn(old.shape, generator=torch.Generator().manual_seed(2), dtype=D)
    for verl_name in ("bypass_ppo_clip", "bypass_ppo_clip_geo_rs", "bypass_ppo_clip_k3_rs", "bypass_pg_is",
                      "bypass_pg_geo_rs_token_tis", "bypass_pg_token_icepop"):
        rc = getattr(RolloutCorrectionConfig, verl_name)()
        if verl_name == "bypass_ppo_clip_geo_rs":
            rc = RolloutCorrectionConfig(rollout_is=None, rollout_rs="seq_mean_k1", rollout_rs_threshold="0.5_2.0",
                                         bypass_mode=True, loss_type="ppo_clip")   # the preset rejects all here
        c = _flat(CORRECTION_PRESETS[_verl_presets()[verl_name]]["config"])
        for mode in ("token-mean", "seq-mean-token-mean"):
            lp = old.clone().requires_grad_(True)
            kw = dict(rollout_is=rc.rollout_is, rollout_is_threshold=rc.rollout_is_threshold,
                      rollout_rs=rc.rollout_rs, rollout_rs_threshold=rc.rollout_rs_threshold)
            try:
                theirs, info_v = core_algos.compute_policy_loss_bypass_mode(roll, lp, A, m, mode, _actor(correction=rc))
            except ZeroDivisionError:
                continue
            weights, loss_mask, corr_info = rollout_correction(lp.detach(), roll, m, **kw)
            per_tok, pg_info = bypass_policy_loss(lp, roll, A, loss_mask, weights, c["policy_loss"], 0.2, 0.28, 3.0)
            info = {**pg_info, **corr_info}
            ours = aggregate_loss(per_tok, loss_mask, mode)
            if not loss_mask.any():   # rejection removed every token: verl divides 0 by 0
                assert ours.item() == 0 and math.isnan(theirs.item())
                continue
            assert ours.item() == pytest.approx(theirs.item(), rel=1e-10, abs=1e-12), (verl_name, mode)
            torch.testing.assert_close(_grad(ours, lp), _grad(theirs, lp), rtol=1e-9, atol=1e-12)
            assert_metrics_equal({k: v for k, v in info.items() if k in info_v}, info_v)


def test_loss_aggregation_modes():
    g = torch.Generator().manual_seed(3)
    for B, T in ((5, 7), (1, 1), (3, 300)):
        L = torch.randn(B, T, generator=g, dtype=D)
        m = _mask(B, T, g)
        if B > 2:
            m[1] = 0
        L[m == 0] = float("nan")                         # padding never counts (verl: where-masked sums)
        for mode in LOSS_AGG_MODES:
            theirs = core_algos.agg_loss(L.nan_to_num(0.0), m, mode)
            assert aggregate_loss(L, m, mode).item() == pytest.approx(theirs.item(), rel=1e-10), mode
        for factor in (4, 100):
            theirs = core_algos.agg_loss(L.nan_to_num(0.0), m, "seq-mean-token-sum-norm", loss_scale_factor=factor)
            ours = aggregate_loss(L, m, "seq-mean-token-sum-norm", norm_length=factor)
            assert ours.item() == pytest.approx(theirs.item(), rel=1e-10)
    assert math.isnan(core_algos.agg_loss(L, torch.zeros_like(m), "token-mean").item())
    assert aggregate_loss(L, torch.zeros_like(m), "token-mean").item() == 0.0


def _groups(sizes):
    return torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])


def test_grpo_and_rloo_advantages():
    g = torch.Generator().manual_seed(4)
    for sizes in ((4, 4, 4), (2, 8, 3), (16,)):
        ids = _groups(sizes)
        B, T = len(ids), 6
        m = _mask(B, T, g)
        scores = torch.randint(0, 2, (B,), generator=g).to(D) + 0.1 * torch.randn(B, generator=g, dtype=D)
        token_r = torch.zeros(B, T, dtype=D)
        token_r[:, 0] = scores
        index = ids.numpy()
        for norm in (True, False):
            theirs, _ = core_algos.compute_grpo_outcome_advantage(token_r, m, index, 1e-6, norm)
            ours = group_advantages(scores, ids, scale_rewards="group" if norm else "none", eps=1e-6)
            torch.testing.assert_close(ours[:, None] * m, theirs, rtol=1e-9, atol=1e-12)
        theirs, _ = core_algos.compute_rloo_outcome_advantage(token_r, m, index)
        ours = group_advantages(scores, ids, estimator="rloo")
        torch.testing.assert_close(ours[:, None] * m, theirs, rtol=1e-9, atol=1e-12)
    # the documented difference: a one-member group
    ids, m = _groups((1, 2)), torch.ones(3, 2, dtype=D)
    token_r = torch.tensor([[0.0, 5.0], [0.0, 1.0], [0.0, 0.0]], dtype=D)
    theirs, _ = core_algos.compute_rloo_outcome_advantage(token_r, m, ids.numpy())
    assert theirs[0, 0].item() == 5.0
    assert group_advantages(token_r.sum(-1), ids, estimator="rloo")[0].item() == 0.0


def test_grpo_default_epsilon_is_verls():
    """With the defaults on both sides (verl's epsilon=1e-6; rl_lab's group_advantages and
    ADV_ESTIMATORS["grpo"], as the trainer calls them) a group whose scores barely differ gets the
    same advantages: -+0.706 for [0, 0.001], where an epsilon of 1e-4 gives -+0.620."""
    ids, m = _groups((2, 3)), torch.ones(5, 3, dtype=D)
    scores = torch.tensor([0.0, 0.001, 1.0, 1.0005, 0.9995], dtype=D)
    token_r = torch.zeros(5, 3, dtype=D)
    token_r[:, -1] = scores
    theirs, _ = core_algos.compute_grpo_outcome_advantage(token_r, m, ids.numpy())
    assert theirs[0, 0].item() == pytest.approx(-0.0005 / (0.001 / math.sqrt(2) + 1e-6), rel=1e-12)
    torch.testing.assert_close(group_advantages(scores, ids)[:, None] * m, theirs, rtol=1e-9, atol=1e-12)
    ours = ADV_ESTIMATORS["grpo"](AdvantageInputs(scores, m.bool(), ids, torch.ones(5, dtype=torch.bool)))
    torch.testing.assert_close(ours.to(D), theirs, rtol=1e-9, atol=1e-12)


def test_reinforce_plus_plus_with_and_without_baseline():
    g = torch.Generator().manual_seed(5)
    ids = _groups((3, 1, 4))
    B, T = len(ids), 9
    m = _mask(B, T, g, 0.8)
    m[:, 4] = 0                                          # an observation span inside the response
    r = torch.randn(B, T, generator=g, dtype=D) * (torch.rand(B, T, generator=g) < 0.3)
    for gamma in (1.0, 0.9):
        theirs, ret_v = core_algos.compute_reinforce_plus_plus_outcome_advantage(
            r, m, config=types.SimpleNamespace(gamma=gamma))
        ours, ret = reinforce_plus_plus(r, m, gamma)
        torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(ret, ret_v, rtol=1e-12, atol=1e-12)
    theirs, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(r, m, ids.numpy())
    ours, _ = reinforce_plus_plus_baseline(r, m, ids)
    torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-12)


def test_optimal_token_baseline():
    g = torch.Generator().manual_seed(6)
    V = 11
    for sizes, lengths in (((4, 3, 1), None), ((5,), (9, 3, 3, 2, 1)), ((3, 3), (4, 4, 2, 6, 6, 6))):
        ids = _groups(sizes)
        B, T = len(ids), 9
        if lengths is None:
            m = _mask(B, T, g, 0.9)
        else:
            m = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).to(D)
        logits = torch.randn(B, T, V, generator=g, dtype=D) * 2
        logp_all = torch.log_softmax(logits, -1)
        tokens = torch.randint(0, V, (B, T), generator=g)
        old_lp = logp_all.gather(-1, tokens[..., None]).squeeze(-1)
        spp = sum_pi_squared(logp_all)
        torch.testing.assert_close(spp, calculate_sum_pi_squared_from_logits(logits), rtol=1e-12, atol=1e-14)
        r = torch.zeros(B, T, dtype=D)
        last = (m.sum(-1).long() - 1).clamp(min=0)
        r[torch.arange(B), last] = torch.randint(0, 2, (B,), generator=g).to(D)
        w = torch.rand(B, T, generator=g, dtype=D) * 2
        for is_w in (None, w):
            for tail in (True, False):
                theirs, ret_v = core_algos.compute_optimal_token_baseline_advantage(
                    r, m, ids.numpy(), old_lp, spp, is_w, handle_zero_tail=tail)
                ours, ret = optimal_token_baseline(r, m, ids, old_lp, spp, is_w, handle_zero_tail=tail)
                torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-12)
                torch.testing.assert_close(ret, ret_v)
