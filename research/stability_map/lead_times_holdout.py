"""Early warning with a held-out threshold: thresholds fitted on seeds 0 and 1, tested on seed 2.

Criterion (fixed before computing): each monitor is smoothed like the reward (20-step trailing
moving average); its threshold is the 99th percentile of the smoothed values over every step of
the seed-0/1 runs that did not collapse. On the seed-2 runs: a collapsed run's lead time is its
fall step minus the first step the smoothed monitor is above the threshold; the false-alarm rate
is the fraction of seed-2 runs that did not collapse and still cross. Collapses are split into
mismatch-driven ones (lr <= 5e-4, where the fresh sampler never collapses) and learning-rate ones
(lr 1e-3, where it always does).

    python research/stability_map/lead_times_holdout.py [runs/stability_map]
"""
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from rl_lab.toolkits import collapse
from rl_lab.utils import read_metrics

MONITORS = ["rollout_corr/k3_kl", "rollout_corr/log_ppl_abs_diff", "rollout_corr/training_ppl", "grad_norm", "entropy"]
root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/stability_map")
runs = []
for csv in sorted(root.glob("*/results.csv")):
    for _, row in pd.read_csv(csv).iterrows():
        runs.append((row, read_metrics(csv.parent / row["run_id"] / "metrics.jsonl")))


def smooth(df, m):
    return collapse.moving_average(df[m].to_numpy(float), collapse.WINDOW)


fit = [df for row, df in runs if row["seed"] in (0, 1) and not row["collapsed"]]
test = [(row, df) for row, df in runs if row["seed"] == 2]
out = []
for m in MONITORS:
    thr = float(np.nanpercentile(np.concatenate([smooth(df, m) for df in fit]), 99))
    healthy = [df for row, df in test if not row["collapsed"]]
    alarms = np.mean([np.nanmax(smooth(df, m)) > thr for df in healthy])
    for kind, sel in [("mismatch-driven", lambda r: r["learning_rate"] <= 5e-4),
                      ("learning-rate (1e-3)", lambda r: r["learning_rate"] > 5e-4)]:
        leads = []
        for row, df in test:
            if row["collapsed"] and sel(row):
                cross = collapse.first_crossing(smooth(df, m), thr, steps=df["step"].to_numpy()[collapse.WINDOW - 1:])
                leads.append(np.nan if cross is None else row["collapse_step"] - cross)
        leads = np.array(leads, float)
        out.append({"monitor": m, "collapses": kind, "warned before the fall": f"{int(np.sum(leads > 0))}/{len(leads)}",
                    "median lead": np.nanmedian(leads[leads > 0]) if np.any(leads > 0) else np.nan,
                    "false alarms (seed 2, healthy)": f"{alarms:.0%} of {len(healthy)}", "threshold": thr})
print(pd.DataFrame(out).to_string(index=False))
