"""Threads beside other kernels (issue 33): one lab's training loop while 0, 1 or 2 other torch
processes train on the same CPUs, under each candidate thread policy.

    python bench/bench_threads.py                 # all policies x 0, 1, 2 busy neighbours (~10 min on 2 cores)
    python bench/bench_threads.py --steps 8 --policies today passive

Every process of a cell (the measured one and its busy neighbours) runs under the same policy, as a
package default would make them: the question is what each kernel should do when a student opens
several labs at once.  The measured process times `--steps` smoke-preset RL steps on the addition
warm start (rl_lab.tools.doctor.time_rl_steps, the step `rl-lab doctor` times) after 3 warm-up steps and
reports the median; the neighbours run the same steps in a loop until the cell ends.  The table
gives ms per step and the ratio to "today" with no neighbour, measured side by side in this run.
Run it on an otherwise idle machine: anything else running is one more neighbour.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# name -> (environment for every process of the cell, torch.set_num_interop_threads or None, description)
POLICIES = {
    "today": ({}, None, "torch's defaults: one thread per CPU, OpenMP's default (spinning) wait"),
    "one_thread": ({"OMP_NUM_THREADS": "1"}, None, "one thread per process"),
    "passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, None,
                "one thread per CPU, OpenMP threads sleep instead of spinning when idle"),
    "interop1": ({}, 1, "one thread per CPU, one inter-op thread"),
    "short_spin": ({"GOMP_SPINCOUNT": "10000"}, None,
                   "one thread per CPU, OpenMP threads spin 10k iterations (not 300k) before sleeping"),
    "passive_one_thread": ({"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"}, None,
                           "one thread per process, passive wait"),
    "passive_interop1": ({"OMP_WAIT_POLICY": "PASSIVE"}, 1, "passive wait and one inter-op thread"),
}

WORKER = r"""
import json, sys, time
interop = json.loads(sys.argv[2])
import torch
if interop is not None:
    torch.set_num_interop_threads(interop)
from rl_lab.tools.doctor import time_rl_steps
if sys.argv[1] == "busy":
    from rl_lab.presets import get_preset
    from rl_lab.trainer import Trainer
    t = Trainer(get_preset("smoke", task="addition", progress_bar=False, output_dir=None))
    print("ready", flush=True)
    while True:
        t.step()
else:
    ms, threads = time_rl_steps(steps=int(sys.argv[3]), warmup=3)
    print(json.dumps({"ms": ms, "threads": threads}), flush=True)
"""


def env_for(policy_env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(policy_env)
    env["RL_LAB_THREAD_POLICY"] = "off"   # the package's own default must not mask the policy tested
    return env


def cell(policy: str, busy: int, steps: int) -> float:
    penv, interop, _ = POLICIES[policy]
    env = env_for(penv)
    neighbours = [subprocess.Popen([sys.executable, "-c", WORKER, "busy", json.dumps(interop)], env=env,
                                   stdout=subprocess.PIPE, text=True) for _ in range(busy)]
    try:
        for p in neighbours:                 # wait until each neighbour is training
            assert p.stdout.readline().strip() == "ready", "a busy neighbour failed to start"
        time.sleep(2)
        out = subprocess.run([sys.executable, "-c", WORKER, "measure", json.dumps(interop), str(steps)],
                             env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])["ms"]
    finally:
        for p in neighbours:
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    ap.add_argument("--rounds", type=int, default=1, help="repeat the whole sweep; cells report the median")
    args = ap.parse_args()
    import torch
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {torch.backends.cpu.get_cpu_capability()}; "
          f"{args.steps} steps per cell; load average before: {os.getloadavg()[0]:.2f}")
    samples: dict[tuple[str, int], list[float]] = {}
    for r in range(args.rounds):
        for busy in args.busy:                   # policies side by side at each load
            for policy in args.policies:
                ms = cell(policy, busy, args.steps)
                samples.setdefault((policy, busy), []).append(ms)
                print(f"  round {r + 1} {policy:18s} {busy} busy: {ms:8.1f} ms/step", flush=True)
    results = {k: statistics.median(v) for k, v in samples.items()}
    base = results.get(("today", 0))
    print("\n| policy | " + " | ".join(f"{b} busy neighbour{'s' if b != 1 else ''}" for b in args.busy) + " |")
    print("|---|" + "---|" * len(args.busy))
    for policy in args.policies:
        cells = []
        for b in args.busy:
            ms = results[policy, b]
            cells.append(f"{ms:.0f} ms" + (f" ({ms / base:.1f}x)" if base else ""))
        print(f"| {policy}: {POLICIES[policy][2]} | " + " | ".join(cells) + " |")
    if base:
        print(f"\n(median of {args.rounds} round(s); x: ms per step over 'today' with no neighbour, "
              "measured in this run)")


if __name__ == "__main__":
    main()
