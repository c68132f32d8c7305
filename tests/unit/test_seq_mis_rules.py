"""Chapter 5, "Two rules called Seq-MIS": the post's one-sided rule, weight 1{rho <= C} rho, is
spelled rollout_is="sequence", rollout_is_threshold=2.0, rollout_rs="seq_sum_k1",
rollout_rs_threshold="0.5_1e300"; verl's preset (correction_preset("Seq-MIS")) is min(rho, 2)
with the band 0.5 <= rho <= 2.  Both are checked here sequence by sequence."""
import math

import pytest
import torch

from rl_lab.corrections import correction_preset, rollout_correction

RHOS = [0.01, 0.1, 0.3, 0.6, 1.0, 1.5, 1.9, 2.5, 10.0]        # sequence ratios, none on a boundary
T = 3
ONE_SIDED = dict(rollout_is="sequence", rollout_is_threshold=2.0, rollout_rs="seq_sum_k1",
                 rollout_rs_threshold="0.5_1e300")


def effective_weights(fields) -> torch.Tensor:
    """Per sequence: the weight times the kept mask, with rho(y) spread unevenly over T tokens."""
    log_rho = torch.tensor([math.log(r) for r in RHOS], dtype=torch.float64)
    split = torch.tensor([0.5, -0.2, 0.7], dtype=torch.float64)       # sums to 1
    log_ratio = log_rho[:, None] * split[None]                         # (B, T), rows sum to log rho
    rollout = torch.full((len(RHOS), T), -1.0, dtype=torch.float64)    # log mu
    mask = torch.ones(len(RHOS), T, dtype=torch.bool)
    fields = fields.get("rollout_correction", fields)                   # a preset's RLConfig fields, or the knobs
    weights, kept, _ = rollout_correction(rollout + log_ratio, rollout, mask, **fields)
    per_token = weights * kept                                         # (B, T)
    assert torch.allclose(per_token, per_token[:, :1].expand_as(per_token)), "one weight a sequence"
    return per_token[:, 0]


def test_one_sided_spelling_is_the_posts_rule():
    expected = torch.tensor([r if r <= 2 else 0.0 for r in RHOS], dtype=torch.float64)
    assert torch.allclose(effective_weights(ONE_SIDED), expected, rtol=1e-9)


def test_verl_preset_is_the_two_sided_band():
    fields = correction_preset("Seq-MIS")
    assert fields == dict(rollout_correction=dict(rollout_is="sequence", rollout_is_threshold=2.0,
                                                  rollout_rs="seq_sum_k1", rollout_rs_threshold="0.5_2.0"))
    expected = torch.tensor([r if 0.5 <= r <= 2 else 0.0 for r in RHOS], dtype=torch.float64)
    assert torch.allclose(effective_weights(fields), expected, rtol=1e-9)


@pytest.mark.parametrize("rho", [0.01, 0.3])
def test_the_rules_differ_below_half(rho):
    """A sequence with rho < 0.5: the post's rule keeps it at weight rho, verl's preset drops it."""
    i = RHOS.index(rho)
    assert effective_weights(ONE_SIDED)[i] == pytest.approx(rho)
    assert effective_weights(correction_preset("Seq-MIS"))[i] == 0
