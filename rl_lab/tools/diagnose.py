"""`rl-lab diagnose RUN`: read a finished (or running) RL run's metrics and say what happened, how
sure the book is, and what to change, in the run's own framework (TRL 1.16 arguments, verl 0.9.1
overrides or RLConfig fields).

    rl-lab diagnose trl_output/                 # a TRL output folder (its newest trainer_state.json)
    rl-lab diagnose runs/my_run                 # an rl_lab run folder (metrics.jsonl, config.yaml)
    rl-lab diagnose verl_metrics.jsonl          # verl's file logger, or its console log
    rl-lab diagnose wandb_export.csv --json     # a W&B CSV export or flat JSONL; JSON on stdout
    rl-lab diagnose console.log --logging-steps 10   # TRL's printed log dicts
    rl-lab diagnose RUN --map reward=my/reward  # a column the tool does not know
    rl-lab diagnose RUN --plot diagnosis.png    # the annotated figure
    rl-lab diagnose RUN --watch                 # follow a live run: a line whenever the verdict changes
    rl-lab diagnose RUN --config config.yaml    # the run's settings: verl's or rl_lab's config.yaml,
                                                # TRL's training_args.bin (never unpickled)

Exit codes (EXIT_CODES): 0 healthy, 1 collapsed, 3 a warning (not collapsed, but a monitor says the
setup is at risk), 4 too short to judge (the run spans fewer steps than the WINDOW-step window),
2 unreadable input or options, 70 an internal error of the tool (a bug: please report it).  With
`--watch` the command re-reads the run every few seconds, prints a line when the verdict or its
cause changes, and exits with the full report at a collapse (1); on Ctrl-C (or after
`--watch-polls`) it exits with the last verdict's code.

The rules, fixed before the tool was evaluated on any run (research/diagnose/NOTES.md); every
threshold comes from a source, not from fitting.  Every window is in *steps* (the run's own step
numbers): with TRL's logging_steps=10 a 20-step window is two records.

* **Collapse** and **gradient blow-up**: `rl_lab.toolkits.collapse` (the stability map's criteria:
  the 20-step moving average of the reward falls below half its running peak and never climbs back
  to 0.8 of it; the gradient norm stays above 10x its early median for 5 steps).  A run spanning
  fewer than WINDOW steps is **too short to judge**.
* **The mismatch KL** `rollout_corr/k3_kl` (the post's `vllm-kl`), per token, or a library's
  equivalent (rl_lab.tools.metric_names: a per-token KL is read as k3; a mean |log-ratio|, e.g.
  TRL's `sampling/sampling_logp_difference/mean`, is converted by k3 ~ (pi/4) E|d|^2):
  - its *first* logged value, before any update, at or above K3_BUG: **suspect a bug**;
  - its *early level*, the median over steps EARLY after the first: at or above K3_WARN (the post:
    1e-2 and more made training infeasible on A100s): **mismatch level**;
  - a *rise*: the first step at which its WINDOW-step trailing mean reaches max(RISE x early level,
    K3_WARN). Before the fall: **mismatch-led**.
* **On-policy**: a run with no separate sampler (TRL without vLLM: `use_vllm=False` in its
  arguments, or, when they cannot be read, no `sampling/*` metrics) has no mismatch to measure.
* **Learning rate**: a collapse with the mismatch excluded (low k3, or on-policy) or not measured,
  where the logged learning rate rose in the WINDOW steps before the fall, or reached its peak (the
  end of a warmup) at most LR_WARMUP_GAP steps before it: **learning-rate**.  Else a collapse whose
  k3 was low and did not rise: **not the mismatch**; no mismatch metric at all: **blind** (the
  evidence is missing, which is not a cause: the report says so apart from the verdict).
* **Where the mismatch comes from** (rl_lab.tools.diagnose_signatures, issue 49): a weight-sync
  fault (k3 jumps two orders of magnitude above its running level and falls back), truncated
  sampling (rho's mean below 1 by a kept-mass deficit while k3 reads low), a stale sampler (k3 ~0
  at the first step, high after it), precision (a steady 16-bit rounding level) or reduction order
  (float32 rounding): each finding names the probable source, its fix in rl_lab, verl and TRL, and
  how sure; they do not change the verdict.  Written on seeds 0-3 of research/mismatch_sources'
  stage 1 and evaluated on its seeds 4-8 (its NOTES.md).
* A run that did not collapse gets a **warning** (exit 3) for a suspected bug, a mismatch level, a
  rise, or a gradient blow-up; else it is **healthy**.

How far this transfers: the thresholds are the post's, measured on 1.5B–7B models in bf16; the
map that the chapters report (book/ch_when_speed_kills.md) is a 0.3M model on a CPU.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from rl_lab.errors import ConfigError
from rl_lab.toolkits.collapse import (
    GRAD_EARLY,
    GRAD_PATIENCE,
    WINDOW,
    detect_collapse,
    detect_grad_blowup,
    moving_average,
)
from rl_lab.tools.diagnose_advice import advise
from rl_lab.tools.diagnose_findings import (
    EARLY,
    EXIT_CODES,
    K3_BUG,
    K3_WARN,
    LR_WARMUP_GAP,
    MONITORS,
    RISE,
    Diagnosis,
    Finding,
    Override,
    mismatch_series,
    records_for,
    spacing,
)
from rl_lab.tools.diagnose_output import figure, plot, report
from rl_lab.tools.diagnose_readers import finite as _finite
from rl_lab.tools.diagnose_readers import load_run, parse_map
from rl_lab.tools.diagnose_setup import read_run_setup, read_setup, read_verl_setup, setup_findings
from rl_lab.tools.diagnose_signatures import signatures
from rl_lab.tools.metric_names import K3

__all__ = ["diagnose", "load_run", "report", "figure", "plot", "watch", "read_verl_setup", "read_setup",
           "setup_findings", "K3", "K3_WARN", "K3_BUG", "EXIT_CODES", "Diagnosis", "Finding",
           "Override"]

# ----------------------------------------------------------------------------------- analysis
def early_level(values: np.ndarray, steps: np.ndarray | None = None) -> float:
    """Median of the values logged EARLY steps after the first (positions, without `steps`)."""
    if steps is None:
        head = values[EARLY[0]:EARLY[1]]
    else:
        offset = steps - steps[0]
        head = values[(offset >= EARLY[0]) & (offset < EARLY[1])]
    head = head[np.isfinite(head)]
    return float(np.median(head)) if len(head) else float("nan")


def rise_step(values: np.ndarray, steps: np.ndarray, level: float, floor: float = 0.0, window: int = WINDOW):
    """First step at which the `window`-record trailing mean reaches max(RISE x level, floor), or None."""
    if not np.isfinite(level) or len(values) < window:
        return None
    smooth = moving_average(np.where(np.isfinite(values), values, np.nan), window)
    line = max(RISE * level, floor)
    if line <= 0:
        return None
    with np.errstate(invalid="ignore"):
        hit = np.nonzero(smooth >= line)[0]
    return int(steps[hit[0] + window - 1]) if len(hit) else None


def _on_policy(df, setup: dict) -> str | None:
    """Why the run has no separate sampler, or None when it may have one."""
    if setup.get("separate_sampler") is False:
        if setup.get("framework") == "trl":
            return "on-policy: use_vllm=False in the run's arguments, so TRL samples with the trainer itself"
        return "on-policy: the run's settings have no separate or stale sampler"
    if (df.attrs.get("framework") == "trl" and setup.get("separate_sampler") is None
            and not any(str(c).startswith("sampling/") for c in df.attrs.get("columns_found", []))):
        return ("on-policy (assumed): no sampling/* metrics, which TRL logs whenever vLLM samples with its "
                "default correction; TRL without vLLM samples with the trainer itself")
    return None


def _framework(df, setup: dict) -> str:
    if setup.get("framework"):
        return setup["framework"]
    if df.attrs.get("framework"):
        return df.attrs["framework"]
    found = [str(c).split(" - ", 1)[-1] for c in df.attrs.get("columns_found", [])]
    if any(c.startswith(("critic/", "actor/", "training/")) for c in found):
        return "verl"
    if any(c.removeprefix("train/") in ("frac_reward_zero_std", "reward_std", "clip_ratio/region_mean")
           or c.removeprefix("train/").startswith("sampling/") for c in found):
        return "trl"
    return "unknown"


def learning_rate_cause(df, fall) -> str | None:
    """What the logged learning rate did before the fall, if it points at the step size."""
    lr = _finite(df, "learning_rate")
    if lr is None or fall is None:
        return None
    steps = df["step"].to_numpy()
    ok = np.isfinite(lr)
    lr, steps = lr[ok], steps[ok]
    at = lr[steps <= fall]
    before = lr[steps <= fall - WINDOW]
    if len(at) and len(before) and at[-1] > 1.01 * before[-1]:
        return (f"the learning rate rose from {before[-1]:.3g} (step {int(steps[steps <= fall - WINDOW][-1])}) "
                f"to {at[-1]:.3g} in the {WINDOW} steps before the fall at step {fall}")
    top = float(lr.max())
    peak = int(steps[np.argmax(lr >= top)])
    if lr[0] < 0.9 * top and 0 <= fall - peak <= LR_WARMUP_GAP:
        return (f"a warmup ended at step {peak} (learning rate {lr[0]:.3g} -> {top:.3g}), {fall - peak} steps "
                f"before the fall at step {fall}")
    return None


def diagnose(df, setup: dict | None = None) -> Diagnosis:
    """Apply the rules of the module docstring to a run's metrics (a DataFrame with `step`); with
    `setup` (diagnose_setup.read_setup) also the findings about the run's configuration."""
    setup = dict(setup or {})
    if "reward" not in df.columns or _finite(df, "reward") is None:
        found = df.attrs.get("columns_found") or [c for c in df.columns if c != "step"]
        raise ConfigError("no reward column: expected TRL's `reward`, verl's `critic/score/mean` or "
                          f"`critic/rewards/mean`, rl_lab's `reward` (with or without `train/`); found: "
                          f"{', '.join(map(str, found[:60])) or 'none'}. Name yours with --map reward=COLUMN")
    steps = df["step"].to_numpy()
    gap = spacing(steps)
    window = records_for(WINDOW, gap)
    d = Diagnosis(verdict="healthy", cause=None, steps=int(steps[-1]), records=len(df),
                  source=df.attrs.get("source", ""), framework=_framework(df, setup),
                  warnings=list(df.attrs.get("warnings", [])), setup=setup)
    if gap > 1:
        d.warnings.append(f"one record every {gap} steps: the {WINDOW}-step window is {window} records")
    d.missing = [c for c in (K3, "grad_norm", "entropy", "learning_rate") if _finite(df, c) is None
                 and not (c == K3 and (mismatch_series(df) is not None or _on_policy(df, setup)))]
    if int(steps[-1]) - int(steps[0]) + gap < WINDOW or len(df) < window:
        d.verdict = "too-short"
        d.findings.append(Finding(
            "too short to judge", f"the run spans steps {int(steps[0])}-{int(steps[-1])} ({len(df)} records), "
            f"less than the {WINDOW}-step window of the collapse criterion", "rl_lab.toolkits.collapse",
            "high: nothing is judged yet; run it again later (or use --watch)"))
        found = mismatch_series(df)              # a wrong first step needs no window
        if found is not None and np.isfinite(found[0]).any() and found[0][np.isfinite(found[0])][0] >= K3_BUG:
            _k3_rules(d, found, steps, window, None)
            d.verdict = "warning"
        d.findings += setup_findings(setup)
        d.overrides, d.already_set = advise(d, df)
        return d
    d.findings += setup_findings(setup)
    _collapse_rules(df, d, steps, window, gap)
    _mismatch_rules(df, d, steps, window, setup)
    if d.verdict == "healthy" and (d.cause not in (None, "blind") or "gradient blow-up" in d.timeline):
        d.verdict = "warning"
    if d.verdict == "healthy":
        d.cause = None
    d.overrides, d.already_set = advise(d, df)
    return d


def _collapse_rules(df, d: Diagnosis, steps, window: int, gap: int) -> None:
    col = detect_collapse(df["reward"].to_numpy(dtype=float), window=window, steps=steps)
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
        offset = steps - steps[0]
        early = (0, max(1, int(np.sum(offset < GRAD_EARLY[1]))))
        blow = detect_grad_blowup(grad, early=early, patience=records_for(GRAD_PATIENCE, gap), steps=steps)
        if blow["blowup"]:
            d.timeline["gradient blow-up"] = blow["step"]
            d.findings.append(Finding(
                "gradient blow-up", f"the gradient norm stayed above 10x its early median ({blow['baseline']:.3g}) "
                f"from step {blow['step']}", "the stability map's criterion", "high"))


def _mismatch_rules(df, d: Diagnosis, steps, window: int, setup: dict) -> None:
    for name in MONITORS:
        values = _finite(df, name)
        if values is None:
            continue
        d.levels[name] = early_level(values, steps)
        if name != "grad_norm":
            rise = rise_step(values, steps, d.levels[name], floor=K3_WARN if name == K3 else 0.0, window=window)
            if rise is not None:
                d.timeline[f"{name} rises"] = rise
    fall = d.timeline.get("reward fall")
    lr_why = learning_rate_cause(df, fall) if d.verdict == "collapsed" else None
    found = mismatch_series(df)
    on_policy = _on_policy(df, setup)
    if found is None:
        d.mismatch_evidence = on_policy or "not logged: the mismatch cannot be seen"
        if d.verdict == "collapsed":
            d.cause = "learning-rate" if lr_why else ("not-the-mismatch" if on_policy else "blind")
        if on_policy:
            d.findings.append(Finding("on-policy", on_policy.split(": ", 1)[1], "TRL 1.16 GRPOTrainer: without vLLM the "
                                      "completions come from the trainer's own model", "high"))
        else:
            d.findings.append(Finding(
                "blind", "no k3 or equivalent logged (rl_lab.tools.metric_names lists the names read)",
                "verl logs rollout_corr/* with algorithm.rollout_correction and calculate_log_probs=true; TRL "
                "logs sampling/* with use_vllm and vllm_importance_sampling_correction", "high"))
    else:
        _k3_rules(d, found, steps, window, fall)
        for sig in signatures(df, found, steps):
            d.findings.append(sig.finding)
            d.sources.append({"source": sig.source, "fix": sig.fix})
        if d.verdict == "collapsed" and d.cause == "not-the-mismatch" and lr_why:
            d.cause = "learning-rate"
    if lr_why:
        d.findings.append(Finding(
            "learning rate", lr_why, "the book's map: at lr 1e-3 even the fresh sampler collapsed; chapter 7 "
            "(book/ch07_lr_scheduling.md): the step size sets how far one update moves the policy",
            "medium: a rule on the logged schedule; it does not exclude a bad batch at the same step"))


def _k3_rules(d: Diagnosis, found, steps, window: int, fall) -> None:
    k3, how = found
    d.mismatch_evidence = f"measured: {how}"
    first = float(k3[np.isfinite(k3)][0])
    level = early_level(k3, steps)
    d.levels.setdefault(K3, level)
    rise = rise_step(k3, steps, level, floor=K3_WARN, window=window)
    if rise is not None:
        d.timeline[f"{K3} rises"] = rise
    if first >= K3_BUG:
        d.cause = "suspect-bug"
        d.findings.append(Finding(
            "suspect a bug", f"k3 was {first:.3g} per token at the first logged step, when sampler and trainer "
            f"hold the same weights (precision alone gives well under {K3_BUG:g}) [{how}]",
            "the post: bf16 rounding gives k3 of 1e-3 or less on H20s; a larger gap before any update "
            "is a setting, not precision", "medium: an asynchronous first step is stale too"))
    elif level >= K3_WARN:
        d.cause = "mismatch-level"
        d.findings.append(Finding(
            "mismatch level", f"k3's early level was {level:.3g} per token (steps {EARLY[0]}-{EARLY[1] - 1} after "
            f"the first), at or above {K3_WARN:g} [{how}]",
            "the post: k3 of 1e-2 and more made training infeasible; the book's map: a high k3 from the first "
            "steps marked the setups that collapsed", "medium: the threshold is the post's, at 1.5B-7B"))
    elif rise is not None and (fall is None or rise < fall):
        d.cause = "mismatch-led"
        d.findings.append(Finding(
            "mismatch-led", f"k3 rose to {RISE:g}x its early level ({level:.3g}) and past {K3_WARN:g} at step "
            f"{rise}" + (f", {fall - rise} steps before the fall" if fall is not None else "") + f" [{how}]",
            "the post: vllm-kl rose before the reward fell; the book's map did not see such a rise",
            "low to medium: a rise is the post's pattern, not reproduced at this book's scale"))
    elif d.verdict == "collapsed":
        d.cause = "not-the-mismatch"
        d.findings.append(Finding(
            "not the mismatch", f"k3 stayed low (early level {level:.3g}, no rise before the fall at step {fall})",
            "the book's map: at lr 1e-3 the fresh sampler collapsed too, with k3 at rounding level",
            "medium: a mismatch k3 cannot see (e.g. in the router of an MoE) is not excluded"))


# ----------------------------------------------------------------------------------- command line
EPILOG = ("exit codes: 0 healthy, 1 collapsed, 2 unreadable input or options, 3 warning (not collapsed, a "
          "monitor says the setup is at risk), 4 too short to judge (fewer steps than the 20-step window; "
          "also under --watch early in a run), 70 internal error of the tool (a bug; never 1)")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.epilog = EPILOG
    ap.add_argument("run", help="a TRL output folder or trainer_state.json, an rl_lab run folder, verl's "
                                "file-logger JSONL or console log, flat JSONL, a W&B CSV export, TRL's console "
                                "output (printed log dicts); .gz files are read too")
    ap.add_argument("--json", action="store_true", help="print the diagnosis as JSON instead of the report")
    ap.add_argument("--out", help="also write the diagnosis as JSON to this file (e.g. diagnosis.json)")
    ap.add_argument("--plot", help="write the annotated figure to this PNG")
    ap.add_argument("--config", help="the run's settings: verl's Hydra config.yaml or an overrides file, rl_lab's "
                                     "config.yaml, or TRL's training_args.bin (read without unpickling). A TRL "
                                     "or rl_lab run folder's own settings are read without it")
    ap.add_argument("--map", action="append", metavar="QUANTITY=COLUMN",
                    help="read COLUMN as QUANTITY (reward, learning_rate, grad_norm, entropy, "
                         "rollout_corr/k3_kl, ...); repeatable")
    ap.add_argument("--logging-steps", type=int, help="steps between records, for TRL's console dicts (which "
                                                      "carry no step)")
    ap.add_argument("--watch", nargs="?", const=30.0, type=float, metavar="SECONDS",
                    help="follow a live run: re-read it every SECONDS (default 30), print a line whenever the "
                         "verdict changes, stop with the full report at a collapse")
    ap.add_argument("--watch-polls", type=int, default=None, help=argparse.SUPPRESS)   # tests: stop after N reads


def _run_size(path: Path) -> int:
    """Bytes of what `load_run` reads (-1 if absent): a file, or a run folder's newest record file."""
    from rl_lab.tools.diagnose_readers import newest_trainer_state
    if path.is_dir():
        state = newest_trainer_state(path)
        path = path / "metrics.jsonl" if (path / "metrics.jsonl").exists() or state is None else state
    return path.stat().st_size if path.exists() else -1


def _load_and_diagnose(path, setup, mapping=None, logging_steps=None):
    df = load_run(path, mapping, logging_steps)
    return df, diagnose(df, setup if setup is not None else read_run_setup(df))


def watch(path, interval: float = 30.0, polls: int | None = None, out=None, sleep=None,
          setup: dict | None = None, mapping: dict | None = None, logging_steps: int | None = None) -> int:
    """Follow a run that is still being written: re-diagnose whenever it has grown, print one line
    when the verdict or its cause changes, and return 1 with the full report at a collapse.  Returns
    the last verdict's exit code on Ctrl-C or after `polls` reads (2 if it was never readable; 4
    while it is shorter than the window)."""
    import time
    out, sleep, path = out or sys.stdout, sleep or time.sleep, Path(path)
    if not interval > 0:
        raise ConfigError(f"--watch takes a positive number of seconds, got {interval}")
    last_size, last_key, last_error, code, n = None, None, None, EXIT_CODES["unreadable"], 0
    try:
        while True:
            size = _run_size(path)
            if size != last_size:
                last_size = size
                try:
                    _, d = _load_and_diagnose(path, setup, mapping, logging_steps)
                except ConfigError as e:       # not written yet: say it once and wait
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
                        return EXIT_CODES["collapsed"]
            n += 1
            if polls is not None and n >= polls:
                return code
            sleep(interval)
    except KeyboardInterrupt:
        return code


def cmd_diagnose(args) -> int:
    """The command: a verdict's exit code, 2 for unreadable input, 70 (never 1) for a bug of the tool."""
    try:
        return _cmd_diagnose(args)
    except ConfigError as e:
        print(f"rl-lab diagnose: {e}", file=sys.stderr)
        return EXIT_CODES["unreadable"]
    except Exception:                                  # a bug: never a verdict's code
        import traceback
        traceback.print_exc()
        print("rl-lab diagnose: internal error (exit 70); the traceback above is a bug of the tool, not a "
              "verdict about the run", file=sys.stderr)
        return EXIT_CODES["internal error"]


def _cmd_diagnose(args) -> int:
    mapping = parse_map(getattr(args, "map", None))
    logging_steps = getattr(args, "logging_steps", None)
    setup = read_setup(args.config) if args.config else None
    if args.watch is not None:
        return watch(args.run, args.watch, polls=args.watch_polls, setup=setup, mapping=mapping,
                     logging_steps=logging_steps)
    df, d = _load_and_diagnose(args.run, setup, mapping, logging_steps)
    if args.out:
        Path(args.out).write_text(json.dumps(d.to_json(), indent=2, default=str) + "\n")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        plot(df, d, args.plot)
    print(json.dumps(d.to_json(), indent=2, default=str) if args.json else report(d))
    return d.exit_code
