"""From laptop to cluster: an `RLConfig` as verl 0.9.1 `ppo_trainer` overrides, and back.

`VERL_FIELD_MAP` is the one table: every `RLConfig` field has a row that says what becomes of it
on verl --
  * "exported": written as verl Hydra keys (`to_verl`) and read back from them (`from_verl`);
  * "files": carried by the exported files (the parquet data, the reward file, the model folder);
  * "local": rl_lab-only and harmless on verl (a progress bar, where rl_lab writes its runs, ...);
  * "refused": verl has no counterpart; a value other than the field's "off" value is refused with
    a message naming the field (`VerlExportError`), the off value is accepted.
Every field that is not "exported" is also written, as a clearly marked YAML comment block at the
end of the overrides file, so that `read_overrides` + `config_from_verl` give back the same
`RLConfig` (the round trip chapter 13 and tests/integration/test_verl_export.py rely on).

`export_verl(cfg, out_dir)` writes everything verl needs to run the same experiment (see its
docstring); `read_verl_metrics(path)` reads a verl run's file-logger JSONL (or console log) into
the DataFrame and metric names of `Trainer.metrics()`.

This module never imports verl: the export is plain data and works without it.  The tests check
the output against verl's own Hydra config, dataclasses, dataset, reward loader and correction
function.
"""
from __future__ import annotations

import dataclasses
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from rl_lab.config import RLConfig
from rl_lab.correction_options import VERL_RS_OPTIONS
from rl_lab.errors import ConfigError
from rl_lab.method_specs import METHOD_SPECS, plugin_specs

VERL_VERSION = "0.9.1"
DUAL_CLIP_OFF = 1.0e10
"""verl always applies dual-clip PPO; rl_lab's clip_ratio_c=None (off) is exported as this cap,
which never binds: verl's ratio is exp(clamp(log-ratio, -20, 20)) <= 4.9e8."""
LOCAL_MARKER = "# --- rl_lab fields verl does not read (kept so rl-lab can read this file back) ---"
ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
RC = "algorithm.rollout_correction"


class VerlExportError(ConfigError):
    """An RLConfig that verl cannot run as it is: the message names the field and what to change."""


@dataclass(frozen=True)
class FieldMap:
    """One row of the table: what an RLConfig field becomes on verl."""
    field: str
    status: str                                   # exported | files | local | refused
    keys: tuple[str, ...] = ()                    # the verl keys it sets (exported rows)
    note: str = ""
    to_verl: Callable[[RLConfig], dict] | None = None
    from_verl: Callable[[dict], Any] | None = None
    allowed: Callable[[Any], bool] | None = None  # refused rows: the values verl can still run


def field_value(cfg: RLConfig, name: str):
    """An RLConfig field's value; "rollout_correction.rollout_is" reads a nested config's knob."""
    for part in name.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _field_default(name: str):
    """The default of a field (or of a nested knob, "rollout_correction.bypass_mode")."""
    kind = RLConfig
    *outer, last = name.split(".")
    for part in outer:
        kind = {f.name: f for f in dataclasses.fields(kind)}[part].default_factory
    f = {f.name: f for f in dataclasses.fields(kind)}[last]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def _one(key: str, attr: str, to=lambda v: v, back=lambda v: v):
    """(to_verl, from_verl) for a field that is one verl key."""
    return (lambda cfg: {key: to(field_value(cfg, attr))}), (lambda flat: back(flat[key]))


def _row(field: str, key: str, note: str, to=lambda v: v, back=lambda v: v) -> FieldMap:
    to_verl, from_verl = _one(key, field, to, back)
    return FieldMap(field, "exported", (key,), note, to_verl, from_verl)


def _refused(field: str, note: str, allowed: Callable[[Any], bool]) -> FieldMap:
    return FieldMap(field, "refused", (), note, allowed=allowed)


def _scale_rewards_to_verl(cfg: RLConfig) -> dict:
    return {"algorithm.norm_adv_by_std_in_grpo": cfg.scale_rewards == "group"}


def _betas_to_verl(cfg: RLConfig) -> dict:
    return {f"{ACTOR}.optim.betas": [cfg.adam_beta1, cfg.adam_beta2]}


def _grad_norm_to_verl(cfg: RLConfig) -> dict:
    return {f"{ACTOR}.optim.clip_grad": cfg.max_grad_norm, f"{ACTOR}.grad_clip": cfg.max_grad_norm}


def _batch_to_verl(cfg: RLConfig) -> dict:
    """verl counts prompts in both batch sizes (it multiplies the mini-batch by rollout.n): one
    mini-batch per batch is one optimizer step per PPO epoch, as in rl_lab."""
    return {"data.train_batch_size": cfg.prompts_per_step, f"{ACTOR}.ppo_mini_batch_size": cfg.prompts_per_step}


def _agg_to_verl(cfg: RLConfig) -> dict:
    """seq-mean-token-sum-norm divides by max_completion_length in rl_lab; verl by
    loss_scale_factor (None: the padded response length), so it is set explicitly."""
    scale = cfg.max_completion_length if cfg.loss_agg_mode == "seq-mean-token-sum-norm" else None
    return {f"{ACTOR}.loss_agg_mode": cfg.loss_agg_mode, f"{ACTOR}.loss_scale_factor": scale}


def _policy_loss_to_verl(cfg: RLConfig) -> dict:
    """Decoupled PPO is verl's "vanilla" loss; in bypass mode verl switches the loss to
    "bypass_mode" itself and reads rollout_correction.loss_type (ppo_clip or reinforce)."""
    return {f"{ACTOR}.policy_loss.loss_mode": "vanilla", f"{RC}.loss_type": cfg.policy_loss}


_RC = "rollout_correction."


def _schedule_to_verl(cfg: RLConfig) -> dict:
    """rl_lab's cosine falls to 0 at max_steps: verl's cosine with min_lr_ratio 0, half a cycle."""
    return {f"{ACTOR}.optim.lr_scheduler_type": cfg.lr_scheduler_type, f"{ACTOR}.optim.min_lr_ratio": 0.0,
            f"{ACTOR}.optim.num_cycles": 0.5}


def _warmup_to_verl(cfg: RLConfig) -> dict:
    return {f"{ACTOR}.optim.lr_warmup_steps": cfg.warmup_steps, f"{ACTOR}.optim.lr_warmup_steps_ratio": 0.0}


def method_rows() -> tuple[FieldMap, ...]:
    """The rows of the methods' RLConfig fields, from their specs (rl_lab.method_specs): exported with
    the spec's keys and functions, kept locally, or refused at any value but the method's off value;
    and `extra_methods`, whose registered methods are each as their own row says."""
    rows = []
    for spec in METHOD_SPECS:
        if spec.field is None:
            continue
        v = spec.verl
        if v.status == "exported":
            rows.append(FieldMap(spec.field, "exported", v.keys, v.note, v.to, v.back))
        elif v.status == "local":
            rows.append(FieldMap(spec.field, "local", note=v.note))
        else:
            rows.append(_refused(spec.field, v.note, lambda value, off=spec.off: value == off and
                                 type(value) is type(off)))
    rows.append(_refused("extra_methods", "registered methods (rl_lab.method_specs.register_method) are exported "
                         "as their rows say; this run has one whose row says verl cannot run it",
                         _extra_methods_exportable))
    return tuple(rows)


def _extra_methods_exportable(value: dict) -> bool:
    rows = plugin_specs()
    return all(name in rows and rows[name].verl.status == "local" for name in value)


_E = "exported"
VERL_FIELD_MAP: tuple[FieldMap, ...] = (
    # --- task and model: carried by the exported files ---------------------------------------------
    FieldMap("task", "files", note="data_source of every parquet row; the reward file scores with this task"),
    FieldMap("task_kwargs", "files", note="extra_info.task_kwargs of every row (JSON); the reward file rebuilds "
             "the task from it"),
    FieldMap("model", "files", ("actor_rollout_ref.model.path", "actor_rollout_ref.model.tokenizer_path"),
             "resolved (warm start, size preset or path) and saved to <out>/model; its tokenizer, with a chat "
             "template, also to <out>/tokenizer, which verl loads"),
    # --- rollout ---------------------------------------------------------------------------------------
    FieldMap("prompts_per_step", _E, ("data.train_batch_size", f"{ACTOR}.ppo_mini_batch_size"),
             "verl counts prompts in both; one mini-batch per batch = one optimizer step per epoch",
             _batch_to_verl, lambda flat: flat["data.train_batch_size"]),
    _row("num_generations", f"{ROLLOUT}.n", "the group size G"),
    _row("max_completion_length", "data.max_response_length",
         "rollout.response_length follows data.max_response_length"),
    _row("temperature", f"{ROLLOUT}.temperature", "verl also scores the trainer's log-probs at this temperature"),
    _row("top_p", f"{ROLLOUT}.top_p", "nucleus sampling"),
    _row("top_k", f"{ROLLOUT}.top_k", "0 (off) in rl_lab is -1 in verl",
         to=lambda v: v if v > 0 else -1, back=lambda v: v if v > 0 else 0),
    _row("sampler_dtype", f"{ROLLOUT}.dtype", "the inference engine's precision (verl's default is bfloat16)"),
    FieldMap("use_vllm", "local", note="rl_lab's in-process sampler choice; verl always samples with a server "
             "engine (rollout.name: vllm or sglang, from the cluster settings)"),
    _refused("max_turns", "multi-turn tool episodes: this export writes single-turn verl runs, not verl's "
             "multi-turn rollout settings (rollout.multi_turn and a tool config)", lambda v: v is None),
    _refused("sampler_quantization", "rl_lab's fake-quantised sampler is an injector, not a serving setting; "
             "verl's rollout.quantization serves a real quantised checkpoint (set it on the command line)",
             lambda v: v is None),
    _refused("sampler_staleness", "rl_lab's injected weight lag; on verl staleness comes from asynchronous "
             "training (trainer.v1.trainer_mode / separate_async, max_off_policy_threshold), not a config number",
             lambda v: v == 0),
    _refused("sampler_logit_noise", "an injector that adds Gaussian noise to the sampler's logits: verl's "
             "engines have no such knob", lambda v: v == 0),
    _refused("sampler_temperature", "an injector (a temperature only the sampler knows): verl passes one "
             "temperature to both sampler and trainer", lambda v: v is None),
    _refused("min_p", "verl 0.9.1's rollout config has no min_p", lambda v: v == 0),
    _refused("min_tokens", "verl 0.9.1's rollout config has no min_tokens (a benchmark setting here)",
             lambda v: v == 0),
    # --- advantages and loss ------------------------------------------------------------------------
    FieldMap("advantage_estimator", _E, ("algorithm.adv_estimator", f"{ACTOR}.calculate_sum_pi_squared"),
             "the same names as verl's AdvantageEstimator; optimal_token_baseline also turns on the actor's "
             "sum of pi^2 (verl asserts it at the first step otherwise)",
             lambda cfg: {"algorithm.adv_estimator": cfg.advantage_estimator,
                          f"{ACTOR}.calculate_sum_pi_squared": cfg.advantage_estimator == "optimal_token_baseline"},
             lambda flat: flat["algorithm.adv_estimator"]),
    _row("gamma", "algorithm.gamma", "discount of reinforce_plus_plus's reward-to-go"),
    FieldMap("scale_rewards", _E, ("algorithm.norm_adv_by_std_in_grpo",),
             "group -> true, none -> false; batch has no verl counterpart (refused)",
             _scale_rewards_to_verl, lambda flat: "group" if flat["algorithm.norm_adv_by_std_in_grpo"] else "none"),
    FieldMap("policy_loss", _E, (f"{ACTOR}.policy_loss.loss_mode", f"{RC}.loss_type"),
             "ppo_clip -> vanilla; reinforce only in bypass mode (verl has no decoupled REINFORCE loss)",
             _policy_loss_to_verl, lambda flat: flat[f"{RC}.loss_type"]),
    FieldMap("loss_agg_mode", _E, (f"{ACTOR}.loss_agg_mode", f"{ACTOR}.loss_scale_factor"),
             "the same names; seq-mean-token-sum-norm also sets loss_scale_factor = max_completion_length",
             _agg_to_verl, lambda flat: flat[f"{ACTOR}.loss_agg_mode"]),
    _row("epsilon", f"{ACTOR}.clip_ratio_low", "the lower clip"),
    FieldMap("epsilon_high", _E, (f"{ACTOR}.clip_ratio_high",), "None (= epsilon) is written as epsilon and "
             "read back as None when equal",
             lambda cfg: {f"{ACTOR}.clip_ratio_high": cfg.epsilon if cfg.epsilon_high is None else cfg.epsilon_high},
             lambda flat: (None if flat[f"{ACTOR}.clip_ratio_high"] == flat[f"{ACTOR}.clip_ratio_low"]
                           else flat[f"{ACTOR}.clip_ratio_high"])),
    _row("clip_ratio_c", f"{ACTOR}.clip_ratio_c", f"None (off) is written as {DUAL_CLIP_OFF:g}, a cap that never binds",
         to=lambda v: DUAL_CLIP_OFF if v is None else v, back=lambda v: None if v >= DUAL_CLIP_OFF else v),
    _row("num_iterations", f"{ACTOR}.ppo_epochs", "optimizer passes over each batch"),
    # --- the methods: one row each from rl_lab.method_specs (their `verl` entry) ----------------------
    *method_rows(),
    # --- off-policy correction: algorithm.rollout_correction ------------------------------------------
    _row(_RC + "rollout_is", f"{RC}.rollout_is", "None, token or sequence"),
    _row(_RC + "rollout_is_threshold", f"{RC}.rollout_is_threshold", "a float (TIS) or 'lo_hi' (IcePop)"),
    _row(_RC + "rollout_is_batch_normalize", f"{RC}.rollout_is_batch_normalize", "self-normalised weights"),
    _row(_RC + "rollout_rs", f"{RC}.rollout_rs", "verl's 11 k1/k2/k3 options; rl_lab's exact-KL options "
         "(token_kl, seq_*_kl) are refused"),
    _row(_RC + "rollout_rs_threshold", f"{RC}.rollout_rs_threshold", "one per option, comma-separated"),
    _refused(_RC + "rollout_token_veto_threshold", "verl removed the token veto in PR #4544; use "
             "rollout_rs='seq_max_k2' (TRM's max criterion) instead", lambda v: v is None),
    _row(_RC + "bypass_mode", f"{RC}.bypass_mode", "pi_old := mu (two policies)"),
    _refused(_RC + "extra_modes", "correction modes registered outside rl_lab have no verl counterpart",
             lambda v: v == {}),
    # --- optimisation -------------------------------------------------------------------------------
    _row("learning_rate", f"{ACTOR}.optim.lr", "AdamW"),
    FieldMap("adam_beta1", _E, (f"{ACTOR}.optim.betas",), "betas[0]", _betas_to_verl,
             lambda flat: flat[f"{ACTOR}.optim.betas"][0]),
    FieldMap("adam_beta2", _E, (f"{ACTOR}.optim.betas",), "betas[1]", _betas_to_verl,
             lambda flat: flat[f"{ACTOR}.optim.betas"][1]),
    _row("weight_decay", f"{ACTOR}.optim.weight_decay", "written always: verl's default is 0.01, rl_lab's 0"),
    FieldMap("max_grad_norm", _E, (f"{ACTOR}.optim.clip_grad", f"{ACTOR}.grad_clip"),
             "both of verl's gradient-clip keys", _grad_norm_to_verl,
             lambda flat: flat[f"{ACTOR}.optim.clip_grad"]),
    FieldMap("lr_scheduler_type", _E, (f"{ACTOR}.optim.lr_scheduler_type", f"{ACTOR}.optim.min_lr_ratio",
                                       f"{ACTOR}.optim.num_cycles"),
             "constant or cosine (to 0 at max_steps); verl has no linear or length-triggered schedule (refused)",
             _schedule_to_verl, lambda flat: flat[f"{ACTOR}.optim.lr_scheduler_type"]),
    FieldMap("warmup_steps", _E, (f"{ACTOR}.optim.lr_warmup_steps", f"{ACTOR}.optim.lr_warmup_steps_ratio"),
             "linear warm-up; verl's starts at 0/W, rl_lab's at 1/W (one step apart)", _warmup_to_verl,
             lambda flat: max(0, flat[f"{ACTOR}.optim.lr_warmup_steps"])),
    # --- run ------------------------------------------------------------------------------------------
    _row("max_steps", "trainer.total_training_steps", "optimizer steps = batches"),
    _row("seed", "data.seed", "the data loader's seed; the exported training prompts are rl_lab's own prompt "
         "stream for this seed, in order (data.shuffle=false)"),
    FieldMap("output_dir", "local", note="where rl_lab writes; verl writes to trainer.default_local_dir and its "
             "file logger"),
    _row("save_steps", "trainer.save_freq", "0 (only at the end) is -1 in verl (verl still saves at the end)",
         to=lambda v: v if v > 0 else -1, back=lambda v: max(0, v)),
    _row("eval_steps", "trainer.test_freq", "greedy validation (verl's val_kwargs: do_sample=false); 0 is -1",
         to=lambda v: v if v > 0 else -1, back=lambda v: max(0, v)),
    FieldMap("eval_prompts", "files", note="the rows of val.parquet (rl_lab's held-out set for this seed)"),
    FieldMap("device", "local", note="verl runs on trainer.device (cuda)"),
    FieldMap("share_prefix", "local", note="an rl_lab forward-pass optimisation (same log-probs)"),
    FieldMap("progress_bar", "local", note="rl_lab's progress bar"),
)

FIELD_ROWS = {row.field: row for row in VERL_FIELD_MAP}


def mapping_table_markdown() -> str:
    """VERL_FIELD_MAP as a Markdown table (written to book/examples/verl_export/mapping.md, which chapter 13 names)."""
    def cell(text: str) -> str:
        for raw, escaped in (("|", "\\|"), ("*", "\\*"), ("<", "&lt;"), (">", "&gt;")):
            text = text.replace(raw, escaped)
        return text
    lines = ["| `RLConfig` field | what verl gets | verl keys | why / how |", "|---|---|---|---|"]
    for row in VERL_FIELD_MAP:
        keys = "<br>".join(f"`{k}`" for k in row.keys) or "--"
        lines.append(f"| `{row.field}` | {row.status} | {keys} | {cell(row.note)} |")
    return "\n".join(lines) + "\n"


def check_exportable(cfg: RLConfig) -> None:
    """Raise VerlExportError naming every field verl cannot run as set (all of them at once)."""
    problems = []
    for row in VERL_FIELD_MAP:
        if row.status == "refused" and not row.allowed(field_value(cfg, row.field)):
            problems.append(f"RLConfig.{row.field}={field_value(cfg, row.field)!r}: {row.note} "
                            f"(set it to {_field_default(row.field)!r} to export)")
    from rl_lab.tasks import get_task
    if getattr(get_task(cfg.task, **cfg.task_kwargs), "environment", None) is not None:
        problems.append(f"RLConfig.task={cfg.task!r} is a tool task (multi-turn episodes with a calculator): "
                        "this export writes single-turn verl runs, not verl's multi-turn rollout settings "
                        "(rollout.multi_turn and a tool config); export a single-turn task")
    if cfg.advantage_estimator in ("trloo", "grpo_per_turn"):
        problems.append(f"RLConfig.advantage_estimator={cfg.advantage_estimator!r}: a turn-level estimator (Dr. "
                        "Kernel's is in its KernelGYM fork) is not in verl " + VERL_VERSION + "; use 'rloo' or "
                        "'grpo' to export")
    if cfg.scale_rewards == "batch":
        problems.append("RLConfig.scale_rewards='batch': verl normalises by the group std or not at all; "
                        "use 'group' or 'none'")
    if cfg.lr_scheduler_type not in ("constant", "cosine"):
        problems.append(f"RLConfig.lr_scheduler_type={cfg.lr_scheduler_type!r}: verl 0.9.1 has constant and "
                        "cosine schedules only; use one of them")
    rc = cfg.rollout_correction
    if cfg.policy_loss == "reinforce" and not rc.bypass_mode:
        problems.append("RLConfig.policy_loss='reinforce' with bypass_mode=False: verl's REINFORCE loss exists "
                        "only in bypass mode; set bypass_mode=True or policy_loss='ppo_clip'")
    if rc.rollout_rs is not None:
        bad = [o for o in rc.rollout_rs.split(",") if o.strip() not in VERL_RS_OPTIONS]
        if bad:
            problems.append(f"RLConfig.rollout_correction.rollout_rs={rc.rollout_rs!r}: {bad} need the sampler's full distributions "
                            f"(rl_lab only); verl's options are {list(VERL_RS_OPTIONS)}")
    if problems:
        raise VerlExportError("this config cannot run on verl " + VERL_VERSION + ":\n  " + "\n  ".join(problems))


def config_overrides(cfg: RLConfig) -> dict[str, Any]:
    """The verl keys the RLConfig's "exported" fields set, flat (dotted key -> value)."""
    check_exportable(cfg)
    flat: dict[str, Any] = {}
    for row in VERL_FIELD_MAP:
        if row.status == "exported":
            flat.update(row.to_verl(cfg))
    return flat


def local_fields(cfg: RLConfig) -> dict[str, Any]:
    """The fields verl does not read (files, local, refused-at-their-off-value), for the round trip."""
    plain = cfg.to_dict()   # nested configs as mappings, as YAML can hold them

    def value(name):
        out = plain
        for part in name.split("."):
            out = out[part]
        return out
    return {row.field: value(row.field) for row in VERL_FIELD_MAP if row.status != "exported"}


def config_from_verl(flat: dict[str, Any], local: dict[str, Any]) -> RLConfig:
    """The RLConfig an override set describes: exported fields from verl's keys, the others from
    `local` (the marked comment block of the overrides file)."""
    fields = dict(local)
    missing = [row.field for row in VERL_FIELD_MAP if row.status != "exported" and row.field not in local]
    if missing:
        raise ConfigError(f"the overrides have no value for {missing}: read the file with read_overrides "
                          "(the marked comment block carries them)")
    for row in VERL_FIELD_MAP:
        if row.status == "exported":
            try:
                fields[row.field] = row.from_verl(flat)
            except KeyError as e:
                raise ConfigError(f"the overrides lack verl key {e.args[0]!r}, which RLConfig.{row.field} "
                                  "is read from") from None
    return RLConfig.from_dict(fields)


# ----------------------------------------------------------------------------- cluster settings
@dataclass
class VerlCluster:
    """Where and how verl runs: nothing here changes the algorithm, only placement and memory."""
    nnodes: int = 1
    n_gpus_per_node: int = 1
    rollout_name: str = "vllm"
    """verl's inference engine: vllm or sglang."""
    tensor_model_parallel_size: int = 1
    gpu_memory_utilization: float = 0.4
    micro_batch_size_per_gpu: int = 16
    """Rows per forward/backward on one GPU (memory only: gradients are accumulated)."""
    project_name: str = "rl_lab"
    experiment_name: str = "export"

    def __post_init__(self):
        if self.rollout_name not in ("vllm", "sglang"):
            raise ConfigError(f"VerlCluster.rollout_name={self.rollout_name!r}: use 'vllm' or 'sglang'")
        for name in ("nnodes", "n_gpus_per_node", "tensor_model_parallel_size", "micro_batch_size_per_gpu"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"VerlCluster.{name}={getattr(self, name)!r} must be a positive integer")


def cluster_overrides(cfg: RLConfig, cluster: VerlCluster, out_dir: str | Path) -> dict[str, Any]:
    """The keys that place the run and point verl at the exported files (not from RLConfig fields)."""
    out = Path(out_dir).resolve()
    rows, gpus = cfg.prompts_per_step * cfg.num_generations, cluster.nnodes * cluster.n_gpus_per_node
    if rows % gpus:
        raise VerlExportError(f"prompts_per_step x num_generations = {rows} rows per step do not split over "
                              f"{gpus} GPUs (verl's validate_config requires it); change prompts_per_step or "
                              "the GPU count")
    micro = max(1, min(cluster.micro_batch_size_per_gpu, rows // gpus))   # never more than a GPU's share
    return {
        "data.train_files": str(out / "data" / "train.parquet"),
        "data.val_files": str(out / "data" / "val.parquet"),
        "data.prompt_key": "prompt",
        "data.shuffle": False,
        "data.max_prompt_length": None,           # filled in by export_verl from the tokenised prompts
        "actor_rollout_ref.model.path": str(out / "model"),
        "actor_rollout_ref.model.tokenizer_path": str(out / "tokenizer"),
        "reward.custom_reward_function.path": str(out / "reward.py"),
        "reward.custom_reward_function.name": "compute_score",
        f"{ROLLOUT}.name": cluster.rollout_name,
        f"{ROLLOUT}.calculate_log_probs": True,   # rollout log-probs: the correction needs mu
        f"{ROLLOUT}.tensor_model_parallel_size": cluster.tensor_model_parallel_size,
        f"{ROLLOUT}.gpu_memory_utilization": cluster.gpu_memory_utilization,
        f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro,
        f"{ACTOR}.ppo_micro_batch_size_per_gpu": micro,
        f"{ACTOR}.entropy_coeff": 0,
        "trainer.nnodes": cluster.nnodes,
        "trainer.n_gpus_per_node": cluster.n_gpus_per_node,
        "trainer.total_epochs": 1,
        "trainer.val_before_train": False,
        "trainer.logger": ["console", "file"],
        "trainer.project_name": cluster.project_name,
        "trainer.experiment_name": cluster.experiment_name,
    }


# ----------------------------------------------------------------------------- writing overrides
def nest(flat: dict[str, Any]) -> dict:
    """{"a.b": 1, "a.c": 2} -> {"a": {"b": 1, "c": 2}}."""
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def flatten(nested: dict, prefix: str = "") -> dict[str, Any]:
    """The inverse of `nest`."""
    flat = {}
    for key, value in nested.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def hydra_value(value) -> str:
    """A value in Hydra's override grammar: strings quoted (so '0.5_2.0' stays a string), None as null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def command_line_overrides(flat: dict[str, Any]) -> list[str]:
    """verl's command-line overrides, `key=value` each (pass them to hydra.compose or main_ppo)."""
    return [f"{key}={hydra_value(value)}" for key, value in flat.items()]


def overrides_yaml(flat: dict[str, Any], local: dict[str, Any]) -> str:
    """The overrides as nested YAML, then the marked comment block of rl_lab-only fields."""
    head = (f"# verl {VERL_VERSION} ppo_trainer overrides written by `rl-lab export verl` "
            "(rl_lab.integrations.verl).\n# Merge onto verl's ppo_trainer config, or pass "
            "command.sh's key=value list.\n")
    body = yaml.safe_dump(nest(flat), sort_keys=False, default_flow_style=False)
    tail = yaml.safe_dump({"rl_lab": local}, sort_keys=False, default_flow_style=False)
    return head + body + LOCAL_MARKER + "\n" + "".join(f"# {line}\n" for line in tail.splitlines())


def read_overrides(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(flat verl overrides, rl_lab-only fields) from an overrides file written by `overrides_yaml`."""
    text = Path(path).read_text()
    if LOCAL_MARKER not in text:
        raise ConfigError(f"{path} has no rl_lab block ({LOCAL_MARKER!r}); only files written by "
                          "`rl-lab export verl` can be read back")
    body, tail = text.split(LOCAL_MARKER, 1)
    flat = flatten(yaml.safe_load(body) or {})
    local_yaml = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                           for line in tail.strip().splitlines())
    return flat, (yaml.safe_load(local_yaml) or {}).get("rl_lab", {})


def config_from_overrides_file(path: str | Path) -> RLConfig:
    """The RLConfig an exported overrides file describes (the round trip)."""
    return config_from_verl(*read_overrides(path))


def shell_word(text: str) -> str:
    """`text` as one shell word: bare when it is plain, else in double quotes (Hydra's own single
    quotes stay inside)."""
    if re.fullmatch(r"[A-Za-z0-9_./=:,+\-@]+", text):
        return text
    if re.search(r'["$`\\!]', text):
        return shlex.quote(text)
    return f'"{text}"'


def shell_command(flat: dict[str, Any]) -> str:
    """`python3 -m verl.trainer.main_ppo key=value ...`, one override per line."""
    args = " \\\n    ".join(shell_word(o) for o in command_line_overrides(flat))
    return f"python3 -m verl.trainer.main_ppo \\\n    {args} \"$@\"\n"


# ----------------------------------------------------------------------------- data, reward, model
def chat_template(adds_bos: bool) -> str:
    """A Jinja chat template that renders the messages' text exactly as rl_lab's engines tokenise a
    prompt (`tokenizer(prompt)`: BOS, then the text); no role markers, no generation prompt."""
    bos = "{{ bos_token }}" if adds_bos else ""
    return bos + "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def verl_rows(task_name: str, task_kwargs: dict, examples: list[dict], split: str) -> list[dict]:
    """verl's RL dataset rows: data_source and ability (the task's name), prompt (chat messages),
    reward_model (the answer as ground_truth), extra_info.
    Every example column besides prompt and answer goes to extra_info.columns (JSON) for the reward."""
    rows = []
    for i, ex in enumerate(examples):
        columns = {k: v for k, v in ex.items() if k not in ("prompt", "answer")}
        rows.append({
            "data_source": task_name,
            "prompt": [{"role": "user", "content": ex["prompt"]}],
            "ability": task_name,
            "reward_model": {"style": "rule", "ground_truth": str(ex["answer"])},
            "extra_info": {"split": split, "index": i, "task_kwargs": json.dumps(task_kwargs, sort_keys=True),
                           "columns": json.dumps(columns, sort_keys=True, default=_json_default)},
        })
    return rows


def _json_default(value):
    import numpy as np
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"example column value {value!r} is not JSON-serialisable")


def write_parquet(rows: list[dict], path: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ConfigError(f"writing {path} needs pyarrow ({e}); install it with `bash tools/install_verl.sh` "
                          "or `pip install pyarrow`") from e
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), str(path))


REWARD_FILE = '''"""verl custom reward for the rl_lab task {task!r}, written by `rl-lab export verl`.

verl calls compute_score(data_source, solution_str, ground_truth, extra_info) once per response
(reward.custom_reward_function.path/name).  It scores with the task's own reward, so verl and
rl_lab give every completion the same score.  Needs rl_lab importable on every reward worker
(pip install the repository, or put it on PYTHONPATH).
"""
import json
from functools import lru_cache

from rl_lab.tasks import get_task


@lru_cache(maxsize=None)
def _task(name, task_kwargs_json):
    return get_task(name, **json.loads(task_kwargs_json))


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    extra_info = extra_info or {{}}
    task = _task(data_source, extra_info.get("task_kwargs", {task_kwargs!r}))
    columns = json.loads(extra_info.get("columns") or "{{}}")
    return task.reward(completions=[solution_str], answer=[ground_truth],
                       **{{k: [v] for k, v in columns.items()}})[0]
'''


def reward_file(task: str, task_kwargs: dict) -> str:
    return REWARD_FILE.format(task=task, task_kwargs=json.dumps(task_kwargs, sort_keys=True))


def export_model(cfg: RLConfig, model_dir: Path, tokenizer_dir: Path) -> int:
    """Save cfg.model (warm start, size preset or path) to model_dir, and its tokenizer with a chat
    template that renders prompts as rl_lab's engines do to both folders.  verl loads the tokenizer
    from tokenizer_dir (model.tokenizer_path): a folder without the model's config.json, because
    AutoTokenizer on a Qwen2 model folder swaps in Qwen2Tokenizer in transformers 5, which drops
    the spaces rl_lab's character tokenizer keeps.  Returns the model's parameter count."""
    from rl_lab.models import num_parameters, resolve_model

    model, tok = resolve_model(cfg.model, cfg.task, seed=cfg.seed)
    probe = tok("1")["input_ids"]
    tok.chat_template = chat_template(adds_bos=tok.bos_token_id is not None and probe[:1] == [tok.bos_token_id])
    model_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(model_dir))
    for folder in (model_dir, tokenizer_dir):
        tok.save_pretrained(str(folder))
    return num_parameters(model)


def max_prompt_tokens(tokenizer, prompts: list[str]) -> int:
    return max(len(tokenizer(p)["input_ids"]) for p in prompts)


@dataclass
class ExportResult:
    out_dir: Path
    overrides: dict[str, Any]
    files: list[Path]


def export_verl(cfg: RLConfig, out_dir: str | Path, cluster: VerlCluster | None = None,
                with_model: bool = True, relative_to: str | Path | None = None) -> ExportResult:
    """Write everything verl needs to run `cfg`, into out_dir:
      overrides.yaml   verl ppo_trainer overrides (nested) + the marked rl_lab block (round trip)
      command.sh       the same overrides as `python3 -m verl.trainer.main_ppo key=value ...`
      data/train.parquet, data/val.parquet   rl_lab's prompt stream for this seed (max_steps x
                       prompts_per_step rows, in order) and its held-out set, in verl's RL format
      reward.py        compute_score(data_source, solution_str, ground_truth, extra_info=None)
      model/, tokenizer/   the model; its tokenizer with a chat template (with_model=False skips
                       both; model.path and model.tokenizer_path still point there)
    relative_to: write the paths as `./<path relative to this folder>` instead of absolute ones (a
    committed example run from the repository root).  Refuses an RLConfig verl cannot run
    (VerlExportError, naming the fields) before writing anything."""
    from rl_lab.tasks import get_task
    from rl_lab.tokenizer import build_tokenizer

    cluster = cluster or VerlCluster()
    flat = config_overrides(cfg)                           # refuses first, writes nothing on error
    placed = cluster_overrides(cfg, cluster, out_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    task = get_task(cfg.task, **cfg.task_kwargs)
    train = task.make_dataset(cfg.max_steps * cfg.prompts_per_step, seed=cfg.seed)   # the Trainer's stream
    val = task.make_dataset(cfg.eval_prompts, seed=1_000_003 + cfg.seed)              # the Trainer's eval set
    files = []
    for split, examples in (("train", train), ("val", val)):
        path = out / "data" / f"{split}.parquet"
        write_parquet(verl_rows(cfg.task, cfg.task_kwargs, examples, split), path)
        files.append(path)
    (out / "reward.py").write_text(reward_file(cfg.task, cfg.task_kwargs))
    files.append(out / "reward.py")
    if with_model:
        export_model(cfg, out / "model", out / "tokenizer")
        from rl_lab.tokenizer import load_tokenizer
        tok = load_tokenizer(out / "model")
        files += [out / "model", out / "tokenizer"]
    else:
        tok = build_tokenizer()
    placed["data.max_prompt_length"] = max_prompt_tokens(tok, [e["prompt"] for e in train + val])
    if relative_to is not None:
        root = Path(relative_to).resolve()
        placed = {k: (f"./{Path(v).relative_to(root).as_posix()}" if isinstance(v, str) and v.startswith(str(root))
                      else v) for k, v in placed.items()}
    overrides = {**placed, **flat}
    (out / "overrides.yaml").write_text(overrides_yaml(overrides, local_fields(cfg)))
    (out / "command.sh").write_text("#!/usr/bin/env bash\n# verl " + VERL_VERSION + " on the exported files "
                                    "(written by `rl-lab export verl`); extra key=value arguments are "
                                    "appended.\nset -euo pipefail\n" + shell_command(overrides))
    files[:0] = [out / "overrides.yaml", out / "command.sh"]
    return ExportResult(out, overrides, files)


# ----------------------------------------------------------------------------- metrics back
VERL_TO_RL_LAB_METRICS = {
    "training/global_step": "step",
    "critic/score/mean": "reward",
    "response_length/mean": "completions/mean_length",
    "response_length/min": "completions/min_length",
    "response_length/max": "completions/max_length",
    "response_length/clip_ratio": "completions/clipped_ratio",
    "actor/entropy": "entropy",
    "actor/loss": "loss",
    "actor/grad_norm": "grad_norm",
    "actor/lr": "learning_rate",
    "actor/kl_loss": "kl",
    "timing_s/step": "step_time",
    "timing_s/gen": "time/rollout",
    "timing_s/update_actor": "time/update",
}
"""verl metric -> Trainer.metrics() name.  rollout_corr/* and actor/pg_clipfrac, actor/ppo_kl,
actor/pg_clipfrac_lower already have rl_lab's names (chapter 5's conformance); other verl metrics
are kept under their own names.  Two near-equivalences: verl's response_length/clip_ratio counts
responses of exactly max length (one that ends in <eos> at the last position too), rl_lab's
completions/clipped_ratio those without <eos>; verl's actor/kl_loss is aggregated with
loss_agg_mode, rl_lab's kl is a token mean.  verl's names come from its source (metric_utils.
compute_data_metrics, the actor's rename_dict(..., "actor/"), marked_timer names)."""


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RAY_PREFIX = re.compile(r"^\([^()]*\bpid=\d+[^()]*\)\s*")


def parse_console_line(line: str) -> tuple[int, dict] | None:
    """One line of verl's console logger (`step:3 - key:value - ...`, verl.utils.logger.
    aggregate_logger.concat_dict_to_str), or None for any other line.  The line may carry what
    Ray adds to an actor's stdout in a driver's or `ray job logs` output: colour codes and the
    actor's prefix, `ESC[36m(TaskRunner pid=14640)ESC[0m step:101 - ...` (`main_task` in
    older verl; `, ip=...` on a multi-node cluster)."""
    line = _RAY_PREFIX.sub("", _ANSI.sub("", line).strip())
    m = re.match(r"^step:(\d+)( - |$)", line)
    if not m:
        return None
    data = {}
    for part in line[m.end():].split(" - ") if line[m.end():] else []:
        key, sep, value = part.rpartition(":")
        number = re.fullmatch(r"(?:np\.\w+\()?([^()]*)\)?", value.strip())   # pprint of numpy: np.float64(0.25)
        if not sep or number is None:
            continue
        try:
            data[key] = float(number.group(1))
        except ValueError:
            continue
    return int(m.group(1)), data


def read_verl_records(path: str | Path) -> list[tuple[int, dict]]:
    """(step, metrics) records from verl's file logger (JSONL lines {"step": s, "data": {...}},
    verl.utils.tracking.FileLogger) or from a console log (stdout of main_ppo with the console
    logger).  Validation-only records are kept (they carry val-core/... keys)."""
    records = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{path}:{number} is not JSON ({e}); is this verl's file logger output?") from e
            if not isinstance(row, dict) or "step" not in row or not isinstance(row.get("data"), dict):
                raise ConfigError(f"{path}:{number} has no 'step' and 'data' (verl's FileLogger writes "
                                  "{\"step\": N, \"data\": {...}})")
            records.append((int(row["step"]), row["data"]))
        else:
            parsed = parse_console_line(line)
            if parsed is not None:
                records.append(parsed)
    if not records:
        raise ConfigError(f"{path} holds no verl metrics: expected the file logger's JSONL "
                          "(trainer.logger=['console','file']) or console lines 'step:N - key:value - ...' "
                          "(Ray's '(TaskRunner pid=N)' prefix allowed)")
    return records


def read_verl_metrics(path: str | Path):
    """A verl run's metrics as the DataFrame `Trainer.metrics()` returns: one row per step, rl_lab's
    names where the meaning is the same (`VERL_TO_RL_LAB_METRICS`), verl's names otherwise.
    Several records of one step (training, then validation) are merged into one row."""
    import pandas as pd

    by_step: dict[int, dict] = {}
    for step, data in read_verl_records(path):
        row = by_step.setdefault(step, {"step": step})
        for key, value in data.items():
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if numeric or value is None:          # orjson writes NaN as null; strings are not metrics
                row[VERL_TO_RL_LAB_METRICS.get(key, key)] = float("nan") if value is None else value
        row["step"] = step
    df = pd.DataFrame([by_step[s] for s in sorted(by_step)])
    return df[["step"] + [c for c in df.columns if c != "step"]]
