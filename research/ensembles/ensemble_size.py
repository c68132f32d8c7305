"""How many members does an ensemble need to match exact Thompson sampling, as the dimension grows?
(Issue 16 item 8: chapter 11's "M >= d on compact action sets" and "far fewer on finite ones".)

For each action set and dimension d, run exact TS, Ensemble++ (sphere perturbations, Gaussian
index) and classic ensemble sampling at every M of `ensemble_size_grid(d)` (powers of two up to
4d, plus d/2, d and 2d) on the same S problems and reward noise (common random numbers), and
write one row per (action set, d, agent, M, seed) with its final cumulative regret and the wall
time of the whole batched run (gzip-compressed if the name ends in .gz).  The criterion is applied by lab 11 on this file:

    M matches TS at d  <=>  median_seeds(regret) <= 1.5 x TS's median
                            and 90th percentile across seeds <= 2 x TS's 90th percentile.

    OMP_NUM_THREADS=1 python research/ensembles/ensemble_size.py     # the shipped CSV, ~15 min
    python research/ensembles/ensemble_size.py --dims 10 20 --seeds 24 --out small.csv

Action sets: "unit_ball" (UnitBallBandit: the compact set {||x|| <= 1}, best action
theta*/||theta*||) and "finite_100" (LinearBandit: 100 fixed actions with Uniform(+-1/sqrt 5)
features, the Russo-Van Roy benchmark of lab 11).  theta* ~ N(0, 10 I), noise 1, matched priors.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import os
import time
from pathlib import Path

import torch

from rl_lab.toolkits.bandits import (
    EnsemblePlusPlus,
    EnsembleSampling,
    LinearBandit,
    ThompsonSampling,
    UnitBallBandit,
    ensemble_size_grid,
    run_bandit,
)

HERE = Path(__file__).resolve().parent
ACTION_SETS = {"unit_ball": lambda d: UnitBallBandit(d=d),
               "finite_100": lambda d: LinearBandit(d=d, num_actions=100)}
FIELDS = ["action_set", "d", "steps", "agent", "M", "seed", "final_regret", "run_seconds"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--action-sets", nargs="+", default=list(ACTION_SETS), choices=list(ACTION_SETS))
    p.add_argument("--dims", nargs="+", type=int, default=[10, 20, 40, 80])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--seeds", type=int, default=100)
    p.add_argument("--out", type=Path, default=HERE / "results" / "ensemble_size.csv.gz")
    args = p.parse_args()
    torch.set_num_threads(1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start_all = time.perf_counter()
    opener = gzip.open if args.out.suffix == ".gz" else open
    with opener(args.out, "wt", newline="") as fh:
        writer = csv.DictWriter(fh, FIELDS)
        writer.writeheader()
        for name in args.action_sets:
            for d in args.dims:
                env, start = ACTION_SETS[name](d), time.perf_counter()
                agents = [("TS", 0, ThompsonSampling(d=d))]
                for M in ensemble_size_grid(d):
                    agents += [("Ens++", M, EnsemblePlusPlus(d=d, M=M)), ("ES", M, EnsembleSampling(d=d, M=M))]
                for key, M, agent in agents:
                    t0 = time.perf_counter()
                    run = run_bandit(env, agent, args.steps, args.seeds, seed=0)
                    seconds = time.perf_counter() - t0
                    for s, f in enumerate(run.final):
                        writer.writerow({"action_set": name, "d": d, "steps": args.steps, "agent": key, "M": M,
                                         "seed": s, "final_regret": f"{f:.4f}", "run_seconds": f"{seconds:.2f}"})
                fh.flush()
                print(f"{name} d={d}: {len(agents)} runs x {args.seeds} seeds x {args.steps} steps in "
                      f"{time.perf_counter() - start:.0f} s", flush=True)
    print(f"total {time.perf_counter() - start_all:.0f} s (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}) "
          f"-> {_shown(Path(args.out))}")


def _shown(path: Path) -> str:
    """The output path as the log should record it: relative to the repository when inside it
    (a log names no machine's folders)."""
    try:
        return str(path.resolve().relative_to(HERE.parent.parent))
    except ValueError:
        return path.name


if __name__ == "__main__":
    main()
