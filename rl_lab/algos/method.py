"""The plug-in interface of the trainer's step (issue 31): a method is a class with a few hooks.

`Trainer.step` (rl_lab/trainer.py) runs the same pipeline for every run; a method changes it only
through these hooks, called in the order of its row in `rl_lab.method_specs.METHOD_SPECS` (which
also says which RLConfig field turns it on and what it becomes on verl and TRL):

    setup(run)          once, when the Trainer is built, with the run's RunContext (frozen models:
                        reference, teacher)
    forward_options()   keyword arguments for every forward of the policy and the reference
                        (sequence_logprobs; DVP's pruned vocabulary); a `BatchOption` value is
                        read from each step's rollout batch (the sampler's kept sets)
    lr_scale(step)      a factor on the scheduled learning rate (the length-triggered schedule)
    rollout_prompts(n)  how many prompts the step draws, given prompts_per_step (dynamic sampling)
    mask_tokens(s)      before the validity checks: drop tokens from s.mask (truncation, DVP)
    filter_rows(s)      after them: drop rows from s.trains (SimpleTIR's void filter)
    advantages(s)       after the advantage estimator: change s.advantages (EMPG)
    prepare(s)          before the update: no-grad inputs (reference / teacher log-probs, demos)
    skip_update(s)      True: the step takes no optimizer step (zero-spread steps)
    token_loss(s)       per iteration: a (B, T) term added to the per-token loss, or None
    batch_loss(s)       per iteration: a scalar added after aggregation, or None
    metrics(s)          after the update: a dict of metrics
    state_dict()        what a checkpoint keeps to resume it (None: nothing); load_state_dict(state)

`s` is the step's `StepState`.  A method that reads pi's whole (B, T, V) distribution sets
`needs_full_logprobs`; one that reads the sampler's, `needs_sampler_distributions`.  Whether a
run uses the method is its row's business (`MethodSpec.active`), not the class's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class RunContext:
    """What a run's methods and estimators may read besides the step's tensors (set when the Trainer
    is built; the Trainer itself is not handed out)."""
    config: Any                                # RLConfig
    task: Any                                  # rl_lab.tasks.Task
    model: Any                                 # the policy (torch.nn.Module), trained in place
    tokenizer: Any
    device: Any                                # torch.device
    reward_funcs: tuple                        # TRL-style reward functions
    environment: Any = None                    # rl_lab.agents.ToolEnvironment for multi-turn episodes
    forward_options: dict = field(default_factory=dict)  # every method's forward_options(), merged

    def forward_for(self, batch) -> dict:
        """The forward options for one rollout batch: each `BatchOption` read from it."""
        return {k: v.read(batch) if isinstance(v, BatchOption) else v for k, v in self.forward_options.items()}


@dataclass(frozen=True)
class BatchOption:
    """A forward option whose value comes from the step's rollout batch: `read(batch) -> value`
    (e.g. the sampler's kept sets, rl_lab.algos.mismatch_fixes)."""
    read: Any


@dataclass
class StepState:
    """The tensors of one `Trainer.step` (B rows, T completion tokens, V vocabulary).

    The masks, all (B, T) bool except the row masks (B,), each a subset of the one before it:
        batch.completion_mask  tokens the sampler drew (not padding, not a tool's output)
        mask (first)           the same, then less the methods' mask_tokens (truncation, DVP)
        valid (B,)             rows with a finite reward, finite log-probs and a token
        trains (B,)            valid rows less the methods' filter_rows (void turns, zero spread)
        counted                mask on the training rows: what the monitors average over
        mask (corrected)       counted less the decoupled correction's rejections
        loss_mask              what the loss uses this iteration (bypass: recomputed rejections)
    """
    run: RunContext                            # config, task, model, tokenizer, device, ...
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
        return self.run.config


class Method:
    """Base class: every hook does nothing.  Subclasses set `name` and override what they need;
    `self.knobs` is the run's config of this method (its row's `knobs(config)`)."""
    name = ""
    needs_full_logprobs = False
    needs_sampler_distributions = False

    def __init__(self, config, spec=None):
        self.config = config
        self.spec = spec
        self.knobs = spec.knobs(config) if spec is not None else None

    def setup(self, run: RunContext) -> None:
        pass

    def forward_options(self) -> dict:
        return {}

    def lr_scale(self, step: int) -> float:
        return 1.0

    def state_dict(self) -> dict | None:
        return None

    def load_state_dict(self, state: dict) -> None:
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
