import os
import signal
import subprocess
import sys
import time

import pytest

from rl_lab.trainer import TIMING_KEYS
from rl_lab.utils import read_jsonl

RL = [sys.executable, "-m", "rl_lab.tools.cli"]
SMALL = ["--set", "model=0.3M", "--set", "max_completion_length=6", "--set", "prompts_per_step=4",
         "--set", "num_generations=4", "--set", "progress_bar=false"]


def _strip(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


@pytest.mark.slow             # > 20 s: not in the fast tier (make test-fast)
def test_yaml_config_and_overrides(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("task: reversal\ntask_kwargs: {length: 3}\nmax_steps: 2\n")
    out = subprocess.run(RL + ["train", "--config", str(cfg), "--out", str(tmp_path / "r")] + SMALL,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "task=reversal" in out.stdout and "steps=2" in out.stdout
    assert "last fifth" in out.stdout
    plot = subprocess.run(RL + ["plot", str(tmp_path / "r")], capture_output=True, text=True, timeout=120)
    assert plot.returncode == 0 and (tmp_path / "r" / "metrics.png").stat().st_size > 1000


def test_bad_config_exits_2_with_a_message(tmp_path):
    out = subprocess.run(RL + ["train", "--set", "loss_agg_mode=mean"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2
    assert "loss_agg_mode" in out.stderr and "token-mean" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow             # > 20 s: not in the fast tier (make test-fast)
def test_a_killed_run_resumes_to_the_same_result(tmp_path):
    args = ["train", "--task", "addition", "--set", "max_steps=10", "--set", "save_steps=2"] + SMALL
    ref = subprocess.run(RL + args + ["--out", str(tmp_path / "ref")], capture_output=True, text=True,
                         timeout=300)
    assert ref.returncode == 0, ref.stderr
    run = tmp_path / "run"
    proc = subprocess.Popen(RL + args + ["--out", str(run)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    while not (run / "checkpoint-4").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run / "final").exists(), "the run finished before it could be killed"
    again = subprocess.run(RL + args + ["--out", str(run), "--resume"], capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    assert _strip(read_jsonl(run / "metrics.jsonl")) == _strip(read_jsonl(tmp_path / "ref" / "metrics.jsonl"))
