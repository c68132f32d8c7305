"""Early warning with a held-out threshold: thresholds fitted on seeds 0 and 1, tested on seeds >= 2.

Criterion (fixed before computing; see NOTES.md): each monitor is smoothed like the reward
(20-step trailing moving average); its threshold is the 99th percentile of the smoothed values
over every step of the seed-0/1 runs that did not collapse (`collapse.warning_threshold`). On the
held-out runs (seed >= 2): a collapsed run's lead time is its fall step minus the first step the
smoothed monitor is at or above the threshold; the false-alarm rate is the fraction of held-out
runs that did not collapse and still cross. Collapses are split into mismatch-driven ones
(lr <= 5e-4, where the fresh sampler never collapses) and learning-rate ones (lr 1e-3, where it
always does). A run that two specs share (corr_none repeats cells of staleness_lr) counts once.
Brackets: 95% Wilson intervals.

    python research/stability_map/lead_times_holdout.py      # reads the shipped results/
"""
from pathlib import Path

import pandas as pd

from rl_lab.toolkits import collapse
from rl_lab.tools.stats import wilson_interval
from rl_lab.tools.sweep import load_results

MONITORS = ["rollout_corr/k3_kl", "rollout_corr/log_ppl_abs_diff", "rollout_corr/training_ppl", "grad_norm", "entropy"]
HERE = Path(__file__).parent / "results"


def table(results: pd.DataFrame, series: pd.DataFrame) -> pd.DataFrame:
    runs = results.drop_duplicates("run_id").set_index("run_id")
    fit = runs.index[(runs["seed"] <= 1) & ~runs["collapsed"]]
    held = runs[runs["seed"] >= 2]
    healthy = held.index[~held["collapsed"]]
    out = []
    for kind, sel in [("mismatch-driven", held["learning_rate"] <= 5e-4), ("learning-rate (1e-3)", held["learning_rate"] > 5e-4)]:
        fallen = held.index[held["collapsed"] & sel]
        t = collapse.early_warning_table(series, MONITORS, fit, fallen, healthy, runs["collapse_step"].to_dict())
        out.append(t.assign(collapses_of=kind))
    t = pd.concat(out).reset_index()
    t["warned_ci"] = [wilson_interval(w, n) for w, n in zip(t["warned"], t["collapses"])]
    t["false_alarm_ci"] = [wilson_interval(f, n) for f, n in zip(t["false_alarms"], t["healthy"])]
    return t


if __name__ == "__main__":
    results = load_results(HERE)
    series = pd.read_csv(HERE / "monitor_series.csv.gz")
    pd.set_option("display.width", 200)
    t = table(results, series)
    t["warned"] = [f"{w}/{n} [{lo:.2f}, {hi:.2f}]" for w, n, (lo, hi) in zip(t["warned"], t["collapses"], t["warned_ci"])]
    t["false alarms"] = [f"{f}/{n} [{lo:.2f}, {hi:.2f}]" for f, n, (lo, hi) in zip(t["false_alarms"], t["healthy"], t["false_alarm_ci"])]
    print(t[["monitor", "collapses_of", "warned", "median_lead", "false alarms", "threshold"]].to_string(index=False))
