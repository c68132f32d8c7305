"""Invariants of the correction suite, checked by hypothesis on random batches:
masks only remove, weights are finite and non-negative, and padding never changes a result
(neither garbage values at padded positions nor extra padded columns)."""
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rl_lab.algos.losses import aggregate_loss, policy_loss
from rl_lab.corrections import VERL_RS_OPTIONS, importance_weights, rejection_mask, rollout_correction

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
D = torch.float64


@st.composite
def batches(draw):
    """(old_logp, rollout_logp, mask): (B, T) float64, at least one counted token."""
    B, T = draw(st.integers(1, 6)), draw(st.integers(1, 24))
    scale = draw(st.sampled_from([1e-4, 0.1, 1.0, 8.0, 40.0]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 31 - 1)))
    roll = -torch.rand(B, T, generator=g, dtype=D) * 5
    old = roll + scale * torch.randn(B, T, generator=g, dtype=D)
    mask = (torch.rand(B, T, generator=g) < draw(st.floats(0.2, 1.0))).to(D)
    mask[draw(st.integers(0, B - 1)), draw(st.integers(0, T - 1))] = 1.0
    return old, roll, mask


rs_specs = st.lists(st.sampled_from(VERL_RS_OPTIONS), min_size=1, max_size=3, unique=True).flatmap(
    lambda opts: st.tuples(
        st.just(",".join(opts)),
        st.tuples(*[st.sampled_from(["0.5_2.0", "0.9_1.5", "0.999_1.001", "3.0"]) if o.endswith("k1")
                    else st.sampled_from(["0.001", "0.05", "1.0", "100"]) for o in opts]).map(",".join)))
is_thresholds = st.one_of(st.floats(0.05, 50.0), st.sampled_from(["0.5_5.0", "1.0_1.0", "0.1_2.0", "2.0"]))


def _corrupt_padding(x, mask, seed):
    g = torch.Generator().manual_seed(seed)
    junk = torch.tensor([math.nan, math.inf, -math.inf, 1e30, -1e30], dtype=D)
    noise = junk[torch.randint(0, 5, x.shape, generator=g)]
    return torch.where(mask.bool(), x, noise)


def _pad_columns(x, k, value=0.0):
    return torch.cat([x, torch.full((x.shape[0], k), value, dtype=x.dtype)], 1)


def _same_metrics(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a:
        if math.isnan(a[k]):
            assert math.isnan(b[k]), k
        elif k.endswith("_std"):   # sqrt(E[x^2] - E[x]^2): compare variances, not their sqrt
            assert b[k] ** 2 == pytest.approx(a[k] ** 2, rel=1e-9, abs=1e-12), k
        else:
            assert b[k] == pytest.approx(a[k], rel=1e-9, abs=1e-12), k


@SETTINGS
@given(batches(), rs_specs)
def test_rejection_masks_only_remove(batch, spec):
    old, roll, mask = batch
    new, _ = rejection_mask(old - roll, mask, *spec)
    assert ((new == 0) | (mask == 1)).all() and (new <= mask).all()
    _, new2, _ = rollout_correction(old, roll, mask, "token", 2.0, rollout_rs=spec[0], rollout_rs_threshold=spec[1],
                                    rollout_token_veto_threshold=1e-3)
    assert (new2 <= new).all()                                        # the veto removes more, never adds


@SETTINGS
@given(batches(), st.sampled_from(["token", "sequence"]), is_thresholds, st.booleans())
def test_weights_are_finite_nonnegative_and_zero_on_padding(batch, level, threshold, normalize):
    old, roll, mask = batch
    w, metrics = importance_weights(old - roll, mask, level, threshold, normalize)
    assert torch.isfinite(w).all() and (w >= 0).all() and (w[mask == 0] == 0).all()
    assert not w.requires_grad
    upper = float(str(threshold).split("_")[-1])
    if not normalize:
        assert (w <= upper * (1 + 1e-12)).all()
    assert math.isfinite(metrics["rollout_is_eff_sample_size"])


@SETTINGS
@given(batches(), st.sampled_from([None, "token", "sequence"]), is_thresholds, rs_specs,
       st.integers(0, 2 ** 31 - 1), st.integers(1, 5))
def test_padding_never_changes_a_result(batch, level, threshold, spec, seed, extra):
    old, roll, mask = batch
    kw = dict(rollout_is=level, rollout_is_threshold=threshold, rollout_rs=spec[0], rollout_rs_threshold=spec[1])
    w, new, metrics = rollout_correction(old, roll, mask, **kw)
    # garbage (NaN, inf, 1e30) at padded positions
    w2, new2, metrics2 = rollout_correction(_corrupt_padding(old, mask, seed), _corrupt_padding(roll, mask, seed + 1),
                                            mask, **kw)
    assert torch.equal(new, new2)
    if w is not None:
        assert torch.equal(w, w2)
    _same_metrics(metrics, metrics2)
    # extra padded columns (a longer max length)
    w3, new3, metrics3 = rollout_correction(_pad_columns(old, extra, math.nan), _pad_columns(roll, extra),
                                            _pad_columns(mask, extra), **kw)
    assert torch.equal(new3[:, : mask.shape[1]], new) and (new3[:, mask.shape[1]:] == 0).all()
    if w is not None:
        torch.testing.assert_close(w3[:, : mask.shape[1]], w, rtol=1e-12, atol=0)
    _same_metrics(metrics, metrics3)


@SETTINGS
@given(batches(), st.sampled_from(["token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum"]),
       st.sampled_from(["ppo_clip", "reinforce"]), st.integers(0, 2 ** 31 - 1))
def test_padding_never_changes_the_loss(batch, mode, loss, seed):
    old, roll, mask = batch
    A = torch.randn(old.shape[0], generator=torch.Generator().manual_seed(seed), dtype=D)

    def total(lp, old_lp):
        per_tok, _ = policy_loss(lp, old_lp, A, mask, loss, clip_ratio_c=3.0)
        return aggregate_loss(per_tok, mask, mode)

    clean = total(old, roll)
    dirty = total(_corrupt_padding(old, mask, seed), _corrupt_padding(roll, mask, seed + 1))
    assert clean.item() == pytest.approx(dirty.item(), rel=1e-12, abs=1e-12) or \
        (math.isnan(clean.item()) and math.isnan(dirty.item()))


@SETTINGS
@given(batches(), st.sampled_from([o for o in VERL_RS_OPTIONS if not o.endswith("k1")]),
       st.floats(1e-3, 10.0), st.floats(0.1, 1.0))
def test_a_tighter_threshold_rejects_more(batch, option, upper, shrink):
    old, roll, mask = batch
    loose, _ = rejection_mask(old - roll, mask, option, upper)
    tight, _ = rejection_mask(old - roll, mask, option, upper * shrink)
    assert (tight <= loose).all()
