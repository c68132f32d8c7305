"""Staleness on the exact engine: the sampler's weights are RLConfig.sampler_staleness syncs old.

Mirrors asynchronous RL (AReaL, slime's async mode, M2PO, VCPO): the sampler generates with the
weights of k optimizer steps ago while the trainer updates.  The fast sampler has the same injector
(rl_lab.engines.injectors.MismatchEngine); on the exact engine the stale weights are the only
difference from the trainer, so the mismatch it measures is staleness alone.  Its fix is the book's
verdict from the stability map (research/stability_map/NOTES.md): bypass PPO-clip
(verl: algorithm.rollout_correction.bypass_mode=true with the ppo_clip loss); AReaL bounds it with
max_head_offpolicyness.  The engine keeps the history (rl_lab.engines.exact.ExactEngine.history).
"""
from __future__ import annotations

from rl_lab.engines.sources.base import Source


class Staleness(Source):
    name = "staleness"

    def history(self) -> int:
        return int(self.knobs)
