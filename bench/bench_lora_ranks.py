"""The LoRA-rank table of chapter 10: reward gain of full fine-tuning and of LoRA at each
rank (at LORA_LR_FACTOR x the full-FT learning rate, and rank 1 also at 1x), mean +- std
over seeds, for a terminal (exact-match) and a dense (per-digit, summed) reward, all measured
side by side in one run, plus the bits learned (code-length gain over the task's prompts).

    python bench/bench_lora_ranks.py                    # laptop sizes (ranks 1-64, 3 seeds)
    python bench/bench_lora_ranks.py --preset smoke     # the lab's smoke sizes
    python bench/bench_lora_ranks.py --workers 2 --out runs/lora_ranks.jsonl   # resumable

Runs are independent processes with one thread each (bit-for-bit reproducible per seed).
Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from pathlib import Path

import numpy as np
import pandas as pd


def _rl_run(args):
    task_name, rank, factor, seed, preset = args
    import torch

    from rl_lab.tasks import Addition
    from rl_lab.toolkits.information import LORA_SWEEP_SIZES, bits_learned, sweep_config, train_adapter_run

    torch.set_num_threads(1)
    sizes = LORA_SWEEP_SIZES[preset]
    task = Addition() if task_name == "terminal" else Addition(reward_mode="partial")
    eval_set = Addition().make_dataset(sizes["eval_prompts"], seed=777)
    t0 = time.perf_counter()
    _, df = train_adapter_run(sweep_config(preset, seed), rank, task=task, reward_funcs=[task.token_return],
                              lr_factor=factor, eval_examples=eval_set, eval_every=sizes["eval_every"])
    n = max(1, len(df) // 5)
    bits = bits_learned(df.attrs["p_start"], df.attrs["p_end"])
    scale = len(Addition().all_examples()) / len(eval_set)
    return {"kind": "rl", "task": task_name, "rank": rank, "lr_factor": factor, "seed": seed,
            "trainable": int(df.trainable.iloc[0]), "bits_learned": scale * bits["code_length_gain"],
            "bits_moved": scale * bits["success_kl"],
            "success_start": df.attrs["success_start"], "success_end": float(df.success.dropna().iloc[-1]),
            "reward_first": float(df.reward.iloc[:n].mean()), "reward_last": float(df.reward.iloc[-n:].mean()),
            "episodes": int(df.episodes.iloc[-1]), "seconds": time.perf_counter() - t0}


def mean_std(x):
    return f"{np.mean(x):+.4f} ± {np.std(x, ddof=1) if len(x) > 1 else 0.0:.4f}"


def main(argv=None) -> int:
    from rl_lab.toolkits.information import LORA_SWEEP_SIZES
    from rl_lab.toolkits.lora import LORA_LR_FACTOR

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="laptop", choices=list(LORA_SWEEP_SIZES))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None,
                    help="append every finished run as a JSON line; rerunning resumes from it")
    args = ap.parse_args(argv)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)

    sizes = LORA_SWEEP_SIZES[args.preset]
    variants = [(None, 1.0)] + [(r, LORA_LR_FACTOR) for r in sizes["ranks"]] + [(r, 1.0) for r in sizes["unscaled_ranks"]]
    jobs = [(t, r, f, s, args.preset) for t in ("terminal", "dense") for r, f in variants for s in sizes["seeds"]]
    rows = []
    if args.out and args.out.exists():  # resume: keep finished runs (one JSON object per line)
        rows = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
        done = {(r["task"], r["rank"], r["lr_factor"], r["seed"]) for r in rows}
        jobs = [j for j in jobs if j[:4] not in done]
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for row in pool.imap_unordered(_rl_run, jobs, chunksize=1):
            rows.append(row)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    wall = time.perf_counter() - t0

    rl = pd.DataFrame(rows)
    rl["variant"] = [("full FT" if pd.isna(r) else f"LoRA r={int(r)}" + ("" if f == LORA_LR_FACTOR else f", lr x{f:g}"))
                     for r, f in zip(rl["rank"], rl["lr_factor"])]
    order = {("terminal", 0): 0, ("dense", 0): 1}
    rl["order"] = [order[t, 0] * 100 + [(None if pd.isna(r) else int(r), f) for r, f in variants].index(
        (None if pd.isna(r) else int(r), f)) for t, r, f in zip(rl.task, rl["rank"], rl.lr_factor)]
    rl = rl.sort_values(["order", "seed"])
    rl["success_gain"] = rl.success_end - rl.success_start
    rl["reward_gain"] = rl.reward_last - rl.reward_first
    print(f"preset {args.preset}: {sizes['steps']} steps x {sizes['prompts_per_step'] * sizes['num_generations']} "
          f"episodes, seeds {list(sizes['seeds'])}; full-FT lr 5e-5, LoRA lr x{LORA_LR_FACTOR:g} unless noted; "
          f"{wall:.0f} s wall with {args.workers} workers (this call)\n")
    print("| task | variant | trainable | Δ exact success (held out) | Δ training reward (last − first fifth) "
          "| bits learned (code-length gain, task) |")
    print("|---|---|---|---|---|---|")
    for (task, variant), g in rl.groupby(["task", "variant"], sort=False):
        print(f"| {task} | {variant} | {g.trainable.iloc[0]:,} | {mean_std(g.success_gain)} | "
              f"{mean_std(g.reward_gain)} | {np.mean(g.bits_learned):+,.0f} ± {np.std(g.bits_learned, ddof=1):,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
