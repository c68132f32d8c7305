"""How long rl_lab.exact takes to compute the exact bias and variance of every estimator,
as the number of sequences V**T grows to ~10^6.

    python bench/bench_exact.py                 # tabular policy, V=2, T = 10..20, and V=4
    python bench/bench_exact.py --network       # also the linear network policy (dense scores)
    python bench/bench_exact.py --max-T 16      # a quicker run
    python bench/bench_exact.py --threads 1     # often faster: the work is memory-bound, and on a
                                                # busy machine a second thread mostly waits

For each size it reports the time to build the problem (enumerate, log-prob tables, exact
grad J, divergences) and the time for all nine estimators' exact moments (mean, bias,
variance), measured in the same run, and the growth factor from the previous size.  The
exact moments are O(N) tree passes per estimator (O(N P) for a network policy), so 4x the
sequences should cost about 4x the time once fixed overheads stop dominating.  The machine's
load average is printed, and the CPU time next to the wall time: on a shared machine the
wall times are inflated.
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from rl_lab.exact import (
    ExactProblem,
    NetworkPolicy,
    SequenceSpace,
    TabularPolicy,
    behaviour_logits,
    exact_moments,
    make_reward,
    standard_estimators,
)


def run(space: SequenceSpace, policy_cls, repeats: int = 1):
    policy = policy_cls(space, seed=0)
    reward = make_reward(space, "majority")
    mu = behaviour_logits(space, policy, "noise", 0.3)
    t0 = time.perf_counter()
    problem = ExactProblem(space, policy, mu, reward)
    t1 = time.perf_counter()
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        s, c = time.perf_counter(), time.process_time()
        moments = [exact_moments(problem, est) for est in standard_estimators(C=2.0)]
        best, best_cpu = min(best, time.perf_counter() - s), min(best_cpu, time.process_time() - c)
    assert moments[5].bias_norm < 1e-12 * max(1.0, float(problem.grad.norm()))   # seq-IS: unbiased
    return t1 - t0, best, best_cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-T", type=int, default=20, help="largest horizon for V=2 (N = 2**T)")
    ap.add_argument("--network", action="store_true", help="also time the linear NetworkPolicy")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    grid = [(2, T) for T in range(10, args.max_T + 1, 2)] + [(4, T) for T in (5, 6, 7, 8, 9, 10)]
    policies = [TabularPolicy] + ([NetworkPolicy] if args.network else [])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"load average {load:.1f}; 9 estimators per row")
    print(f"{'policy':14s} {'V':>2s} {'T':>3s} {'N = V^T':>10s} {'build s':>8s} {'9 est. s':>9s} "
          f"{'(CPU s)':>8s} {'x prev':>7s} {'ns/(seq*est)':>13s}")
    for policy_cls in policies:
        prev, last_V = None, None
        for V, T in grid:
            prev = prev if V == last_V else None
            last_V = V
            space = SequenceSpace(V, T)
            build, est, cpu = run(space, policy_cls, repeats=1 if space.N > 2 ** 17 else 3)
            growth = f"{est / prev:7.2f}" if prev else "      -"
            per = est / (space.N * 9) * 1e9
            print(f"{policy_cls.__name__:14s} {V:2d} {T:3d} {space.N:10,d} {build:8.2f} {est:9.2f} "
                  f"{cpu:8.2f} {growth} {per:13.1f}", flush=True)
            prev = est


if __name__ == "__main__":
    main()
