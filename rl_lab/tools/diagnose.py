"""`rl-lab diagnose RUN`: read a finished (or running) RL run's metrics and say what happened, how
sure the book is, and which verl 0.9.1 overrides to try.

    rl-lab diagnose runs/my_run                 # an rl_lab run folder (its metrics.jsonl)
    rl-lab diagnose verl_metrics.jsonl          # verl's file logger, or its console log
    rl-lab diagnose wandb_export.csv --json     # a W&B CSV export or flat JSONL; JSON on stdout
    rl-lab diagnose RUN --plot diagnosis.png    # the annotated figure
    rl-lab diagnose RUN --watch                 # follow a live run: a line whenever the verdict changes
    rl-lab diagnose RUN --config config.yaml    # also read verl's Hydra config (or an overrides file)

Exit codes: 0 healthy, 1 collapsed, 3 a warning (not collapsed, but a monitor says the setup is at
risk), 2 unreadable input.  With `--watch` the command re-reads the run every few seconds, prints a
line when the verdict or its cause changes, and exits with the full report at a collapse (1); on
Ctrl-C (or after `--watch-polls`) it exits with the last verdict's code.

The rules, fixed before the tool was evaluated on any run (research/diagnose/NOTES.md); every
threshold comes from a source, not from fitting:

* **Collapse** and **gradient blow-up**: `rl_lab.toolkits.collapse` (the stability map's criteria:
  the 20-step moving average of the reward falls below half its running peak and never climbs back
  to 0.8 of it; the gradient norm stays above 10x its early median for 5 steps).
* **The mismatch KL** `rollout_corr/k3_kl` (the post's `vllm-kl`), per token:
  - its *first* logged value, before any update, when sampler and trainer hold the same weights
    and only precision separates them: at or above K3_BUG the two engines compute different
    distributions (a temperature, top-p/top-k or chat template the trainer does not apply, a
    weight-sync bug): **suspect a bug**;
  - its *early level*, the median over positions EARLY: at or above K3_WARN (the post: 1e-2 and
    more made training infeasible on A100s; L20s trained at 1e-3 to 1e-2) the run is off-policy
    from the start: **mismatch level**;
  - a *rise*: the first step at which its WINDOW-step trailing mean reaches max(RISE x early level,
    K3_WARN). Before the fall: **mismatch-led**.
* A collapsed run whose k3 was low and did not rise before the fall: **not the mismatch** (look at
  the learning rate, the reward, the data). No k3 logged: **blind**.
* A run that did not collapse gets a **warning** (exit 3) for a suspected bug, a mismatch level, a
  rise, or a gradient blow-up; else it is **healthy**.

How far this transfers: the thresholds are the post's, measured on 1.5B–7B models in bf16; the
map that the chapters report (book/ch_when_speed_kills.md) is a 0.3M model on a CPU, where the
mismatch came from a stale sampler. On the map a high early k3 marked a setup that collapsed at a
learning rate where a fresh sampler did not; k3 did not rise before the fall, and the gradient
norm gave no warning. The overrides are ranked by the map's evidence where it has any, and say so.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from rl_lab.errors import ConfigError
from rl_lab.toolkits.collapse import WINDOW, detect_collapse, detect_grad_blowup, moving_average

K3_BUG = 5e-2
"""k3 per token at the first logged step at or above which the engines must disagree on more than precision."""
K3_WARN = 1e-2
"""k3 per token (early level) from which a run is off-policy from the start (the post's warning sign)."""
RISE = 3.0
"""A monitor rises when its smoothed value reaches RISE x its early level."""
EARLY = (1, 20)
"""Positions [start, stop) whose median is a monitor's early level (position 0: the first step)."""

K3 = "rollout_corr/k3_kl"
MONITORS = {            # rl_lab name: what it is (shown in the timeline)
    K3: "mismatch KL (k3, per token)",
    "rollout_corr/log_ppl_abs_diff": "|log-perplexity gap|",
    "rollout_corr/training_ppl": "trainer perplexity of the sampled text",
    "rollout_corr/chi2_token": "chi^2 per token",
    "rollout_corr/rollout_is_eff_sample_size": "effective sample size",
    "training/rollout_probs_diff_mean": "mean |p_trainer - p_sampler| (verl)",
    "grad_norm": "gradient norm",
    "entropy": "entropy",
    "completions/mean_length": "mean completion length",
}
STEP_COLUMNS = ("step", "_step", "Step", "training/global_step", "global_step", "trainer/global_step")
EXTRA_NAMES = {"critic/rewards/mean": "reward",          # a fallback when critic/score/mean is absent
               "actor/entropy_loss": "entropy"}         # older verl (May 2025 still) logged the mean entropy so


# ----------------------------------------------------------------------------------- reading
def _verl_names() -> dict:
    from rl_lab.integrations.verl import VERL_TO_RL_LAB_METRICS
    return VERL_TO_RL_LAB_METRICS


def _rename(columns: list[str]) -> dict:
    """Column -> rl_lab name: verl's names translated, W&B's '<run> - ' prefix dropped."""
    verl = _verl_names()
    out = {}
    for col in columns:
        name = col.split(" - ", 1)[1] if " - " in col else col
        out[col] = verl.get(name, name)
    for col, name in list(out.items()):
        if name in EXTRA_NAMES and EXTRA_NAMES[name] not in out.values():
            out[col] = EXTRA_NAMES[name]
    return out


def _frame(rows: list[dict], source: str):
    import pandas as pd

    df = pd.DataFrame(rows)
    df = df.rename(columns=_rename(list(df.columns)))
    df = df.loc[:, ~df.columns.duplicated()]
    step = next((c for c in STEP_COLUMNS if c in df.columns), None)
    df["step"] = pd.to_numeric(df[step], errors="coerce") if step else np.arange(1, len(df) + 1)
    df = df[df["step"].notna()]
    numeric = {c: pd.to_numeric(df[c], errors="coerce") for c in df.columns}
    df = pd.DataFrame(numeric).groupby("step", as_index=False).last().sort_values("step").reset_index(drop=True)
    df.attrs["source"] = source
    return df


def load_run(path: str | Path):
    """A run's per-step metrics under rl_lab's names, from any of the supported inputs (module
    docstring).  Raises ConfigError with what was expected when the input is none of them."""
    p = Path(path)
    if p.is_dir():
        if not (p / "metrics.jsonl").exists():
            raise ConfigError(f"{p} is a folder without metrics.jsonl: pass an rl_lab run folder, or a file "
                              "(verl's file-logger JSONL, its console log, flat JSONL or a W&B CSV export)")
        from rl_lab.utils import read_metrics
        return _frame(read_metrics(p / "metrics.jsonl").to_dict("records"), f"rl_lab run folder {p}")
    if not p.exists():
        raise ConfigError(f"{p}: no such file or folder")
    text = p.read_text(errors="replace")
    if p.suffix.lower() == ".csv":
        rows = list(csv.DictReader(io.StringIO(text)))
        rows = [{k: v for k, v in row.items() if k and not k.endswith(("__MIN", "__MAX"))} for row in rows]
        return _frame(rows, f"CSV {p.name}")
    first = next((line for line in text.splitlines() if line.strip()), "")
    if first.lstrip().startswith("{"):
        try:
            row = json.loads(first)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p}: the first line is not JSON ({e})") from None
        if isinstance(row, dict) and "data" in row and "step" in row:
            return _verl_frame(p)
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    break                              # a torn last line of a live log
        return _frame(rows, f"flat JSONL {p.name}")
    return _verl_frame(p)


def _verl_frame(p: Path):
    from rl_lab.integrations.verl import read_verl_records
    rows = [{"step": step, **data} for step, data in read_verl_records(p)]
    return _frame(rows, f"verl log {p.name}")


# ----------------------------------------------------------------------------------- verl's config
_A, _R, _C = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "algorithm.rollout_correction"


def read_verl_setup(path) -> dict:
    """What the diagnosis needs from a verl run's configuration: Hydra's saved `config.yaml`
    (nested), or a file of `key=value` overrides / flat dotted keys.  Missing keys get verl
    0.9.1's defaults where the rules need one.  Raises ConfigError if nothing readable is found."""
    import yaml

    from rl_lab.integrations.verl import flatten
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config {p}: no such file (pass verl's Hydra config.yaml or an overrides file)")
    text = p.read_text(errors="replace")
    flat: dict = {}
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        loaded = None
    if isinstance(loaded, dict):
        flat = flatten(loaded)
    else:                                           # key=value lines (a command line's overrides)
        for word in text.replace("\\\n", " ").split():
            if "=" in word and not word.startswith("-"):
                key, value = word.split("=", 1)
                flat[key.lstrip("+")] = yaml.safe_load(value) if value else None
    if not any(k.startswith(("actor_rollout_ref.", "algorithm.", "data.")) for k in flat):
        raise ConfigError(f"--config {p}: no verl keys (actor_rollout_ref.*, algorithm.*, data.*) found")

    def get(key, default=None):
        value = flat.get(key, default)
        return default if value is None else value
    batch, mini = get("data.train_batch_size"), get(f"{_A}.ppo_mini_batch_size")
    epochs = get(f"{_A}.ppo_epochs", 1)
    steps = int(batch // mini * epochs) if batch and mini else None
    return {"optimizer_steps_per_batch": steps, "train_batch_size": batch, "ppo_mini_batch_size": mini,
            "ppo_epochs": epochs, "lr": get(f"{_A}.optim.lr"), "rollout_dtype": get(f"{_R}.dtype", "bfloat16"),
            "temperature": float(get(f"{_R}.temperature", 1.0)), "top_p": float(get(f"{_R}.top_p", 1.0)),
            "top_k": int(get(f"{_R}.top_k", -1)), "rollout_is": get(f"{_C}.rollout_is"),
            "rollout_rs": get(f"{_C}.rollout_rs"), "rollout_rs_threshold": get(f"{_C}.rollout_rs_threshold"),
            "bypass_mode": bool(get(f"{_C}.bypass_mode", False)), "source": str(p)}


def setup_findings(setup: dict) -> list:
    """Findings about the configuration itself, each with its evidence (module docstring)."""
    out = []
    k = setup.get("optimizer_steps_per_batch")
    if k and k > 1:
        out.append(Finding(
            "several optimizer steps per batch",
            f"train_batch_size / ppo_mini_batch_size x ppo_epochs = {setup['train_batch_size']} / "
            f"{setup['ppo_mini_batch_size']} x {setup['ppo_epochs']} = {k}: from the second step on, the "
            f"data is up to {k - 1} optimizer step(s) older than the policy",
            "the stability map: a sampler 2-4 steps stale collapsed runs at a learning rate a fresh one "
            "survived, and bypass PPO-clip held (book/ch_when_speed_kills.md)",
            "medium: measured on a 0.3M model on a CPU; the mechanism (stale data) is the same at scale"))
    if setup.get("bypass_mode") and setup.get("rollout_is"):
        out.append(Finding(
            "weights computed, never applied",
            f"bypass_mode=true with rollout_is={setup['rollout_is']!r}",
            "verl 0.9.1: bypass PPO-clip computes the IS weights for its metrics and never applies "
            "them; the clip against the sampler is the correction (book/ch05_rollout_correction.md, "
            "surprise (d))", "high: read from verl's code"))
    tempered = setup.get("temperature", 1.0) != 1.0
    truncated = setup.get("top_p", 1.0) < 1.0 or setup.get("top_k", -1) > 0
    if tempered or truncated:
        out.append(Finding(
            "a tempered or truncated sampler",
            f"temperature={setup['temperature']:g}, top_p={setup['top_p']:g}, top_k={setup['top_k']}",
            "k3 reads low under top-p/top-k by the mass the sampler cuts off (book/ch05, surprise (b)); "
            "a temperature the trainer does not apply to its own log-probs gives ratios far from 1 "
            "from step 1 (check that the actor scores at the same temperature)",
            "high for the estimator's bias; check your trainer for the temperature"))
    rs, th = setup.get("rollout_rs"), setup.get("rollout_rs_threshold")
    if rs and th:
        for option, band in zip(str(rs).split(","), str(th).split(",")):
            if option.strip().endswith("_k1") and "_" in band:
                lo, hi = (float(x) for x in band.split("_"))
                if abs(lo * hi - 1) > 1e-6:
                    out.append(Finding(
                        "a k1 rejection band that is not reciprocal",
                        f"{option.strip()} with threshold {band!r}: verl keeps ratios in "
                        f"[{1 / hi:.3g}, {1 / lo:.3g}], not [{lo:g}, {hi:g}]",
                        "verl 0.9.1's k1 statistic is -log(rho), so its band is mirrored "
                        "(book/ch04_masking_trust_regions.md)", "high: read from verl's code"))
    return out


# ----------------------------------------------------------------------------------- analysis
@dataclass
class Finding:
    rule: str            # which rule fired
    observed: str        # what the run showed, with step numbers
    evidence: str        # where the rule comes from
    confidence: str      # high / medium / low, and why


@dataclass
class Override:
    lines: str           # verl 0.9.1 overrides (key=value ...)
    why: str
    evidence: str


@dataclass
class Diagnosis:
    verdict: str                         # healthy | warning | collapsed
    cause: str | None                    # suspect-bug | mismatch-level | mismatch-led | not-the-mismatch | blind
    steps: int
    source: str
    timeline: dict = field(default_factory=dict)    # event -> step
    levels: dict = field(default_factory=dict)      # monitor -> early level
    findings: list = field(default_factory=list)
    overrides: list = field(default_factory=list)
    missing: list = field(default_factory=list)     # expected columns the input lacks
    setup: dict = field(default_factory=dict)       # what --config read from verl's configuration

    @property
    def exit_code(self) -> int:
        return {"healthy": 0, "collapsed": 1, "warning": 3}[self.verdict]

    def to_json(self) -> dict:
        out = asdict(self)
        out["exit_code"] = self.exit_code
        return out


def _finite(df, column) -> np.ndarray | None:
    if column not in df.columns:
        return None
    values = df[column].to_numpy(dtype=float)
    return values if np.isfinite(values).any() else None


def early_level(values: np.ndarray) -> float:
    head = values[EARLY[0]:EARLY[1]]
    head = head[np.isfinite(head)]
    return float(np.median(head)) if len(head) else float("nan")


def rise_step(values: np.ndarray, steps: np.ndarray, level: float, floor: float = 0.0):
    """First step at which the WINDOW-step trailing mean reaches max(RISE x level, floor), or None."""
    if not np.isfinite(level) or len(values) < WINDOW:
        return None
    smooth = moving_average(np.where(np.isfinite(values), values, np.nan), WINDOW)
    line = max(RISE * level, floor)
    if line <= 0:
        return None
    with np.errstate(invalid="ignore"):
        hit = np.nonzero(smooth >= line)[0]
    return int(steps[hit[0] + WINDOW - 1]) if len(hit) else None


def diagnose(df, setup: dict | None = None) -> Diagnosis:
    """Apply the rules of the module docstring to a run's metrics (a DataFrame with `step`); with
    `setup` (read_verl_setup) also the findings about verl's configuration."""
    if "reward" not in df.columns or _finite(df, "reward") is None:
        raise ConfigError("no reward column: expected rl_lab's `reward`, verl's `critic/score/mean` or "
                          "`critic/rewards/mean`; without a reward there is no collapse to diagnose")
    steps = df["step"].to_numpy()
    missing = [c for c in (K3, "grad_norm", "entropy", "rollout_corr/training_ppl") if _finite(df, c) is None]
    d = Diagnosis(verdict="healthy", cause=None, steps=len(df), source=df.attrs.get("source", ""),
                  missing=missing, setup=dict(setup or {}))
    d.findings += setup_findings(setup or {})
    col = detect_collapse(df["reward"].to_numpy(dtype=float), steps=steps)
    if col["collapsed"]:
        d.verdict = "collapsed"
        d.timeline["reward peak"] = col["peak_step"]
        d.timeline["reward fall"] = col["fall_step"]
        d.findings.append(Finding(
            "collapse", f"the {WINDOW}-step mean reward fell below half its peak ({col['peak']:.3g} at step "
            f"{col['peak_step']}) at step {col['fall_step']} and never recovered",
            "the stability map's criterion (rl_lab.toolkits.collapse)", "high: a fixed criterion on the logged reward"))
    grad = _finite(df, "grad_norm")
    if grad is not None:
        blow = detect_grad_blowup(grad, steps=steps)
        if blow["blowup"]:
            d.timeline["gradient blow-up"] = blow["step"]
            d.findings.append(Finding(
                "gradient blow-up", f"the gradient norm stayed above 10x its early median ({blow['baseline']:.3g}) "
                f"from step {blow['step']}", "the stability map's criterion", "high"))
    for name in MONITORS:
        values = _finite(df, name)
        if values is None:
            continue
        level = early_level(values)
        d.levels[name] = level
        if name != "grad_norm":
            rise = rise_step(values, steps, level, floor=K3_WARN if name == K3 else 0.0)
            if rise is not None:
                d.timeline[f"{name} rises"] = rise
    k3 = _finite(df, K3)
    fall = col["fall_step"]
    if k3 is None:
        d.cause = "blind" if d.verdict == "collapsed" else None
        d.findings.append(Finding(
            "blind", f"no {K3} logged: the mismatch cannot be seen",
            "verl logs rollout_corr/* when algorithm.rollout_correction is set and "
            "actor_rollout_ref.rollout.calculate_log_probs=true", "high"))
    else:
        first = float(k3[np.isfinite(k3)][0])
        level = d.levels[K3]
        rise = d.timeline.get(f"{K3} rises")
        if first >= K3_BUG:
            d.cause = "suspect-bug"
            d.findings.append(Finding(
                "suspect a bug", f"k3 was {first:.3g} per token at the first logged step, when sampler and trainer "
                f"hold the same weights (precision alone gives well under {K3_BUG:g})",
                "the post: bf16 rounding gives k3 of 1e-3 or less on H20s; a larger gap before any update "
                "is a setting, not precision", "medium: an asynchronous first step is stale too"))
        elif level >= K3_WARN:
            d.cause = "mismatch-level"
            d.findings.append(Finding(
                "mismatch level", f"k3's early level was {level:.3g} per token (steps {EARLY[0] + 1}-{EARLY[1]}), "
                f"at or above {K3_WARN:g}",
                "the post: k3 of 1e-2 and more made training infeasible; the book's map: a high k3 from the first "
                "steps marked the setups that collapsed", "medium: the threshold is the post's, at 1.5B-7B"))
        elif rise is not None and (fall is None or rise < fall):
            d.cause = "mismatch-led"
            d.findings.append(Finding(
                "mismatch-led", f"k3 rose to {RISE:g}x its early level ({level:.3g}) and past {K3_WARN:g} at step "
                f"{rise}" + (f", {fall - rise} steps before the fall" if fall is not None else ""),
                "the post: vllm-kl rose before the reward fell; the book's map did not see such a rise",
                "low to medium: a rise is the post's pattern, not reproduced at this book's scale"))
        elif d.verdict == "collapsed":
            d.cause = "not-the-mismatch"
            d.findings.append(Finding(
                "not the mismatch", f"k3 stayed low (early level {level:.3g}, no rise before the fall at step {fall})",
                "the book's map: at lr 1e-3 the fresh sampler collapsed too, with k3 at rounding level",
                "medium: a mismatch k3 cannot see (e.g. in the router of an MoE) is not excluded"))
    if d.verdict == "healthy" and (d.cause is not None or "gradient blow-up" in d.timeline):
        d.verdict = "warning"
    d.overrides = overrides_for(d)
    return d


def overrides_for(d: Diagnosis) -> list[Override]:
    """Ranked verl 0.9.1 overrides for the diagnosed cause, each with its evidence."""
    rc = "algorithm.rollout_correction"
    out = []
    if d.cause in ("mismatch-level", "mismatch-led"):
        out += [
            Override(f"{rc}.bypass_mode=true {rc}.loss_type=ppo_clip",
                     "a trust region around the sampler's own policy; the only correction that held at four stale "
                     "steps on the map. In verl 0.9.1 bypass PPO-clip ignores IS weights, and the new trainer also "
                     "needs actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode",
                     "book map: bypass PPO-clip 0/3 collapses at stale 4, lr 5e-4 (uncorrected 9/9)"),
            Override(f"{rc}.rollout_is=token {rc}.rollout_is_threshold=2.0",
                     "truncated token-level importance weights (token TIS)",
                     "book map: kept the reward at two stale steps over nine seeds; did not prevent the collapse at "
                     "four; verl's guide: for moderate off-policyness"),
            Override("actor_rollout_ref.actor.optim.lr=<half of the current value>",
                     "a smaller step shrinks the noise and the drift of the stale sampler alike",
                     "book map: at lr 2e-4 no run collapsed at any staleness; ch07's SGA lemma"),
        ]
        level = d.levels.get(K3, float("nan"))
        if math.isfinite(level) and level > 0:
            out.append(Override(f"{rc}.rollout_rs=seq_mean_k3 {rc}.rollout_rs_threshold={3 * level:.3g}",
                                "reject sequences whose mean k3 is 3x this run's early level",
                                "book map: Seq-MIS collapsed 3/3 at four stale steps; use as a guard, not a fix"))
        out.append(Override("actor_rollout_ref.rollout.dtype=float16 (and the actor's mixed precision in fp16)",
                            "fp16 on both engines rounds less than bf16 where the values are moderate",
                            "other posts (fp16 against the mismatch); not tested in this book"))
    elif d.cause == "suspect-bug":
        out += [Override("actor_rollout_ref.rollout.temperature=1.0 actor_rollout_ref.rollout.top_p=1.0 "
                         "actor_rollout_ref.rollout.top_k=-1",
                         "the trainer scores with the raw softmax: a sampler temperature, top-p or top-k it does not "
                         "apply makes the ratios wrong from the first step",
                         "verl computes old_log_prob at temperature from the rollout config; check both sides")]
    elif d.cause == "not-the-mismatch":
        out += [Override("actor_rollout_ref.actor.optim.lr=<half of the current value>",
                         "the collapse came without a mismatch: the step size is the first suspect",
                         "book map: at lr 1e-3 every run collapsed, fresh sampler included")]
    elif d.cause == "blind":
        out += [Override(f"{rc}.rollout_is=null {rc}.rollout_rs=null "
                         "actor_rollout_ref.rollout.calculate_log_probs=true",
                         "metrics only: logs rollout_corr/* (k3, log-ppl gap, chi^2) without changing the loss",
                         "verl's rollout-correction guide: start with metrics only")]
    if d.verdict == "collapsed":
        warn = min((s for k, s in d.timeline.items() if k != "reward peak" and k != "reward fall"), default=None)
        at = warn if warn is not None else d.timeline.get("reward fall")
        out.append(Override(f"trainer.resume_mode=resume_path trainer.resume_from_path=<checkpoints>/global_step_<N> "
                            f"(the last checkpoint before step {at})",
                            "restart from before the first sign, with the changes above",
                            "common practice; the steps are this run's"))
    return out


# ----------------------------------------------------------------------------------- output
def report(d: Diagnosis) -> str:
    """One screen: verdict, timeline, findings with their evidence, overrides."""
    lines = [f"rl-lab diagnose: {d.source} ({d.steps} steps)",
             f"verdict: {d.verdict.upper()}" + (f"  cause: {d.cause}" if d.cause else "")]
    if d.timeline:
        lines.append("timeline:")
        for event, step in sorted(d.timeline.items(), key=lambda kv: kv[1]):
            lines.append(f"  step {step:>6}  {event}")
    if d.levels:
        shown = ", ".join(f"{MONITORS[k].split(' (')[0]} {v:.3g}" for k, v in d.levels.items() if math.isfinite(v))
        lines.append(f"early levels (steps {EARLY[0] + 1}-{EARLY[1]}): {shown}")
    for f in d.findings:
        lines += [f"- {f.rule}: {f.observed}", f"    evidence: {f.evidence}", f"    confidence: {f.confidence}"]
    if d.overrides:
        lines.append("try (verl 0.9.1), in this order:")
        for i, o in enumerate(d.overrides, 1):
            lines += [f"  {i}. {o.lines}", f"     why: {o.why}", f"     evidence: {o.evidence}"]
    if d.missing:
        lines.append(f"not in the input: {', '.join(d.missing)} (their panels and rules are skipped)")
    return "\n".join(lines)


def plot(df, d: Diagnosis, path: str | Path) -> Path:
    """Write `figure(df, d)` to a PNG."""
    import matplotlib.pyplot as plt

    fig = figure(df, d)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def figure(df, d: Diagnosis):
    """Reward, k3 (log scale) and gradient norm (log scale), with the fall and the rises marked."""
    import matplotlib.pyplot as plt

    panels = [("reward", "reward", False), (K3, "k3 per token", True), ("grad_norm", "gradient norm", True)]
    panels = [p for p in panels if _finite(df, p[0]) is not None]
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.1 * len(panels)), sharex=True, squeeze=False)
    for ax, (name, label, log) in zip(axes[:, 0], panels):
        values = df[name].to_numpy(dtype=float)
        ax.plot(df["step"], values, lw=0.8, alpha=0.5)
        if len(values) >= WINDOW:
            ax.plot(df["step"].to_numpy()[WINDOW - 1:], moving_average(values, WINDOW), lw=1.5)
        if log:
            ax.set_yscale("log")
        if name == K3:
            ax.axhline(K3_WARN, color="C3", ls=":", lw=0.8, label=f"K3_WARN = {K3_WARN:g}")
            ax.legend(fontsize=7, loc="upper left")
        ax.set_ylabel(label)
        for event, step in d.timeline.items():     # the events the verdict rests on, not every monitor's rise
            if event in ("reward fall", "gradient blow-up", f"{K3} rises"):
                ax.axvline(step, color="k" if "fall" in event else "C3", ls="--" if "fall" in event else ":", lw=0.8)
    axes[0, 0].set_title(f"{d.verdict}" + (f" ({d.cause})" if d.cause else "") + f": {d.source}", fontsize=9)
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    return fig


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("run", help="an rl_lab run folder, verl's file-logger JSONL or console log, flat JSONL, or a "
                                "W&B CSV export")
    ap.add_argument("--json", action="store_true", help="print the diagnosis as JSON instead of the report")
    ap.add_argument("--out", help="also write the diagnosis as JSON to this file (e.g. diagnosis.json)")
    ap.add_argument("--plot", help="write the annotated figure to this PNG")
    ap.add_argument("--config", help="verl's Hydra config (config.yaml) or an overrides file: adds findings "
                                      "about the setup (optimizer steps per batch, bypass with IS weights, "
                                      "temperature/top-p, a mirrored k1 band)")
    ap.add_argument("--watch", nargs="?", const=30.0, type=float, metavar="SECONDS",
                    help="follow a live run: re-read it every SECONDS (default 30), print a line whenever the "
                         "verdict changes, stop with the full report at a collapse")
    ap.add_argument("--watch-polls", type=int, default=None, help=argparse.SUPPRESS)   # tests: stop after N reads


def _run_size(path: Path) -> int:
    """Bytes of what `load_run` reads: the file, or a run folder's metrics.jsonl (-1 if absent)."""
    p = path / "metrics.jsonl" if path.is_dir() else path
    return p.stat().st_size if p.exists() else -1


def watch(path, interval: float = 30.0, polls: int | None = None, out=None, sleep=None,
          setup: dict | None = None) -> int:
    """Follow a run that is still being written: re-diagnose whenever it has grown, print one line
    when the verdict or its cause changes, and return 1 with the full report at a collapse.  Returns
    the last verdict's exit code on Ctrl-C or after `polls` reads (2 if it was never readable)."""
    import time
    out, sleep, path = out or sys.stdout, sleep or time.sleep, Path(path)
    if not interval > 0:
        raise ConfigError(f"--watch takes a positive number of seconds, got {interval}")
    last_size, last_key, last_error, code, n = None, None, None, 2, 0
    try:
        while True:
            size = _run_size(path)
            if size != last_size:
                last_size = size
                try:
                    d = diagnose(load_run(path), setup)
                except ConfigError as e:       # not written yet, or too short: say it once and wait
                    if str(e) != last_error:
                        print(f"[watch] waiting: {e}", file=out, flush=True)
                        last_error = str(e)
                else:
                    last_error, code = None, d.exit_code
                    if (d.verdict, d.cause) != last_key:
                        last_key = (d.verdict, d.cause)
                        first = ", ".join(f"{event} at step {step}" for event, step in d.timeline.items())
                        print(f"[watch] step {d.steps}: {d.verdict.upper()}" + (f" ({d.cause})" if d.cause else "")
                              + (f"; {first}" if first else ""), file=out, flush=True)
                    if d.verdict == "collapsed":
                        print(report(d), file=out, flush=True)
                        return 1
            n += 1
            if polls is not None and n >= polls:
                return code
            sleep(interval)
    except KeyboardInterrupt:
        return code


def cmd_diagnose(args) -> int:
    if args.watch is not None:
        try:
            setup = read_verl_setup(args.config) if args.config else None
            return watch(args.run, args.watch, polls=args.watch_polls, setup=setup)
        except ConfigError as e:
            print(f"rl-lab diagnose: {e}", file=sys.stderr)
            return 2
    try:
        setup = read_verl_setup(args.config) if args.config else None
        df = load_run(args.run)
        d = diagnose(df, setup)
    except ConfigError as e:
        print(f"rl-lab diagnose: {e}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(json.dumps(d.to_json(), indent=2, default=str) + "\n")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        plot(df, d, args.plot)
    print(json.dumps(d.to_json(), indent=2, default=str) if args.json else report(d))
    return d.exit_code
