"""The "When speed kills stability" lab's growth runs in the `laptop` preset, run once and shipped,
so that CI (which runs the labs in `smoke`) checks the chapter's statement on them (issue 54,
item 2): at this scale neither k3 nor the log-perplexity gap grows over training, for any sampler
(one-sample t over seeds of the log ratio last fifth / first fifth, t > 3 = grew).

    .venv/bin/python research/lab_claims/speed_kills_laptop.py   # about 6 minutes on one CPU thread

The runs are the lab's own (labs/lab_when_speed_kills.md, "Does the mismatch grow?"): three samplers
x 4 seeds x 300 steps from the shipped addition warm start. Writes
results/speed_kills_laptop_growth.csv: one row per (source, seed, step) with the monitors the lab
reduces."""
import time
from pathlib import Path

import pandas as pd
import torch

from rl_lab import Trainer, get_preset, load_warm_start

SOURCES = {"HF bf16": dict(sampler_dtype="bfloat16"), "HF fp16": dict(sampler_dtype="float16"),
           "fp32 + logit noise 0.1": dict(sampler_logit_noise=0.1)}             # the lab's SOURCES
LAPTOP = dict(steps=300, train_seeds=4)                                          # SIZES["laptop"]
COLUMNS = ["step", "rollout_corr/k3_kl", "rollout_corr/log_ppl_abs_diff", "entropy", "reward"]


def main() -> None:
    torch.set_num_threads(1)
    t0, frames = time.time(), []
    for name, kw in SOURCES.items():
        for seed in range(LAPTOP["train_seeds"]):
            m, t = load_warm_start("addition")
            cfg = get_preset("laptop", max_steps=LAPTOP["steps"], seed=seed, progress_bar=False,
                             eval_steps=0, save_steps=0, output_dir=None, **kw)
            df = Trainer(cfg, model=m, tokenizer=t).train()
            frames.append(df[[c for c in COLUMNS if c in df]].assign(source=name, seed=seed))
    out = Path(__file__).resolve().parent / "results" / "speed_kills_laptop_growth.csv"
    grid = pd.concat(frames, ignore_index=True)
    grid[["source", "seed", *COLUMNS]].to_csv(out, index=False)
    print(f"{len(grid)} rows in {time.time() - t0:.0f} s -> {out.name}")


if __name__ == "__main__":
    main()
