"""Mismatch injectors: ways to make the sampler mu differ from the trainer's pi on purpose.

Each mirrors a cause seen in production, at a size a laptop can run:
  sampler_dtype="bfloat16"/"float16"  low-precision inference engine (rl_lab.engines.rollout.HFEngine)
  sampler_quantization="int8"         weight-only int8 quantisation of the sampler (W8A16)
  sampler_staleness=k                 the sampler's weights are k optimizer steps old (async RL)
  sampler_logit_noise=sigma           Gaussian noise on the sampler's logits (kernel noise)
  sampler_temperature=tau             the sampler divides its logits by tau, the trainer scores at
                                      `temperature` (a temperature set only in the inference engine)
  top_p / top_k / min_p               truncated sampling; the trainer scores the full vocabulary
`rl_lab.engines.make_engine(config, model, tokenizer)` builds the engine an RLConfig asks for.

Chapter "When speed kills stability" (book/ch_when_speed_kills.md) and the lab "measure your own mismatch" use them.
"""
from __future__ import annotations

import collections

import torch

from rl_lab.engines.rollout import HFEngine, follow_device


@torch.no_grad()
def fake_quantize_int8_(model: torch.nn.Module, skip: tuple[str, ...] = ("lm_head",)) -> None:
    """Round every nn.Linear weight to int8 per output channel, in place:
    W <- round(W / s).clamp(-127, 127) * s, with s = max_j |W_ij| / 127 per row i.
    The (tied) embedding / lm_head stays in full precision, as in common W8A16 schemes."""
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and not any(k in name for k in skip):
            w = module.weight
            scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0          # (out, 1)
            w.copy_((w / scale).round().clamp(-127, 127) * scale)


class MismatchEngine(HFEngine):
    """An HFEngine whose sampler is perturbed: int8 weights, stale weights, noisy logits, a
    temperature of its own (logits / temperature, after the noise; None or 1: off).

    Always keeps its own copy of the weights.  `sync_weights` records the trainer's weights
    and loads the ones from `staleness` syncs ago (the oldest it has, early on), then
    quantises them if asked.
    """
    perturbed = True             # the trainer evaluates with a plain HFEngine

    def __init__(self, model, tokenizer, dtype: str = "float32", quantization: str | None = None,
                 staleness: int = 0, logit_noise: float = 0.0, temperature: float | None = None):
        super().__init__(model, tokenizer, dtype, copy_weights=True)
        if quantization not in (None, "int8"):
            raise ValueError(f"quantization={quantization!r}: choose None or 'int8'")
        if temperature is not None and not temperature > 0:
            raise ValueError(f"temperature={temperature!r} must be > 0 (or None)")
        self.quantization, self.staleness, self.logit_noise = quantization, int(staleness), float(logit_noise)
        self.temperature = None if temperature is None else float(temperature)
        self.history: collections.deque = collections.deque(maxlen=self.staleness + 1)

    @torch.no_grad()
    def sync_weights(self, model: torch.nn.Module) -> None:
        self.history.append({n: p.detach().clone() for n, p in model.named_parameters()})
        source = self.history[0]                                  # `staleness` syncs ago, or the oldest
        follow_device(self.model, model)
        for name, p in self.model.named_parameters():
            p.copy_(source[name])
        if self.quantization == "int8":
            fake_quantize_int8_(self.model)

    def perturb_logits(self, logits, generator):
        if self.logit_noise != 0:
            noise = torch.randn(logits.shape, generator=generator, device=logits.device, dtype=torch.float32)
            logits = logits.float() + self.logit_noise * noise
        if self.temperature is not None and self.temperature != 1.0:
            logits = logits.float() / self.temperature
        return logits

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "history": list(self.history)}

    def load_state_dict(self, state: dict | None) -> None:
        if state is None:
            return
        self.model.load_state_dict(state["model"])
        self.history.clear()
        self.history.extend(state.get("history", []))

