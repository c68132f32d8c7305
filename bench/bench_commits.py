"""One training run under two versions of the package, alternating: before/after on one machine.

Issue 32 asks whether the stability map's 300-step run got faster "than today", measured before and
after on the same machine.  This script checks out `--base` (a commit, tag or branch) into a
temporary git worktree and runs the same `rl-lab train` command under it and under this checkout,
one after the other, A B A B ..., each in a fresh process with `--threads` torch threads (the map's
sweeps run one thread per worker).  The default run is the map's cell (research/stability_map:
warm-started 0.3M model, 2-digit addition, 8 x 8 completions, staleness 2, lr 5e-4, 300 steps, a
held-out evaluation at the end).  It prints, per version, the median whole-run time (the process:
imports, model, steps, evaluation) and the median step time (`step_time` in metrics.jsonl), and the
ratio after / before of each, the median of the repetition-by-repetition ratios with their range.

    python bench/bench_commits.py --base e2eb49e^              # the map's run, 3 repetitions
    python bench/bench_commits.py --base HEAD~5 --steps 100 --reps 5
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sweep import CELL  # noqa: E402  the map's cell, as benchmark 7 runs it


def cell_args(steps: int) -> list[str]:
    """`rl-lab train` arguments for the map's cell (bench_sweep.CELL) with `steps` steps."""
    fields = {**CELL, "max_steps": steps, "eval_steps": steps, "progress_bar": "false"}
    args = ["--task", fields.pop("task"), "--preset", fields.pop("preset")]
    for key, value in fields.items():
        args += ["--set", f"{key}={value}"]
    return args


def run_once(tree: Path, out: Path, steps: int, seed: int, threads: int) -> tuple[float, float]:
    """One `rl-lab train` of the cell under the package in `tree` -> (whole run s, median step s)."""
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1")
    cli = "rl_lab.tools.cli" if (tree / "rl_lab" / "tools" / "cli.py").is_file() else "rl_lab.cli"  # moved in issue 31
    args = [sys.executable, "-m", cli, "train", *cell_args(steps), "--seed", str(seed), "--out", str(out)]
    t = time.perf_counter()
    done = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"the run under {tree} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return seconds, statistics.median(r["step_time"] for r in rows if "step_time" in r)


def ratio_line(name: str, before: list[float], after: list[float]) -> str:
    ratios = sorted(a / b for a, b in zip(after, before))
    return (f"{name}: before {statistics.median(before):.3f} s, after {statistics.median(after):.3f} s, "
            f"after / before {statistics.median(ratios):.3f}x ({ratios[0]:.3f}-{ratios[-1]:.3f})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the version before (a commit, tag or branch)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    base, head = (subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True,
                                 check=True).stdout.strip() for rev in (a.base, "HEAD"))
    print(f"before {base}, after {head} (this checkout, with its uncommitted changes); {a.steps} steps, "
          f"{a.threads} thread(s), {a.reps} repetitions alternating; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="rl_lab_commits_") as tmp:
        old = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(old), base], cwd=REPO, check=True)
        try:
            times = {"before": [], "after": []}
            for rep in range(a.reps):
                for name, tree in (("before", old), ("after", REPO)):
                    times[name].append(run_once(tree, Path(tmp) / f"{name}{rep}", a.steps, a.seed, a.threads))
                    print(f"  rep {rep + 1} {name}: run {times[name][-1][0]:.1f} s, "
                          f"median step {times[name][-1][1] * 1e3:.1f} ms", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO, check=False)
    for i, name in enumerate(("whole run", "median step")):
        print(ratio_line(name, [t[i] for t in times["before"]], [t[i] for t in times["after"]]))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
