"""Benchmark 5: one GRPO step at long completions, rl_lab against TRL's GRPOTrainer and a plain step.

The grid of issue 20: completion length T in {16, 128, 512} x model {0.3M, 3M, 30M}. Every
completion is forced to exactly T tokens (<eos> held back: rl_lab's `min_tokens`, HF's and TRL's
`min_new_tokens`), so each contender generates, scores and trains on the same number of tokens.
The contenders are bench_rl_step.py's (same model, task, optimizer, loss); they alternate step by
step in one process, and each ratio is the median of the step-by-step ratios with quartiles.

    python bench/bench_long_completions.py                          # the whole grid (about an hour)
    python bench/bench_long_completions.py --sizes 0.3M --lengths 16 128
    python bench/bench_long_completions.py --memory                 # peak memory per contender, T = 512

Beside each contender's step time: its achieved model FLOP/s and their fraction of the step's
roofline (bench_roofline.py: the step's products -- sampling's prefill and one-token decode steps,
the trainer's forward and backward over every row -- each at the rate this machine sustains for
its shape, measured in the same run right after the cell).  The FLOPs are the model's, the same
for all three contenders (the plain computation; sharing the prompt is one way to need fewer), so
FLOP/s compare like steps/s, and the fraction says how far each is from what the matrix products
allow.

Three more outputs:
* where rl_lab's step time goes (sampling, rewards, the trainer's forward, backward, optimizer,
  corrections + advantages + loss + metrics), from timers around those calls in its own steps;
* how each contender's step time grows with T: the exponent b of a least-squares fit
  time = a * T^b over the lengths run (b = 1: linear; attention alone would push it toward 2);
* `--memory`: each contender alone in a fresh child process for one step, the
  child's peak resident memory (getrusage ru_maxrss), since one process cannot tell its
  contenders' peaks apart.
Batch sizes shrink with the model so a cell fits in minutes on 2 CPU cores (BATCH below); the
batch is the same for every contender in a cell. Needs `trl` (`pip install -e ".[bench]"`).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_rl_step as rl_step  # noqa: E402  (the contenders)
import bench_roofline as roofline  # noqa: E402  (FLOPs and the shape-aware roofline)
import torch  # noqa: E402

import rl_lab.trainer as trainer_module  # noqa: E402
from rl_lab.tools.stats import power_law_exponent  # noqa: E402

LENGTHS = (16, 128, 512)
SIZES = ("0.3M", "3M", "30M")
BATCH = {"0.3M": (8, 8), "3M": (8, 8), "30M": (2, 8)}       # prompts x generations per step
STEPS = {16: 12, 128: 5, 512: 3}                            # timed steps per cell, after one warm-up
PHASES = ("sampling", "rewards", "forward", "backward", "optimizer", "other")


# --------------------------------------------------------------------------- rl_lab's time breakdown
class PhaseTimers:
    """Wall time of the named calls inside rl_lab's steps (each step's phases sum to its update and
    rollout time, up to `other`).  `armed` is set only while an rl_lab step runs, so the global
    patches (autograd's backward) do not count the other contenders' work."""

    def __init__(self):
        self.armed = False
        self.steps: list[dict[str, float]] = []
        self.current: dict[str, float] = defaultdict(float)

    def wrap(self, phase: str, fn):
        def timed(*args, **kwargs):
            if not self.armed:
                return fn(*args, **kwargs)
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                rl_step.sync()
                self.current[phase] += time.perf_counter() - t
        return timed

    @contextlib.contextmanager
    def step(self):
        self.armed, self.current = True, defaultdict(float)
        t = time.perf_counter()
        try:
            yield
        finally:
            total = time.perf_counter() - t
            self.armed = False
            row = {k: self.current[k] for k in PHASES[:-1]}
            row["other"] = total - sum(row.values())
            self.steps.append(row)


def attach_timers(trainer, timers: PhaseTimers):
    """Time sampling, rewards, the log-prob forward, backward and the optimizer of one Trainer."""
    trainer.engine.generate = timers.wrap("sampling", trainer.engine.generate)
    trainer._logprobs = timers.wrap("forward", trainer._logprobs)
    trainer.optimizer.step = timers.wrap("optimizer", trainer.optimizer.step)


@contextlib.contextmanager
def global_timers(timers: PhaseTimers):
    """Patches that live at module level: reward calls and autograd's backward."""
    saved = trainer_module.call_reward_funcs, torch.autograd.backward
    trainer_module.call_reward_funcs = timers.wrap("rewards", saved[0])
    torch.autograd.backward = timers.wrap("backward", saved[1])
    try:
        yield
    finally:
        trainer_module.call_reward_funcs, torch.autograd.backward = saved


def timed_rl_lab_steps(size, steps, seed, shape, timers):
    trainer = rl_step.rl_lab_trainer(size, steps, seed, shape)
    attach_timers(trainer, timers)
    for _ in range(steps):
        t = time.perf_counter()
        with timers.step():
            trainer.step()
        yield time.perf_counter() - t


# --------------------------------------------------------------------------- one cell
def run_cell(size: str, length: int, steps: int, workdir: str, with_trl: bool) -> dict:
    prompts, gens = BATCH[size]
    shape = rl_step.Shape(prompts, gens, length, forced=True)
    timers = PhaseTimers()
    others = {"rl_lab": timed_rl_lab_steps(size, steps, 1, shape, timers),
              "plain": rl_step.plain_steps(size, steps, 1, shape)}
    with global_timers(timers):
        if with_trl:
            times = rl_step.trl_steps(size, steps, 1, workdir, others, shape)
        else:
            times = {k: [next(g) for _ in range(steps)] for k, g in others.items()}  # not interleaved
    phases = {k: statistics.median(s[k] for s in timers.steps[1:]) for k in PHASES}
    return {"size": size, "length": length, "rows": shape.rows, "tokens": shape.rows * length,
            "times": times, "phases": phases, **step_roofline(size, shape.rows, length)}


def step_roofline(size: str, rows: int, length: int) -> dict:
    """The cell's model FLOPs per step (sampling, train) and the step's roofline time in seconds."""
    from rl_lab.models import model_config
    from rl_lab.tokenizer import build_tokenizer
    config = model_config(size, vocab_size=len(build_tokenizer()))
    roofline.DEVICE = torch.device(rl_step.DEVICE)
    prompt = roofline.PROMPT   # every 2-digit addition prompt ("59+17=") is 7 tokens
    products = roofline.step_gemms(config, rows, prompt, length)
    return {"flops": {k: sum(p[-1] for p in v) for k, v in products.items()},
            "roofline": sum(roofline.roofline_time(v) for v in products.values())}


def ratio(cell, num, den):
    """Median and quartiles of the step-by-step ratios num/den, warm-up step left out."""
    r = rl_step.paired(cell["times"][num], cell["times"][den], skip=1)
    if len(r) == 1:
        return r[0], r[0], r[0]
    q = statistics.quantiles(r, n=4, method="inclusive")
    return statistics.median(r), q[0], q[2]


def print_cells(cells, names):
    print("\nper contender: median step time, achieved model GFLOP/s (the step's FLOPs / its time) and "
          "their fraction of the step's roofline")
    print(f"{'model':>5} {'T':>4} {'rows':>4} {'tokens':>6} {'GFLOP':>7} {'roofline':>8} | "
          + " | ".join(f"{n + ' s, GFLOP/s (of roof)':>27}" for n in names)
          + (" | rl_lab/TRL steps/s (quartiles)" if "TRL" in names else "") + " | rl_lab/plain time (quartiles)")
    for c in cells:
        med = {n: statistics.median(c["times"][n][1:]) for n in names}
        flops = sum(c["flops"].values())
        row = f"{c['size']:>5} {c['length']:>4} {c['rows']:>4} {c['tokens']:>6} {flops / 1e9:7.2f} {c['roofline']:7.3f}s | "
        row += " | ".join(f"{med[n]:>10.3f} s {flops / med[n] / 1e9:7.1f} ({c['roofline'] / med[n]:4.0%})"
                          for n in names)
        if "TRL" in names:
            m, lo, hi = ratio(c, "TRL", "rl_lab")
            row += f" | {m:5.2f}x ({lo:.2f}-{hi:.2f})" + " " * 11
        m, lo, hi = ratio(c, "rl_lab", "plain")
        row += f" | {m:5.2f}x ({lo:.2f}-{hi:.2f})"
        print(row)
    print("\nmodel GFLOP per step: " + "; ".join(
        f"{c['size']} T={c['length']} sampling {c['flops']['sampling'] / 1e9:.2f} + train {c['flops']['train'] / 1e9:.2f}"
        for c in cells))
    print("\nrl_lab's step, median seconds per phase (share of the step):")
    print(f"{'model':>5} {'T':>4} | " + " | ".join(f"{p:>15}" for p in PHASES))
    for c in cells:
        total = sum(c["phases"].values())
        print(f"{c['size']:>5} {c['length']:>4} | " + " | ".join(
            f"{c['phases'][p]:8.3f} ({100 * c['phases'][p] / total:3.0f}%)" for p in PHASES))
    by_size = defaultdict(list)
    for c in cells:
        by_size[c["size"]].append(c)
    print("\nfitted exponent b of step time ~ T^b (per token of the batch: b - 1):")
    for size, cs in by_size.items():
        if len(cs) < 2:
            continue
        lengths = [c["length"] for c in cs]
        fits = {n: power_law_exponent(lengths, [statistics.median(c["times"][n][1:]) for c in cs]) for n in names}
        print(f"  {size:>5} over T = {lengths}: " + ", ".join(f"{n} {b:.2f}" for n, b in fits.items()))


# --------------------------------------------------------------------------- peak memory
def child_main(contender: str, size: str, length: int):
    """One contender alone for one step (the optimizer state exists from the first); print the
    process's peak RSS, and its peak before the step (the libraries imported, nothing built)."""
    prompts, gens = BATCH[size]
    shape = rl_step.Shape(prompts, gens, length, forced=True)
    if contender == "TRL":
        from trl import GRPOConfig, GRPOTrainer  # noqa: F401  (imported before the baseline)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with tempfile.TemporaryDirectory() as work:
        if contender == "TRL":
            rl_step.trl_steps(size, 1, 1, work, {}, shape)
        else:
            gen = (rl_step.rl_lab_steps(size, 1, 1, shape) if contender == "rl_lab"
                   else rl_step.plain_steps(size, 1, 1, shape))
            for _ in gen:
                pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"maxrss_mib": peak, "before_mib": before}))


def memory_table(sizes, length, names, threads):
    print(f"\npeak resident memory at T = {length}, each contender alone in a fresh process for one step: "
          "the whole process (Python, libraries, model, optimizer state, activations) and, in brackets, "
          "what the step added to the peak after the libraries were imported:")
    for size in sizes:
        row = []
        for name in names:
            out = subprocess.run([sys.executable, __file__, "--child", name, size, str(length),
                                  "--threads", str(threads)], capture_output=True, text=True, check=True)
            m = json.loads(out.stdout.strip().splitlines()[-1])
            row.append(f"{name} {m['maxrss_mib']:.0f} MiB (+{m['maxrss_mib'] - m['before_mib']:.0f})")
        print(f"  {size:>5} ({'x'.join(map(str, BATCH[size]))} rows): " + ", ".join(row), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(BATCH))
    ap.add_argument("--lengths", nargs="+", type=int, default=list(LENGTHS))
    ap.add_argument("--steps", type=int, default=None, help="timed steps per cell (default: STEPS[T])")
    ap.add_argument("--threads", type=int, default=2, help="torch threads on the CPU")
    ap.add_argument("--no-trl", action="store_true", help="skip TRL (if it is not installed)")
    ap.add_argument("--memory", action="store_true", help="only the peak-memory table, at the longest T")
    ap.add_argument("--child", nargs=3, metavar=("CONTENDER", "SIZE", "T"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if rl_step.DEVICE == "cpu":
        torch.set_num_threads(a.threads)
    if a.child:
        return child_main(a.child[0], a.child[1], int(a.child[2]))
    names = ["rl_lab", "plain"] + ([] if a.no_trl else ["TRL"])
    if not a.no_trl:
        try:
            import trl  # noqa: F401
        except ImportError:
            raise SystemExit("TRL is not installed: pip install -e '.[bench]' (or pass --no-trl)")
    load = os.getloadavg()
    print(f"device {rl_step.DEVICE}, torch {torch.__version__}, {torch.get_num_threads()} threads; forced "
          f"completion lengths {a.lengths}; batch per model {BATCH}; load average {load[0]:.1f} at the start")
    if a.memory:
        return memory_table(a.sizes, max(a.lengths), names, a.threads)
    cells = []
    with tempfile.TemporaryDirectory() as work:
        for size in a.sizes:
            for length in a.lengths:
                steps = 1 + (a.steps or STEPS.get(length, 3))
                t = time.perf_counter()
                cells.append(run_cell(size, length, steps, work, not a.no_trl))
                print(f"  [{size} T={length}: {steps} steps of each contender in {time.perf_counter() - t:.0f} s]",
                      flush=True)
    print_cells(cells, names)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
