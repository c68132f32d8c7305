"""Benchmark 6: sweep throughput, runs per hour of one stability-map cell, 1 worker against 2.

The cell is research/stability_map's staleness-2 / lr 5e-4 cell (warm-started 0.3M model, 2-digit
addition, 8 x 8 completions, 300 steps, a held-out eval at the end) over `--seeds` seeds. Each
setting runs the same sweep afresh in its own temporary folder with `rl_lab.tools.sweep.run_sweep`:

    1 worker  x all threads   one run at a time, torch using every core
    N workers x 1 thread       N runs at once (spawned processes), one thread each

The settings alternate (A B A B ... for --reps repetitions) so the machine's drift hits them
alike; prints each repetition's wall time, runs per hour (median) and the ratio of the two.

    python bench/bench_sweep.py                       # 4 seeds, 1 repetition, 300 steps
    python bench/bench_sweep.py --steps 100 --reps 2  # shorter runs, two repetitions
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rl_lab.tools.sweep import _cpu_count, run_sweep

CELL = {"task": "addition", "preset": "smoke", "model": "warm-start", "prompts_per_step": 8,
        "num_generations": 8, "sampler_staleness": 2, "learning_rate": 5e-4}


def spec(steps: int, seeds: int, out: str) -> dict:
    return {"base": {**CELL, "max_steps": steps, "eval_steps": steps}, "grid": {}, "seeds": list(range(seeds)),
            "out": out}


def timed_sweep(steps: int, seeds: int, workers: int, threads: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        df = run_sweep(spec(steps, seeds, out), workers=workers, threads=threads, progress=False)
        seconds = time.perf_counter() - t
    if len(df) != seeds:
        raise SystemExit(f"the sweep finished {len(df)} of {seeds} runs")
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=4, help="runs per sweep")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--workers", type=int, default=None, help="the parallel setting (default: cpu count)")
    a = ap.parse_args()
    cores = _cpu_count()
    workers = a.workers or cores
    settings = {f"1 worker x {cores} threads": (1, cores), f"{workers} workers x 1 thread": (workers, 1)}
    print(f"{cores} cores; load average {os.getloadavg()[0]:.1f}; one cell x {a.seeds} seeds of {a.steps} "
          f"steps per sweep; {a.reps} repetition(s), settings alternating")
    seconds = {k: [] for k in settings}
    for rep in range(a.reps):
        for name, (w, th) in settings.items():
            seconds[name].append(timed_sweep(a.steps, a.seeds, w, th))
            print(f"  rep {rep + 1}: {name:22s} {seconds[name][-1]:7.1f} s", flush=True)
    rate = {k: 3600 * a.seeds / statistics.median(v) for k, v in seconds.items()}
    for k, r in rate.items():
        print(f"{k:22s} {r:6.1f} runs/hour")
    one, many = list(settings)
    ratios = [b / c for b, c in zip(seconds[one], seconds[many])]
    print(f"throughput {many} / {one}: {statistics.median(ratios):.2f}x  (per repetition: "
          + ", ".join(f"{x:.2f}" for x in ratios) + f"); load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
