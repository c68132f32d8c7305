"""Sweeps: a YAML grid of RLConfig fields x seeds, one row per run in <out>/results.csv.

    base: {task: addition, preset: smoke, max_steps: 200}
    grid: {learning_rate: [5e-5, 3e-4], sampler_dtype: [float32, bfloat16], rollout_correction.rollout_is: [null, token]}
    seeds: [0, 1, 2]
    out: runs/map1            # results.csv, sweep.yaml and one folder per run (<out>/<run_id>/)
    metrics: {}               # optional, see METRIC_OPTIONS

`rl-lab sweep grid.yaml [--workers N] [--dry-run]` or `run_sweep(spec, workers=N)` from a lab.

* Every cell x seed is a run: config = get_preset(base.preset, **base, **cell, seed=seed).  Its
  run id is a short hash of that whole config (without output_dir, progress_bar, save_steps), so
  the same run keeps its id and folder across invocations; `name` spells out the cell.
* Every config is built and validated before anything runs; a ConfigError names the cell.
* Each run trains with rl_lab's Trainer in <out>/<run_id>/ (metrics.jsonl, config.yaml,
  checkpoints every `save_steps`, default max_steps // 10), and when it finishes the parent
  process appends ONE row to results.csv (summary_row: reward stats, the collapse flags of
  rl_lab.toolkits.collapse, the mismatch monitors' means, wall seconds).
* Resumable: a run whose id is in results.csv is skipped; a run folder with a checkpoint is
  resumed from it (Trainer.resume: bit-identical to an uninterrupted run); a folder without
  one is started afresh.  A killed sweep loses only its in-flight runs' steps since their last
  checkpoint.  A row torn by a kill is dropped on the next read.
* `workers=N` runs N spawned processes, each with torch.set_num_threads(cpu_count // N)
  (or `threads`); only the parent writes results.csv.

Columns of results.csv (summary_row; "last"/"first" = the last/first `fraction` = 20% of steps,
steps are the trainer's 1-based step numbers, empty = not applicable):
  run_id, name, <one column per grid field>, seed, steps
  reward_first, reward_last          mean reward (a NaN step counts as 0, as in rl_lab.toolkits.collapse)
  reward_peak, reward_peak_step      peak of the `window`-step moving average (window cut to the run)
  eval_reward                        last greedy held-out eval/reward (eval_steps > 0 or final_eval)
  collapse_evaluated, collapsed, collapse_step, collapse_peak, collapse_peak_step, collapse_dips
                                     rl_lab.toolkits.collapse.detect_collapse
  grad_blowup, grad_blowup_step, grad_norm_baseline    rl_lab.toolkits.collapse.detect_grad_blowup
  <monitor>_mean, <monitor>_last     for k3_kl, log_ppl_abs_diff, logp_diff_max, is_ratio_max,
                                     chi2_token, tokens_differ, grad_norm, entropy, mean_length
                                     (MONITORS; NaN if not logged)
  warn_<monitor>_step, warn_<monitor>_lead   with metrics.warn: first crossing, fall - crossing
  skipped_steps, masked_samples      the trainer's fault counters, summed
  train_s                            sum of the logged step times (survives a resume)
  resumed_from, wall_s               the checkpoint step this invocation resumed at; its seconds

Chapter "When speed kills stability" (book/ch_when_speed_kills.md) and research/stability_map/ use it.
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import itertools
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rl_lab.config import RLConfig
from rl_lab.errors import ConfigError
from rl_lab.presets import get_preset
from rl_lab.toolkits import collapse
from rl_lab.utils import atomic_write_text

SPEC_KEYS = ("base", "grid", "seeds", "out", "metrics")
NOT_IN_ID = ("output_dir", "progress_bar", "save_steps")
"""RLConfig fields that do not change what a run computes, left out of its id."""
RESULTS = "results.csv"

MONITORS = {
    "k3_kl": "rollout_corr/k3_kl",
    "log_ppl_abs_diff": "rollout_corr/log_ppl_abs_diff",
    "logp_diff_max": "sampling/sampling_logp_difference/max",
    "is_ratio_max": "sampling/importance_sampling_ratio/max",
    "chi2_token": "rollout_corr/chi2_token",
    "tokens_differ": "rollout_corr/tokens_differ",
    "grad_norm": "grad_norm",
    "entropy": "entropy",
    "mean_length": "completions/mean_length",
}
"""Default monitors summarised per run: column prefix -> the trainer's metric name."""

METRIC_OPTIONS: dict[str, Any] = dict(
    window=collapse.WINDOW, drop=collapse.DROP, recover=collapse.RECOVER,
    grad_early=list(collapse.GRAD_EARLY), grad_factor=collapse.GRAD_FACTOR,
    grad_patience=collapse.GRAD_PATIENCE,
    fraction=0.2,        # reward_first / reward_last / <monitor>_last average this share of the steps
    monitors=None,       # None: MONITORS; a list of metric names, or a mapping column -> metric name
    warn={},             # column -> threshold: the step a monitor first reaches it, and the lead time
    final_eval=False,    # True: a greedy held-out evaluation after training (eval_reward)
)
"""The `metrics:` options of a sweep spec and their defaults (the collapse criteria by default)."""


class SweepError(RuntimeError):
    """One or more runs of a sweep raised; the others' rows were written."""


@dataclass
class Run:
    run_id: str
    name: str
    cell: dict
    seed: int
    config: RLConfig


@dataclass
class Sweep:
    out: Path
    grid_keys: list
    runs: list
    options: dict
    spec: dict

    @property
    def results_path(self) -> Path:
        return self.out / RESULTS


# ----------------------------------------------------------------------------- the plan
def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def _field(config: RLConfig, key: str):
    """A grid axis's value in a built config: a field, or a nested config's knob ("empg.k"); a
    nested config as a mapping."""
    value = config
    for part in key.split("."):
        value = getattr(value, part) if value is not None else None
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


def run_id(config: RLConfig) -> str:
    """A short, stable hash of everything that decides what the run computes."""
    d = {k: v for k, v in config.to_dict().items() if k not in NOT_IN_ID}
    return hashlib.sha1(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:10]


def load_spec(spec) -> dict:
    """A spec mapping, from a dict or a YAML file (checked for unknown keys)."""
    if isinstance(spec, (str, Path)):
        path = Path(spec)
        if not path.exists():
            raise ConfigError(f"sweep spec {str(path)!r} does not exist")
        try:
            spec = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            raise ConfigError(f"sweep spec {str(path)!r} is not valid YAML: {e}") from None
    if not isinstance(spec, dict):
        raise ConfigError(f"a sweep spec is a mapping with keys {list(SPEC_KEYS)}, got {type(spec).__name__}")
    unknown = set(spec) - set(SPEC_KEYS)
    if unknown:
        raise ConfigError(f"sweep spec has unknown key(s) {sorted(unknown)}; keys are {list(SPEC_KEYS)}")
    return dict(spec)


def _options(metrics) -> dict:
    metrics = metrics or {}
    if not isinstance(metrics, dict):
        raise ConfigError(f"sweep metrics: must be a mapping of options {sorted(METRIC_OPTIONS)}")
    unknown = set(metrics) - set(METRIC_OPTIONS)
    if unknown:
        raise ConfigError(f"sweep metrics: unknown option(s) {sorted(unknown)}; options are {sorted(METRIC_OPTIONS)}")
    opts = {**METRIC_OPTIONS, **metrics}
    mon = opts["monitors"]
    if mon is None:
        mon = dict(MONITORS)
    elif isinstance(mon, (list, tuple)):
        mon = {m.replace("/", "_"): m for m in mon}
    elif not isinstance(mon, dict):
        raise ConfigError("sweep metrics.monitors: a list of metric names or a mapping column -> metric name")
    opts["monitors"] = mon
    if not isinstance(opts["warn"], dict) or set(opts["warn"]) - set(mon):
        raise ConfigError(f"sweep metrics.warn: a mapping monitor -> threshold, monitors being {sorted(mon)}")
    if not 0 < float(opts["fraction"]) <= 1:
        raise ConfigError(f"sweep metrics.fraction={opts['fraction']!r}: use a share of the steps in (0, 1]")
    try:  # the collapse functions check their own arguments
        collapse.detect_collapse([1.0] * int(opts["window"]), int(opts["window"]), float(opts["drop"]),
                                 float(opts["recover"]))
        collapse.detect_grad_blowup([1.0], tuple(opts["grad_early"]), float(opts["grad_factor"]),
                                    int(opts["grad_patience"]))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"sweep metrics: {e}") from None
    return opts


def plan_sweep(spec, out: str | Path | None = None) -> Sweep:
    """Expand and validate a spec (dict or YAML path): every run's RLConfig is built here, so a
    bad field fails before anything runs.  `out` overrides the spec's out:."""
    spec = load_spec(spec)
    base = dict(spec.get("base") or {})
    grid = dict(spec.get("grid") or {})
    seeds = spec.get("seeds", [0])
    out = out if out is not None else spec.get("out")
    if not out:
        raise ConfigError("sweep spec needs out: (the folder for results.csv and the runs)")
    if not isinstance(base, dict) or not isinstance(grid, dict):
        raise ConfigError("sweep base: and grid: are mappings of RLConfig fields")
    seeds = [seeds] if isinstance(seeds, int) else seeds
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           for s in seeds):
        raise ConfigError(f"sweep seeds: a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"sweep seeds {seeds} repeat a seed")
    for key, values in grid.items():
        if key in ("seed", "preset", "output_dir"):
            raise ConfigError(f"sweep grid: {key!r} cannot be a grid axis"
                              + ("; list the seeds under seeds:" if key == "seed" else
                                 "; set it in base:" if key == "preset" else "; set out:"))
        if not isinstance(values, list) or not values:
            raise ConfigError(f"sweep grid.{key}: a non-empty list of values, got {values!r}")
    clash = set(base) & set(grid)
    if clash:
        raise ConfigError(f"sweep: {sorted(clash)} set in both base: and grid:; set each field in one place")
    for key in ("seed", "output_dir"):
        if key in base:
            raise ConfigError(f"sweep base: {key!r} is set by the sweep ({'seeds:' if key == 'seed' else 'out:'})")
    preset = base.pop("preset", None)
    options = _options(spec.get("metrics"))
    try:
        from rl_lab.models import check_model_spec
    except ImportError:                             # an rl_lab without the up-front model check
        check_model_spec = None
    keys = list(grid)
    runs, seen = [], {}
    for values in itertools.product(*(grid[k] for k in keys)):
        cell = dict(zip(keys, values))
        for seed in seeds:
            name = ",".join([f"{k}={_fmt(v)}" for k, v in cell.items()] + [f"seed={seed}"])  # for errors
            fields = {**base, **cell, "seed": seed, "progress_bar": False}
            try:
                cfg = get_preset(preset, **fields)
                if "save_steps" not in fields:
                    fields["save_steps"] = max(1, cfg.max_steps // 10)
                rid = run_id(cfg)
                cfg = get_preset(preset, **fields, output_dir=str(Path(out) / rid))
                if check_model_spec is not None:    # a missing model fails here, not in every run
                    check_model_spec(cfg.model, cfg.task)
            except ConfigError as e:
                raise ConfigError(f"sweep run {name}: {e}") from None
            typed = {k: _field(cfg, k) for k in keys}           # YAML's "5e-5" -> 5e-05
            name = ",".join([f"{k}={_fmt(v)}" for k, v in typed.items()] + [f"seed={seed}"])
            if rid in seen:
                raise ConfigError(f"sweep runs {seen[rid]} and {name} have the same configuration")
            seen[rid] = name
            runs.append(Run(rid, name, typed, seed, cfg))
    return Sweep(Path(out), keys, runs, options, spec)


# ----------------------------------------------------------------------------- one run
def _mean(x) -> float:
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    return float(x.mean()) if len(x) else math.nan


def summary_row(df, options: dict | None = None) -> dict:
    """One run's metrics DataFrame (Trainer.train()'s) -> the summary columns of results.csv.
    Rewards follow rl_lab.toolkits.collapse: a NaN reward counts as collapse.NAN_REWARD."""
    opts = _options(None) if options is None else options
    n = len(df)
    k = max(1, int(n * float(opts["fraction"])))
    steps = df["step"].tolist()
    reward = np.nan_to_num(df["reward"].to_numpy(dtype=float), nan=collapse.NAN_REWARD,
                           posinf=collapse.NAN_REWARD, neginf=collapse.NAN_REWARD)
    ma = collapse.moving_average(reward, min(int(opts["window"]), n))
    best = int(np.argmax(ma))
    row = dict(steps=n, reward_first=float(reward[:k].mean()), reward_last=float(reward[-k:].mean()),
               reward_peak=float(ma[best]), reward_peak_step=steps[best + len(reward) - len(ma)])
    ev = df["eval/reward"].dropna() if "eval/reward" in df else []
    row["eval_reward"] = float(ev.iloc[-1]) if len(ev) else math.nan
    c = collapse.detect_collapse(reward, int(opts["window"]), float(opts["drop"]), float(opts["recover"]),
                                 steps=steps)
    row.update(collapse_evaluated=c["evaluated"], collapsed=c["collapsed"], collapse_step=c["fall_step"],
               collapse_peak=c["peak"] if c["collapsed"] else None,
               collapse_peak_step=c["peak_step"] if c["collapsed"] else None, collapse_dips=c["dips"])
    g = collapse.detect_grad_blowup(df["grad_norm"].to_numpy(dtype=float), tuple(opts["grad_early"]),
                                    float(opts["grad_factor"]), int(opts["grad_patience"]), steps=steps)
    row.update(grad_blowup=g["blowup"], grad_blowup_step=g["step"], grad_norm_baseline=g["baseline"])
    for col, metric in opts["monitors"].items():
        x = df[metric].to_numpy(dtype=float) if metric in df else np.full(n, np.nan)
        row[f"{col}_mean"], row[f"{col}_last"] = _mean(x), _mean(x[-k:])
    for col, threshold in opts["warn"].items():
        metric = opts["monitors"][col]
        x = df[metric].to_numpy(dtype=float) if metric in df else np.full(n, np.nan)
        row[f"warn_{col}_step"] = collapse.first_crossing(x, float(threshold), steps=steps)
        row[f"warn_{col}_lead"] = collapse.lead_time(x, float(threshold), c["fall_step"], steps=steps)
    row["skipped_steps"] = int(df["faults/skipped_steps"].sum()) if "faults/skipped_steps" in df else 0
    row["masked_samples"] = int(df["faults/masked_samples"].sum()) if "faults/masked_samples" in df else 0
    row["train_s"] = float(df["step_time"].sum()) if "step_time" in df else math.nan
    return row


def execute_run(config: dict | RLConfig, options: dict | None = None, threads: int | None = None) -> dict:
    """Train one run in its output_dir (resuming from its last checkpoint if it has one) and
    return its summary columns plus resumed_from (the step it resumed at) and wall_s (this
    call's seconds).  Used by the sweep's workers; `threads` sets torch's thread count."""
    import torch

    from rl_lab.runs import RunFolder
    from rl_lab.trainer import Trainer

    if threads:
        torch.set_num_threads(threads)
    cfg = config if isinstance(config, RLConfig) else RLConfig.from_dict(config)
    t0 = time.perf_counter()
    run_dir = Path(cfg.output_dir)
    has_ckpt = bool(RunFolder(run_dir).checkpoints(complete=True))
    if run_dir.exists() and not has_ckpt:   # killed before its first checkpoint: nothing to keep
        shutil.rmtree(run_dir)
    trainer = Trainer(cfg)
    last = trainer.last_checkpoint() if has_ckpt else None
    resumed_from = int(last.name.split("-")[1]) if last is not None else 0
    df = trainer.train(resume=last is not None)
    opts = _options(None) if options is None else options
    row = summary_row(df, opts)
    if opts["final_eval"]:
        row["eval_reward"] = trainer.evaluate()["eval/reward"]
    row.update(resumed_from=resumed_from, wall_s=time.perf_counter() - t0)
    return row


def _run_job(job):
    """Worker entry point (picklable): -> (run_id, row or None, error text or None)."""
    try:
        return job["run_id"], execute_run(job["config"], job["options"], job["threads"]), None
    except Exception as e:  # reported by the parent; the other runs go on
        import traceback
        return job["run_id"], None, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"


# ----------------------------------------------------------------------------- results.csv
def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _read_results(path: Path) -> tuple[list[str], list[dict]]:
    """Header and rows of results.csv; a torn last line (a killed writer) is cut off the file."""
    if not path.exists():
        return [], []
    text = path.read_text()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        atomic_write_text(path, text)
    reader = csv.DictReader(io.StringIO(text))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


def load_results(folder: str | Path):
    """Every `<folder>/*/results.csv` (one per sweep spec, as research/ ships them) in one
    DataFrame, with the spec folder's name in a `spec` column."""
    import pandas as pd

    paths = sorted(Path(folder).glob("*/results.csv"))
    if not paths:
        raise FileNotFoundError(f"no */results.csv under {folder}")
    return pd.concat([pd.read_csv(p).assign(spec=p.parent.name) for p in paths], ignore_index=True)


def _append_row(path: Path, row: dict) -> None:
    """Append one row (the parent only); new columns rewrite the file with the union header."""
    header, rows = _read_results(path)
    if header and set(row) <= set(header):
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow([_cell(row.get(c)) for c in header])
        with open(path, "a") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        return
    header = header + [c for c in row if c not in header]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    w.writerow({c: _cell(row.get(c)) for c in header})
    atomic_write_text(path, buf.getvalue())


def _status(sweep: Sweep, done: set) -> list[str]:
    from rl_lab.runs import RunFolder

    out = []
    for r in sweep.runs:
        if r.run_id in done:
            out.append("done")
            continue
        ckpts = RunFolder(sweep.out / r.run_id).checkpoints(complete=True)
        out.append(f"resume@{max(ckpts)}" if ckpts else "new")
    return out


def plan_table(sweep: Sweep):
    """The run list as a DataFrame: run_id, name, grid fields, seed, status (done, resume@step, new)."""
    import pandas as pd

    _, rows = _read_results(sweep.results_path)
    status = _status(sweep, {r["run_id"] for r in rows})
    return pd.DataFrame([{"run_id": r.run_id, "name": r.name, **r.cell, "seed": r.seed, "status": s}
                         for r, s in zip(sweep.runs, status)])


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# ----------------------------------------------------------------------------- the sweep
def run_sweep(spec, workers: int = 1, progress: bool = True, out: str | Path | None = None,
              threads: int | None = None, dry_run: bool = False):
    """Run (or finish) a sweep -> its rows of results.csv as a DataFrame, in plan order.

    spec: a dict or a YAML path (see the module docstring).  workers: parallel processes
    (1 runs in this process).  threads: torch threads per worker (default cpu_count // workers;
    the same thread count gives bitwise-identical runs).  dry_run: return plan_table() instead.
    Raises ConfigError before running anything if any run's config is invalid, and SweepError
    after the others finished if a run raised."""
    import pandas as pd
    from tqdm.auto import tqdm

    sweep = plan_sweep(spec, out)
    if dry_run:
        return plan_table(sweep)
    if workers < 1:
        raise ConfigError(f"workers={workers}: use at least 1")
    threads = threads or max(1, _cpu_count() // workers)
    sweep.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(sweep.out / "sweep.yaml", yaml.safe_dump(sweep.spec, sort_keys=False))
    path = sweep.results_path
    _, rows = _read_results(path)
    ids = {r.run_id for r in sweep.runs}
    done = {r["run_id"]: r for r in rows if r["run_id"] in ids}
    todo = [r for r in sweep.runs if r.run_id not in done]
    collapses = sum(r.get("collapsed") == "True" for r in done.values())
    bar = tqdm(total=len(sweep.runs), initial=len(done), desc="sweep", unit="run", disable=not progress)
    bar.set_postfix(collapses=collapses)
    by_id = {r.run_id: r for r in todo}
    errors = {}

    def finish(rid, row, err):
        nonlocal collapses
        if err is not None:
            errors[rid] = err
            print(f"sweep: run {by_id[rid].name} ({rid}) failed: {err.splitlines()[0]}", file=sys.stderr)
        else:
            r = by_id[rid]
            _append_row(path, {"run_id": rid, "name": r.name, **r.cell, "seed": r.seed, **row})
            collapses += bool(row["collapsed"])
        bar.update(1)
        bar.set_postfix(collapses=collapses)

    jobs = [dict(run_id=r.run_id, config=r.config.to_dict(), options=sweep.options, threads=threads)
            for r in todo]
    try:
        if workers == 1 or len(jobs) <= 1:
            import torch
            before = torch.get_num_threads()
            try:
                for job in jobs:
                    finish(*_run_job(job))
            finally:
                torch.set_num_threads(before)
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed
            pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)),
                                       mp_context=multiprocessing.get_context("spawn"))
            try:
                futures = [pool.submit(_run_job, job) for job in jobs]
                for fut in as_completed(futures):
                    finish(*fut.result())
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
    finally:
        bar.close()
    if errors:
        raise SweepError(f"{len(errors)} of {len(sweep.runs)} runs failed (the others are in {path}); "
                         "re-run to retry them:\n" + "\n".join(f"{by_id[k].name} ({k}): {v}"
                                                               for k, v in errors.items()))
    df = pd.read_csv(path)
    df = df[df["run_id"].isin(ids)]
    order = {r.run_id: i for i, r in enumerate(sweep.runs)}
    return df.sort_values("run_id", key=lambda s: s.map(order)).reset_index(drop=True)


def cmd_sweep(args) -> int:
    """`rl-lab sweep SPEC [--workers N] [--threads T] [--out DIR] [--dry-run] [--no-progress]`."""
    import pandas as pd

    if args.dry_run:
        table = run_sweep(args.spec, out=args.out, dry_run=True)
        with pd.option_context("display.max_rows", None, "display.width", 200, "display.max_columns", None):
            print(table.to_string(index=False))
        counts = table["status"].str.split("@").str[0].value_counts()
        print(f"{len(table)} runs: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
        return 0
    try:
        df = run_sweep(args.spec, workers=args.workers, progress=not args.no_progress, out=args.out,
                       threads=args.threads)
    except SweepError as e:
        print(f"rl-lab: {e}", file=sys.stderr)
        return 1
    cols = ["name", "reward_first", "reward_last", "eval_reward", "collapsed", "collapse_step", "wall_s"]
    with pd.option_context("display.max_rows", None, "display.width", 200, "display.max_colwidth", 80):
        print(df[[c for c in cols if c in df]].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    out = Path(args.out) if args.out else Path(load_spec(args.spec)["out"])
    print(f"{len(df)} runs, {int(df['collapsed'].astype(str).eq('True').sum())} collapsed; "
          f"results: {out / RESULTS}")
    return 0
