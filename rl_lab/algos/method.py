"""The plug-in interface of the trainer's step (issue 31): a method is a class with a few hooks.

`Trainer.step` (rl_lab/trainer.py) runs the same pipeline for every run; a method changes it only
through these hooks, called in the order of `rl_lab.algos.methods.METHODS`:

    setup(trainer)      once, when the Trainer is built (frozen models: reference, teacher)
    rollout_prompts(n)  how many prompts the step draws, given prompts_per_step (dynamic sampling)
    mask_tokens(s)      before the validity checks: drop tokens from s.mask (truncation, DVP)
    filter_rows(s)      after them: drop rows from s.trains (SimpleTIR's void filter)
    advantages(s)       after the advantage estimator: change s.advantages (EMPG)
    prepare(s)          before the update: no-grad inputs (reference / teacher log-probs, demos)
    skip_update(s)      True: the step takes no optimizer step (zero-spread steps)
    token_loss(s)       per iteration: a (B, T) term added to the per-token loss, or None
    batch_loss(s)       per iteration: a scalar added after aggregation, or None
    metrics(s)          after the update: a dict of metrics

`s` is the step's `StepState`.  A method that reads pi's whole (B, T, V) distribution sets
`needs_full_logprobs`; `active(config)` says whether the run's RLConfig turns it on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class StepState:
    """The tensors of one `Trainer.step` (B rows, T completion tokens, V vocabulary)."""
    trainer: Any                               # the Trainer: config, task, model, tokenizer, device
    batch: Any                                 # RolloutBatch: tokens, masks, mu's log-probs, turns
    examples: list                             # the step's N task examples
    rows: list                                 # B = N x G examples, one per completion
    rewards: torch.Tensor                      # (B,) float32; NaN where a reward failed
    mask: torch.Tensor                         # (B, T) bool: tokens in the objective
    logp: torch.Tensor | None = None           # (B, T) log pi_theta, with gradient (this iteration)
    entropy: torch.Tensor | None = None        # (B, T) entropy of pi (first iteration)
    logp_all: torch.Tensor | None = None       # (B, T, V) log pi when a method needs it (this iteration)
    first_logp_all: torch.Tensor | None = None  # (B, T, V) from the first iteration
    old_logp: torch.Tensor | None = None       # (B, T) log pi_old (detached, first iteration)
    valid: torch.Tensor | None = None          # (B,) rows with a finite reward and log-probs, non-empty
    trains: torch.Tensor | None = None         # (B,) rows that train (valid less filtered rows)
    counted: torch.Tensor | None = None        # (B, T) tokens counted in the monitors
    old_logp_safe: torch.Tensor | None = None  # (B, T) log pi_old, 0 off the mask
    rollout_logp: torch.Tensor | None = None   # (B, T) log mu, 0 off the mask
    is_weights: torch.Tensor | None = None     # (B, T) decoupled mode's IS weights, or None
    advantages: torch.Tensor | None = None     # (B, T)
    logp_safe: torch.Tensor | None = None      # (B, T) log pi_theta, 0 off the mask (this iteration)
    loss_mask: torch.Tensor | None = None      # (B, T) the mask the loss uses (this iteration)
    extra: dict = field(default_factory=dict)  # what a method keeps between its hooks

    @property
    def config(self):
        return self.trainer.config


class Method:
    """Base class: every hook does nothing.  Subclasses set `name` and override what they need."""
    name = ""
    needs_full_logprobs = False

    @staticmethod
    def active(config) -> bool:
        return False

    def __init__(self, config):
        self.config = config

    def setup(self, trainer) -> None:
        pass

    def rollout_prompts(self, n: int) -> int:
        return n

    def mask_tokens(self, s: StepState) -> None:
        pass

    def filter_rows(self, s: StepState) -> None:
        pass

    def advantages(self, s: StepState) -> None:
        pass

    def prepare(self, s: StepState) -> None:
        pass

    def skip_update(self, s: StepState) -> bool:
        return False

    def token_loss(self, s: StepState):
        return None

    def batch_loss(self, s: StepState):
        return None

    def metrics(self, s: StepState) -> dict:
        return {}


def masked_token_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean of a detached (B, T) tensor over `mask`'s tokens (0 when the mask is empty)."""
    return (x.detach() * mask).sum().item() / max(1, int(mask.sum()))
