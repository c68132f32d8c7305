"""Where the training-inference mismatch comes from, one torch-free row per source (issue 49).

`RLConfig.mismatch` (a `MismatchConfig`, None = off) switches the sampler to the exact-zero engine
(rl_lab.engines.exact.ExactEngine): the sampler decodes with the trainer's own forward, so the two
compute bitwise the same log-probs (k3 = 0, rho = 1 exactly).  That is the control.  Each source is
then one dial on top of it, with its fix as an option of the same sub-config:

    mismatch: {}                                          # the control, exact zero
    mismatch: {precision: {dtype: bfloat16}}              # a bf16 sampler
    mismatch: {precision: {dtype: float16, fix: same_dtype}}  # fp16 on both sides: exact again
    --set mismatch.batch_variant.max_splits=4             # CLI and sweep grids: a dotted key turns it on
    model: 0.3M-moe, mismatch: {routing: {replay: true}}  # a mixture of experts, its flips replayed

Each row names the source, its sub-config (None where the source reads an existing RLConfig field),
the class that implements it ("module:Class", imported only when a
run uses it), what it mirrors in production, its fix, and the fix's key in verl 0.9.1 and TRL 1.16
where one exists (read from the installed wheels).  The engine (rl_lab.engines.exact) and the
trainer's side of the fixes (rl_lab.algos.mismatch_fixes) are built from the rows, in row order; no
code elsewhere names a source.

The flat injectors of chapter "When speed kills stability" (sampler_dtype, sampler_quantization,
sampler_staleness, sampler_logit_noise, sampler_temperature, top_p/top_k/min_p) keep driving the
fast sampler as before; under `mismatch` only sampler_staleness is read (the "staleness" row), and
the others are refused with a message naming the dial to use instead.
"""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass

from rl_lab.config_checks import _check_choice, _check_range, _Validated
from rl_lab.errors import ConfigError

PRECISION_DTYPES = ("bfloat16", "float16")
LM_HEADS = ("same", "float32")
PRECISION_FIXES = ("none", "same_dtype")
TP_SHARDS = (1, 2, 4, 8)
TP_REDUCES = ("ring", "tree")
SYNC_FAULTS = ("skip_layer", "bf16")
ROUTER_DTYPES = ("bfloat16", "float16", "float32")


# ------------------------------------------------------------------ the sources' configs
@dataclass
class PrecisionConfig(_Validated):
    """The sampler's matrix products run in `dtype` (torch.autocast: products in low precision,
    norms and softmax in float32, as a mixed-precision engine), the trainer's in float32."""
    dtype: str = "bfloat16"
    """"bfloat16" (7-bit mantissa, vLLM's default) or "float16" (10 bits, Qi et al. 2025)."""
    lm_head: str = "same"
    """"float32": the sampler's LM head runs in float32 on its hidden state (MiniMax-M1, ScaleRL;
    TRL's cast_lm_head_to_fp32): the last product and the softmax lose no precision, the layers
    below it still do.  "same": the head in `dtype` like the rest."""
    fix: str = "none"
    """"same_dtype": the trainer's forward runs in the sampler's precision too (the same autocast and
    head): both sides compute the same products, so the mismatch is exactly 0 again (Qi et al.'s
    "FP16 on both engines", at a scale where both engines are one code path).  "none": off."""

    def validate(self):
        _check_choice(self, "dtype", PRECISION_DTYPES)
        _check_choice(self, "lm_head", LM_HEADS)
        _check_choice(self, "fix", PRECISION_FIXES)


@dataclass
class BatchVariantConfig(_Validated):
    """The sampler's linear layers split each product's reduction (split-K) into a number of chunks
    that depends on how many rows the product has, as serving kernels do to fill the machine when the
    batch is small: splits = clamp(parallel_rows // rows, 1, max_splits), partial sums added in order."""
    max_splits: int = 4
    """The most chunks a reduction is split into (>= 2)."""
    parallel_rows: int = 2048
    """Rows a product needs to fill the machine without splitting: fewer rows, more splits."""
    batch_invariant: bool = False
    """The fix (vLLM's batch-invariant mode with TorchTitan's matching kernels; verl's
    rollout.full_determinism): one fixed split, max_splits, whatever the batch, on both the sampler
    and the trainer: the same reduction order on both sides, so the mismatch is exactly 0."""

    def validate(self):
        _check_range(self, "max_splits", lo=2)
        _check_range(self, "parallel_rows", lo=1)


@dataclass
class TensorParallelConfig(_Validated):
    """Row-parallel layers (attention output and MLP down projections, as Megatron shards them): the
    reduction is split over shards and the partial products summed (an all-reduce); the sampler and
    the trainer may use different shard counts."""
    sampler_shards: int = 2
    trainer_shards: int = 1
    reduce: str = "ring"
    """The all-reduce's order: "ring" adds the partials one after another, "tree" pairwise."""
    fix: bool = False
    """The trainer shards like the sampler (sampler_shards, the same order): the same sums on both
    sides, exactly 0 (TBIK's "tensor parallelism brought to order")."""

    def validate(self):
        _check_choice(self, "sampler_shards", TP_SHARDS)
        _check_choice(self, "trainer_shards", TP_SHARDS)
        _check_choice(self, "reduce", TP_REDUCES)


@dataclass
class TruncationConfig(_Validated):
    """The sampler truncates its distribution (top-p, top-k, min-p) and the trainer scores the full
    vocabulary: rho = pi / mu is off by the kept mass S (TRL #6789, prime-rl #3235)."""
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    keep_mask: bool = False
    """The fix, DeepSeek-V3.2's Keep Sampling Mask: the sampler records its kept set and the trainer
    renormalises pi over it, so rho has no kept-mass bias (exactly 1 on the exact engine)."""

    def validate(self):
        _check_range(self, "top_p", lo=0, hi=1, lo_open=True)
        _check_range(self, "top_k", lo=0)
        _check_range(self, "min_p", lo=0, hi=1, hi_open=True)
        if self.top_p == 1.0 and self.top_k == 0 and self.min_p == 0.0:
            raise ConfigError("TruncationConfig truncates nothing: set top_p < 1, top_k > 0 or min_p > 0")


@dataclass
class WeightSyncConfig(_Validated):
    """A fault in the trainer -> sampler weight sync: some parameters are not synced ("skip_layer"),
    or are synced through bfloat16 ("bf16", a LoRA merge in bf16), from `start_step` on."""
    fault: str = "skip_layer"
    layer: str = "model.layers.0."
    """The fault touches the parameters whose name starts with this ("" = every parameter)."""
    start_step: int = 0
    """The first sync (0-based step) with the fault."""
    steps: int = 0
    """How many syncs the fault lasts; 0: to the end of the run."""
    verify: bool = False
    """The check and fix: after every sync the sampler's weights are compared bitwise with the
    trainer's (logged as mismatch/sync_max_abs_diff) and synced again cleanly when they differ.
    The other check, one step at lr = 0 whose k3 must be exactly 0 on the exact engine, is
    rl_lab.toolkits.mismatch_sources.sync_check."""

    def validate(self):
        _check_choice(self, "fault", SYNC_FAULTS)
        _check_range(self, "start_step", lo=0)
        _check_range(self, "steps", lo=0)


@dataclass
class RoutingConfig(_Validated):
    """A mixture-of-experts sampler (model: 0.3M-moe) chooses each token's experts from router
    logits computed in `router_dtype` (and/or moved by `router_noise`), the trainer from its own
    float32 ones: near-tied experts flip.  Only the choice is perturbed; the gate weights of the
    chosen experts come from the float32 logits on both sides."""
    router_dtype: str = "bfloat16"
    """The precision of the sampler's router product when it chooses: "bfloat16" (7-bit mantissa;
    about 0.3% of 0.3M-moe's routing decisions flip, smoke preset), "float16" (10 bits; none flipped
    in five smoke steps), or "float32" (the trainer's: no rounding, the noise alone)."""
    router_noise: float = 0.0
    """The std of a Gaussian perturbation of the sampler's router logits (0: none), a fixed random
    function of each token's hidden state (seeded by RLConfig.seed), so a token is routed the same
    way in every forward of a rollout.  The tiny router's logits spread about 0.2 at init; 0.02
    flips about 6% of its decisions: a many-expert MoE's flip rate on a model that has few."""
    replay: bool = False
    """The fix, rollout routing replay (R3): the trainer's forward uses the experts the sampler chose
    for every token (recorded in the rollout), gate weights from its own logits: exactly 0 again."""

    def validate(self):
        _check_choice(self, "router_dtype", ROUTER_DTYPES)
        _check_range(self, "router_noise", lo=0)
        if not isinstance(self.replay, bool):
            raise ConfigError(f"RoutingConfig.replay={self.replay!r} must be true or false")
        if self.router_dtype == "float32" and self.router_noise == 0:
            raise ConfigError("RoutingConfig perturbs nothing (router_dtype float32, router_noise 0): set "
                              "router_dtype to bfloat16 or float16, or router_noise > 0")


# ------------------------------------------------------------------ the rows
@dataclass(frozen=True)
class SourceSpec:
    """One source of mismatch (see the module docstring)."""
    name: str
    impl: str
    """"module:Class" of its rl_lab.engines.sources.base.Source."""
    config: type | None
    """Its sub-config, MismatchConfig.<name>; None: `field` holds it."""
    field: str | None = None
    """The existing RLConfig field it reads (None: its sub-config)."""
    mirrors: str = ""
    fix: str = ""
    verl: str = ""
    """The fix's key in verl 0.9.1 ("" = none)."""
    trl: str = ""
    """The fix's key in TRL 1.16's GRPOConfig ("" = none)."""

    def active(self, config) -> bool:
        """Whether a run with `config` (an RLConfig with mismatch set) turns this source on."""
        if self.config is not None:
            return getattr(config.mismatch, self.name) is not None
        return bool(getattr(config, self.field))

    def knobs(self, config):
        return getattr(config.mismatch, self.name) if self.config is not None else getattr(config, self.field)

    def load(self) -> type:
        module, _, name = self.impl.partition(":")
        return getattr(importlib.import_module(module), name)


_S = "rl_lab.engines.sources."
SOURCE_SPECS: list[SourceSpec] = [
    SourceSpec("precision", _S + "precision:Precision", PrecisionConfig,
               mirrors="a bf16/fp16 inference engine (vLLM, SGLang) beside an fp32-master trainer",
               fix="fp16 (or the sampler's dtype) on both sides; or an fp32 LM head on the sampler",
               verl="actor_rollout_ref.rollout.dtype=float16 with actor_rollout_ref.actor.fsdp_config.dtype=float16 "
                    "(grad scaler); LM head: actor_rollout_ref.actor.automodel.lm_head_precision (automodel engine)",
               trl="fp16=True; cast_lm_head_to_fp32=True"),
    SourceSpec("batch_variant", _S + "batch_variant:BatchVariant", BatchVariantConfig,
               mirrors="split-K matmuls whose reduction order depends on the batch size (Thinking Machines; "
                       "verl #2088, #6280)",
               fix="batch-invariant kernels: one reduction order on both sides",
               verl="actor_rollout_ref.rollout.full_determinism=true (sets VERL_FULL_DETERMINISM=1, "
                    "VLLM_BATCH_INVARIANT=1)"),
    SourceSpec("tensor_parallel", _S + "tensor_parallel:TensorParallel", TensorParallelConfig,
               mirrors="a sampler and a trainer at different tensor-parallel sizes (TBIK)",
               fix="the same shard count and all-reduce order on both sides"),
    SourceSpec("truncation", _S + "truncation:Truncation", TruncationConfig,
               mirrors="top-p / top-k / min-p in the inference engine only (TRL #6789, prime-rl #3235)",
               fix="Keep Sampling Mask (DeepSeek-V3.2): the trainer renormalises over the sampler's kept set"),
    SourceSpec("weight_sync", _S + "weight_sync:WeightSync", WeightSyncConfig,
               mirrors="a layer left unsynced, or merged through bf16 (open-instruct #1473, NeMo-RL #4243)",
               fix="verify the sync (checksums, or one lr = 0 step whose k3 is at rounding level)"),
    SourceSpec("staleness", _S + "staleness:Staleness", None, field="sampler_staleness",
               mirrors="asynchronous RL: the sampler's weights are k optimizer steps old",
               fix="the book's verdict (research/stability_map): bypass PPO-clip; AReaL's max_head_offpolicyness",
               verl="algorithm.rollout_correction.bypass_mode=true with the ppo_clip loss"),
    SourceSpec("routing", _S + "routing:Routing", RoutingConfig,
               mirrors="an MoE whose inference engine chooses experts from router logits in bf16: near-tied "
                       "experts flip between sampler and trainer (model: 0.3M-moe; chapter 8's TinyMoELM)",
               fix="rollout routing replay, R3 (arXiv 2510.11370): the trainer reuses the sampler's experts",
               verl="actor_rollout_ref.actor.megatron.router_replay.mode=R3"),
]
"""The sources, in the order the engine applies them."""


def source_spec(name: str) -> SourceSpec:
    for s in SOURCE_SPECS:
        if s.name == name:
            return s
    raise ConfigError(f"no mismatch source {name!r}; sources: {[s.name for s in SOURCE_SPECS]}")


def active_sources(config) -> list[SourceSpec]:
    """The rows a run (an RLConfig with mismatch set) turns on, in order."""
    return [s for s in SOURCE_SPECS if s.active(config)]


# ------------------------------------------------------------------ RLConfig.mismatch
@dataclass
class MismatchConfig(_Validated):
    """RLConfig.mismatch: the exact-zero sampler, and one sub-config per source (None = off).
    `MismatchConfig()` alone is the control; a mapping or True turns a source on with its knobs."""
    precision: PrecisionConfig | None = None
    batch_variant: BatchVariantConfig | None = None
    tensor_parallel: TensorParallelConfig | None = None
    truncation: TruncationConfig | None = None
    weight_sync: WeightSyncConfig | None = None
    routing: RoutingConfig | None = None

    def _coerce(self):
        for spec in SOURCE_SPECS:
            if spec.config is not None:
                setattr(self, spec.name, _coerce_source(spec, getattr(self, spec.name)))

    def validate(self):
        pass

    @classmethod
    def from_dict(cls, d: dict):
        """A MismatchConfig from a mapping; a dotted key ("precision.dtype") sets one knob and turns
        that source on."""
        d = dict(d)
        for key in [k for k in d if isinstance(k, str) and "." in k]:
            name, knob = key.split(".", 1)
            nested = d.get(name)
            if nested is False:
                raise ConfigError(f"MismatchConfig: {name}=false (off) and {key} both given; drop one")
            nested = dataclasses.asdict(nested) if dataclasses.is_dataclass(nested) else nested
            d[name] = {**(nested if isinstance(nested, dict) else {}), knob: d.pop(key)}
        return super().from_dict(d)


def _coerce_source(spec: SourceSpec, value):
    if value is None or value is False:
        return None
    if isinstance(value, spec.config):
        return value
    if value is True or isinstance(value, dict):
        try:
            return spec.config.from_dict({} if value is True else value)
        except ConfigError as e:
            raise ConfigError(f"MismatchConfig.{spec.name}: {e}") from e
    raise ConfigError(f"MismatchConfig.{spec.name}={value!r}: give {spec.config.__name__}(...), a mapping of "
                      f"its fields, true for its defaults, or null (off)")


REFUSED_UNDER_MISMATCH = {
    "use_vllm": "the exact engine is the trainer's own forward; vLLM is another engine",
    "sampler_dtype": "use mismatch.precision.dtype",
    "sampler_quantization": "int8 weights are not a dial of the exact engine; use the fast sampler",
    "sampler_logit_noise": "logit noise is not a dial of the exact engine; use the fast sampler",
    "sampler_temperature": "a sampler-only temperature is not a dial of the exact engine",
    "top_p": "use mismatch.truncation.top_p",
    "top_k": "use mismatch.truncation.top_k",
    "min_p": "use mismatch.truncation.min_p",
    "min_tokens": "a sampler-only <eos> ban is a mismatch of its own, not a dial of the exact engine",
}
"""RLConfig fields that must keep their defaults when `mismatch` is set, and what to use instead."""


def check_mismatch_run(config) -> None:
    """RLConfig.validate's checks of a run with `mismatch` set: the flat injectors off (each refused
    with the dial to use), and a single-turn task (the exact engine runs no environment)."""
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    for name, instead in REFUSED_UNDER_MISMATCH.items():
        value = getattr(config, name)
        if value != defaults[name]:
            raise ConfigError(f"RLConfig.{name}={value!r} cannot be combined with mismatch (the exact-zero "
                              f"engine): {instead}; or set mismatch=null")
    from rl_lab.tasks import is_tool_task
    if is_tool_task(config.task):
        raise ConfigError(f"RLConfig.mismatch: task {config.task!r} has a tool environment, which the exact-zero "
                          "engine does not run; choose a single-turn task or set mismatch=null")
