"""Truncated sampling: top-p / top-k / min-p in the sampler, the full vocabulary in the trainer.

Mirrors an inference engine asked for top_p < 1 or top_k > 0 while the trainer scores pi over the
whole vocabulary (TRL #6789; prime-rl #3235, "runs with truncated sampling collapse"; vLLM RFC
#42259).  The sampler draws from mu = pi restricted to its kept set K and renormalised, so for a
sampled token rho = pi / mu = S, the kept mass S = pi(K) <= 1: the ratio is biased low by exactly
the mass the sampler cut, and k3 reads it as a mismatch that is not a disagreement of the engines.
The rules are the fast sampler's (rl_lab.engines.rollout.process_logits): min-p, then top-k, then
top-p, on the logits after the temperature.

The fix, keep_mask=True (DeepSeek-V3.2's Keep Sampling Mask; slime does it when top_p < 1): the
sampler records its kept set (the -inf entries of its recorded (B, T, V) log-probs) and the trainer
renormalises pi over it (rl_lab.algos.mismatch_fixes passes it to the forward as sampling_mask), so
rho has no kept-mass bias: exactly 1 on the exact engine.  verl 0.9.1 and TRL 1.16 have no key for
it (TRL #6789 is open).
"""
from __future__ import annotations

import torch

from rl_lab.engines.sources.base import Source
from rl_lab.engines.vocabulary import safe_vocabulary


def kept_set(logits, top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0):
    """(B, V) logits after the temperature -> (B, V) bool, the tokens the sampler keeps: min-p, then
    top-k, then top-p, each on what the one before kept (process_logits' rules; a unit test holds
    them equal)."""
    logits = logits.float()
    keep = torch.ones_like(logits, dtype=torch.bool)
    if min_p > 0:
        keep &= safe_vocabulary(logits, min_p)
    if top_k and top_k < logits.shape[-1]:
        masked = logits.masked_fill(~keep, float("-inf"))
        keep &= masked >= torch.topk(masked, top_k, dim=-1).values[:, -1:]
    if top_p < 1.0:
        masked = logits.masked_fill(~keep, float("-inf"))
        sorted_logits, order = torch.sort(masked, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p       # the mass before it already reaches top_p
        keep &= ~drop_sorted.scatter(-1, order, drop_sorted)
    return keep                                                                        # (B, V)


class Truncation(Source):
    name = "truncation"

    @property
    def needs_sampler_distributions(self) -> bool:
        return self.knobs.keep_mask

    def kept(self, logits):
        k = self.knobs
        return kept_set(logits, k.top_p, k.top_k, k.min_p)
