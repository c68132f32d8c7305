"""Ship the per-step monitor series of every stability-map run, so that the lab can recompute the
early-warning table without the 2 GB of run folders.

    python research/stability_map/export_series.py [runs/stability_map] [research/stability_map/results]

Writes <results>/monitor_series.csv.gz: one row per (run_id, step) (a run in two specs once) with the reward and the
monitors the table uses, 4 significant digits (the table's thresholds and crossings are not
sensitive below that; the lab checks that it reproduces this script's table).
"""
import sys
from pathlib import Path

import pandas as pd

from rl_lab.utils import read_metrics

COLUMNS = ["reward", "rollout_corr/k3_kl", "rollout_corr/log_ppl_abs_diff", "rollout_corr/training_ppl",
           "grad_norm", "entropy"]
runs_root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/stability_map")
out_root = Path(sys.argv[2] if len(sys.argv) > 2 else "research/stability_map/results")
frames, seen = [], set()
for csv in sorted(runs_root.glob("*/results.csv")):
    for run_id in pd.read_csv(csv)["run_id"]:
        if run_id in seen:   # the same config in two specs (corr_none repeats staleness_lr cells): same run
            continue
        seen.add(run_id)
        df = read_metrics(csv.parent / run_id / "metrics.jsonl")
        frames.append(df[["step"] + COLUMNS].assign(spec=csv.parent.name, run_id=run_id))
series = pd.concat(frames, ignore_index=True)[["spec", "run_id", "step"] + COLUMNS]
path = out_root / "monitor_series.csv.gz"
series.to_csv(path, index=False, float_format="%.4g", compression={"method": "gzip", "mtime": 0})
print(f"{path}: {len(series)} rows, {series['run_id'].nunique()} runs, {path.stat().st_size / 1e3:.0f} kB")
