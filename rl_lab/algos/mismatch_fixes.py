"""The trainer's side of the mismatch sources' fixes (RLConfig.mismatch; rows in rl_lab.mismatch_specs).

One method for every source: it builds the run's sources and hands the trainer's forward what their
fixes ask (rl_lab.engines.sources.base): a `forward_context` (the sampler's precision or reduction
order, or the experts the sampler routed each token to, entered around every forward of the policy
and the reference), built for each batch, and, for Keep Sampling Mask, a `sampling_mask` read from
each batch (the sampler's kept sets, the finite entries of its recorded
(B, T, V) log-probs).  It logs what the engine measured about itself (the weight-sync check).  With
no fix on it changes nothing: the exact engine alone makes mu = pi.
"""
from __future__ import annotations

import torch

from rl_lab.algos.method import BatchOption, Method, StepState
from rl_lab.engines.exact import build_sources
from rl_lab.engines.sources.base import compose


def sampler_kept_sets(batch) -> torch.Tensor:
    """(B, T, V) bool: the tokens the sampler could draw at each position (its -inf entries are out)."""
    return ~torch.isneginf(batch.sampler_logprobs_full)


class MismatchFixes(Method):
    name = "mismatch_sources"

    def __init__(self, config, spec=None):
        super().__init__(config, spec)
        self.sources = build_sources(config)
        self.needs_sampler_distributions = any(s.needs_sampler_distributions for s in self.sources)

    def forward_options(self) -> dict:
        options = {}
        if self.sources:
            options["forward_context"] = BatchOption(self.forward_context)
        if self.needs_sampler_distributions:
            options["sampling_mask"] = BatchOption(sampler_kept_sets)
        return options

    def forward_context(self, batch):
        """The sources' fixes for the trainer's forwards of one batch, in row order: a factory
        model -> context, or None when no fix is on."""
        factories = [f for s in self.sources for f in (s.trainer_forward(), s.replay(batch)) if f is not None]
        if not factories:
            return None
        return lambda model: compose([f(model) for f in factories])

    def metrics(self, s: StepState) -> dict:
        return dict(s.batch.engine_metrics or {})
