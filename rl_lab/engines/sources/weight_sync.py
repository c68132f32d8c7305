"""Weight-sync faults: the sampler does not get the trainer's weights as they are.

Mirrors the failures practitioners find when "the logprob diff keeps growing even at lr = 0"
(open-instruct #1473, NeMo-RL #4243; vLLM vime #64): an engine or a sync fault, not learning.  Two
faults, on the parameters whose name starts with `layer`, from sync `start_step` for `steps` syncs
(0: to the end):
  skip_layer  those parameters are not synced: the sampler keeps the ones it had (a layer missed by
              a name mapping, a shard not broadcast);
  bf16        they are synced through bfloat16 (a LoRA adapter merged into the base in bf16 before
              the broadcast): rounded to 8 bits of mantissa, even at lr = 0.

The check and fix, verify=True: after every sync the sampler's weights are compared with the ones
it should hold, bit for bit (a checksum in production), the largest difference logged as
mismatch/sync_max_abs_diff, and a sync that differs is done again cleanly (mismatch/sync_repairs).
The other check, a step at lr = 0 whose k3 must be exactly 0 on the exact engine (at rounding level
on a real one), is rl_lab.toolkits.mismatch_sources.sync_check.  verl 0.9.1 and TRL 1.16 have no
key for either: both sync without a check.
"""
from __future__ import annotations

import torch

from rl_lab.engines.sources.base import Source
from rl_lab.errors import ConfigError


class WeightSync(Source):
    name = "weight_sync"

    def faulty(self, step: int) -> bool:
        k = self.knobs
        return step >= k.start_step and (k.steps == 0 or step < k.start_step + k.steps)

    def synced(self, name, new, old, step):
        if not (name.startswith(self.knobs.layer) and self.faulty(step)):
            return new
        if self.knobs.fault == "skip_layer":
            return old
        return new.to(torch.bfloat16).to(new.dtype)

    def after_sync(self, engine, step: int) -> dict:
        if not self.knobs.verify:
            return {}
        wanted = engine.intended_weights()
        diff = max((p.detach() - wanted[n]).abs().max().item() for n, p in engine.model.named_parameters())
        if diff != 0:
            engine.load_weights(wanted)
        return {"mismatch/sync_max_abs_diff": diff, "mismatch/sync_repairs": int(diff != 0)}

    def setup(self, model) -> None:
        names = [n for n, _ in model.named_parameters()]
        if not any(n.startswith(self.knobs.layer) for n in names):
            prefixes = sorted({".".join(n.split(".")[:3]) + "." for n in names})
            raise ConfigError(f"RLConfig.mismatch.weight_sync.layer={self.knobs.layer!r} names no parameter; "
                              f"choose a prefix such as {prefixes[:6]} (or '' for every parameter)")
