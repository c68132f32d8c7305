"""Ship the per-step columns that `rl-lab diagnose`'s source rules read, for every stage-1 run.

The run folders (runs/mismatch_sources/s1_*/<run_id>/metrics.jsonl) are not shipped; this writes
results/s1_steps.csv.gz (one row per arm, seed and step; the columns under the names rl_lab logs
them, 7 significant digits) so that diagnose_eval.py runs from shipped files.

    .venv/bin/python research/mismatch_sources/extract_steps.py [--runs runs/mismatch_sources] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
COLUMNS = ["reward", "grad_norm", "entropy", "learning_rate", "rollout_corr/k3_kl", "rollout_corr/kl",
           "sampling/importance_sampling_ratio/mean", "sampling/importance_sampling_ratio/max",
           "rollout_corr/tokens_differ"]
"""What diagnose's collapse rules and source rules read (rl_lab's names in metrics.jsonl)."""


def extract(runs: Path, seeds: set[int] | None = None) -> pd.DataFrame:
    frames = []
    for arm_dir in sorted(RESULTS.glob("s1_*")):
        index = pd.read_csv(arm_dir / "results.csv", usecols=["run_id", "seed"])
        for run_id, seed in index.itertuples(index=False):
            if seeds is not None and int(seed) not in seeds:
                continue
            with open(runs / arm_dir.name / str(run_id) / "metrics.jsonl") as f:
                rows = [json.loads(line) for line in f if line.strip()]
            df = pd.DataFrame(rows)[["step", *COLUMNS]]
            df.insert(0, "seed", int(seed))
            df.insert(0, "arm", arm_dir.name)
            frames.append(df)
    return pd.concat(frames, ignore_index=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="runs/mismatch_sources", help="the stage-1 run folders' parent")
    ap.add_argument("--out", default=str(RESULTS / "s1_steps.csv.gz"))
    ap.add_argument("--seeds", help="only these seeds, e.g. 0-3 (default: all)")
    args = ap.parse_args(argv)
    seeds = None
    if args.seeds:
        lo, _, hi = args.seeds.partition("-")
        seeds = set(range(int(lo), int(hi or lo) + 1))
    df = extract(Path(args.runs), seeds)
    df.to_csv(args.out, index=False, float_format="%.7g", compression={"method": "gzip", "mtime": 0})
    print(f"{args.out}: {len(df)} rows, {df.groupby(['arm', 'seed']).ngroups} runs, "
          f"{Path(args.out).stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
