"""The trainer's scoring of a batch, in two functions that the trainer and the exact-zero sampler
(rl_lab.engines.exact) both call: `forward_logits` (the policy's forward over prompt + completion)
and `score_logits` (the logits -> the log-distributions the trainer's loss reads).  One code path
for both sides is what makes the exact engine's log-probs bitwise the trainer's.

`forward_context(model)`, when given, is a context manager entered around the forward: a mismatch
source's fix that makes the trainer compute like the sampler (rl_lab.engines.sources), e.g. the
sampler's precision or its reduction order.  `sampling_mask` (B, T, V) bool replays the sampler's
kept set (Keep Sampling Mask): the distribution is renormalised over it.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from rl_lab.engines.shared_prefix import completion_logits
from rl_lab.engines.vocabulary import safe_vocabulary


def forward_logits(model, prompt_ids, prompt_mask, completion_ids, share_prefix: bool = True,
                   forward_context=None) -> torch.Tensor:
    """(B, T, V) raw logits predicting each completion token (`completion_logits`), inside
    `forward_context(model)` when one is given."""
    context = forward_context(model) if forward_context is not None else contextlib.nullcontext()
    with context:
        return completion_logits(model, prompt_ids, prompt_mask, completion_ids, share_prefix)


def score_logits(logits, temperature: float = 1.0, dvp_min_p: float = 0.0, sampling_mask=None) -> torch.Tensor:
    """(B, T, V) raw logits -> (B, T, V) log-probs: divided by the sampling temperature (as TRL),
    restricted to DVP's safe vocabulary p >= dvp_min_p * p_max when dvp_min_p > 0, and to the
    sampler's kept set where `sampling_mask` is False (-inf outside either)."""
    logits = logits.float() / temperature
    if dvp_min_p > 0:
        logits = logits.masked_fill(~safe_vocabulary(logits, dvp_min_p), float("-inf"))
    if sampling_mask is not None:
        logits = logits.masked_fill(~sampling_mask, float("-inf"))
    return F.log_softmax(logits, dim=-1)                                               # (B, T, V)
