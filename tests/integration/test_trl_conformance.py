"""rl_lab's importance weights against TRL 1.16's own vLLM importance-sampling code.

TRL computes the ratio inline in GRPOTrainer._generate_and_score_completions; the tests drive that
code through rl_lab.integrations.trl_reference.TrlCorrectionProbe (a GRPOTrainer on rl_lab's tiny
Qwen2, built in memory, whose rollout_func returns fixed completions and the sampler's log-probs,
with use_vllm switched on after construction).  The log-ratios are random, per-row scales from
1e-2 to 2 over 16 completions of 1 to 12 tokens, so sequences land on both sides of the caps.
TRL computes in float32; rl_lab runs in float64 on TRL's own old and sampler log-probs.

For each of TRL's four modes, rl_lab's mode given by rl_lab.integrations.trl.correction_from_trl
(token/sequence IS truncated at C, or IcePop's band for the masks) gives TRL's weights on every
counted token and TRL's loss on the batch, to float32 rounding; the export's mapping
(trl_correction_args) gives TRL's mode back.

Differences, each asserted rather than hidden (chapter 5's dropdown "rl_lab, verl and TRL"):
  * padding: TRL's token ratio is exp(0) = 1 on padding, rl_lab's weight 0 (the loss masks both).
  * the sequence ratio: TRL's is exp(sum of log-ratios) unclamped; rl_lab's (verl's) clamps the sum at
    +-20 first.  Above +20 both cut the sequence; below -20 the weights differ by at most exp(-20).
  * a mask without clip_min (TRL's default): rl_lab needs a lower bound; MASK_FLOOR = exp(-20) keeps
    every ratio.
  * what is masked: TRL's sequence_mask zeroes the weight and keeps the tokens in the loss's
    denominator (as rl_lab's IcePop); verl's Seq-MIS (rollout_rs) removes them from the mask, so its
    token-mean loss is TRL's times (all tokens / kept tokens).
  * the logged ratio: TRL's sampling/importance_sampling_ratio/* are after truncation or masking (its
    max never exceeds the cap); rl_lab's sequence-level rollout_is_max is before.
  * TRL's traps, read from its source: the docstring calls token_truncate the default while the code's
    default is sequence_mask; use_bias_correction_kl defaults to True.

Without TRL 1.16 the module is skipped; RL_LAB_REQUIRE_TRL=1 (CI, .ci/run) makes that a failure.
"""
import inspect
import math
import os

import pytest
import torch

REQUIRE = os.environ.get("RL_LAB_REQUIRE_TRL", "") == "1"


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"{reason} (RL_LAB_REQUIRE_TRL=1 makes this a failure)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


try:
    import trl  # noqa: F401
except ImportError as exc:
    _unavailable(f"TRL does not import ({exc}): `make setup` installs it (the [trl] extra)")
from importlib.metadata import version  # noqa: E402

if version("trl") != "1.16.0":
    _unavailable(f"conformance is pinned to TRL 1.16.0, found {version('trl')}")

from trl import GRPOConfig  # noqa: E402

from rl_lab.algos.losses import aggregate_loss, policy_loss  # noqa: E402
from rl_lab.config import CorrectionConfig  # noqa: E402
from rl_lab.corrections import importance_weights, rollout_correction  # noqa: E402
from rl_lab.integrations.trl import (  # noqa: E402
    MASK_FLOOR,
    TRL_MODES,
    correction_from_trl,
    trl_correction_args,
)
from rl_lab.integrations.trl_reference import TrlCorrectionProbe  # noqa: E402

D = torch.float64
G, LENGTHS = 4, [12, 1, 7, 3, 12, 9, 5, 2, 11, 4, 8, 12, 6, 10, 3, 12]
REWARDS = [float((3 * i) % 5) for i in range(len(LENGTHS))]
SETTINGS = [(mode, 3.0, None) for mode in TRL_MODES] + [   # TRL's cap 3.0 without clip_min, then others
    ("token_truncate", 1.5, None), ("sequence_truncate", 1.5, None), ("token_mask", 2.0, 0.5),
    ("sequence_mask", 2.0, 0.5)]
IDS = [f"{m}-{hi}-{lo}" for m, hi, lo in SETTINGS]


@pytest.fixture(scope="module")
def probe():
    return TrlCorrectionProbe(LENGTHS, REWARDS, num_generations=G, seed=0)


def random_log_ratio(seed: int = 1) -> torch.Tensor:
    """(B, T) log pi/mu: each row at its own scale, from 1e-2 to 2 per token."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.logspace(-2, math.log10(2.0), len(LENGTHS))[torch.randperm(len(LENGTHS), generator=g)]
    return scale[:, None] * torch.randn(len(LENGTHS), max(LENGTHS), generator=g)


def rl_lab_side(res: dict, fields: dict):
    """rl_lab's weights (B, T), mask, metrics and token-mean PPO loss on TRL's own tensors."""
    old, sampling, mask = res["old"].to(D), res["sampling"].to(D), res["mask"].to(D)
    rc = CorrectionConfig(**fields)
    w, new_mask, metrics = rollout_correction(old, sampling, mask, config=rc)
    logp = old.clone().requires_grad_(True)                  # on-policy: pi_theta = pi_old, r = 1
    per_token, _ = policy_loss(logp, old, res["advantages"].to(D), new_mask, "ppo_clip", 0.2, None, w)
    return w, new_mask, metrics, aggregate_loss(per_token, new_mask, "token-mean").item()


def trl_weights(res: dict) -> torch.Tensor:
    """TRL's ratio as (B, T): a sequence mode's (B, 1) broadcast over the row."""
    return res["ratio"].to(D).expand_as(res["old"])


@pytest.mark.parametrize("mode,clip_max,clip_min", SETTINGS, ids=IDS)
def test_weights_and_loss_equal_trls(probe, mode, clip_max, clip_min):
    res = probe.run(random_log_ratio(), mode, clip_max, clip_min)
    fields = correction_from_trl(mode, clip_max, clip_min)
    w, new_mask, metrics, loss = rl_lab_side(res, fields)
    m = res["mask"].bool()
    ours, theirs = w[m], trl_weights(res)[m]
    assert torch.allclose(ours, theirs, rtol=2e-5, atol=1e-7), (ours - theirs).abs().max()
    cut = (theirs == 0) if mode.endswith("mask") else (theirs >= clip_max * (1 - 1e-6))
    assert cut.any() and not cut.all(), "the batch must put ratios on both sides of the bound"
    assert torch.equal(new_mask, res["mask"].to(D)), "TRL's and rl_lab's IS modes never change the mask"
    assert loss == pytest.approx(res["loss"], rel=2e-5, abs=1e-7)


@pytest.mark.parametrize("mode,clip_max,clip_min", SETTINGS, ids=IDS)
def test_the_export_writes_the_mode_back(mode, clip_max, clip_min):
    fields = correction_from_trl(mode, clip_max, clip_min)
    args = trl_correction_args(CorrectionConfig(**fields))
    assert args["vllm_importance_sampling_correction"] is True
    assert args["vllm_importance_sampling_mode"] == mode
    assert args["vllm_importance_sampling_clip_max"] == clip_max
    expected_min = MASK_FLOOR if (clip_min is None and mode.endswith("mask")) else clip_min
    assert args["vllm_importance_sampling_clip_min"] == expected_min
    import dataclasses
    assert set(args) <= {f.name for f in dataclasses.fields(GRPOConfig)}
    # (not built here: a second TrainingArguments resets accelerate's state under the probe's trainer;
    # tests/integration/test_trl_export.py builds GRPOConfig from an export in its own process)


def test_padding_trl_ratio_is_one_rl_labs_weight_is_zero(probe):
    res = probe.run(random_log_ratio(), "token_truncate", 3.0, None)
    w, *_ = rl_lab_side(res, correction_from_trl("token_truncate", 3.0))
    pad = ~res["mask"].bool()
    assert pad.any()
    assert torch.all(res["ratio"][pad] == 1.0) and torch.all(w[pad] == 0.0)


def test_the_sequence_ratio_is_unclamped_in_trl(probe):
    """Rows whose summed log-ratio is beyond +-20: TRL's exp(S) against rl_lab's exp(clamp(S, +-20))."""
    lr = random_log_ratio()
    lr[0], lr[4] = -2.5, 2.5                                   # 12 tokens: S = -30 and +30
    for mode in ("sequence_truncate", "sequence_mask"):
        res = probe.run(lr, mode, 3.0, None)
        w, *_ = rl_lab_side(res, correction_from_trl(mode, 3.0))
        ours, theirs = w[:, 0], res["ratio"][:, 0].to(D)
        assert theirs[0] < 1e-12 and ours[0] == pytest.approx(math.exp(-20.0), rel=1e-4)
        assert abs(ours[0] - theirs[0]) <= MASK_FLOOR              # a difference below exp(-20)
        assert ours[4] == theirs[4] == (3.0 if mode == "sequence_truncate" else 0.0)


def test_what_is_masked_trl_keeps_the_tokens_seq_mis_removes_them(probe):
    """TRL's sequence_mask = rl_lab's sequence IcePop (mask unchanged); verl's Seq-MIS form removes
    the masked sequences' tokens, so its token-mean loss is TRL's times all / kept tokens."""
    res = probe.run(random_log_ratio(), "sequence_mask", 3.0, None)
    seq_mis = dict(rollout_is="sequence", rollout_is_threshold=3.0, rollout_rs="seq_sum_k1",
                   rollout_rs_threshold=f"{1 / 3!r}_{1 / MASK_FLOOR!r}")
    _, kept, _, loss_rs = rl_lab_side(res, seq_mis)
    n_all, n_kept = res["mask"].sum().item(), kept.sum().item()
    assert n_kept < n_all
    assert loss_rs == pytest.approx(res["loss"] * n_all / n_kept, rel=2e-5)


def test_the_logged_ratio_is_after_truncation(probe):
    """TRL logs sampling/importance_sampling_ratio/* of the truncated (or masked) ratio: its max
    never exceeds the cap, while rl_lab's sequence-level rollout_is_max is the ratio before."""
    res = probe.run(random_log_ratio(), "sequence_truncate", 1.5, None)
    _, _, metrics, _ = rl_lab_side(res, correction_from_trl("sequence_truncate", 1.5))
    logged = res["metrics"]
    assert logged["sampling/importance_sampling_ratio/max"] == pytest.approx(1.5)
    assert metrics["rollout_corr/rollout_is_max"] > 1.5                       # before truncation
    assert metrics["rollout_corr/rollout_is_ratio_fraction_high"] > 0
    # a sequence mode's mean is over sequences (rl_lab's rollout_is_seq_mean), a token mode's over tokens
    assert logged["sampling/importance_sampling_ratio/mean"] == pytest.approx(
        metrics["rollout_corr/rollout_is_seq_mean"], rel=2e-5)
    res = probe.run(random_log_ratio(), "token_truncate", 1.5, None)
    _, _, metrics, _ = rl_lab_side(res, correction_from_trl("token_truncate", 1.5))
    logged = res["metrics"]
    assert logged["sampling/importance_sampling_ratio/max"] == pytest.approx(metrics["rollout_corr/rollout_is_max"])
    assert logged["sampling/importance_sampling_ratio/mean"] == pytest.approx(
        metrics["rollout_corr/rollout_is_mean"], rel=2e-5)
    # TRL's sampling_logp_difference/max is rl_lab's max_abs_logprob_diff; its mean, the mean |log pi - log mu|
    assert logged["sampling/sampling_logp_difference/max"] == pytest.approx(
        metrics["rollout_corr/max_abs_logprob_diff"], rel=2e-5)
    m = res["mask"].bool()
    assert logged["sampling/sampling_logp_difference/mean"] == pytest.approx(
        (res["old"] - res["sampling"]).abs()[m].mean().item(), rel=2e-5)


def test_rl_lab_weights_alone_match_on_a_plain_call(probe):
    """importance_weights (the function the chapters call) agrees with the rollout_correction hook."""
    res = probe.run(random_log_ratio(2), "token_mask", 2.0, 0.5)
    old, sampling, mask = res["old"].to(D), res["sampling"].to(D), res["mask"].to(D)
    w, _ = importance_weights(old - sampling, mask, "token", "0.5_2.0")
    m = mask.bool()
    assert torch.allclose(w[m], trl_weights(res)[m], rtol=2e-5, atol=1e-7)


# ----------------------------------------------------------------------------- TRL's traps, read from TRL
def test_trap_the_docstring_default_is_not_the_codes():
    """GRPOConfig's docstring marks token_truncate "(default)"; the field's default is sequence_mask,
    with clip_max 3.0 and no clip_min.  Chapter 13 names this; an upgrade that changes it fails here."""
    import dataclasses
    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    assert fields["vllm_importance_sampling_mode"].default == "sequence_mask"
    assert fields["vllm_importance_sampling_clip_max"].default == 3.0
    assert fields["vllm_importance_sampling_clip_min"].default is None
    assert fields["vllm_importance_sampling_correction"].default is True
    doc = inspect.getdoc(GRPOConfig)
    line = next(ln for ln in doc.splitlines() if '"token_truncate"' in ln and "Token-level truncated" in ln)
    assert "(default)" in line


def test_trap_use_bias_correction_kl_defaults_to_true():
    """TRL multiplies its KL term by pi_theta/pi_old unless told not to; the export sets it False."""
    import dataclasses

    from rl_lab.integrations.trl import FIXED_ARGS
    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    assert fields["use_bias_correction_kl"].default is True
    assert FIXED_ARGS["use_bias_correction_kl"] is False


def test_trap_the_logged_ratio_is_computed_after_truncation_in_the_source():
    """In _generate_and_score_completions the sampling/importance_sampling_ratio metrics read the
    variable the truncation/mask block has overwritten (the behaviour test_the_logged_ratio_... shows)."""
    from trl import GRPOTrainer
    src = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    clamp = src.index("vllm_importance_sampling_ratio = torch.clamp(")
    logged = src.index('"sampling/importance_sampling_ratio/max"')
    assert clamp < logged
    assert "flat_is_ratio = vllm_importance_sampling_ratio" in src[clamp:logged]
