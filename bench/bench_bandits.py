"""Compute per step of exact Thompson sampling, ensemble sampling and Ensemble++ against the
dimension d and the ensemble size M, and (with --regret) the regret table of chapter 11.

    python bench/bench_bandits.py                    # time per step vs d (M = 16) and vs M (d = 50)
    python bench/bench_bandits.py --regret           # regret at M in {1,...,64}, laptop preset sizes
    python bench/bench_bandits.py --regret --preset smoke --seeds 24

Timing: every agent runs the same problems (one batch of `--seeds` seeds, one CPU thread) in
the same process, one after the other, and the table reports milliseconds per step for the whole
batch together with the ratio to Ensemble++ measured in the same run.  TS pays an O(d^3)
Cholesky factorisation for every decision; Ensemble++ and ensemble sampling pay O(d^2 + dM).
Wall times on a shared machine are noisy: read the ratios, not the absolute numbers.
"""
from __future__ import annotations

import argparse
import math
import time

import torch

from rl_lab.toolkits.bandits import (
    EnsemblePlusPlus,
    EnsembleSampling,
    LinearBandit,
    ThompsonSampling,
    bandit_preset,
    regret_table,
    run_bandit,
)


def time_per_step(d: int, M: int, seeds: int, steps: int, actions: int) -> dict[str, float]:
    env = LinearBandit(d=d, num_actions=actions, contexts="varying")
    out = {}
    for agent in (ThompsonSampling(d=d), EnsemblePlusPlus(d=d, M=M), EnsembleSampling(d=d, M=M)):
        run = run_bandit(env, agent, steps, seeds, seed=0)
        out[agent.name] = 1e3 * run.seconds_per_step
    return out


def timing(args) -> None:
    print(f"time per step (ms, all {args.seeds} seeds together; {args.steps} steps, "
          f"{args.actions} actions, 1 thread)")
    header = f"{'d':>5} {'M':>5} {'TS':>9} {'Ens++':>9} {'ES':>9} {'TS/Ens++':>9} {'ES/Ens++':>9}"
    for label, grid in (("against d (M = 16)", [(d, 16) for d in args.dims]),
                        ("against M (d = 50)", [(50, M) for M in args.ms])):
        print(f"\n{label}\n{header}")
        for d, M in grid:
            t = time_per_step(d, M, args.seeds, args.steps, args.actions)
            e = t["Ensemble++"]
            print(f"{d:>5} {M:>5} {t['TS']:>9.3f} {e:>9.3f} {t['ensemble sampling']:>9.3f} "
                  f"{t['TS'] / e:>9.2f} {t['ensemble sampling'] / e:>9.2f}")


def regret(args) -> None:
    sizes = bandit_preset(args.preset)
    steps, seeds = args.steps_regret or sizes["steps"], args.seeds_regret or sizes["seeds"]
    d, K = 10, 100
    env = LinearBandit(d=d, num_actions=K)
    print(f"Linear bandit d={d}, K={K} fixed actions, theta* ~ N(0, 10 I), eta = 1; T={steps}, "
          f"{seeds} seeds; d ln T = {d * math.log(steps):.0f}")
    start = time.perf_counter()
    runs = [run_bandit(env, ThompsonSampling(d=d), steps, seeds)]
    for M in (1, 2, 4, 8, 16, 32, 64):
        runs.append(run_bandit(env, EnsemblePlusPlus(d=d, M=M), steps, seeds))
        runs.append(run_bandit(env, EnsembleSampling(d=d, M=M), steps, seeds))
    table = regret_table(runs)
    ts = runs[0].mean_se()
    print("\n| M | Ensemble++ | ensemble sampling | TS |\n|---|---|---|---|")
    for i, M in enumerate((1, 2, 4, 8, 16, 32, 64)):
        epp, es = runs[1 + 2 * i].mean_se(), runs[2 + 2 * i].mean_se()
        print(f"| {M} | {epp[0]:.1f} ± {epp[1]:.1f} | {es[0]:.1f} ± {es[1]:.1f} | {ts[0]:.1f} ± {ts[1]:.1f} |")
    print("\n(final cumulative regret, mean ± standard error over seeds)\n")
    print(table[["agent", "regret", "se", "median"]].round(1).to_string(index=False))
    print(f"\n{time.perf_counter() - start:.0f} s")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--regret", action="store_true", help="print the regret table instead of timings")
    p.add_argument("--preset", default="laptop", help="sizes for --regret (smoke, laptop, gpu)")
    p.add_argument("--steps-regret", type=int, default=None)
    p.add_argument("--seeds-regret", type=int, default=None)
    p.add_argument("--seeds", type=int, default=16, help="seeds per batch for the timings")
    p.add_argument("--steps", type=int, default=200, help="steps per timing run")
    p.add_argument("--actions", type=int, default=50)
    p.add_argument("--dims", type=int, nargs="+", default=[10, 25, 50, 100, 200])
    p.add_argument("--ms", type=int, nargs="+", default=[4, 16, 64, 256])
    args = p.parse_args()
    torch.manual_seed(0)
    regret(args) if args.regret else timing(args)


if __name__ == "__main__":
    main()
