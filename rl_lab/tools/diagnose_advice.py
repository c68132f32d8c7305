"""What `rl-lab diagnose` proposes, in the run's own framework: TRL 1.16 arguments, verl 0.9.1
overrides, or RLConfig fields.  Each action is written once per framework (ACTIONS); a framework
without an equivalent is left out rather than translated loosely, and an action the run's settings
already follow is not proposed again (it is listed as already set).

Two TRL traps the texts follow: TRL 1.16 has no bypass mode, and `vllm_importance_sampling_cap`
is deprecated since 1.6 (`vllm_importance_sampling_clip_max`); transformers 5 removed
`warmup_ratio` (a float `warmup_steps` below 1 is the ratio)."""
from __future__ import annotations

import math

from rl_lab.tools.diagnose_findings import Diagnosis, Override
from rl_lab.tools.metric_names import K3

RC = "algorithm.rollout_correction"
LANGUAGE = {"trl": "TRL 1.16 GRPOConfig arguments", "verl": "verl 0.9.1 overrides",
            "rl_lab": "RLConfig fields (rl-lab train --set KEY=VALUE, or config.yaml)"}


def _half(lr):
    """Half the run's learning rate (a number), or a placeholder when it is unknown."""
    return float(f"{float(lr) / 2:.3g}") if isinstance(lr, (int, float)) and lr > 0 else "<half of the current value>"


def _actions(d: Diagnosis, lr, resume_at: str) -> dict:
    """action -> framework -> (settings, text, why, evidence)."""
    level = d.levels.get(K3, float("nan"))
    seq_rs = f"{3 * level:.3g}" if math.isfinite(level) and level > 0 else None
    half = _half(lr)
    return {
        "bypass": {
            "verl": ({f"{RC}.bypass_mode": True, f"{RC}.loss_type": "ppo_clip"}, None,
                     "a trust region around the sampler's own policy; the only correction that held at four stale "
                     "steps on the map. In verl 0.9.1 bypass PPO-clip ignores IS weights, and the new trainer also "
                     "needs actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode",
                     "book map: bypass PPO-clip 0/3 collapses at stale 4, lr 5e-4 (uncorrected 9/9)"),
            "rl_lab": ({"rollout_correction.bypass_mode": True, "policy_loss": "ppo_clip"}, None,
                       "PPO-clip against the sampler's own log-probs: the only correction that held at four stale "
                       "steps on the map", "book map: bypass PPO-clip 0/3 collapses at stale 4, lr 5e-4"),
        },
        "token_tis": {
            "verl": ({f"{RC}.rollout_is": "token", f"{RC}.rollout_is_threshold": 2.0}, None,
                     "truncated token-level importance weights (token TIS)",
                     "book map: kept the reward at two stale steps over nine seeds; did not prevent the collapse at "
                     "four; verl's guide: for moderate off-policyness"),
            "trl": ({"vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "token_truncate",
                     "vllm_importance_sampling_clip_max": 2.0}, None,
                    "token TIS instead of TRL's default sequence_mask (whose sequence ratio, exp of the summed "
                    "log-ratio, masks long completions at cap 3.0); vllm_importance_sampling_cap is the deprecated "
                    "name of clip_max. Only active with use_vllm=True",
                    "book map: token TIS kept the reward at two stale steps; TRL 1.16's grpo_trainer.py"),
            "rl_lab": ({"rollout_correction.rollout_is": "token", "rollout_correction.rollout_is_threshold": 2.0},
                       None, "truncated token-level importance weights (token TIS)",
                       "book map: kept the reward at two stale steps over nine seeds"),
        },
        "lower_lr": {
            "verl": ({"actor_rollout_ref.actor.optim.lr": half}, None,
                     "a smaller step: the first suspect when the mismatch is excluded, and it shrinks a stale "
                     "sampler's drift too", "book map: at lr 2e-4 no run collapsed at any staleness; at 1e-3 every "
                     "run did, fresh sampler included"),
            "trl": ({"learning_rate": half}, None,
                    "a smaller step: the first suspect when the mismatch is excluded",
                    "book map: at lr 1e-3 every run collapsed, fresh sampler included"),
            "rl_lab": ({"learning_rate": half}, None, "a smaller step",
                       "book map: at lr 1e-3 every run collapsed, fresh sampler included"),
        },
        "warmup": {
            "trl": ({"warmup_steps": 0.1}, None,
                    "the fall came as the warmup reached its peak: a lower peak (above), reached more slowly "
                    "(transformers 5 removed warmup_ratio; a float warmup_steps below 1 is the ratio)",
                    "chapter 7 (book/ch07_lr_scheduling.md)"),
            "verl": ({"actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": 0.1}, None,
                     "the fall came as the warmup reached its peak: a lower peak, reached more slowly",
                     "chapter 7 (book/ch07_lr_scheduling.md)"),
            "rl_lab": ({"warmup_steps": "<more steps>"}, None,
                       "the fall came as the warmup reached its peak", "chapter 7 (book/ch07_lr_scheduling.md)"),
        },
        "clip_grad": {
            "trl": ({"max_grad_norm": 0.5}, None, "clip harder while the gradient norm is blowing up",
                    "the stability map's blow-up criterion fired; clipping bounds each step"),
            "verl": ({"actor_rollout_ref.actor.grad_clip": 0.5}, None, "clip harder while the gradient norm blows up",
                     "the stability map's blow-up criterion fired"),
            "rl_lab": ({"max_grad_norm": 0.5}, None, "clip harder while the gradient norm blows up",
                       "the stability map's blow-up criterion fired"),
        },
        "seq_rs": {
            "verl": ({f"{RC}.rollout_rs": "seq_mean_k3", f"{RC}.rollout_rs_threshold": seq_rs}, None,
                     "reject sequences whose mean k3 is 3x this run's early level",
                     "book map: Seq-MIS collapsed 3/3 at four stale steps; use as a guard, not a fix"),
        } if seq_rs else {},
        "fp16": {
            "verl": ({}, "actor_rollout_ref.rollout.dtype=float16 (and the actor's mixed precision in fp16)",
                     "fp16 on both engines rounds less than bf16 where the values are moderate",
                     "other posts (fp16 against the mismatch); not tested in this book"),
        },
        "plain_sampler": {
            "verl": ({"actor_rollout_ref.rollout.temperature": 1.0, "actor_rollout_ref.rollout.top_p": 1.0,
                      "actor_rollout_ref.rollout.top_k": -1}, None,
                     "the trainer scores with the raw softmax: a sampler temperature, top-p or top-k it does not "
                     "apply makes the ratios wrong from the first step",
                     "verl computes old_log_prob at temperature from the rollout config; check both sides"),
            "trl": ({"temperature": 1.0, "top_p": 1.0, "top_k": 0}, None,
                    "a sampler truncation the trainer does not replay makes the ratios wrong from the first step",
                    "TRL #6789 (top-p/top-k and IS)"),
            "rl_lab": ({"temperature": 1.0, "top_p": 1.0, "top_k": 0}, None,
                       "a truncated sampler biases k3 and the ratios", "book/ch05_rollout_correction.md"),
        },
        "metrics_only": {
            "verl": ({f"{RC}.rollout_is": None, f"{RC}.rollout_rs": None,
                      "actor_rollout_ref.rollout.calculate_log_probs": True}, None,
                     "metrics only: logs rollout_corr/* (k3, log-ppl gap, chi^2) without changing the loss",
                     "verl's rollout-correction guide: start with metrics only"),
            "trl": ({"vllm_importance_sampling_correction": True}, None,
                    "with use_vllm=True TRL logs sampling/sampling_logp_difference/* only while the correction is "
                    "on", "TRL 1.16's grpo_trainer.py"),
        },
        "resume": {
            "verl": ({}, f"trainer.resume_mode=resume_path trainer.resume_from_path=<checkpoints>/global_step_<N> "
                         f"(the last checkpoint before step {resume_at})",
                     "restart from before the first sign, with the changes above", "common practice"),
            "trl": ({}, f"trainer.train(resume_from_checkpoint=\"{resume_at}\")",
                    "restart from before the first sign, with the changes above (TRL/HF Trainer)", "common practice"),
            "rl_lab": ({}, f"rl-lab train --out <run> --resume (it continues from the last checkpoint; keep one "
                           f"from before {resume_at})", "restart from before the first sign", "common practice"),
        },
    }


def _plan(d: Diagnosis) -> list[str]:
    """The actions for the diagnosed cause, most supported first."""
    if d.cause in ("mismatch-level", "mismatch-led"):
        return ["bypass", "token_tis", "lower_lr", "seq_rs", "fp16"]
    if d.cause == "suspect-bug":
        return ["plain_sampler"]
    if d.cause == "learning-rate":
        return ["lower_lr", "warmup"]
    if d.cause == "not-the-mismatch":
        return ["lower_lr"]
    if d.cause == "blind":
        return ["metrics_only", "lower_lr"]
    return []


def _resume_at(d: Diagnosis, df) -> str:
    """Where to restart: a TRL run's last checkpoint before the first sign, else the step."""
    signs = [s for k, s in d.timeline.items() if k not in ("reward peak", "reward fall")]
    before = min(signs) if signs else d.timeline.get("reward fall")
    if d.framework == "trl" and df.attrs.get("folder") and df.attrs.get("checkpoints"):
        early = [c for c in df.attrs["checkpoints"] if c < (before or 0)]
        if early:
            return f"{df.attrs['folder']}/checkpoint-{max(early)}"
        return f"<no checkpoint of this run is before step {before}: start again>"
    return str(before)


def _line(settings: dict, text: str | None, framework: str) -> str:
    if text:
        return text
    if framework == "trl":
        return ", ".join(f"{k}={v!r}" for k, v in settings.items())
    return " ".join(f"{k}={'null' if v is None else str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in settings.items())


def _already(settings: dict, values: dict) -> bool:
    """True when the run's settings already hold every value of the action."""
    if not settings or not values:
        return False
    return all(k in values and values[k] == v for k, v in settings.items())


def advise(d: Diagnosis, df) -> tuple[list[Override], list[str]]:
    """(ranked overrides in the run's framework, the advice its settings already follow)."""
    framework = d.framework if d.framework in LANGUAGE else "verl"
    values = (d.setup or {}).get("values", {})
    lr = values.get("learning_rate", values.get("actor_rollout_ref.actor.optim.lr"))
    if lr is None and "learning_rate" in df.columns:
        lr = float(df["learning_rate"].max())
    plan = _plan(d)
    if "gradient blow-up" in d.timeline:
        plan.append("clip_grad")
    if d.verdict == "collapsed":
        plan.append("resume")
    table = _actions(d, lr, _resume_at(d, df) if d.verdict == "collapsed" else "")
    out, already = [], []
    for action in plan:
        entry = table[action].get(framework)
        if entry is None:
            continue
        settings, text, why, evidence = entry
        if _already(settings, values):
            already.append(f"{_line(settings, text, framework)} (already in {d.setup.get('source', 'the settings')})")
            continue
        out.append(Override(_line(settings, text, framework), why, evidence, settings))
    return out, already
