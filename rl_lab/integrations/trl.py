"""From laptop to TRL: an `RLConfig` as TRL 1.16 `GRPOConfig` arguments, and a runnable script.

`TRL_FIELD_MAP` says, for every `RLConfig` field, what becomes of it in TRL (the same four statuses
as rl_lab.integrations.verl's table): "exported" as GRPOConfig arguments, carried by the exported
"files" (dataset, reward, model), "local" (harmless: TRL never reads it) or "refused" (TRL has no
counterpart; any value but the field's off value is refused, naming the field).  The methods' rows
come from their `trl=` entries in rl_lab.method_specs.

The rollout correction (RLConfig.rollout_correction) maps onto TRL's vLLM importance sampling
(`trl_correction_args`): rl_lab's importance weights are TRL's four modes --

    rollout_is="token",    rollout_is_threshold=C        -> token_truncate,    clip_max=C
    rollout_is="sequence", rollout_is_threshold=C        -> sequence_truncate, clip_max=C
    rollout_is="token",    rollout_is_threshold="lo_hi"  -> token_mask,        clip_min=lo, clip_max=hi
    rollout_is="sequence", rollout_is_threshold="lo_hi"  -> sequence_mask,     clip_min=lo, clip_max=hi

(tests/integration/test_trl_conformance.py checks each against TRL's own code); rejection
(rollout_rs), the token veto, batch normalisation and bypass mode have no TRL counterpart.  TRL
applies the correction only when it samples with vLLM (`use_vllm=True`): on a CPU, with Hugging Face
`generate`, its sampler is the trainer and there is nothing to correct.

`export_trl(cfg, out_dir)` writes grpo_config.json (the arguments), data/train.jsonl (rl_lab's prompt
stream for the seed), the model and tokenizer (save_pretrained, so the run is offline) and
train_trl.py, which runs TRL's GRPOTrainer on them with the task's own reward.

This module imports no TRL: the export is plain data.  `trl_correction_reference` (for tests and
chapter 13) drives TRL's own code and imports it when called.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rl_lab.config import RLConfig
from rl_lab.correction_options import parse_is_threshold
from rl_lab.errors import ConfigError
from rl_lab.method_specs import METHOD_SPECS, plugin_specs

TRL_VERSION = "1.16.0"
TRL_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
MASK_FLOOR = math.exp(-20.0)
"""rl_lab's smallest importance weight: it clamps the log-ratio at -20 (verl's SAFETY_BOUND), so a
lower bound at or below exp(-20) keeps every ratio, as TRL's mask modes do with clip_min=None."""
FIXED_ARGS = {
    "bf16": False, "fp16": False, "gradient_checkpointing": False,
    "gradient_accumulation_steps": 1, "steps_per_generation": 1, "shuffle_dataset": False,
    "logging_steps": 1, "report_to": "none", "disable_tqdm": True, "dataloader_num_workers": 0,
    "optim": "adamw_torch", "use_bias_correction_kl": False,
}
"""GRPOConfig arguments every export sets, because TRL's defaults differ from rl_lab's: bf16=None
means bf16 even on a CPU, gradient checkpointing is on, logging_steps is 10 (a record is not a
step), the dataset is shuffled (rl_lab's prompt stream is in order), and use_bias_correction_kl=True
multiplies the KL term by the ratio pi_theta/pi_old (rl_lab's beta term is the plain k3).  One
optimizer step per generation batch, as in rl_lab.  train_trl.py sets use_cpu when there is no GPU."""


class TrlExportError(ConfigError):
    """An RLConfig that TRL cannot run as it is: the message names the field and what to change."""


@dataclass(frozen=True)
class TrlField:
    """One row of the table: what an RLConfig field becomes in TRL."""
    field: str
    status: str                                    # exported | files | local | refused
    keys: tuple[str, ...] = ()
    note: str = ""
    to_trl: Callable[[RLConfig], dict] | None = None
    allowed: Callable[[Any], bool] | None = None   # refused rows: the values TRL can still run


def _value(cfg: RLConfig, name: str):
    for part in name.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _same(field: str, note: str = "the same name and meaning", key: str | None = None) -> TrlField:
    key = key or field
    return TrlField(field, "exported", (key,), note, lambda cfg: {key: _value(cfg, field)})


def _refused(field: str, note: str, allowed: Callable[[Any], bool]) -> TrlField:
    return TrlField(field, "refused", (), note, allowed=allowed)


def _local(field: str, note: str) -> TrlField:
    return TrlField(field, "local", (), note)


# ----------------------------------------------------------------------------- the correction
def trl_correction_args(rc) -> dict[str, Any]:
    """A CorrectionConfig (RLConfig.rollout_correction) as TRL's vllm_importance_sampling_*
    arguments.  Refuses (TrlExportError, naming the knob) what TRL has no counterpart for."""
    problems = correction_problems(rc)
    if problems:
        raise TrlExportError("this correction cannot run on TRL " + TRL_VERSION + ":\n  " + "\n  ".join(problems))
    if rc.rollout_is is None:
        return {"vllm_importance_sampling_correction": False}
    upper, lower = parse_is_threshold(rc.rollout_is_threshold)
    kind = "truncate" if lower is None else "mask"
    return {"vllm_importance_sampling_correction": True,
            "vllm_importance_sampling_mode": f"{rc.rollout_is}_{kind}",
            "vllm_importance_sampling_clip_max": upper, "vllm_importance_sampling_clip_min": lower}


def correction_problems(rc) -> list[str]:
    """Why TRL cannot run this CorrectionConfig (one line per knob; empty when it can)."""
    where, out = "RLConfig.rollout_correction.", []
    if rc.rollout_rs is not None:
        out.append(f"{where}rollout_rs={rc.rollout_rs!r}: TRL 1.16 has no rejection sampling (its "
                   "off_policy_mask_threshold is DeepSeek-V3.2's OPSM, another rule); set it to None")
    if rc.rollout_token_veto_threshold is not None:
        out.append(f"{where}rollout_token_veto_threshold={rc.rollout_token_veto_threshold!r}: TRL has no token "
                   "veto; set it to None")
    if rc.rollout_is_batch_normalize:
        out.append(f"{where}rollout_is_batch_normalize=True: TRL does not normalise its importance weights; "
                   "set it to False")
    if rc.bypass_mode:
        out.append(f"{where}bypass_mode=True: TRL keeps three policies (its old log-probs are the trainer's, "
                   "recomputed before the update); set it to False")
    if rc.extra_modes:
        out.append(f"{where}extra_modes={sorted(rc.extra_modes)}: correction modes registered outside rl_lab "
                   "have no TRL counterpart; set it to {{}}")
    if rc.rollout_is is not None:
        upper, lower = parse_is_threshold(rc.rollout_is_threshold)
        if lower is not None and not lower < upper:
            out.append(f"{where}rollout_is_threshold={rc.rollout_is_threshold!r}: TRL requires clip_min < "
                       "clip_max; widen the band")
    return out


def correction_from_trl(mode: str = "sequence_mask", clip_max: float | None = 3.0,
                        clip_min: float | None = None) -> dict[str, Any]:
    """The CorrectionConfig fields of rl_lab's mode that computes what a TRL mode computes
    (TRL's defaults: sequence_mask, clip_max 3.0, no clip_min).  A mask without clip_min is the
    band [MASK_FLOOR, clip_max]; a truncation with a clip_min (a lower clamp) has no rl_lab
    counterpart and is refused."""
    if mode not in TRL_MODES:
        raise ConfigError(f"vllm_importance_sampling_mode={mode!r} is unknown; choose one of {list(TRL_MODES)}")
    level, kind = mode.split("_")
    if kind == "truncate":
        if clip_min is not None or clip_max is None:
            raise ConfigError(f"{mode} with clip_min={clip_min!r}, clip_max={clip_max!r}: rl_lab truncates from "
                              "above only (TIS); use clip_min=None and a clip_max")
        return {"rollout_is": level, "rollout_is_threshold": float(clip_max)}
    lo = MASK_FLOOR if clip_min is None else float(clip_min)
    hi = math.inf if clip_max is None else float(clip_max)
    return {"rollout_is": level, "rollout_is_threshold": f"{lo!r}_{hi!r}"}


# ----------------------------------------------------------------------------- the table
_LOSS_TYPES = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}


def _batch_to_trl(cfg: RLConfig) -> dict:
    """TRL counts completions: per_device_train_batch_size = prompts x generations (one device)."""
    return {"per_device_train_batch_size": cfg.prompts_per_step * cfg.num_generations}


def _schedule_to_trl(cfg: RLConfig) -> dict:
    """Hugging Face's "constant" ignores warm-up: with warmup_steps it is constant_with_warmup."""
    kind = cfg.lr_scheduler_type
    if kind == "constant" and cfg.warmup_steps > 0:
        kind = "constant_with_warmup"
    return {"lr_scheduler_type": kind}


def _save_to_trl(cfg: RLConfig) -> dict:
    return {"save_strategy": "steps", "save_steps": cfg.save_steps} if cfg.save_steps > 0 else {"save_strategy": "no"}


def _vllm_to_trl(cfg: RLConfig) -> dict:
    return {"use_vllm": cfg.use_vllm, **({"vllm_mode": "colocate"} if cfg.use_vllm else {})}


def method_rows() -> tuple[TrlField, ...]:
    """The methods' fields, from their `trl=` entries (rl_lab.method_specs)."""
    rows = []
    for spec in METHOD_SPECS:
        if spec.field is None:
            continue
        t = spec.trl
        if t.status == "exported":
            rows.append(TrlField(spec.field, "exported", t.keys, t.note, t.to))
        elif t.status == "local":
            rows.append(_local(spec.field, t.note))
        else:
            rows.append(_refused(spec.field, t.note,
                                 lambda v, off=spec.off: v == off and type(v) is type(off)))
    rows.append(_refused("extra_methods", "registered methods are exported as their rows' trl= entries say; "
                         "this run has one TRL cannot run",
                         lambda v: all(n in plugin_specs() and plugin_specs()[n].trl.status == "local" for n in v)))
    return tuple(rows)


def _correction_row() -> TrlField:
    keys = ("vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
            "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min")
    return TrlField("rollout_correction", "exported", keys,
                    "token/sequence IS truncated at C -> *_truncate, 'lo_hi' -> *_mask; rejection, veto, batch "
                    "normalisation and bypass mode are refused. TRL applies it only with use_vllm=True",
                    lambda cfg: trl_correction_args(cfg.rollout_correction))


_E = "exported"
TRL_FIELD_MAP: tuple[TrlField, ...] = (
    TrlField("task", "files", note="data/train.jsonl's rows; train_trl.py scores with this task's reward"),
    TrlField("task_kwargs", "files", note="rebuilds the task in train_trl.py (grpo_export.json)"),
    TrlField("model", "files", note="resolved and saved to <out>/model with its tokenizer (save_pretrained): "
             "the run is offline"),
    TrlField("prompts_per_step", _E, ("per_device_train_batch_size",),
             "TRL counts completions: prompts_per_step x num_generations on one device", _batch_to_trl),
    _same("num_generations", "the group size G"),
    _same("max_completion_length"),
    _same("temperature", "TRL also scores the trainer's log-probs at this temperature"),
    _same("top_p"),
    _same("top_k", "0 is off in both"),
    TrlField("min_p", _E, ("min_p",), "0 (off) in rl_lab is None in TRL",
             lambda cfg: {"min_p": cfg.min_p or None}),
    _refused("min_tokens", "GRPOConfig has no min_tokens (a benchmark setting here)", lambda v: v == 0),
    _refused("sampler_dtype", "TRL's sampler is the trainer's model (Hugging Face generate) or vLLM in the "
             "training dtype; rl_lab's separate sampler precision has no GRPOConfig argument", lambda v: v == "float32"),
    TrlField("use_vllm", _E, ("use_vllm", "vllm_mode"), "the same name; vLLM in colocate mode", _vllm_to_trl),
    _refused("max_turns", "multi-turn tool episodes: this export writes single-turn runs (TRL's tools= and "
             "environment_factory= are not set)", lambda v: v is None),
    _refused("sampler_quantization", "an injector (rl_lab's fake-quantised sampler)", lambda v: v is None),
    _refused("sampler_staleness", "an injector (weight lag); TRL's own lag comes from steps_per_generation "
             "and num_iterations", lambda v: v == 0),
    _refused("sampler_logit_noise", "an injector (noise on the sampler's logits)", lambda v: v == 0),
    _refused("sampler_temperature", "an injector (a temperature only the sampler knows)", lambda v: v is None),
    _refused("advantage_estimator", "GRPOTrainer computes GRPO's group advantage only (RLOO is another trainer)",
             lambda v: v == "grpo"),
    _local("gamma", "only reinforce_plus_plus reads it (refused)"),
    _same("scale_rewards", "group, batch or none: the same names (TRL adds 1e-4 to the std, rl_lab 1e-6)"),
    _refused("policy_loss", "GRPOTrainer's losses are clipped-ratio losses (or CISPO's); it has no REINFORCE "
             "loss", lambda v: v == "ppo_clip"),
    TrlField("loss_agg_mode", _E, ("loss_type",), "token-mean -> dapo, seq-mean-token-mean -> grpo, "
             "seq-mean-token-sum-norm -> dr_grpo; the others are refused",
             lambda cfg: {"loss_type": _LOSS_TYPES[cfg.loss_agg_mode]}),
    _same("epsilon", "the lower clip"),
    _same("epsilon_high", "None (= epsilon) in both"),
    _refused("clip_ratio_c", "TRL's delta clips the ratio for both signs of the advantage (INTELLECT-2), not "
             "dual-clip PPO's cap for A < 0", lambda v: v is None),
    _same("num_iterations", "optimizer passes over each batch (TRL's mu)"),
    *method_rows(),
    _correction_row(),
    _same("learning_rate"), _same("adam_beta1"), _same("adam_beta2"), _same("weight_decay"),
    _same("max_grad_norm"),
    TrlField("lr_scheduler_type", _E, ("lr_scheduler_type",), "constant, linear, cosine (Hugging Face's); "
             "constant with warm-up is constant_with_warmup; length_triggered is refused", _schedule_to_trl),
    _same("warmup_steps", "linear warm-up (Hugging Face starts at 0/W, rl_lab at 1/W)"),
    _same("max_steps"),
    _same("seed", "the trainer's seed; the prompts are rl_lab's stream for this seed, in order"),
    _local("output_dir", "train_trl.py writes to <out>/trl_output (or --output-dir)"),
    TrlField("save_steps", _E, ("save_strategy", "save_steps"), "0 (only at the end) -> save_strategy 'no'",
             _save_to_trl),
    _local("eval_steps", "not exported: TRL's evaluation needs an eval dataset and a metric (rl_lab's greedy "
           "accuracy has no GRPOConfig argument)"),
    _local("eval_prompts", "read only by rl_lab's evaluation"),
    _local("device", "train_trl.py sets use_cpu when there is no GPU"),
    _local("share_prefix", "an rl_lab forward-pass optimisation"),
    _local("progress_bar", "rl_lab's progress bar"),
)

TRL_ROWS = {row.field: row for row in TRL_FIELD_MAP}


def check_exportable(cfg: RLConfig) -> None:
    """Raise TrlExportError naming every field TRL cannot run as set (all of them at once)."""
    problems = []
    for row in TRL_FIELD_MAP:
        if row.status == "refused" and not row.allowed(_value(cfg, row.field)):
            problems.append(f"RLConfig.{row.field}={_value(cfg, row.field)!r}: {row.note} "
                            f"(set it to {_default(row.field)!r} to export)")
    if cfg.loss_agg_mode not in _LOSS_TYPES:
        problems.append(f"RLConfig.loss_agg_mode={cfg.loss_agg_mode!r}: TRL's loss types aggregate as "
                        f"{sorted(_LOSS_TYPES)}; use one of them")
    if cfg.lr_scheduler_type == "length_triggered":
        problems.append("RLConfig.lr_scheduler_type='length_triggered': TRL has no length-triggered schedule; "
                        "use constant, linear or cosine")
    from rl_lab.tasks import get_task
    if getattr(get_task(cfg.task, **cfg.task_kwargs), "environment", None) is not None:
        problems.append(f"RLConfig.task={cfg.task!r} is a tool task (multi-turn episodes): this export writes "
                        "single-turn TRL runs; export a single-turn task")
    problems += correction_problems(cfg.rollout_correction)
    if problems:
        raise TrlExportError("this config cannot run on TRL " + TRL_VERSION + ":\n  " + "\n  ".join(problems))


def _default(name: str):
    f = {f.name: f for f in dataclasses.fields(RLConfig)}[name]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def grpo_config_args(cfg: RLConfig) -> dict[str, Any]:
    """TRL 1.16 GRPOConfig keyword arguments for cfg (without output_dir and use_cpu, which
    train_trl.py sets on the machine that runs it)."""
    check_exportable(cfg)
    args = dict(FIXED_ARGS)
    for row in TRL_FIELD_MAP:
        if row.status == "exported":
            args.update(row.to_trl(cfg))
    return args


def mapping_table_markdown() -> str:
    """TRL_FIELD_MAP as a Markdown table."""
    lines = ["| `RLConfig` field | what TRL gets | GRPOConfig arguments | why / how |", "|---|---|---|---|"]
    for row in TRL_FIELD_MAP:
        keys = "<br>".join(f"`{k}`" for k in row.keys) or "--"
        lines.append(f"| `{row.field}` | {row.status} | {keys} | {row.note.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the files
SCRIPT = '''"""TRL {version} GRPO run of the rl_lab task {task!r}, written by `rl-lab export trl`.

    python train_trl.py                      # the whole run ({max_steps} steps), into ./trl_output
    python train_trl.py --max-steps 1 --output-dir trl_smoke

Reads grpo_config.json (GRPOConfig's arguments), data/train.jsonl (rl_lab's prompt stream for this
seed, in order) and model/ (the model and its tokenizer).  Scores with the task's own reward, so
rl_lab and TRL give every completion the same score: needs rl_lab importable (pip install the
repository, or put it on PYTHONPATH).  Offline: nothing is downloaded.
"""
import argparse
import json
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

from rl_lab.tasks import get_task

HERE = Path(__file__).resolve().parent


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\\n\\n")[0])
    ap.add_argument("--max-steps", type=int, help="override max_steps (e.g. 1 for a smoke test)")
    ap.add_argument("--output-dir", default=str(HERE / "trl_output"))
    cli = ap.parse_args(argv)
    meta = json.loads((HERE / "grpo_export.json").read_text())
    kwargs = json.loads((HERE / "grpo_config.json").read_text())
    if cli.max_steps is not None:
        kwargs["max_steps"] = cli.max_steps
    kwargs["use_cpu"] = not torch.cuda.is_available()
    args = GRPOConfig(output_dir=cli.output_dir, **kwargs)
    task = get_task(meta["task"], **meta["task_kwargs"])

    def reward(completions, answer, **columns):
        return task.reward(completions=completions, answer=answer, **columns)
    reward.__name__ = meta["task"]            # TRL logs rewards/<name>/mean

    rows = [json.loads(line) for line in (HERE / "data" / "train.jsonl").read_text().splitlines() if line]
    # PreTrainedTokenizerFast, not AutoTokenizer: on a Qwen2 folder the latter swaps in Qwen2's BPE
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(HERE / "model"))
    model = AutoModelForCausalLM.from_pretrained(str(HERE / "model"), dtype=torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer)
    trainer.train()
    trainer.save_state()                      # trainer_state.json: log_history, one record per step


if __name__ == "__main__":
    main()
'''


@dataclass
class TrlExportResult:
    out_dir: Path
    args: dict[str, Any]
    files: list[Path]


def export_trl(cfg: RLConfig, out_dir: str | Path, with_model: bool = True) -> TrlExportResult:
    """Write a TRL 1.16 run of cfg into out_dir:
      grpo_config.json   GRPOConfig's keyword arguments (no output_dir, no use_cpu)
      grpo_export.json   the task, its knobs and what rl_lab fields were left local
      data/train.jsonl   rl_lab's prompt stream for this seed (max_steps x prompts_per_step rows, in order)
      model/             the model and its tokenizer (save_pretrained; with_model=False skips it)
      train_trl.py       runs GRPOTrainer on them, with the task's reward
    Refuses (TrlExportError, naming every field) before writing anything."""
    from rl_lab.tasks import get_task

    args = grpo_config_args(cfg)                         # refuses first, writes nothing on error
    out = Path(out_dir)
    (out / "data").mkdir(parents=True, exist_ok=True)
    task = get_task(cfg.task, **cfg.task_kwargs)
    train = task.make_dataset(cfg.max_steps * cfg.prompts_per_step, seed=cfg.seed)   # the Trainer's stream
    (out / "data" / "train.jsonl").write_text("".join(json.dumps(_row(ex), sort_keys=True) + "\n" for ex in train))
    (out / "grpo_config.json").write_text(json.dumps(args, indent=1, sort_keys=True) + "\n")
    local = {row.field: row.note for row in TRL_FIELD_MAP if row.status in ("local", "refused")}
    meta = {"trl_version": TRL_VERSION, "task": cfg.task, "task_kwargs": cfg.task_kwargs,
            "not_exported": local}
    (out / "grpo_export.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    (out / "train_trl.py").write_text(SCRIPT.format(version=TRL_VERSION, task=cfg.task, max_steps=cfg.max_steps))
    files = [out / "grpo_config.json", out / "grpo_export.json", out / "data" / "train.jsonl", out / "train_trl.py"]
    if with_model:
        from rl_lab.models import resolve_model
        model, tok = resolve_model(cfg.model, cfg.task, seed=cfg.seed)
        model.save_pretrained(str(out / "model"))
        tok.save_pretrained(str(out / "model"))
        files.append(out / "model")
    return TrlExportResult(out, args, files)


def _row(example: dict) -> dict:
    """A dataset row as JSON: numpy scalars and arrays as Python values."""
    import numpy as np
    return {k: (v.item() if isinstance(v, np.generic) else v.tolist() if isinstance(v, np.ndarray) else v)
            for k, v in example.items()}
