"""The model-size map: each 3M cell next to the same cell at 0.3M, with the verdict of NOTES.md.

    .venv/bin/python research/model_size/summarize.py [--md]

Reads research/model_size/results/<block>/results.csv (this map, 3M) and the 0.3M cells shipped in
research/stability_map/results/staleness_lr (seeds 0-2) and research/long_completions/results/
addition_bf16.  Columns: collapses over seeds; mean sampled reward over the last fifth of steps
(mean and worst seed); greedy held-out eval at the last step; mean per-token k3; each seed's collapse
step ("-": none); the verdict of the pre-registered rule (NOTES.md):

* "collapse from the mismatch": >= 2/3 of the source's runs collapse and 0/3 of the fresh fp32
  sampler's at the same size and learning rate;
* "learning-rate cell": the fresh sampler itself collapses >= 1/3 there (says nothing of the mismatch);
* "no collapse from the mismatch": anything else (a null result);
* the fresh sampler's own rows: "control".
"""
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "research/model_size/results"
SMALL = {  # 0.3M results on addition, the same recipe otherwise
    "staleness": ROOT / "research/stability_map/results/staleness_lr/results.csv",
    "bf16": ROOT / "research/long_completions/results/addition_bf16/results.csv",
}
BLOCKS = ("staleness_lr5e-4", "staleness_lr2e-4", "staleness_lr1e-4", "bf16_lr1e-4")


def source_of(row) -> str:
    if row.get("sampler_dtype") == "bfloat16":
        return "bf16"
    stale = int(row.get("sampler_staleness", 0) or 0)
    return f"stale {stale}" if stale else "fresh (fp32)"


def load(paths, size: str) -> pd.DataFrame:
    frames = [pd.read_csv(p) for p in paths if Path(p).exists()]
    if not frames:
        return pd.DataFrame()
    d = pd.concat(frames, ignore_index=True)
    d = d[d["seed"].isin([0, 1, 2])]
    return d.assign(size=size, source=d.apply(source_of, axis=1))


def verdict(cell: pd.DataFrame, control: pd.DataFrame | None) -> str:
    if cell["source"].iloc[0] == "fresh (fp32)":
        return "control"
    if control is None or control.empty:
        return "no control run"
    if control["collapsed"].astype(bool).mean() >= 1 / 3:
        return "learning-rate cell"
    n, c = len(cell), int(cell["collapsed"].astype(bool).sum())
    if c >= 2 and c / n >= 2 / 3 and not control["collapsed"].astype(bool).any():
        return "collapse from the mismatch"
    return "no collapse from the mismatch"


def table(d: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (size, lr, source), cell in d.groupby(["size", "learning_rate", "source"], sort=True):
        control = d[(d["size"] == size) & (d["learning_rate"] == lr) & (d["source"] == "fresh (fp32)")]
        rows.append({
            "size": size, "lr": lr, "source": source,
            "collapsed": f"{int(cell['collapsed'].astype(bool).sum())}/{len(cell)}",
            "reward_last": cell["reward_last"].mean(), "reward_last_min": cell["reward_last"].min(),
            "eval_reward": cell["eval_reward"].mean(), "k3_per_token": cell["k3_kl_mean"].mean(),
            "collapse_steps": " ".join("-" if pd.isna(x) else str(int(x)) for x in cell["collapse_step"]),
            "verdict": verdict(cell, control),
        })
    return pd.DataFrame(rows)


def main(md: bool) -> pd.DataFrame:
    big = load([HERE / b / "results.csv" for b in BLOCKS], "3M")
    if big.empty:
        sys.exit(f"no results under {HERE}: run research/model_size/run_map.sh and copy runs/model_size/*/results.csv")
    small = load(SMALL.values(), "0.3M")
    small = small[small.set_index(["learning_rate", "source"]).index.isin(
        big.set_index(["learning_rate", "source"]).index)]        # only the cells the 3M map has
    t = table(pd.concat([small, big], ignore_index=True))
    t = t.sort_values(["lr", "source", "size"], ascending=[False, True, True], kind="stable")
    pd.set_option("display.width", 250)
    print(t.to_markdown(index=False, floatfmt=".3g") if md else t.to_string(index=False, float_format="{:.3g}".format))
    return t


if __name__ == "__main__":
    main("--md" in sys.argv)
