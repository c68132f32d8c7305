"""Batch-variant reductions: the sampler's products reduce in an order that depends on the batch.

Mirrors the finding of Thinking Machines ("Defeating Nondeterminism in LLM Inference", 2025): an
inference engine's log-probs for one sequence change with the batch it is served in, not because
GPUs are concurrent but because kernels pick their reduction strategy by batch size.  A matmul with
few rows does not fill the machine, so the kernel splits the reduction dimension (split-K) and adds
the partial sums; with many rows it does not split.  verl's users meet it as "log_prob differs from
old_log_prob at step 1" (verl #2088, #6280).

Here every linear layer of the sampler computes its product in splits = clamp(parallel_rows // rows,
1, max_splits) chunks of the input features (rows = the product's rows: tokens in the call), the
partials added in order (rl_lab.engines.sources.base.chunked_linear): the same products, summed in
another order, so the sampler's bits move with the batch size and differ from the trainer's
unsplit products.  torch's own CPU matmul does the same at a smaller scale: on this project's AVX2
machine a row's bits of F.linear are the same for 4 rows or more and differ for 1-3 rows (the
matrix library's small-M path); rl_lab.engines.exact's docstring has the measurements.

The fix, batch_invariant=True: one split, max_splits, for every batch, on the sampler and the
trainer (vLLM's batch-invariant kernels with TorchTitan using the same ones; verl:
actor_rollout_ref.rollout.full_determinism=true, which sets VERL_FULL_DETERMINISM=1 and
VLLM_BATCH_INVARIANT=1): the same reduction order on both sides, so the mismatch is exactly 0.
"""
from __future__ import annotations

import torch

from rl_lab.engines.sources.base import Source, chunked_linear, patched_linears
from rl_lab.errors import ConfigError


def splits_for(rows: int, parallel_rows: int, max_splits: int) -> int:
    """The split-K heuristic: more chunks for fewer rows, between 1 and max_splits."""
    return max(1, min(max_splits, parallel_rows // max(1, rows)))


class BatchVariant(Source):
    name = "batch_variant"

    def _variant(self, module, x):
        rows = x.numel() // x.shape[-1]
        k = self.knobs
        return chunked_linear(module, x, splits_for(rows, k.parallel_rows, k.max_splits))

    def _fixed(self, module, x):
        return chunked_linear(module, x, self.knobs.max_splits)

    def sampler_forward(self, model):
        return patched_linears(model, self._fixed if self.knobs.batch_invariant else self._variant)

    def trainer_forward(self):
        if not self.knobs.batch_invariant:
            return None
        return lambda model: patched_linears(model, self._fixed)

    def setup(self, model) -> None:
        _check_divisible(model, self.knobs.max_splits, "RLConfig.mismatch.batch_variant.max_splits")


def _check_divisible(model, parts: int, field: str, select=lambda name: True) -> None:
    """A ConfigError naming `field` when a selected layer's input features do not split into `parts`."""
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and select(name) and m.in_features % parts:
            raise ConfigError(f"{field}={parts}: layer {name} has {m.in_features} input features, not a multiple "
                              f"of {parts}; choose a divisor of it")
