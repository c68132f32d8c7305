"""Per-call cost of the Python tool's sandbox: calls per second in each mode, side by side.

    python bench/bench_sandbox.py            # 40 calls per variant, interleaved, 3 rounds
    python bench/bench_sandbox.py --calls 100

Variants, each running the same small program (`print(sum(range(1000)))`):
  bare interpreter   `python -I -S -X utf8 -c` through posix_spawn, no limits, no preloads (the floor)
  unsandboxed        run_python with allow_unsandboxed (rlimits, audit hook, a folder on disk)
  namespaces         run_python in namespaces mode (user/PID/mount/net namespaces, read-only root,
                     tmpfs, seccomp, rlimits, audit hook)
The variants alternate call by call so a busy machine slows them alike; the table gives calls per
second and each variant's cost relative to the bare interpreter.  Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from unittest import mock

from rl_lab.agents import SandboxLimits, python_tool, run_python, sandbox_mode

PROGRAM = "print(sum(range(1000)))"


def bare() -> None:
    pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-X", "utf8", "-c", PROGRAM + " or 0"],
                         {"PATH": "/usr/bin:/bin"}, file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
    os.waitpid(pid, 0)


def namespaces() -> None:
    assert run_python(PROGRAM).output == "499500\n"


def unsandboxed() -> None:
    with mock.patch.object(python_tool, "sandbox_mode", lambda: python_tool.SandboxMode("unsandboxed", "bench")), \
            mock.patch.object(python_tool, "_warned_unsandboxed", True):
        assert run_python(PROGRAM, SandboxLimits(allow_unsandboxed=True)).output == "499500\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    mode = sandbox_mode()
    print(f"mode on this machine: {mode.name} ({mode.reason}); euid {os.geteuid()}; {os.cpu_count()} CPUs")
    variants = {"bare interpreter": bare, "unsandboxed": unsandboxed}
    if mode.name == "namespaces":
        variants["namespaces"] = namespaces
    seconds = {name: [] for name in variants}
    for _ in range(args.rounds):
        for _ in range(args.calls):
            for name, call in variants.items():
                start = time.perf_counter()
                call()
                seconds[name].append(time.perf_counter() - start)
    floor = sorted(seconds["bare interpreter"])[len(seconds["bare interpreter"]) // 2]
    print(f"{'variant':18s} {'calls/s':>8s} {'median ms':>10s} {'p90 ms':>8s} {'x bare':>7s}")
    for name, values in seconds.items():
        values = sorted(values)
        median, p90 = values[len(values) // 2], values[int(0.9 * len(values))]
        print(f"{name:18s} {1 / median:8.1f} {1e3 * median:10.1f} {1e3 * p90:8.1f} {median / floor:7.2f}")


if __name__ == "__main__":
    main()
