"""The long-horizon cells against the criteria of NOTES.md (fixed before the runs).

    .venv/bin/python research/long_horizon/summarize.py --collect   # after run.sh: copy results in
    .venv/bin/python research/long_horizon/summarize.py             # print the table

`--collect` copies runs/long_horizon/<spec>/results.csv (and sweep.yaml) to results/<spec>/ and
writes results/fifths.csv: per run, the mean of k3, reward and entropy over the first and the last
fifth of its steps (the growth test needs them; the run folders are not shipped).
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
from rl_lab.tools.stats import holm, one_sample_t, welch  # noqa: E402
from rl_lab.tools.sweep import load_results  # noqa: E402
from rl_lab.utils import read_jsonl  # noqa: E402

RUNS, RESULTS = ROOT / "runs/long_horizon", HERE / "results"
SPECS = ("staleness", "bf16")
SERIES = {"k3": "rollout_corr/k3_kl", "reward": "reward", "entropy": "entropy"}
ALPHA = 0.05


def collect(runs: Path = RUNS, results: Path = RESULTS) -> None:
    rows = []
    for spec in SPECS:
        (results / spec).mkdir(parents=True, exist_ok=True)
        for name in ("results.csv", "sweep.yaml"):
            shutil.copy(runs / spec / name, results / spec / name)
        for run_id in pd.read_csv(runs / spec / "results.csv")["run_id"]:
            df = pd.DataFrame(read_jsonl(runs / spec / run_id / "metrics.jsonl"))
            n = len(df) // 5
            row = {"spec": spec, "run_id": run_id, "steps": len(df)}
            for short, key in SERIES.items():
                row[f"{short}_first"], row[f"{short}_last"] = df[key][:n].mean(), df[key][-n:].mean()
            rows.append(row)
    pd.DataFrame(rows).to_csv(results / "fifths.csv", index=False)


def source_of(row) -> str:
    if row.get("sampler_dtype") == "bfloat16":
        return "bf16"
    return "fresh" if not row["sampler_staleness"] else f"stale {int(row['sampler_staleness'])}"


def runs(results: Path = RESULTS) -> pd.DataFrame:
    df = load_results(results)
    df["source"] = df.apply(source_of, axis=1)
    fifths = pd.read_csv(results / "fifths.csv")          # reward_first/last are in results.csv already
    return df.merge(fifths[["run_id", "k3_first", "k3_last", "entropy_first", "entropy_last"]], on="run_id")


def table(results: Path = RESULTS) -> pd.DataFrame:
    """One row per (source, lr): collapses, last-fifth reward, the reward test against the fresh
    sampler (Welch, Holm over the six), the verdict by the collapse rule, and k3's growth t."""
    df = runs(results)
    rows = []
    for lr, cell in df.groupby("learning_rate"):
        fresh = cell[cell["source"] == "fresh"]
        for source, g in cell.groupby("source"):
            growth = np.log(g["k3_last"] / g["k3_first"])
            row = {"learning_rate": lr, "source": source, "runs": len(g), "collapses": int(g["collapsed"].sum()),
                   "reward_last": g["reward_last"].mean(), "eval_reward": g["eval_reward"].mean(),
                   "k3_first": g["k3_first"].mean(), "k3_last": g["k3_last"].mean(),
                   "k3_growth_t": one_sample_t(growth) if source != "fresh" else np.nan,
                   "fresh_collapses": int(fresh["collapsed"].sum())}
            if source != "fresh":
                w = welch(g["reward_last"], fresh["reward_last"])
                row.update(diff=w["diff"], t=w["t"], p=w["p"])
            rows.append(row)
    out = pd.DataFrame(rows)
    tested = out["source"] != "fresh"
    out.loc[tested, "p_holm"] = holm(out.loc[tested, "p"])
    out["reward_verdict"] = [("null" if not t or not p < ALPHA else "gains reward" if d > 0 else "costs reward")
                             for t, p, d in zip(tested, out["p_holm"], out["diff"])]
    out.loc[~tested, "reward_verdict"] = "control"
    out["collapse_verdict"] = [
        "control" if s == "fresh" else "learning-rate cell" if f > 0 else
        "collapses runs" if c >= 2 else "no collapse from the mismatch"
        for s, f, c in zip(out["source"], out["fresh_collapses"], out["collapses"])]
    out["k3_growth"] = ["–" if np.isnan(t) else "grew" if t > 3 else "shrank" if t < -3 else "no change resolved"
                        for t in out["k3_growth_t"]]
    return out.sort_values(["learning_rate", "source"]).reset_index(drop=True)


if __name__ == "__main__":
    if "--collect" in sys.argv:
        collect()
    pd.set_option("display.width", 200)
    print(table().to_string(index=False, float_format=lambda x: f"{x:.3g}"))
