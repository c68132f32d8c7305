"""Every method of the trainer, declared in one torch-free row (issue 51): its name, the class that
implements it, the RLConfig field that turns it on and holds its knobs, and what that field becomes
on verl and on TRL.  The rows are in hook order: the order in which the trainer calls the methods'
hooks (rl_lab.algos.method explains the hooks), which is part of the result (the per-token loss
terms are added, and the token masks applied, in this order).

Everything else derives from METHOD_SPECS: RLConfig's nested configs (`method_configs()`), the
methods a run builds (rl_lab.algos.methods.build_methods), the verl export's rows for these fields
(rl_lab.integrations.verl), and which checkpoint keys of earlier versions belong to a method.

Adding a method: a module with its `Method` subclass (and, if it has knobs, a `_Validated` config
class), and one row.  A method of rl_lab itself gets its row here and its RLConfig field (typed and
documented; tests/unit/test_methods.py checks that rows and fields agree).  A method from outside
registers its row with `register_method` and takes its knobs from `RLConfig.extra_methods[name]`:

    register_method(MethodSpec("my_bonus", "my_pkg.bonus:Bonus", config=BonusConfig,
                               verl=local("a metric only")), after="empg")
    RLConfig(extra_methods={"my_bonus": {"coef": 0.1}})

The method configs below are nested in RLConfig under the method's field and None when the
method is off: `RLConfig(empg=EMPGConfig(k=2))`, `empg={"k": 2}` or `empg=True` (its defaults) in
Python and YAML, `--set empg.k=2` on the command line (which turns EMPG on).  A method without
knobs is a bool (skip_zero_spread_steps, tool_token_stats) or a number (beta).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from dataclasses import field as _field
from typing import Any, Callable

from rl_lab.config_checks import _check_choice, _check_range, _Validated
from rl_lab.errors import ConfigError
from rl_lab.mismatch_specs import MismatchConfig

EMPG_NORMALIZE = ("sum", "scaled_advantage", "none")
VOID_SCOPES = ("loss", "loss_and_groups")


# ------------------------------------------------------------------ the methods' configs
@dataclass
class DVPConfig(_Validated):
    """Dynamic Vocabulary Pruning (chapter 6; rl_lab.algos.token_masks.DVP): sampler and trainer
    both keep only the tokens with p >= min_p * p_max in their own distribution."""
    min_p: float = 1e-3
    """The safe set's threshold relative to the most likely token (rl_lab's reading; the paper's
    exact rule was not available)."""

    def validate(self):
        _check_range(self, "min_p", lo=0, hi=1, lo_open=True, hi_open=True)


@dataclass
class VoidFilterConfig(_Validated):
    """SimpleTIR's void-turn filter (rl_lab.algos.simpletir.VoidFilter): an episode with a void turn
    (neither a complete tool call nor a final answer) trains no token."""
    scope: str = "loss"
    """What a void episode leaves.  "loss" (SimpleTIR's trainer): only the loss mask; the group's
    advantages are computed over every episode of the prompt, void ones included, so a success
    whose group-mates are void keeps its positive advantage.  "loss_and_groups" (rl_lab before
    issue 53, research/tool_methods' mask_void arms): the loss and the group statistics, so the
    group's mean and std are over its non-void episodes only (a success among void group-mates
    then gets advantage 0)."""

    def validate(self):
        _check_choice(self, "scope", VOID_SCOPES)


@dataclass
class FilterGroupsConfig(_Validated):
    """DAPO's dynamic sampling (verl's algorithm.filter_groups; rl_lab.algos.zero_spread): draw
    max_num_gen_batches x prompts_per_step prompts and train on the first prompts_per_step groups
    whose rewards differ; skip the step when none do (filter/groups_kept, filter/groups_drawn)."""
    max_num_gen_batches: int = 3
    """How many batches of prompts_per_step prompts a step may draw (verl's name; rl_lab draws them
    in one rollout)."""

    def validate(self):
        _check_range(self, "max_num_gen_batches", lo=1)


@dataclass
class EMPGConfig(_Validated):
    """EMPG (rl_lab.algos.empg): scale each model turn's advantage by g(H) = exp(-k H~) / batch mean
    (H~: the turn's mean token entropy, min-max normalised over the batch), add zeta times the next
    turn's clarity exp(-k_f H~_next), and whiten over the batch's tokens as `normalize` says."""
    k: float = 1.0
    """max g / min g <= e^k."""
    k_f: float = 1.0
    """The future-clarity bonus's sharpness."""
    zeta: float = 0.1
    """The weight of the future-clarity bonus (0: the scaling alone)."""
    normalize: str = "sum"
    """Where the whitening sits (the source's text was not available; both readings): "sum" whitens
    g A + zeta f (a batch without reward spread still gets a unit-size push from the bonus);
    "scaled_advantage" whitens g A, then adds zeta f (the bonus keeps its size, at most zeta);
    "none" whitens nothing."""

    def validate(self):
        _check_range(self, "k", lo=0, lo_open=True)
        _check_range(self, "k_f", lo=0)
        _check_range(self, "zeta", lo=0)
        _check_choice(self, "normalize", EMPG_NORMALIZE)


@dataclass
class ImitationConfig(_Validated):
    """Hybrid RL/IL (rl_lab.algos.hybrid.Imitation): add coef times the imitation loss, the mean NLL
    of the task's own demonstrations for the step's prompts (the warm start's SFT loss)."""
    coef: float = 0.1

    def validate(self):
        _check_range(self, "coef", lo=0, lo_open=True)


@dataclass
class TeacherKLConfig(_Validated):
    """Hybrid RL/IL (rl_lab.algos.hybrid.TeacherKL): add coef times the exact per-token
    KL(pi || teacher) over the vocabulary on the model's own tokens (the note's dense gradient)."""
    model: str | None = None
    """The teacher: "warm-start", a size preset or a local path (as RLConfig.model); it must share
    the policy's tokenizer."""
    coef: float = 0.1

    def validate(self):
        if not self.model:
            raise ConfigError("TeacherKLConfig.model is not set: name the teacher, e.g. teacher_kl={model: "
                              "warm-start} (the task's shipped checkpoint) or a local model path")
        _check_range(self, "coef", lo=0, lo_open=True)


@dataclass
class LengthTriggeredConfig(_Validated):
    """The length-triggered schedule (chapter 7; rl_lab.schedules): halve the learning rate every
    decay_period_factor x (surge step) steps once the mean completion length surges.  Filled with
    its defaults when lr_scheduler_type is "length_triggered"."""
    baseline_steps: int = 50
    """The baseline length is the mean over this many first steps."""
    surge_factor: float = 3.0
    """A surge is a step whose mean length exceeds this multiple of the baseline."""
    decay_period_factor: float = 1.8
    """The decay period is this multiple of the surge step."""
    min_lr_ratio: float = 0.1
    """The learning rate never falls below this fraction of learning_rate (verl's name)."""

    def validate(self):
        _check_range(self, "baseline_steps", lo=1)
        _check_range(self, "surge_factor", lo=1, lo_open=True)
        _check_range(self, "decay_period_factor", lo=0, lo_open=True)
        _check_range(self, "min_lr_ratio", lo=0, hi=1, lo_open=True)


# ------------------------------------------------------------------ the rows
ACTOR = "actor_rollout_ref.actor"


@dataclass(frozen=True)
class Export:
    """What a method's RLConfig field becomes in a peer library (verl, TRL).

    status: "exported" (written as the library's keys: `to(config) -> {key: value}`, read back with
    `back(flat) -> value`), "local" (rl_lab-only and harmless there: kept beside the export) or
    "refused" (the library has no counterpart: only the method's off value can be exported)."""
    status: str
    note: str
    keys: tuple[str, ...] = ()
    to: Callable[[Any], dict] | None = None
    back: Callable[[dict], Any] | None = None


def refused(note: str) -> Export:
    return Export("refused", note)


def local(note: str) -> Export:
    return Export("local", note)


def exported(keys: tuple[str, ...], note: str, to: Callable[[Any], dict], back: Callable[[dict], Any]) -> Export:
    return Export("exported", note, tuple(keys), to, back)


@dataclass(frozen=True)
class MethodSpec:
    """One method of the trainer (see the module docstring)."""
    name: str
    """The method's name: its checkpoint entry, and what build_methods lists."""
    impl: str
    """"module:Class" of its `rl_lab.algos.method.Method` subclass, imported only when a run is built
    (the rows themselves load no torch)."""
    field: str | None = None
    """The RLConfig field that turns it on and holds its knobs; None: `RLConfig.extra_methods[name]`."""
    config: type | None = None
    """Its knobs' config class (a `_Validated` dataclass), nested in RLConfig; None: the field is a
    flag or a number."""
    off: Any = None
    """The field's value when the method is off (None, False or 0)."""
    when: Callable[[Any], bool] | None = None
    """config -> whether the run uses it; default: the field is not `off`."""
    verl: Export = _field(default_factory=lambda: refused("verl 0.9.1 has no counterpart"))
    trl: Export = _field(default_factory=lambda: refused("TRL 1.16's GRPOConfig has no counterpart"))
    legacy_checkpoint_keys: tuple[str, ...] = ()
    """Top-level keys of earlier checkpoints that held this method's state (read into it on resume)."""

    def active(self, config) -> bool:
        if self.when is not None:
            return bool(self.when(config))
        if self.field is None:
            return self.name in (config.extra_methods or {})
        return getattr(config, self.field) != self.off

    def knobs(self, config):
        """The run's knobs for this method: its nested config, its field's value, or its entry in
        extra_methods."""
        if self.field is None:
            return (config.extra_methods or {}).get(self.name)
        return getattr(config, self.field)

    def load(self) -> type:
        """The Method class (imports its module)."""
        module, _, name = self.impl.partition(":")
        return getattr(importlib.import_module(module), name)


def _kl_to_verl(cfg) -> dict:
    return {f"{ACTOR}.use_kl_loss": cfg.beta > 0, f"{ACTOR}.kl_loss_coef": float(cfg.beta),
            f"{ACTOR}.kl_loss_type": "low_var_kl", "algorithm.use_kl_in_reward": False}


def _kl_from_verl(flat: dict) -> float:
    return float(flat[f"{ACTOR}.kl_loss_coef"]) if flat[f"{ACTOR}.use_kl_loss"] else 0.0


_NO_TRL = "TRL 1.16's GRPOConfig has no "
METHOD_SPECS: list[MethodSpec] = [
    MethodSpec("truncation_mask", "rl_lab.algos.token_masks:TruncationMask", "mask_truncated_completions", off=False,
               verl=refused("verl 0.9.1 has no loss mask for truncated completions"),
               trl=exported(("mask_truncated_completions",), "the same name and meaning",
                            lambda cfg: {"mask_truncated_completions": cfg.mask_truncated_completions},
                            lambda flat: flat["mask_truncated_completions"])),
    MethodSpec("dvp", "rl_lab.algos.token_masks:DVP", "dvp", DVPConfig,
               verl=refused("Dynamic Vocabulary Pruning is rl_lab's own (chapter 6): verl's sampler and trainer "
                            "do not prune"),
               trl=refused(_NO_TRL + "vocabulary pruning of sampler and trainer")),
    MethodSpec("void_filter", "rl_lab.algos.simpletir:VoidFilter", "mask_void_turns", VoidFilterConfig,
               verl=refused("SimpleTIR's void-turn filter lives in its own verl fork, not in verl 0.9.1"),
               trl=refused(_NO_TRL + "void-turn filter")),
    MethodSpec("filter_groups", "rl_lab.algos.zero_spread:DynamicSampling", "filter_groups", FilterGroupsConfig,
               verl=refused("verl 0.9.1 filters zero-spread groups (algorithm.filter_groups) only in its v1 "
                            "trainer's replay buffer, which refills evicted groups; the export does not set it"),
               trl=refused(_NO_TRL + "dynamic sampling (it logs frac_reward_zero_std)")),
    MethodSpec("skip_zero_spread", "rl_lab.algos.zero_spread:ZeroSpreadSkip", "skip_zero_spread_steps", off=False,
               verl=refused("verl 0.9.1 always takes the optimizer step"),
               trl=refused("TRL always takes the optimizer step")),
    MethodSpec("empg", "rl_lab.algos.empg:EMPG", "empg", EMPGConfig,
               verl=refused("verl 0.9.1 has no entropy-modulated advantage (EMPG)"),
               trl=refused(_NO_TRL + "entropy-modulated advantage")),
    MethodSpec("reference_kl", "rl_lab.algos.reference_kl:ReferenceKL", "beta", off=0.0,
               when=lambda cfg: cfg.beta > 0,
               verl=exported((f"{ACTOR}.use_kl_loss", f"{ACTOR}.kl_loss_coef", f"{ACTOR}.kl_loss_type",
                              "algorithm.use_kl_in_reward"),
                             "KL in the loss, k3 (verl's low_var_kl, clamped to [-10, 10]); beta = 0 turns it off",
                             _kl_to_verl, _kl_from_verl),
               trl=exported(("beta",), "TRL's beta: k3 to the reference in the loss",
                            lambda cfg: {"beta": float(cfg.beta)}, lambda flat: float(flat["beta"])),
               legacy_checkpoint_keys=("ref_model",)),
    MethodSpec("teacher_kl", "rl_lab.algos.hybrid:TeacherKL", "teacher_kl", TeacherKLConfig,
               verl=refused("verl 0.9.1 has no KL to a teacher model (only to its reference)"),
               trl=refused(_NO_TRL + "KL to a teacher (TRL's GKDTrainer is another trainer)")),
    MethodSpec("imitation", "rl_lab.algos.hybrid:Imitation", "imitation", ImitationConfig,
               verl=refused("verl 0.9.1's actor has no imitation (SFT) term in the RL loss"),
               trl=refused(_NO_TRL + "imitation term")),
    MethodSpec("tool_token_stats", "rl_lab.algos.simpletir:ToolTokenStats", "tool_token_stats", off=False,
               verl=refused("rl_lab's SimpleTIR measurement (a metric verl 0.9.1 does not log)"),
               trl=local("rl_lab's SimpleTIR measurement, a metric only")),
    MethodSpec("turn_reward_metrics", "rl_lab.algos.turn_metrics:TurnRewardMetrics", when=lambda cfg: True),
    MethodSpec("length_triggered", "rl_lab.algos.length_triggered:LengthTriggered", "length_triggered",
               LengthTriggeredConfig, when=lambda cfg: cfg.lr_scheduler_type == "length_triggered",
               verl=local("only read by lr_scheduler_type=length_triggered (refused); its min_lr_ratio is not "
                          "verl's: the cosine export sets verl's min_lr_ratio to 0 (rl_lab's cosine ends at 0)"),
               trl=local("only read by lr_scheduler_type=length_triggered, which TRL has not"),
               legacy_checkpoint_keys=("mean_lengths",)),
    MethodSpec("mismatch_sources", "rl_lab.algos.mismatch_fixes:MismatchFixes", "mismatch", MismatchConfig,
               verl=refused("rl_lab's mismatch dials simulate each source on one machine; on verl each fix is a "
                            "key of its own (rl_lab.mismatch_specs.SOURCE_SPECS lists them)"),
               trl=refused(_NO_TRL + "mismatch simulator; its fixes' keys are in rl_lab.mismatch_specs")),
]
"""The methods in hook order."""


def method_configs() -> dict[str, type]:
    """RLConfig's nested method configs by field name."""
    return {s.field: s.config for s in METHOD_SPECS if s.field is not None and s.config is not None}


def spec(name: str) -> MethodSpec:
    """The row of the method called `name`."""
    for s in METHOD_SPECS:
        if s.name == name:
            return s
    raise ConfigError(f"no method is registered as {name!r}; registered: {[s.name for s in METHOD_SPECS]}")


def plugin_specs() -> dict[str, MethodSpec]:
    """The rows registered from outside (their knobs live in RLConfig.extra_methods), by name."""
    return {s.name: s for s in METHOD_SPECS if s.field is None and s.when is None}


def register_method(row: MethodSpec, before: str | None = None, after: str | None = None) -> MethodSpec:
    """Add a method's row (at the end of the hook order, or just before/after a named method).  A
    row registered from outside has no RLConfig field: its knobs are RLConfig.extra_methods[name].
    Registering the same row again is a no-op; another row under a taken name is an error."""
    if row.field is not None or row.when is not None:
        raise ConfigError(f"register_method({row.name!r}): a registered method takes its knobs from "
                          "RLConfig.extra_methods; leave field and when unset")
    if any(s.name == row.name for s in METHOD_SPECS):
        if spec(row.name) == row:
            return row
        raise ConfigError(f"a method named {row.name!r} is already registered; choose another name")
    if before is not None and after is not None:
        raise ConfigError("register_method: give before= or after=, not both")
    at = len(METHOD_SPECS)
    if before is not None or after is not None:
        at = METHOD_SPECS.index(spec(before or after)) + (after is not None)
    METHOD_SPECS.insert(at, row)
    return row


def unregister_method(name: str) -> None:
    """Remove a row registered with `register_method` (tests, notebooks)."""
    row = spec(name)
    if row not in plugin_specs().values():
        raise ConfigError(f"{name!r} is one of rl_lab's own methods; only registered ones can be removed")
    METHOD_SPECS.remove(row)
