"""Evaluate `rl-lab diagnose` on the stability map's runs, by the criteria of NOTES.md.

    python research/diagnose/evaluate.py        # writes research/diagnose/results/{runs,summary}.csv

Reads the shipped per-step series (research/stability_map/results/monitor_series.csv.gz) and the
runs' labels; each run goes through the same `diagnose()` the command line uses.
"""
from pathlib import Path

import pandas as pd

from rl_lab.tools.diagnose import EARLY, diagnose
from rl_lab.tools.stats import wilson_interval
from rl_lab.tools.sweep import load_results

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "research" / "stability_map" / "results"
OUT = Path(__file__).parent / "results"


def truth(row) -> str:
    if not row["collapsed"]:
        return "healthy"
    if row["sampler_staleness"] == 0:
        return "not the mismatch"
    return "mismatch" if row["learning_rate"] <= 5e-4 else "ambiguous"


def evaluate() -> tuple[pd.DataFrame, pd.DataFrame]:
    series = pd.read_csv(MAP / "monitor_series.csv.gz")
    labels = load_results(MAP).drop_duplicates("run_id").set_index("run_id")
    rows = []
    for run_id, df in series.groupby("run_id", sort=True):
        df = df.drop(columns=["spec", "run_id"]).sort_values("step").reset_index(drop=True)
        df.attrs["source"] = run_id
        d = diagnose(df)
        label = labels.loc[run_id]
        fall = d.timeline.get("reward fall")
        warn = EARLY[1] if d.cause == "mismatch-level" else d.timeline.get("rollout_corr/k3_kl rises")
        rows.append({"run_id": run_id, "sampler_staleness": int(label["sampler_staleness"]),
                     "learning_rate": float(label["learning_rate"]), "seed": int(label["seed"]),
                     "truth": truth(label), "verdict": d.verdict, "cause": d.cause, "fall_step": fall,
                     "lead": (fall - warn) if (fall is not None and warn is not None) else None,
                     "k3_early": d.levels.get("rollout_corr/k3_kl")})
    runs = pd.DataFrame(rows)
    summary = []
    scored = runs[runs.truth.isin(["mismatch", "not the mismatch"])]
    said = scored.cause.map({"mismatch-level": "mismatch", "mismatch-led": "mismatch",
                             "not-the-mismatch": "not the mismatch"})
    right = int((said == scored.truth).sum())
    lo, hi = wilson_interval(right, len(scored))
    summary.append({"measure": "cause of a collapse: accuracy", "count": f"{right}/{len(scored)}",
                    "value": right / len(scored), "ci_low": lo, "ci_high": hi})
    for t in ("mismatch", "not the mismatch", "ambiguous"):
        sub = runs[runs.truth == t]
        summary.append({"measure": f"collapses labelled {t}: called", "count": str(len(sub)),
                        "value": None, "ci_low": None, "ci_high": None,
                        "detail": sub.cause.value_counts().to_dict()})
    for fresh in (True, False):
        sub = runs[(runs.truth == "healthy") & ((runs.sampler_staleness == 0) == fresh)]
        k = int((sub.verdict == "warning").sum())
        lo, hi = wilson_interval(k, len(sub)) if len(sub) else (None, None)
        summary.append({"measure": f"healthy runs, {'fresh' if fresh else 'stale'} sampler: warned",
                        "count": f"{k}/{len(sub)}", "value": k / len(sub) if len(sub) else None,
                        "ci_low": lo, "ci_high": hi, "detail": sub.cause.value_counts().to_dict()})
    leads = runs[(runs.truth == "mismatch") & runs.lead.notna()].lead
    summary.append({"measure": "lead time of a mismatch collapse (steps)", "count": str(len(leads)),
                    "value": float(leads.median()) if len(leads) else None,
                    "ci_low": float(leads.min()) if len(leads) else None,
                    "ci_high": float(leads.max()) if len(leads) else None})
    return runs, pd.DataFrame(summary)


if __name__ == "__main__":
    runs, summary = evaluate()
    OUT.mkdir(parents=True, exist_ok=True)
    runs.to_csv(OUT / "runs.csv", index=False)
    summary.to_csv(OUT / "summary.csv", index=False)
    print(summary.to_string(index=False))
