"""Early warning on the stability map: how many steps before the reward falls does each monitor
cross a threshold set on healthy runs, and how often does it cross in runs that never collapse?

Criterion (fixed before computing): each monitor is smoothed like the reward (20-step trailing
moving average); its threshold is the 99th percentile of the smoothed values over every step of
the runs that did not collapse (all panels of the map). A collapsed
run's lead time is its fall step (rl_lab.toolkits.collapse) minus the first step the monitor is above the
threshold (negative: it crossed only after the fall; none: never). The false-alarm rate is the
fraction of non-collapsed runs whose monitor ever crosses it.  Because the threshold comes from
the healthy runs themselves, about one step in a hundred of theirs lies above it by construction:
read the false-alarm rate together with that.

    python research/stability_map/lead_times.py [runs/stability_map]
"""
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from rl_lab.toolkits import collapse
from rl_lab.utils import read_metrics

MONITORS = ["rollout_corr/k3_kl", "rollout_corr/log_ppl_abs_diff", "rollout_corr/training_ppl", "grad_norm",
            "entropy"]
root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/stability_map")
runs = []
for csv in sorted(root.glob("*/results.csv")):
    for _, row in pd.read_csv(csv).iterrows():
        df = read_metrics(csv.parent / row["run_id"] / "metrics.jsonl")
        runs.append((csv.parent.name, row, df))
healthy = [df for _, row, df in runs if not row["collapsed"]]
fallen = [(spec, row, df) for spec, row, df in runs if row["collapsed"]]
rows = []
def smooth(df, m):
    return collapse.moving_average(df[m].to_numpy(float), collapse.WINDOW)


for m in MONITORS:
    thr = float(np.nanpercentile(np.concatenate([smooth(df, m) for df in healthy]), 99))
    alarms = np.mean([np.nanmax(smooth(df, m)) > thr for df in healthy])
    leads = []
    for _, row, df in fallen:
        cross = collapse.first_crossing(smooth(df, m), thr, steps=df["step"].to_numpy()[collapse.WINDOW - 1:])
        leads.append(np.nan if cross is None else row["collapse_step"] - cross)
    leads = np.array(leads, float)
    rows.append({"monitor": m, "threshold (p99 healthy)": thr, "false alarms": f"{alarms:.0%} of {len(healthy)}",
                 "warned before the fall": f"{np.sum(leads > 0)}/{len(leads)}",
                 "median lead (steps)": np.nanmedian(leads) if np.isfinite(leads).any() else np.nan})
print(pd.DataFrame(rows).to_string(index=False))
