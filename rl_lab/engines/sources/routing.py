"""Routing: a mixture-of-experts sampler picks its experts from router logits rounded differently.

Mirrors an MoE served by an inference engine whose router product runs in bf16 (or fp16) while the
trainer's runs in fp32: the same weights, the same hidden state, logits a rounding apart, so a token
whose K-th and (K+1)-th experts are nearly tied goes to another expert set in the sampler than in
the trainer (a router flip), and its log-prob, and every later token's that attends to it, differ.
Here the sampler's router (every `mlp.gate` of a Qwen2-MoE, Qwen2MoeTopKRouter) computes its logits
twice: in `router_dtype` only to choose the K experts, and in float32 for everything else (the
softmax, the gate weights of the chosen experts, the logits it returns).  So the perturbation is the
choice alone: a token whose expert set is the trainer's in every layer gets the trainer's gate
weights bit for bit, and the mismatch is what the flips cause.

The fix, replay=True (rollout routing replay, R3: Ma et al. 2025, arXiv 2510.11370; verl 0.9.1
`actor_rollout_ref.actor.megatron.router_replay.mode=R3`; TRL 1.16 has none): the sampler records
the experts its last forward chose for every token (RolloutBatch.sampler_routing, (L, B, P+T, K);
the exact engine's last forward sees every sampled token but the last, which no scored position
reads) and the trainer's forward uses them instead of its own top-K, with gate weights from its own
fp32 logits at the forced set, so the router still gets a gradient through them.  On the exact
engine the two forwards are then the same operations on the same operands: k3 = 0 exactly.  Under
rl_lab.algos.mismatch_fixes the replay applies to every trainer forward of the batch, the
reference's too (verl replays in the actor only; it matters with a KL penalty to the reference).

`router_noise` adds a fixed random function of the hidden state to the sampler's router logits:
the tiny MoE (0.3M-moe: 2 layers, 4 experts, top-2) has wide gaps between its experts, so bf16
flips about 0.3% of its decisions (fp16 hardly any), and the noise stands in for the near-ties of
a router with many experts (0.02: about 6%).  It is a function of the token, not a fresh draw per
forward, because the exact engine recomputes every position at each decoding step and replay
reuses the last forward's choice.

What it cannot show at this scale: a 30B MoE over 48 layers and 128 experts flips more, and
compounds the flips over long sequences and many layers; and R3's cost (recording and moving L x K expert ids
per token, and a trainer that no longer learns which experts its own router would choose) is not
measured here.
"""
from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn.functional as F

from rl_lab.engines.shared_prefix import token_layout
from rl_lab.engines.sources.base import Source
from rl_lab.errors import ConfigError

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def moe_routers(model) -> list:
    """The router of every mixture-of-experts block of `model` (a module with `gate` and `experts`,
    as Qwen2-MoE's `mlp`), in layer order."""
    return [m.gate for m in model.modules() if hasattr(m, "gate") and hasattr(m, "experts")]


def _route(choose, layer: int, calls: list, gate, hidden):
    """Qwen2MoeTopKRouter.forward with the choice of experts left to `choose(layer, call, gate,
    hidden, probs)` -> (N, K); with torch.topk of probs as the choice it is the router's own bits."""
    hidden = hidden.reshape(-1, gate.weight.shape[1])                                  # (N, H)
    logits = F.linear(hidden, gate.weight)                                             # (N, E)
    probs = F.softmax(logits, dtype=torch.float, dim=-1)                               # (N, E)
    experts = choose(layer, calls[layer], gate, hidden, probs)                         # (N, K)
    calls[layer] += 1
    weights = probs.gather(-1, experts)                                                # (N, K)
    if gate.norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return logits, weights.to(logits.dtype), experts


@contextlib.contextmanager
def routed(model, choose):
    """Inside the block every router of `model` routes through `_route` with `choose` (the c-th
    call of layer l's router since the block was entered is `call` c); restored on exit."""
    gates = moe_routers(model)
    calls = [0] * len(gates)
    saved = [g.__dict__.get("forward") for g in gates]
    for layer, g in enumerate(gates):
        g.forward = functools.partial(_route, choose, layer, calls, g)
    try:
        yield
    finally:
        for g, before in zip(gates, saved):
            if before is None:
                del g.forward
            else:
                g.forward = before


def sampler_choice(gate, hidden, probs, dtype, noise=None) -> torch.Tensor:
    """(N, K) the top-K experts of the router logits computed in `dtype`, plus `noise(hidden)` (N, E)
    when given, in the order of the float32 `probs` (N, E): the trainer's set gives the trainer's tensor."""
    low = F.linear(hidden.to(dtype), gate.weight.to(dtype)).float()                   # (N, E)
    if noise is not None:
        low = low + noise(hidden)
    chosen = torch.topk(low, gate.top_k, dim=-1).indices                               # (N, K)
    order = probs.gather(-1, chosen).argsort(dim=-1, descending=True, stable=True)
    return chosen.gather(-1, order)


def fixed_noise(std: float, directions: torch.Tensor):
    """hidden (N, H) -> (N, E) std x (the unit hidden vector's projections on `directions` (E, H),
    N(0, 1) entries): Gaussian over tokens with std `std`, the same for the same hidden state."""
    return lambda hidden: std * F.linear(F.normalize(hidden.float(), dim=-1), directions.to(hidden.device))


def flipped(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(...) bool: the expert sets of (..., K) `a` and `b` differ (order ignored)."""
    return (a.sort(-1).values != b.sort(-1).values).any(-1)


class Routing(Source):
    name = "routing"

    def __init__(self, knobs, config):
        super().__init__(knobs, config)
        self.calls: list = []           # per router: (experts, flips) of each call of the last forward
        self.noise: list = []           # per router: its fixed_noise, or None

    def setup(self, model) -> None:
        gates = moe_routers(model)
        generator = torch.Generator().manual_seed(int(getattr(self.config, "seed", 0)))
        self.noise = [fixed_noise(self.knobs.router_noise, torch.randn(g.weight.shape, generator=generator))
                      if self.knobs.router_noise > 0 else None for g in gates]
        if not gates:
            raise ConfigError(f"RLConfig.mismatch.routing needs a mixture-of-experts model (layers whose mlp has a "
                              f"router `gate` and `experts`); {type(model).__name__} has none: set model: 0.3M-moe "
                              "(a tiny Qwen2-MoE) or the path of a saved MoE")

    def sampler_forward(self, model):
        self.calls = [[] for _ in moe_routers(model)]
        dtype = DTYPES[self.knobs.router_dtype]

        def choose(layer, call, gate, hidden, probs):
            experts = sampler_choice(gate, hidden, probs, dtype, self.noise[layer])    # (N, K)
            own = torch.topk(probs, gate.top_k, dim=-1).indices                        # the trainer's choice
            self.calls[layer].append((experts, flipped(experts, own)))
            return experts
        return routed(model, choose)

    def record(self, batch) -> dict:
        """The last forward's experts (and flips) by position: sampler_routing (L, B, P+T, K), and
        mismatch/routing_flips, the share of (layer, real token) decisions that differ from the
        trainer's own top-K (the last sampled token counts with the padding the forward saw)."""
        layout, representative = token_layout(batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                               self.config.share_prefix)
        if any(len(c) != len(layout) for c in self.calls):
            raise RuntimeError(f"routing: the sampler's last forward made {[len(c) for c in self.calls]} router "
                               f"calls per layer, the trainer's layout {len(layout)}")
        B, S = batch.completion_ids.shape[0], batch.prompt_ids.shape[1] + batch.completion_ids.shape[1]
        L, K = len(self.calls), self.calls[0][0][0].shape[-1]
        experts = torch.full((L, B * S, K), -1, dtype=torch.long, device=batch.prompt_ids.device)
        flips = torch.zeros((L, B * S), dtype=torch.bool, device=batch.prompt_ids.device)
        for c, positions in enumerate(layout):
            experts[:, positions] = torch.stack([layer[c][0] for layer in self.calls])   # (L, N_c, K)
            flips[:, positions] = torch.stack([layer[c][1] for layer in self.calls])     # (L, N_c)
        ran = representative >= 0                                                        # (B*S,)
        experts = experts[:, representative.clamp(min=0)].masked_fill(~ran[None, :, None], -1)
        flips = flips[:, representative.clamp(min=0)] & ran
        real = torch.cat([batch.prompt_mask, batch.completion_mask], 1).bool().reshape(-1) & ran
        share = flips[:, real].float().mean().item() if real.any() else 0.0
        return {"sampler_routing": experts.view(L, B, S, K),
                "engine_metrics": {**(batch.engine_metrics or {}), "mismatch/routing_flips": share}}

    def replay(self, batch):
        if not self.knobs.replay:
            return None
        forced = replayed_experts(batch, self.config.share_prefix)                   # per call: (L, N_c, K)

        def choose(layer, call, gate, hidden, probs):
            if call >= len(forced) or layer >= len(forced[call]) or len(forced[call][layer]) != len(hidden):
                raise RuntimeError(f"routing replay: router call {call} of layer {layer} runs {len(hidden)} tokens, "
                                   f"the recorded layout has {[tuple(f.shape) for f in forced]} (L, N_c, K)")
            return forced[call][layer]
        return lambda model: routed(model, choose)


def replayed_experts(batch, share_prefix: bool) -> list:
    """The batch's recorded experts (L, B, P+T, K) cut into the trainer forward's router calls
    (`token_layout`): one (L, N_c, K) tensor per call."""
    routing = batch.sampler_routing
    if routing is None:
        raise ConfigError("mismatch.routing.replay needs the sampler's experts (RolloutBatch.sampler_routing), "
                          "which the exact engine records under mismatch.routing; this batch has none")
    B, P = batch.prompt_ids.shape
    S = P + batch.completion_ids.shape[1]
    if routing.dim() != 4 or tuple(routing.shape[1:3]) != (B, S):
        raise ValueError(f"sampler_routing has shape {tuple(routing.shape)}; the batch needs (L, {B}, {S}, K)")
    layout, _ = token_layout(batch.prompt_ids, batch.prompt_mask, batch.completion_ids, share_prefix)
    flat = routing.flatten(1, 2)                                                       # (L, B*S, K)
    forced = [flat[:, positions] for positions in layout]
    if any((f < 0).any() for f in forced):
        raise ValueError("sampler_routing has no experts (-1) for a token the trainer's forward runs")
    return forced
