"""What a mismatch source is to the exact-zero engine: a few hooks, each a no-op here.

The exact engine (rl_lab.engines.exact) computes the sampler's log-probs with the trainer's own
forward on a copy of its weights.  A source perturbs one stage of that, on the sampler's side only:

    sampler_forward(model)      a context manager around the sampler's forward (precision, the
                                reduction order of its products)
    kept(logits)                (B, V) bool: the tokens the sampler may draw at this position, from
                                the (B, V) logits after the temperature (truncation); None: all
    synced(name, new, old, step) the tensor the sampler loads for parameter `name` at sync `step`
                                (weight-sync faults); `new` unless it interferes
    after_sync(engine, step)    after every sync, with the engine: a dict of metrics (a sync check)
    history()                   how many syncs old the sampler's weights are (staleness)
    record(batch)               after a rollout, with its RolloutBatch: the fields to set on it,
                                what the sampler's forward recorded for the trainer (routed experts)
and, for its fix on the trainer's side (rl_lab.algos.mismatch_fixes passes them to every forward):
    trainer_forward()           a context-manager factory model -> context, or None
    replay(batch)               the same, built from what `record` left on the step's batch (routing
                                replay); None: nothing to replay
    needs_sampler_distributions the trainer must see mu's (B, T, V) log-probs (the kept sets)

With every dial at its off value (or its fix on) the sampler computes what the trainer computes,
bit for bit: the unit tests hold each source to that.
"""
from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn.functional as F


class Source:
    """Base class: no perturbation.  `self.knobs` is the source's sub-config (or field value)."""
    name = ""
    needs_sampler_distributions = False

    def __init__(self, knobs, config):
        self.knobs, self.config = knobs, config

    def sampler_forward(self, model):
        return None

    def trainer_forward(self):
        return None

    def replay(self, batch):
        return None

    def record(self, batch) -> dict:
        return {}

    def kept(self, logits):
        return None

    def synced(self, name: str, new: torch.Tensor, old: torch.Tensor, step: int) -> torch.Tensor:
        return new

    def after_sync(self, engine, step: int) -> dict:
        return {}

    def history(self) -> int:
        """How many syncs old the sampler's weights are (staleness); 0: the current ones."""
        return 0

    def setup(self, model) -> None:
        """Once, with the sampler's model copy, when the engine is built (checks names, shapes)."""


@contextlib.contextmanager
def patched_linears(model, forward, select=lambda name: True):
    """Inside the block, every nn.Linear of `model` whose name `select` accepts computes
    `forward(module, x)` instead of its own forward; restored on exit (also on an error)."""
    modules = [m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and select(n)]
    saved = [m.__dict__.get("forward") for m in modules]
    for m in modules:
        m.forward = functools.partial(forward, m)
    try:
        yield
    finally:
        for m, before in zip(modules, saved):
            if before is None:
                del m.forward
            else:
                m.forward = before


def chunked_linear(module, x, chunks: int, order: str = "ring"):
    """F.linear(x, W, b) with the reduction over the input features split into `chunks` equal
    parts, each an F.linear of its slice, the partial sums added in float32 in `order` ("ring": one
    after another; "tree": pairwise), then the bias: the same products, another rounding.
    chunks = 1 is the module's own F.linear."""
    weight, bias = module.weight, module.bias
    if chunks == 1:
        return F.linear(x, weight, bias)
    parts = [F.linear(xs, ws) for xs, ws in zip(x.chunk(chunks, -1), weight.chunk(chunks, -1))]
    dtype = parts[0].dtype
    parts = [p.float() for p in parts]
    while len(parts) > 1:
        if order == "ring":
            parts = [parts[0] + parts[1], *parts[2:]]
        else:
            parts = [parts[i] + parts[i + 1] if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    out = parts[0].to(dtype)
    return out if bias is None else out + bias.to(dtype)


def compose(contexts):
    """One context manager entering each of `contexts` (None ones skipped) in order."""
    stack = contextlib.ExitStack()
    for c in contexts:
        if c is not None:
            stack.enter_context(c)
    return stack
