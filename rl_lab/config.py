"""Dataclass configs, validated with messages that say what to change (the presets and the command
line's fields are in rl_lab.presets).

Field names follow TRL's `GRPOConfig` (num_generations, max_completion_length, temperature,
top_p, top_k, epsilon, epsilon_high, num_iterations, beta, scale_rewards,
mask_truncated_completions) and verl's actor / `algorithm.rollout_correction` configs
(loss_agg_mode, clip_ratio_c, gamma, and `rollout_correction` = verl's algorithm.rollout_correction:
rollout_is, rollout_is_threshold, rollout_is_batch_normalize, rollout_rs, rollout_rs_threshold,
bypass_mode) where the concept is the same.

Chapter 1 lists the fields of a run; chapter 5 maps the correction fields to verl's.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rl_lab.config_checks import _check_choice, _check_min_tokens, _check_range, _check_types, _Validated  # noqa: F401
from rl_lab.correction_options import CORRECTION_FIELDS, IS_LEVELS, CorrectionConfig  # noqa: F401 - re-exported
from rl_lab.errors import ConfigError
from rl_lab.method_specs import (  # noqa: F401 - re-exported
    EMPG_NORMALIZE,
    DVPConfig,
    EMPGConfig,
    FilterGroupsConfig,
    ImitationConfig,
    LengthTriggeredConfig,
    TeacherKLConfig,
    VoidFilterConfig,
    method_configs,
    plugin_specs,
)
from rl_lab.mismatch_specs import MismatchConfig, check_mismatch_run

DTYPES = ("float32", "bfloat16", "float16")
POLICY_LOSSES = ("reinforce", "ppo_clip")
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum",
                  "seq-mean-token-sum-norm")
SCALE_REWARDS = ("group", "batch", "none")
ADV_ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline",
                  "optimal_token_baseline", "trloo", "grpo_per_turn")
SAMPLER_QUANTIZATION = (None, "int8")
SCHEDULERS = ("constant", "linear", "cosine", "length_triggered")


@dataclass
class _SamplingFields:
    """How the rollout engine samples (the behaviour policy mu), declared once: SamplingConfig is
    these fields alone, what an engine's generate() takes; RLConfig has them at its top level under
    TRL's GRPOConfig names and builds a SamplingConfig with `RLConfig.sampling()`."""
    max_completion_length: int | None = None
    """Maximum number of generated tokens per completion (TRL's name)."""
    temperature: float = 1.0
    top_p: float = 1.0
    """Nucleus sampling; 1.0 keeps the whole vocabulary."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 turns it off."""
    min_p: float = 0.0
    """Sampler-only truncation: keep only tokens with p >= min_p * p_max (vLLM's min_p; the trainer
    does not truncate); 0 turns it off."""
    min_tokens: int = 0
    """<eos> cannot be sampled before this many tokens (vLLM's min_tokens, HF's min_new_tokens): it
    is removed from mu there, not from pi.  max_completion_length = min_tokens forces every
    completion to that length (benchmarks at a fixed length); 0 turns it off."""

    def _validate_sampling(self):
        _check_range(self, "max_completion_length", lo=1)
        _check_min_tokens(self)
        _check_range(self, "temperature", lo=0, lo_open=True)
        _check_range(self, "top_p", lo=0, hi=1, lo_open=True)
        _check_range(self, "top_k", lo=0)
        _check_range(self, "min_p", lo=0, hi=1, hi_open=True)


@dataclass
class SamplingConfig(_SamplingFields, _Validated):
    """The sampling fields an engine's generate() takes.  The sampler's precision is not here: it
    belongs to the engine (`HFEngine`/`VLLMEngine(dtype=...)`, from RLConfig.sampler_dtype)."""
    max_completion_length: int = 16

    def validate(self):
        self._validate_sampling()


METHOD_CONFIGS: dict[str, type] = method_configs()
"""RLConfig's nested configs by field name (from rl_lab.method_specs.METHOD_SPECS)."""

LEGACY_FIELDS: dict[str, tuple[str, str]] = {
    "dvp_min_p": ("dvp", "min_p"), "max_num_gen_batches": ("filter_groups", "max_num_gen_batches"),
    "empg_k": ("empg", "k"), "empg_k_f": ("empg", "k_f"), "empg_zeta": ("empg", "zeta"),
    "empg_normalize": ("empg", "normalize"), "il_coef": ("imitation", "coef"),
    "teacher_kl_coef": ("teacher_kl", "coef"), "teacher_model": ("teacher_kl", "model"),
    "length_baseline_steps": ("length_triggered", "baseline_steps"),
    "length_surge_factor": ("length_triggered", "surge_factor"),
    "lr_decay_period_factor": ("length_triggered", "decay_period_factor"),
    "min_lr_ratio": ("length_triggered", "min_lr_ratio")}
"""The flat fields of rl_lab before the nested configs (config.yaml files of earlier runs): read
with a ConfigWarning into their nested place."""


@dataclass
class RLConfig(_SamplingFields, _Validated):
    """Everything one RL run needs.  `Trainer(RLConfig(...)).train()` runs it.  The sampling fields
    (max_completion_length, temperature, top_p, top_k, min_p, min_tokens) come from _SamplingFields;
    a method with knobs has a nested config (see DVPConfig and below), None when it is off."""
    # --- task and model --------------------------------------------------------------
    task: str = "addition"
    """Task name (see `rl_lab.tasks.TASKS`)."""
    task_kwargs: dict = field(default_factory=dict)
    """Difficulty knobs passed to the task, e.g. {"digits": 3}."""
    model: str = "warm-start"
    """"warm-start" (the shipped checkpoint for `task`), a size preset ("0.3M", "3M",
    "30M": random init) or a path to any local Hugging Face causal LM."""
    # --- rollout ------------------------------------------------------------------------
    prompts_per_step: int = 8
    """Distinct prompts per optimizer step (TRL counts completions instead:
    per_device_train_batch_size = prompts_per_step * num_generations)."""
    num_generations: int = 8
    """Completions per prompt: the group size G."""
    # max_completion_length: None means 8, or a tool task's longest episode (call, tool output,
    # answer, <eos>), set when the config is built, so the Python API and the CLI agree.
    sampler_dtype: str = "float32"
    """Precision of the rollout engine (bfloat16 makes a real training-inference mismatch)."""
    use_vllm: bool = False
    """Sample with vLLM in this process (rl_lab.engines.vllm_engine.VLLMEngine; TRL's name), in
    `sampler_dtype`, instead of the Hugging Face sampling loop. Needs tools/install_vllm.sh."""
    max_turns: int | None = None
    """Model turns per episode, K, for a tool task (one with an `environment`, e.g.
    multiplication_tool): None keeps the task's own K; 1 executes no call (the tool is not
    available).  A task without an environment refuses it."""
    # --- mismatch injectors (rl_lab.engines.injectors): ways the sampler mu drifts from pi ----------
    sampler_quantization: str | None = None
    """"int8": the sampler's linear layers are fake-quantised per output channel (W8A16)."""
    sampler_staleness: int = 0
    """The sampler's weights are this many optimizer steps behind the trainer's (async RL)."""
    sampler_logit_noise: float = 0.0
    """Std of Gaussian noise added to the sampler's logits (a stand-in for kernel noise)."""
    sampler_temperature: float | None = None
    """The sampler divides its logits by this (on top of `temperature`); the trainer does not know
    it and scores at `temperature` (a temperature set in the inference engine only).  None: off."""
    mismatch: MismatchConfig | None = None
    """The exact-zero sampler and the mismatch sources, one dial each with its fix (MismatchConfig;
    rl_lab.mismatch_specs): `mismatch={}` is the control (sampler and trainer bitwise equal),
    `--set mismatch.precision.dtype=bfloat16` one source on it.  None: the fast sampler and the flat
    injectors above."""
    # --- advantages and loss ------------------------------------------------------------
    advantage_estimator: str = "grpo"
    """verl's names: grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline,
    optimal_token_baseline (OTB); and Dr. Kernel's trloo (turn-level returns, leave-one-out
    baseline per prompt and model turn; per-turn rewards where the task gives them).  grpo is
    trajectory-level (one mean per prompt, the same advantage on every turn); grpo_per_turn groups
    per (prompt, model turn) as multi-turn pipelines do: TRLOO's turn returns minus the mean of the
    group's episodes present at that turn, the episode itself included, divided by that (prompt,
    turn) std under scale_rewards="group" (rl_lab.algos.trloo; one turn: the same as grpo)."""
    gamma: float = 1.0
    """Discount of the reward-to-go in reinforce_plus_plus."""
    scale_rewards: str = "group"
    """Divide advantages by the group std ("group", GRPO), the batch std, or not ("none", Dr. GRPO)."""
    policy_loss: str = "ppo_clip"
    """"ppo_clip" (clipped ratio to the policy that computed old log-probs) or "reinforce"."""
    loss_agg_mode: str = "token-mean"
    """verl's names.  TRL's loss_type dapo = token-mean, grpo = seq-mean-token-mean,
    dr_grpo = seq-mean-token-sum-norm."""
    epsilon: float = 0.2
    epsilon_high: float | None = None
    """Upper clip (DAPO's clip-higher); None uses epsilon."""
    clip_ratio_c: float | None = None
    """Dual-clip PPO: for A < 0 the loss is capped at -A * clip_ratio_c (verl's default 3.0);
    None turns it off (TRL)."""
    num_iterations: int = 1
    """Optimizer steps on each batch (PPO epochs, TRL's mu)."""
    beta: float = 0.0
    """KL(pi || pi_ref) coefficient (k3 estimator); 0 loads no reference model."""
    mask_truncated_completions: bool = False
    """Drop completions that hit max_completion_length without <eos> from the loss."""
    mask_void_turns: VoidFilterConfig | None = None
    """SimpleTIR's filter (its name; VoidFilterConfig): every episode with a void turn leaves the
    loss, counted as filter/void_trajectories; `true` is SimpleTIR's own (scope "loss": the group's
    advantages still count it), `{scope: loss_and_groups}` also drops it from the group statistics
    (rl_lab before issue 53).  A void turn ends with neither a complete tool call nor a final
    answer: cut by the length limit, or ended early (<eos>) without an answer in the task's answer
    format.  Without an environment the one turn is void when it was cut by the length limit.
    None: off."""
    skip_zero_spread_steps: bool = False
    """No optimizer step when every group's rewards are equal (the policy gradient is then 0, but
    AdamW's moments would still move the weights); counted as filter/zero_spread_skipped
    (rl_lab.algos.zero_spread).  The skip looks at the rewards only: combined with a term whose
    gradient does not vanish without reward spread (beta's reference KL, teacher_kl, imitation,
    EMPG's bonus), it discards that gradient too on such steps."""
    filter_groups: FilterGroupsConfig | None = None
    """DAPO's dynamic sampling (FilterGroupsConfig); None: off."""
    tool_token_stats: bool = False
    """Log SimpleTIR's measurement of a multi-turn batch at every step (tir/...: the share of sampled
    tokens with pi < 0.1 and their logit gradient norm |A| ||e_y - pi||, right after a tool output vs
    elsewhere; rl_lab.algos.simpletir).  Keeps pi's (B, T, V) log-probs for the step."""
    empg: EMPGConfig | None = None
    """Entropy-modulated advantages per model turn (EMPGConfig); None: off."""
    imitation: ImitationConfig | None = None
    """Hybrid RL/IL: an imitation (NLL) term on the task's demonstrations (ImitationConfig); None: off."""
    teacher_kl: TeacherKLConfig | None = None
    """Hybrid RL/IL: a dense per-token KL to a teacher model (TeacherKLConfig); None: off."""
    extra_methods: dict = field(default_factory=dict)
    """Methods registered from outside rl_lab (rl_lab.method_specs.register_method), by name: their
    knobs (a mapping of the method's config, or true for its defaults).  {}: none."""
    # --- off-policy correction hook (rl_lab.algos.correction; verl's rollout_correction) ---
    rollout_correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    """Importance weights, rejection and the operating mode between sampler and trainer
    (CorrectionConfig: verl's algorithm.rollout_correction, the same names); all off by default.
    `rollout_correction={"rollout_is": "token"}`, `--set rollout_correction.rollout_is=token`."""
    dvp: DVPConfig | None = None
    """Dynamic Vocabulary Pruning in sampler and trainer (DVPConfig); None: off."""
    # --- optimisation -------------------------------------------------------------------
    learning_rate: float = 5e-5
    """Tuned for the shipped 0.3M warm starts: 1e-4 already degrades them, 1e-3 collapses them.
    0 freezes the policy (a control run on the same prompt and sampling streams)."""
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    lr_scheduler_type: str = "constant"
    """constant, linear, cosine (to 0 at max_steps), or length_triggered: halve the learning rate
    once the mean completion length surges (rl_lab.schedules; chapter 7; knobs in length_triggered)."""
    warmup_steps: int = 0
    length_triggered: LengthTriggeredConfig | None = None
    """The length-triggered schedule's knobs (LengthTriggeredConfig); set to its defaults when
    lr_scheduler_type is length_triggered, and read only then."""
    # --- run ----------------------------------------------------------------------------
    max_steps: int = 200
    seed: int = 0
    output_dir: str | None = None
    """Where metrics.jsonl, config.yaml and checkpoints go; None keeps everything in memory."""
    save_steps: int = 0
    """Checkpoint every N steps (0: only at the end).  Needs output_dir."""
    eval_steps: int = 0
    """Greedy accuracy on held-out prompts every N steps (0: off)."""
    eval_prompts: int = 64
    device: str = "auto"
    """"auto" (CUDA if present, else CPU), "cpu" or "cuda"."""
    share_prefix: bool = True
    """The trainer's forward runs each distinct prompt once and reuses its key/value cache for
    the prompt's rows (rl_lab.engines.shared_prefix; same log-probs and gradients to rounding),
    when that skips at least 15% of the batch's tokens (`MIN_SAVED_FRACTION`; short prompts under
    long completions take the plain forward, which is then faster and smaller).  False:
    one plain forward over every row, for a model whose forward takes no cache."""
    progress_bar: bool = True

    def validate(self):
        from rl_lab.tasks import TASKS  # local import: tasks imports nothing from here
        _check_choice(self, "task", list(TASKS))
        self._validate_episodes(_checked_knobs(self))
        self._warn_inert()
        for name in ("prompts_per_step", "num_iterations", "max_steps"):
            _check_range(self, name, lo=1)
        _check_range(self, "num_generations", lo=2)
        self._validate_sampling()
        _check_choice(self, "sampler_dtype", DTYPES)
        _check_choice(self, "sampler_quantization", SAMPLER_QUANTIZATION)
        _check_range(self, "sampler_staleness", lo=0)
        _check_range(self, "sampler_logit_noise", lo=0)
        if self.sampler_temperature is not None:
            _check_range(self, "sampler_temperature", lo=0, lo_open=True)
        if self.mismatch is not None:
            check_mismatch_run(self)
        if self.use_vllm:
            injectors = [n for n in ("sampler_quantization", "sampler_staleness", "sampler_logit_noise",
                                     "sampler_temperature")
                         if getattr(self, n)]
            if injectors:
                raise ConfigError(f"use_vllm=True cannot be combined with {', '.join(injectors)}: those "
                                  "injectors perturb the Hugging Face engine; set use_vllm=False or "
                                  "turn them off")
            rs = self.rollout_correction.rollout_rs
            if rs is not None and "_kl" in rs:
                raise ConfigError(f"rollout_correction.rollout_rs={rs!r} needs the sampler's full distributions, "
                                  "which vLLM does not return; use a k1/k2/k3 option or use_vllm=False")
        _check_choice(self, "advantage_estimator", ADV_ESTIMATORS)
        _check_range(self, "gamma", lo=0, hi=1)
        _check_choice(self, "scale_rewards", SCALE_REWARDS)
        _check_choice(self, "policy_loss", POLICY_LOSSES)
        _check_choice(self, "loss_agg_mode", LOSS_AGG_MODES)
        _check_range(self, "epsilon", lo=0, hi=1, lo_open=True, hi_open=True)
        if self.epsilon_high is not None:
            _check_range(self, "epsilon_high", lo=0, lo_open=True)
        if self.clip_ratio_c is not None:
            _check_range(self, "clip_ratio_c", lo=1, lo_open=True)
        _check_range(self, "beta", lo=0)
        _check_range(self, "learning_rate", lo=0)   # 0 freezes the policy: a paired control run
        _check_range(self, "adam_beta1", lo=0, hi=1, hi_open=True)
        _check_range(self, "adam_beta2", lo=0, hi=1, hi_open=True)
        _check_range(self, "weight_decay", lo=0)
        _check_range(self, "max_grad_norm", lo=0, lo_open=True)
        _check_choice(self, "lr_scheduler_type", SCHEDULERS)
        for name in ("warmup_steps", "save_steps", "eval_steps", "seed"):
            _check_range(self, name, lo=0)
        _check_range(self, "eval_prompts", lo=1)
        _check_choice(self, "device", ("auto", "cpu", "cuda"))
        if self.save_steps and not self.output_dir:
            raise ConfigError("RLConfig.save_steps > 0 needs output_dir (where to write checkpoints)")

    INERT = (
        (("length_triggered",), lambda c: c.lr_scheduler_type != "length_triggered",
         "lr_scheduler_type is not length_triggered"),
    )
    """Fields that only one option reads: (fields, "that option is off", why).  Setting one away
    from its default while the option is off is a ConfigWarning, not a silent no-op.  (A method's
    own knobs cannot be inert: they live in its nested config, which is None when it is off.)"""

    def _warn_inert(self):
        import warnings

        from rl_lab.errors import ConfigWarning
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for names, off, why in self.INERT:
            if not off(self):
                continue
            changed = [n for n in names if getattr(self, n) != defaults[n]]
            if changed:
                warnings.warn(f"RLConfig.{', '.join(f'{n}={getattr(self, n)!r}' for n in changed)} "
                              f"has no effect: {why}", ConfigWarning, stacklevel=5)

    def _validate_episodes(self, knobs):
        """max_turns only for a tool task; a tool task's episode must fit max_completion_length."""
        from rl_lab.tasks import TASKS, is_tool_task
        tool = is_tool_task(self.task)
        if self.max_completion_length is None:
            self.max_completion_length = (episode_completion_length(self.task, knobs) if tool
                                          else DEFAULT_COMPLETION_LENGTH)
        if not tool:
            if self.max_turns is not None:
                tool_tasks = [name for name in TASKS if is_tool_task(name)]
                raise ConfigError(f"RLConfig.max_turns={self.max_turns!r}: task {self.task!r} has no tool "
                                  f"environment, so its episodes have one turn; leave max_turns unset (null) "
                                  f"or choose a tool task: {tool_tasks}")
            return
        if self.max_turns is not None:
            _check_range(self, "max_turns", lo=1)
        need = episode_completion_length(self.task, knobs)
        if self.max_completion_length < need:
            raise ConfigError(f"RLConfig.max_completion_length={self.max_completion_length} is shorter than one "
                              f"{self.task!r} episode (call, tool output and answer: up to {need} tokens with "
                              f"<eos>); set max_completion_length >= {need}")

    def replace(self, **changes):
        """A copy with some fields changed (validated); a correction option may be given by its own
        name (`replace(rollout_is="token")`): it changes that option of rollout_correction."""
        if any(k in CORRECTION_FIELDS for k in changes):
            changes.setdefault("rollout_correction", self.rollout_correction)
            changes = _fold_flat_correction(changes, warn=False)
        return super().replace(**changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data (nested configs as mappings), in reading order: the sampling
        fields after num_generations, as in a run's config.yaml."""
        d = dataclasses.asdict(self)
        sampling = [f.name for f in dataclasses.fields(_SamplingFields)]
        rest = [k for k in d if k not in sampling]
        at = rest.index("num_generations") + 1
        return {k: d[k] for k in rest[:at] + sampling + rest[at:]}

    def sampling(self) -> SamplingConfig:
        """The engine's SamplingConfig: the sampling fields, with DVP's threshold as the sampler's
        min_p when it is higher (DVP prunes the sampler too)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(_SamplingFields)}
        fields["min_p"] = max(self.min_p, self.dvp.min_p if self.dvp else 0.0)
        return SamplingConfig(**fields)

    # ------------------------------------------------------------------ nested configs
    def _coerce(self):
        """Each nested config from what the caller gave: an instance, a mapping of its fields, True
        (its defaults) or False/None (off); the length-triggered knobs filled in when that schedule
        is chosen."""
        for name, kind in METHOD_CONFIGS.items():
            value = getattr(self, name)
            if value is True or (isinstance(value, dict) and not isinstance(value, bool)):
                try:
                    value = kind.from_dict({} if value is True else value)
                except ConfigError as e:
                    raise ConfigError(f"RLConfig.{name}: {e}") from e
            elif value is False:
                value = None
            elif value is not None and not isinstance(value, kind):
                raise ConfigError(f"RLConfig.{name}={value!r}: give {kind.__name__}(...), a mapping of its fields "
                                  f"(e.g. {{{next(iter(f.name for f in dataclasses.fields(kind)))}: ...}}), "
                                  f"true for its defaults, or null (off)")
            setattr(self, name, value)
        if self.lr_scheduler_type == "length_triggered" and self.length_triggered is None:
            self.length_triggered = LengthTriggeredConfig()
        self.rollout_correction = _coerce_correction(self.rollout_correction)
        self.extra_methods = _coerce_extra_methods(self.extra_methods)

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        """An RLConfig from a mapping (YAML, a sweep grid, the CLI's --set).  A dotted key sets one
        knob of a nested config and turns its method on ("empg.k": 2); the flat names of earlier
        versions (LEGACY_FIELDS, e.g. empg_k) are read into their nested place with a ConfigWarning."""
        return super().from_dict(_nest(_from_legacy(dict(d))))


def _flat_correction_init(init):
    """RLConfig(rollout_is="token", ...): the correction's flat fields of earlier versions, in
    Python too, read into rollout_correction with the same ConfigWarning as in a config.yaml."""
    import functools

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **_fold_flat_correction(kwargs))
    return __init__


RLConfig.__init__ = _flat_correction_init(RLConfig.__init__)


def _fold_flat_correction(d: dict, warn: bool = True) -> dict:
    """`d` with the correction's flat fields (CORRECTION_FIELDS, RLConfig's before issue 51) moved
    into its rollout_correction (a mapping, an instance or absent), the knob named winning; with
    `warn`, a ConfigWarning names them."""
    flat = {k: d[k] for k in d if k in CORRECTION_FIELDS}
    if not flat:
        return d
    d = {k: v for k, v in d.items() if k not in flat}
    nested = d.get("rollout_correction")
    nested = dataclasses.asdict(nested) if dataclasses.is_dataclass(nested) else nested
    d["rollout_correction"] = {**(nested if isinstance(nested, dict) else {}), **flat}
    if warn:
        import warnings

        from rl_lab.errors import ConfigWarning
        warnings.warn("RLConfig fields of an earlier rl_lab read into rollout_correction: "
                      + ", ".join(f"{k} -> rollout_correction.{k}" for k in flat)
                      + " (write them that way, as verl's algorithm.rollout_correction does)", ConfigWarning,
                      stacklevel=5)
    return d


def _from_legacy(d: dict) -> dict:
    """Earlier versions' flat fields into their nested configs: the correction's (CORRECTION_FIELDS)
    into rollout_correction, the methods' (LEGACY_FIELDS) where that method was on (the others were
    inert, and go); a ConfigWarning names the renames."""
    d = _fold_flat_correction(d)
    old = {k: d.pop(k) for k in list(d) if k in LEGACY_FIELDS}
    if not old:
        return d
    import warnings

    from rl_lab.errors import ConfigWarning

    def positive(key):
        value = old.get(key)
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    on = {"dvp": positive("dvp_min_p"), "imitation": positive("il_coef"), "teacher_kl": positive("teacher_kl_coef"),
          "filter_groups": bool(d.get("filter_groups")), "empg": bool(d.get("empg")),
          "length_triggered": d.get("lr_scheduler_type") == "length_triggered"}
    for key, value in old.items():
        method, knob = LEGACY_FIELDS[key]
        if on[method]:
            nested = d.get(method)
            d[method] = {**(nested if isinstance(nested, dict) else {}), knob: value}
    warnings.warn("RLConfig fields of an earlier rl_lab read into nested configs: "
                  + ", ".join(f"{k} -> {'.'.join(LEGACY_FIELDS[k])}" for k in old)
                  + " (write them that way; an option that was off is left off)", ConfigWarning, stacklevel=4)
    return d


def _coerce_correction(value) -> CorrectionConfig:
    """RLConfig.rollout_correction from an instance, a mapping of its fields, or None (all off)."""
    if isinstance(value, CorrectionConfig):
        return value
    if value is None:
        return CorrectionConfig()
    if isinstance(value, dict):
        try:
            return CorrectionConfig.from_dict(value)
        except ConfigError as e:
            raise ConfigError(f"RLConfig.rollout_correction: {e}") from e
    raise ConfigError(f"RLConfig.rollout_correction={value!r}: give CorrectionConfig(...) or a mapping of its "
                      f"fields ({list(CORRECTION_FIELDS)}), e.g. {{rollout_is: token}}")


def _coerce_extra_methods(value) -> dict:
    """RLConfig.extra_methods with each registered method's knobs as its config (a mapping or true:
    its defaults); an unregistered name is an error that lists the registered ones."""
    if not isinstance(value, dict):
        raise ConfigError(f"RLConfig.extra_methods={value!r} must be a mapping of method name -> knobs")
    rows, out = plugin_specs(), {}
    for name, knobs in value.items():
        if name not in rows:
            raise ConfigError(f"RLConfig.extra_methods: no method {name!r} is registered (register_method in "
                              f"rl_lab.method_specs); registered: {sorted(rows)}")
        kind = rows[name].config
        if knobs is True or knobs is None:
            knobs = {}
        if kind is None:
            if knobs not in ({}, ()):
                raise ConfigError(f"RLConfig.extra_methods.{name}={knobs!r}: this method has no knobs; write true")
            out[name] = {}
        elif isinstance(knobs, kind):
            out[name] = knobs
        elif isinstance(knobs, dict):
            try:
                out[name] = kind.from_dict(knobs)
            except ConfigError as e:
                raise ConfigError(f"RLConfig.extra_methods.{name}: {e}") from e
        else:
            raise ConfigError(f"RLConfig.extra_methods.{name}={knobs!r}: give {kind.__name__}(...), a mapping "
                              "of its fields, or true for its defaults")
    return out


def _nest(d: dict) -> dict:
    """{"empg.k": 2} -> {"empg": {"k": 2}}, merged into what `d` gives the nested config."""
    for key in [k for k in d if isinstance(k, str) and k.startswith("extra_methods.")]:
        _, name, *knob = key.split(".", 2)
        methods = d.get("extra_methods")
        methods = dict(methods) if isinstance(methods, dict) else {}
        knobs = methods.get(name)
        knobs = dataclasses.asdict(knobs) if dataclasses.is_dataclass(knobs) else knobs
        knobs = knobs if isinstance(knobs, dict) else {}
        value = d.pop(key)
        methods[name] = {**knobs, knob[0]: value} if knob else value
        d["extra_methods"] = methods
    for key in [k for k in d if isinstance(k, str) and "." in k]:
        name, knob = key.split(".", 1)
        if name not in METHOD_CONFIGS and name != "rollout_correction":
            raise ConfigError(f"RLConfig field {key!r}: only a nested config takes a dotted key "
                              f"({sorted([*METHOD_CONFIGS, 'rollout_correction'])}); write {name!r} without a dot")
        nested = d.get(name)
        if nested is False:
            raise ConfigError(f"RLConfig: {name}=false (off) and {key} both given; drop one")
        if dataclasses.is_dataclass(nested):
            nested = dataclasses.asdict(nested)
        d[name] = {**(nested if isinstance(nested, dict) else {}), knob: d.pop(key)}
    return d


@dataclass
class WarmStartConfig(_Validated):
    """Supervised pre-training on a task's solutions, so RL starts from a policy that
    sometimes succeeds."""
    task: str = "addition"
    task_kwargs: dict = field(default_factory=dict)
    model_size: str = "0.3M"
    steps: int = 1500
    """The most optimizer steps, and the horizon of the cosine schedule."""
    batch_size: int = 64
    learning_rate: float = 3e-3
    warmup_steps: int = 50
    seed: int = 0
    target_success: float | None = None
    """Stop at the first evaluation whose held-out sampled success (temperature 1) reaches this.
    The target, not a step count, is then the recipe: on another CPU the trajectory differs a
    little, the step it stops at moves, and the success it stops at does not.  None: run `steps`."""
    eval_every: int = 5
    """With target_success: evaluate every this many steps."""
    eval_prompts: int = 512
    """With target_success: prompts in the stopping set (its own seed, apart from the reported set)."""

    def validate(self):
        from rl_lab.models import MODEL_SIZES
        from rl_lab.tasks import TASKS
        _check_choice(self, "task", list(TASKS))
        _checked_knobs(self)
        _check_choice(self, "model_size", list(MODEL_SIZES))
        for name in ("steps", "batch_size", "eval_every", "eval_prompts"):
            _check_range(self, name, lo=1)
        _check_range(self, "learning_rate", lo=0, lo_open=True)
        _check_range(self, "warmup_steps", lo=0)
        if self.target_success is not None:
            _check_range(self, "target_success", lo=0, hi=1, lo_open=True, hi_open=True)


DEFAULT_COMPLETION_LENGTH = 8
"""RLConfig.max_completion_length when it is None and the task has no tool (the single-turn tasks'
answers fit in 8 tokens)."""


def episode_completion_length(task: str, knobs) -> int:
    """Tokens a tool task's longest episode needs (call, tool output, answer, <eos>), from the
    task's checked knobs (`rl_lab.tasks.check_task`)."""
    from rl_lab.tasks import TASKS
    return TASKS[task].answer_tokens(knobs) + 1


def _checked_knobs(config):
    """The config's task knobs, checked without building the task: unknown or out-of-range knobs
    fail when the config is built, not in the Trainer."""
    from rl_lab.tasks import check_task
    try:
        return check_task(config.task, config.task_kwargs)
    except ValueError as e:
        raise ConfigError(f"{type(config).__name__}.task_kwargs={config.task_kwargs!r}: {e}") from e
