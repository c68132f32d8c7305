"""How often the clip bound, per run of a sweep (NOTES.md, "Bypass at four stale steps on nine seeds").

    python research/stability_map/clipfrac.py runs/stability_map/corr9s4_bypass_ppo_clip OUT.csv

One row per run folder under the sweep's output: run_id, seed, the mean of `actor/pg_clipfrac` over
all steps and over the first and the last fifth of the steps, and the number of steps that logged it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import yaml


def clipfrac_row(run: Path) -> dict:
    values = []
    for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("actor/pg_clipfrac") is not None:
            values.append(float(record["actor/pg_clipfrac"]))
    if not values:
        raise SystemExit(f"{run}: no actor/pg_clipfrac in metrics.jsonl")
    fifth = max(1, len(values) // 5)
    seed = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8")).get("seed")
    return {"run_id": run.name, "seed": seed, "steps": len(values),
            "clipfrac_mean": sum(values) / len(values),
            "clipfrac_first": sum(values[:fifth]) / fifth, "clipfrac_last": sum(values[-fifth:]) / fifth}


def main(sweep: str, out: str) -> None:
    runs = sorted(p.parent for p in Path(sweep).glob("*/metrics.jsonl"))
    frame = pd.DataFrame([clipfrac_row(r) for r in runs]).sort_values("seed")
    frame.to_csv(out, index=False)
    print(frame.to_string(index=False))


if __name__ == "__main__":
    main(*sys.argv[1:3])
