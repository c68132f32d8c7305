"""Lab 9's training grid in the `laptop` preset, run once and shipped, so that CI (which runs the
labs in `smoke`) checks the lab's laptop-only claim on these numbers (issue 54, item 2): OTB's mean
gradient norm sits below mean-only GRPO's by more than the spread between seeds, with the same
reward (within 0.03).

    .venv/bin/python research/lab_claims/lab09_laptop.py      # about 10 minutes on one CPU thread

The call is the lab's own (labs/lab09_optimal_token_baseline.md, section 5), with the laptop
preset's sizes: 3 methods x 4 seeds x 150 steps. Writes results/lab09_laptop_grid.csv: one row per
(method, seed, step) with the columns the lab reduces."""
import time
from pathlib import Path

import torch

from rl_lab.toolkits.compare import run_grid

RUNS = {"GRPO (std-scaled)": dict(advantage_estimator="grpo"),          # the lab's RUNS
        "GRPO (mean only)": dict(advantage_estimator="grpo", scale_rewards="none"),
        "OTB": dict(advantage_estimator="optimal_token_baseline")}
LAPTOP = dict(steps=150, seeds=4)                                       # the lab's SIZES["laptop"]
COLUMNS = ["method", "seed", "step", "reward", "grad_norm", "completions/mean_length"]


def main() -> None:
    torch.set_num_threads(1)
    t0 = time.time()
    grid = run_grid(RUNS, seeds=range(LAPTOP["seeds"]), preset="laptop", max_steps=LAPTOP["steps"],
                    eval_steps=0)
    out = Path(__file__).resolve().parent / "results" / "lab09_laptop_grid.csv"
    grid[[c for c in COLUMNS if c in grid]].to_csv(out, index=False)
    print(f"{len(grid)} rows in {time.time() - t0:.0f} s -> {out.name}")


if __name__ == "__main__":
    main()
