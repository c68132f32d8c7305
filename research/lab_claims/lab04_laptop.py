"""Lab 4's training grid in the `laptop` preset, run once and shipped, so that CI (which runs the
labs in `smoke`) checks the lab's laptop-only reward claims on these numbers (issue 29, item 14).

    .venv/bin/python research/lab_claims/lab04_laptop.py      # a few minutes on one CPU thread

The call is the lab's own (labs/lab04_masking_trust_regions.md, the cell after "Now training"),
with the laptop preset's sizes: every method x 3 seeds x 100 steps of 8 prompts, logit noise 0.2.
Writes results/lab04_laptop_grid.csv: one row per (method, seed, step) with the columns the lab
reduces (reward, the rejected fraction of sequences, grad_norm)."""
import time
from pathlib import Path

import torch

from rl_lab.corrections import correction_preset
from rl_lab.toolkits.compare import run_grid

METHODS = ["None (monitor only)", "TRM-Max", "TRM-Avg", "TRM", "Geo-RS"]
LAPTOP = dict(steps=100, prompts=8, seeds=3)               # the lab's SIZES["laptop"]
COLUMNS = ["method", "seed", "step", "reward", "rollout_corr/rollout_rs_seq_masked_fraction", "grad_norm"]


def main() -> None:
    torch.set_num_threads(1)
    t0 = time.time()
    grid = run_grid({m: correction_preset(m) for m in METHODS}, seeds=range(LAPTOP["seeds"]),
                    preset="laptop", max_steps=LAPTOP["steps"], eval_steps=0, sampler_logit_noise=0.2,
                    prompts_per_step=LAPTOP["prompts"])
    out = Path(__file__).resolve().parent / "results" / "lab04_laptop_grid.csv"
    grid[[c for c in COLUMNS if c in grid]].to_csv(out, index=False)
    print(f"{len(grid)} rows in {time.time() - t0:.0f} s -> {out.name}")


if __name__ == "__main__":
    main()
