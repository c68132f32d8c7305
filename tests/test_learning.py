"""Does it learn?  The exact command of the README, in the smoke preset, from the shipped warm
start: the mean reward of the last fifth of the steps must clearly exceed the first fifth's.
Statistical (Welch's t over per-step rewards), not a fixed large margin."""
import re
import subprocess
import sys

import numpy as np
import pytest

from rl_lab.utils import read_jsonl


@pytest.mark.slow
def test_smoke_run_raises_the_reward(tmp_path):
    out = subprocess.run([sys.executable, "-m", "rl_lab.cli", "train", "--task", "addition",
                          "--preset", "smoke", "--out", str(tmp_path / "run"), "--set", "progress_bar=false"],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    m = re.search(r"first fifth ([\d.]+) -> last fifth ([\d.]+)", out.stdout)
    assert m, out.stdout
    rewards = np.array([r["reward"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")])
    n = len(rewards) // 5
    first, last = rewards[:n], rewards[-n:]
    assert float(m.group(1)) == pytest.approx(first.mean(), abs=1e-3)
    t = (last.mean() - first.mean()) / np.sqrt(first.var(ddof=1) / n + last.var(ddof=1) / n)
    print(out.stdout, f"Welch t = {t:.2f}")
    assert last.mean() > first.mean() and t > 2.0
