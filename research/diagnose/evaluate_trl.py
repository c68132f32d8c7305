"""Evaluate `rl-lab diagnose` on TRL 1.16's own runs, by the criteria of NOTES.md (issue 50).

    OMP_NUM_THREADS=1 python research/diagnose/make_trl_runs.py     # the runs (minutes; not shipped)
    python research/diagnose/evaluate_trl.py                         # -> results/trl_{runs,summary}.csv

Each run's output folder goes through the same `load_run` + `diagnose` as the command line, with
the settings the tool finds in the folder itself (training_args.bin, read without unpickling).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from rl_lab.errors import ConfigError
from rl_lab.tools.diagnose import diagnose, load_run
from rl_lab.tools.diagnose_setup import read_run_setup
from rl_lab.tools.stats import wilson_interval

HERE = Path(__file__).parent
RUNS, OUT = HERE / "trl_runs", HERE / "results"


def judge(folder: Path) -> dict:
    label = json.loads((folder / "truth.json").read_text())
    try:
        df = load_run(folder)
        d = diagnose(df, read_run_setup(df))
        verdict, cause, fall, evidence = d.verdict, d.cause, d.timeline.get("reward fall"), d.mismatch_evidence
    except ConfigError as e:
        verdict, cause, fall, evidence = "unreadable", None, None, str(e)
    said_collapsed = verdict == "collapsed"
    right = (said_collapsed == label["collapsed"]) and verdict not in ("too-short", "unreadable")
    return {"run": label["name"], "kind": label["kind"], "logging_steps": label["logging_steps"],
            "seed": label["seed"], "truth_collapsed": label["collapsed"], "truth_fall": label["fall_step"],
            "verdict": verdict, "cause": cause, "fall_step": fall, "verdict_right": right,
            "cause_right": (cause == "learning-rate") if label["collapsed"] else None,
            "on_policy": evidence.startswith("on-policy"), "steps_judged": label["steps_judged"]}


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []

    def add(measure, k, n):
        lo, hi = wilson_interval(k, n) if n else (None, None)
        rows.append({"measure": measure, "count": f"{k}/{n}", "value": k / n if n else None,
                     "ci_low": lo, "ci_high": hi})
    add("verdict accuracy", int(runs.verdict_right.sum()), len(runs))
    for log in sorted(runs.logging_steps.unique()):
        sub = runs[runs.logging_steps == log]
        add(f"verdict accuracy, logging_steps={log}", int(sub.verdict_right.sum()), len(sub))
    col = runs[runs.truth_collapsed]
    add("cause of a collapse: learning-rate", int(col.cause_right.sum()), len(col))
    add("said on-policy", int(runs.on_policy.sum()), len(runs))
    gap = (col.fall_step - col.truth_fall).abs()
    rows.append({"measure": "fall step: |tool - truth| (steps), median", "count": str(len(gap)),
                 "value": float(gap.median()) if len(gap) else None,
                 "ci_low": float(gap.min()) if len(gap) else None, "ci_high": float(gap.max()) if len(gap) else None})
    return pd.DataFrame(rows)


def main() -> None:
    folders = sorted(p for p in RUNS.iterdir() if (p / "truth.json").is_file())
    if not folders:
        raise SystemExit(f"no runs under {RUNS}: run research/diagnose/make_trl_runs.py first")
    runs = pd.DataFrame([judge(f) for f in folders])
    summary = summarise(runs)
    OUT.mkdir(exist_ok=True)
    runs.to_csv(OUT / "trl_runs.csv", index=False)
    summary.to_csv(OUT / "trl_summary.csv", index=False)
    print(runs.to_string(index=False))
    print(summary.to_string(index=False))


if __name__ == "__main__":
    main()
