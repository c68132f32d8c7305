"""Two methods that take tokens out of the objective before anything else reads the mask.

TruncationMask (RLConfig.mask_truncated_completions; DAPO's overlong filtering, TRL's
    `mask_truncated_completions`): a completion cut at max_completion_length has no verified end,
    so none of its tokens train.  By design, not a fault: nothing is counted under faults/.
DVP (RLConfig.dvp, DVPConfig.min_p; chapter 6, Dynamic Vocabulary Pruning): the trainer's log-prob of a token
    outside pi's kept vocabulary {v : pi_v >= min_p x max pi} is -inf (rl_lab.algos.grpo.
    sequence_logprobs prunes it), and such a token leaves the objective; logged as
    dvp/outside_fraction.
"""
from __future__ import annotations

import torch

from rl_lab.algos.method import Method, StepState


class TruncationMask(Method):
    name = "truncation_mask"

    @staticmethod
    def active(config) -> bool:
        return bool(config.mask_truncated_completions)

    def mask_tokens(self, s: StepState) -> None:
        s.mask &= ~s.batch.is_truncated[:, None]


class DVP(Method):
    name = "dvp"

    @staticmethod
    def active(config) -> bool:
        return config.dvp is not None

    @staticmethod
    def min_p(config) -> float:
        """The trainer's pruning threshold: DVPConfig.min_p, 0 (no pruning) when DVP is off."""
        return config.dvp.min_p if config.dvp is not None else 0.0

    def mask_tokens(self, s: StepState) -> None:
        outside = s.mask & torch.isneginf(s.old_logp)                                  # (B, T)
        s.mask &= ~outside
        s.extra["dvp_outside"] = outside

    def metrics(self, s: StepState) -> dict:
        outside = s.extra["dvp_outside"]
        return {"dvp/outside_fraction": int(outside.sum()) / max(1, int((outside | s.counted).sum()))}
