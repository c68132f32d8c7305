"""Per-cell tables of the long-completion map, next to the addition cells at the same lr.

    .venv/bin/python research/long_completions/summarize.py [--md]

Reads research/long_completions/results/<source>/results.csv (this map) and the addition
results shipped in research/stability_map/ and research/collapse_pilot/.  Columns: collapses
over seeds; mean sampled reward over the first and last fifth of steps; the worst seed's last
fifth; greedy held-out eval at the last step; mean per-token k3 (`k3_kl_mean`); k3 x mean
completion length (the summed, sequence-level k3 per completion); mean per-token entropy; each
seed's collapse step ("-": none); mean training seconds per run.
"""
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "research/long_completions/results"
ADDITION = {  # addition cells (T ~ 3.6 tokens) comparable to this map's sources
    "none": (ROOT / "research/stability_map/results/staleness_lr/results.csv", "sampler_staleness", 0),
    "stale2": (ROOT / "research/stability_map/results/staleness_lr/results.csv", "sampler_staleness", 2),
    "noise1.5 (lr 2e-4)": (ROOT / "research/collapse_pilot/results/stage_a/noise/results.csv", "sampler_logit_noise", 1.5),
    "noise1.5 (lr 5e-4)": (ROOT / "research/collapse_pilot/results/stage_a2/noise/results.csv", "sampler_logit_noise", 1.5),
    "bf16": (HERE / "addition_bf16/results.csv", "sampler_dtype", "bfloat16"),
}


def cells(d: pd.DataFrame, label: str) -> pd.DataFrame:
    g = d.groupby("learning_rate", sort=True)
    out = pd.DataFrame({
        "collapsed": g["collapsed"].apply(lambda s: f"{int(s.astype(bool).sum())}/{len(s)}"),
        "reward_first": g["reward_first"].mean(),
        "reward_last": g["reward_last"].mean(),
        "reward_last_min": g["reward_last"].min(),
        "eval_reward": g["eval_reward"].mean(),
        "k3_per_token": g["k3_kl_mean"].mean(),
        "k3_per_seq": g.apply(lambda x: (x["k3_kl_mean"] * x["mean_length_mean"]).mean(), include_groups=False),
        "entropy": g["entropy_mean"].mean(),
        "collapse_steps": g["collapse_step"].apply(lambda s: " ".join("-" if pd.isna(x) else str(int(x)) for x in s)),
        "train_s": g["train_s"].mean(),
    }).reset_index()
    out.insert(0, "source", label)
    return out


LABELS = {"none": "none (fp32)", "none_lr1e-3": "none (fp32)", "bf16": "bf16",
          "noise_lr2e-4": "noise 1.5", "noise_lr5e-4": "noise 1.5",
          "stale2_lr2e-4": "stale 2", "stale2_lr5e-4": "stale 2"}


def main(md: bool):
    rows = []
    for folder, label in LABELS.items():
        p = HERE / folder / "results.csv"
        if p.exists():
            rows.append(cells(pd.read_csv(p), label))
    order = {lab: i for i, lab in enumerate(dict.fromkeys(LABELS.values()))}
    long = pd.concat(rows)
    long = long.assign(_o=long["source"].map(order)).sort_values(["_o", "learning_rate"], kind="stable").drop(columns="_o")
    add = []
    for label, (p, col, val) in ADDITION.items():
        if p.exists():
            d = pd.read_csv(p)
            d = d[d[col] == val]
            d = d[d["learning_rate"].isin([2e-4, 5e-4, 1e-3])]
            add.append(cells(d, label))
    add = pd.concat(add) if add else pd.DataFrame()
    pd.set_option("display.width", 250)
    for title, t in (("scratchpad (T ~ 42)", long), ("addition (T ~ 3.6)", add)):
        print(f"\n### {title}\n")
        print(t.to_markdown(index=False, floatfmt=".3g") if md else t.to_string(index=False, float_format="{:.3g}".format))


if __name__ == "__main__":
    main("--md" in sys.argv)
