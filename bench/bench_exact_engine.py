"""The exact-zero engine's cost against the fast decoder (issue 49): rollout time per call, side by
side, on the same model, prompts and sampling, alternating the two engines.

The exact engine (rl_lab.engines.exact) runs the trainer's whole forward over the (B, P + T) buffer
for every generated token (no key/value cache), so its cost grows like T times one scoring forward;
the fast decoder (rl_lab.engines.fast_decode) runs one prefill and one cached step per token.  A
training step also pays the trainer's forward and backward, which both samplers share, so the
step's ratio is smaller than the rollout's: --step measures whole trainer steps too.

    python bench/bench_exact_engine.py                           # 0.3M warm start, 8 x 8, T = 8
    python bench/bench_exact_engine.py --sizes 0.3M 3M --batch 8 8 --new 8 16 --reps 5 --step

Prints, for each size and length, the median seconds per rollout of each engine and their ratio
(exact / fast); with --step the same for one trainer step.  Run it alone (the lead's benchmarks).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from rl_lab.config import RLConfig
from rl_lab.trainer import Trainer


def side_by_side(fast, exact, reps: int) -> tuple[float, float]:
    """Median seconds of `fast()` and `exact()`, timed alternately after one warm-up call each."""
    fast(), exact()
    times = {fast: [], exact: []}
    for _ in range(reps):
        for fn in (fast, exact):
            t0 = time.perf_counter()
            fn()
            times[fn].append(time.perf_counter() - t0)
    return statistics.median(times[fast]), statistics.median(times[exact])


def trainers(size: str, prompts: int, generations: int, new: int):
    model = "warm-start" if size == "0.3M" else size
    common = dict(task="addition", model=model, prompts_per_step=prompts, num_generations=generations,
                  max_completion_length=new, progress_bar=False, learning_rate=0.0)
    return Trainer(RLConfig(**common)), Trainer(RLConfig(**common, mismatch={}))


def rollout(trainer):
    examples = [trainer.task.sample(trainer.rng) for _ in range(trainer.config.prompts_per_step)]
    prompts = [e["prompt"] for e in examples]
    return lambda: trainer.engine.generate(prompts, trainer.config.num_generations, trainer.config.sampling(),
                                           torch.Generator().manual_seed(0))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["0.3M"])
    parser.add_argument("--batch", nargs=2, type=int, default=[8, 8], metavar=("PROMPTS", "GENERATIONS"))
    parser.add_argument("--new", nargs="+", type=int, default=[8], help="max_completion_length values")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--step", action="store_true", help="also time whole trainer steps")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    print(f"{'size':>5} {'T':>4} {'what':>8} {'fast s':>9} {'exact s':>9} {'exact/fast':>10}")
    for size in args.sizes:
        for new in args.new:
            fast, exact = trainers(size, *args.batch, new)
            rows = [("rollout", rollout(fast), rollout(exact))]
            if args.step:
                rows.append(("step", fast.step, exact.step))
            for what, f, e in rows:
                tf, te = side_by_side(f, e, args.reps)
                print(f"{size:>5} {new:>4} {what:>8} {tf:9.4f} {te:9.4f} {te / tf:10.2f}")


if __name__ == "__main__":
    main()
