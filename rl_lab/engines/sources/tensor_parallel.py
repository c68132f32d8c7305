"""Tensor-parallel order: row-parallel layers summed over shards, a different count on each side.

Mirrors Megatron-style tensor parallelism: a row-parallel linear layer (the attention output and
the MLP down projection) splits its input features over the shards, each shard computes a partial
product and an all-reduce adds them.  A sampler served at TP = 4 and a trainer at TP = 1 (or 2) add
the same products in different groupings, a mismatch of its own ("Enabling large-scale true
on-policy RL by bringing tensor parallelism to order", TBIK).  The all-reduce's order is a knob:
"ring" adds the partials one after another, "tree" pairwise.

The fix, fix=True: the trainer's row-parallel layers are sharded like the sampler's (sampler_shards,
the same order), so both sides add the same partials in the same order: exactly 0.  verl 0.9.1 and
TRL 1.16 have no key for it (TBIK's tree reduction is its own code).
"""
from __future__ import annotations

from rl_lab.engines.sources.base import Source, chunked_linear, patched_linears
from rl_lab.engines.sources.batch_variant import _check_divisible

ROW_PARALLEL = ("o_proj", "down_proj")


def row_parallel(name: str) -> bool:
    return name.split(".")[-1] in ROW_PARALLEL


def sharded(model, shards: int, order: str):
    """The context of a forward whose row-parallel layers are summed over `shards` partials."""
    return patched_linears(model, lambda m, x: chunked_linear(m, x, shards, order), row_parallel)


class TensorParallel(Source):
    name = "tensor_parallel"

    def sampler_forward(self, model):
        return sharded(model, self.knobs.sampler_shards, self.knobs.reduce) if self.knobs.sampler_shards > 1 else None

    def trainer_forward(self):
        k = self.knobs
        shards = k.sampler_shards if k.fix else k.trainer_shards
        return None if shards == 1 else (lambda model: sharded(model, shards, k.reduce))

    def setup(self, model) -> None:
        for field in ("sampler_shards", "trainer_shards"):
            _check_divisible(model, getattr(self.knobs, field), f"RLConfig.mismatch.tensor_parallel.{field}",
                             row_parallel)
