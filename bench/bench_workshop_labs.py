"""The workshop's lab times (book/workshop.md, "The plan"): each lab of the plan executed alone in a
fresh kernel with plain nbclient, in each preset, one after the other.  The page quotes its times
from book/data/lab_times.yaml: record a new run there (and in BENCHMARKS.md, section 4), with the
machine it ran on.

    python bench/bench_workshop_labs.py                       # smoke and laptop, the plan's labs
    python bench/bench_workshop_labs.py --presets smoke --labs lab01_first_rl_run

The kernel is the `python3` kernel of this environment with the package's defaults (no thread
variables set here).  Run it on an otherwise idle machine; it prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import jupytext
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
# the four blocks' labs, then the instructor's vLLM demo (it stops at its first cell without vLLM)
PLAN = ["lab01_first_rl_run", "lab_when_speed_kills", "lab03_token_vs_sequence",
        "lab05_rollout_correction", "lab_measure_your_mismatch"]


def run_lab(name: str, preset: str, timeout: int) -> float:
    nb = jupytext.read(ROOT / "labs" / f"{name}.md")
    os.environ["RL_LAB_PRESET"] = preset                 # the kernel inherits it
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "labs")}}).execute()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", nargs="+", default=["smoke", "laptop"])
    ap.add_argument("--labs", nargs="+", default=PLAN)
    ap.add_argument("--timeout", type=int, default=1800, help="per cell, seconds")
    args = ap.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average before: {os.getloadavg()[0]:.2f}")
    times = {}
    for preset in args.presets:
        for lab in args.labs:
            times[lab, preset] = run_lab(lab, preset, args.timeout)
            print(f"  {lab:28s} {preset:7s} {times[lab, preset]:6.0f} s", flush=True)
    print("\n| lab | " + " | ".join(args.presets) + " |")
    print("|---|" + "---|" * len(args.presets))
    for lab in args.labs:
        print(f"| {lab} | " + " | ".join(f"{times[lab, p]:.0f} s" for p in args.presets) + " |")


if __name__ == "__main__":
    main()
