"""Two methods that take tokens out of the objective before anything else reads the mask.

TruncationMask (RLConfig.mask_truncated_completions; DAPO's overlong filtering, TRL's
    `mask_truncated_completions`): a completion cut at max_completion_length has no verified end,
    so none of its tokens train.  By design, not a fault: nothing is counted under faults/.
DVP (RLConfig.dvp, DVPConfig.min_p; chapter 6, Dynamic Vocabulary Pruning): the trainer's log-prob of a token
    outside pi's kept vocabulary {v : pi_v >= min_p x max pi} is -inf (rl_lab.algos.losses.
    token_logprobs prunes it), and such a token leaves the objective; logged as
    dvp/outside_fraction.
"""
from __future__ import annotations

import torch

from rl_lab.algos.method import Method, StepState


class TruncationMask(Method):
    name = "truncation_mask"

    def mask_tokens(self, s: StepState) -> None:
        s.mask &= ~s.batch.is_truncated[:, None]


class DVP(Method):
    name = "dvp"

    def forward_options(self) -> dict:
        """The trainer's (and the reference's) forward prunes to the safe set p >= min_p * p_max; the
        sampler prunes too (RLConfig.sampling)."""
        return {"dvp_min_p": self.knobs.min_p}

    def mask_tokens(self, s: StepState) -> None:
        outside = s.mask & torch.isneginf(s.old_logp)                                  # (B, T)
        s.mask &= ~outside
        s.extra["dvp_outside"] = outside

    def metrics(self, s: StepState) -> dict:
        outside = s.extra["dvp_outside"]
        return {"dvp/outside_fraction": int(outside.sum()) / max(1, int((outside | s.counted).sum()))}
