"""Does it learn?  The README's command, in the smoke preset, from a warm start rebuilt from its
recipe on this machine (so the check holds on any CPU, not only the one that built the shipped
file), against a paired control: the same command with learning_rate=0, which sees the same
prompt stream and sampling seeds with a frozen policy.

Criterion, fixed before looking: over 3 seeds, the last fifth of training is split into blocks of
BLOCK steps; each block's mean reward (trained - control) is one paired difference.  Blocks, not
steps, because per-step rewards are autocorrelated.  The mean difference must be positive with
t > 2 over the blocks of all seeds, every seed must gain, and the held-out greedy reward at the
end must be higher than the control's on average over the seeds."""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from rl_lab.tools.stats import one_sample_t
from rl_lab.utils import read_jsonl

SEEDS = (0, 1, 2)
BLOCK = 20


def _train(run_dir, model_dir, seed, learning_rate=None):
    args = [sys.executable, "-m", "rl_lab.tools.cli", "train", "--task", "addition", "--preset", "smoke",
            "--out", str(run_dir), "--seed", str(seed), "--set", f"model={model_dir}",
            "--set", "progress_bar=false", "--set", "eval_steps=700"]
    if learning_rate is not None:
        args += ["--set", f"learning_rate={learning_rate}"]
    env = dict(os.environ, OMP_NUM_THREADS="1")   # two runs side by side on two cores
    out = subprocess.run(args, capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return read_jsonl(run_dir / "metrics.jsonl")


def block_means(rewards, block=BLOCK):
    rewards = np.asarray(rewards, dtype=float)
    n = len(rewards) // block
    return rewards[: n * block].reshape(n, block).mean(axis=1)


@pytest.mark.slow
def test_smoke_run_beats_a_frozen_control(rebuilt_warm_start, tmp_path):
    assert rebuilt_warm_start["returncode"] == 0, rebuilt_warm_start["log"]
    model_dir = rebuilt_warm_start["dir"] / "addition-0.3M"
    diffs, seed_gains, greedy_gains = [], [], []
    for seed in SEEDS:
        with ThreadPoolExecutor(2) as pool:
            trained = pool.submit(_train, tmp_path / f"rl{seed}", model_dir, seed)
            control = pool.submit(_train, tmp_path / f"frozen{seed}", model_dir, seed, 0)
            trained, control = trained.result(), control.result()
        r_t = np.array([r["reward"] for r in trained])
        r_c = np.array([r["reward"] for r in control])
        last = len(r_t) // 5
        d = block_means(r_t[-last:]) - block_means(r_c[-last:])
        diffs.extend(d)
        seed_gains.append(d.mean())
        greedy_gains.append(trained[-1]["eval/reward"] - control[-1]["eval/reward"])
    t = one_sample_t(diffs)
    print(f"per-seed gain over the frozen control (last fifth): {np.round(seed_gains, 3)}; "
          f"block t = {t:.2f}; greedy held-out gains {np.round(greedy_gains, 3)}")
    assert all(g > 0 for g in seed_gains), seed_gains
    assert t > 2.0
    assert np.mean(greedy_gains) > 0, greedy_gains
