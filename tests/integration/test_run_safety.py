"""Nothing a user runs is lost: a second run never mixes into a first one's folder, rotation
keeps the current run's checkpoints, --resume keeps the saved config, a SIGKILL during a
checkpoint save resumes cleanly, metrics.jsonl is strict JSON, trainer state loads with
weights_only=True, and `make clean` leaves runs/ alone."""
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from rl_lab import RLConfig, Trainer
from rl_lab.config import ConfigError
from rl_lab.trainer import TIMING_KEYS
from rl_lab.utils import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
RL = [sys.executable, "-m", "rl_lab.tools.cli"]
SMALL_ARGS = ["--set", "model=0.3M", "--set", "max_completion_length=6", "--set", "prompts_per_step=4",
              "--set", "num_generations=4", "--set", "progress_bar=false"]
SMALL = dict(model="0.3M", prompts_per_step=4, num_generations=4, max_completion_length=6,
             progress_bar=False, learning_rate=1e-3)


def _cfg(**kw):
    return RLConfig(**{**SMALL, **kw})


def _strip(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


def _rl(*args, timeout=300):
    return subprocess.run(RL + list(args), capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- 1. a second run never mixes in
@pytest.mark.slow             # > 20 s: not in the fast tier (make test-fast)
def test_cli_refuses_a_run_folder_that_holds_a_run_and_overwrite_starts_over(tmp_path):
    run = tmp_path / "run"
    args = ["train", "--task", "addition", "--out", str(run), "--set", "max_steps=2"] + SMALL_ARGS
    first = _rl(*args)
    assert first.returncode == 0, first.stderr
    again = _rl(*args)
    assert again.returncode == 2, again.stdout + again.stderr
    msg = again.stderr
    assert "Traceback" not in msg
    assert "metrics.jsonl" in msg and "2 rows" in msg and "checkpoint-2" in msg
    assert "--resume" in msg and "--overwrite" in msg
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2]   # untouched
    over = _rl(*args, "--overwrite")
    assert over.returncode == 0, over.stderr
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2]   # one run, not two
    both = _rl(*args, "--overwrite", "--resume")
    assert both.returncode == 2 and "--overwrite" in both.stderr


def test_trainer_refuses_a_run_folder_that_holds_a_run(tmp_path):
    Trainer(_cfg(max_steps=2, output_dir=str(tmp_path))).train()
    with pytest.raises(ConfigError, match=r"(?s)metrics\.jsonl.*resume.*overwrite"):
        Trainer(_cfg(max_steps=2, output_dir=str(tmp_path))).train()
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2]
    Trainer(_cfg(max_steps=3, output_dir=str(tmp_path))).train(overwrite=True)
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-3"]
    tr = Trainer(_cfg(max_steps=4, output_dir=str(tmp_path)))           # continuing is fine
    tr.train(resume=True)
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]


# ---------------------------------------------------------------- 2. rotation
def test_rotation_keeps_the_current_runs_newest_checkpoint(tmp_path):
    for step in (100, 200):                          # an older run's checkpoints, higher steps
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.pt").write_bytes(b"older run")
    tr = Trainer(_cfg(max_steps=3, output_dir=str(tmp_path)))
    for _ in range(3):
        tr.step()
        tr.save_checkpoint(keep=2)
    names = sorted(p.name for p in tmp_path.glob("checkpoint-*"))
    assert "checkpoint-3" in names and "checkpoint-2" in names and "checkpoint-1" not in names
    assert "checkpoint-100" in names and "checkpoint-200" in names   # not this run's to delete
    assert tr.last_checkpoint().name == "checkpoint-3"


# ---------------------------------------------------------------- 3. --resume keeps the config
@pytest.mark.slow             # > 20 s: not in the fast tier (make test-fast)
def test_resume_reads_the_saved_config_and_lists_set_changes(tmp_path):
    run = tmp_path / "run"
    first = _rl("train", "--task", "reversal", "--seed", "3", "--out", str(run), "--set", "max_steps=2",
                "--set", "task_kwargs={length: 3}", *SMALL_ARGS)
    assert first.returncode == 0, first.stderr
    saved = yaml.safe_load((run / "config.yaml").read_text())
    # a field that differs without --set is refused, and nothing is written
    bad = _rl("train", "--out", str(run), "--resume", "--seed", "4")
    assert bad.returncode == 2 and "seed" in bad.stderr and "--set" in bad.stderr, bad.stderr
    assert yaml.safe_load((run / "config.yaml").read_text()) == saved
    cfg = tmp_path / "c.yaml"
    cfg.write_text("learning_rate: 0.5\n")
    bad = _rl("train", "--out", str(run), "--resume", "--config", str(cfg))
    assert bad.returncode == 2 and "learning_rate" in bad.stderr, bad.stderr
    # no other arguments: the saved config (task, seed, sizes) with a deliberate --set change
    ok = _rl("train", "--out", str(run), "--resume", "--set", "max_steps=3", "--set", "learning_rate=2e-3")
    assert ok.returncode == 0, ok.stderr
    changed = [line for line in (ok.stdout + ok.stderr).splitlines() if "max_steps" in line]
    assert changed and "learning_rate" in changed[0], ok.stderr          # the --set changes, listed
    assert "seed" not in changed[0] and "task" not in changed[0]         # and nothing else
    assert "task=reversal" in ok.stdout and "steps=3" in ok.stdout
    now = yaml.safe_load((run / "config.yaml").read_text())
    assert now["task"] == "reversal" and now["seed"] == 3 and now["model"] == "0.3M"
    assert now["max_steps"] == 3 and now["learning_rate"] == pytest.approx(2e-3)
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3]


def test_a_run_saved_with_flat_correction_fields_resumes(tmp_path):
    """A config.yaml from before the nested rollout_correction (issue 51): --resume reads it into
    rollout_correction with a warning, sees no change, and a deliberate --set by the old flat name
    changes that knob."""
    run = tmp_path / "run"
    first = _rl("train", "--task", "addition", "--out", str(run), "--set", "max_steps=1",
                "--set", "rollout_correction.rollout_is=token", *SMALL_ARGS)
    assert first.returncode == 0, first.stderr
    saved = yaml.safe_load((run / "config.yaml").read_text())
    flat = {**{k: v for k, v in saved.items() if k != "rollout_correction"}, **saved["rollout_correction"]}
    flat.pop("extra_modes")
    (run / "config.yaml").write_text(yaml.safe_dump(flat, sort_keys=False))
    ok = _rl("train", "--out", str(run), "--resume", "--set", "max_steps=2", "--set", "rollout_is_threshold=3.0")
    assert ok.returncode == 0, ok.stderr
    assert "read into rollout_correction" in ok.stderr, ok.stderr
    changed = [line for line in ok.stderr.splitlines() if "resuming" in line]
    assert changed and "rollout_correction.rollout_is_threshold 2.0 -> 3.0" in changed[0], ok.stderr
    now = yaml.safe_load((run / "config.yaml").read_text())
    assert now["rollout_correction"]["rollout_is"] == "token" and now["rollout_correction"]["rollout_is_threshold"] == 3
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2]


# ---------------------------------------------------------------- 4. SIGKILL during a save
_KILLED_MID_SAVE = textwrap.dedent("""
    import os, sys, time
    from rl_lab import RLConfig, Trainer
    real_replace = os.replace
    def slow_replace(src, dst):
        real_replace(src, dst)
        if str(dst).endswith(".old"):      # the old checkpoint is moved aside, the new one not in yet
            print("MIDWAY", flush=True)
            time.sleep(600)
    os.replace = slow_replace
    cfg = RLConfig(**eval(sys.argv[1]))
    Trainer(cfg).train()
""")


def test_a_run_killed_in_the_middle_of_a_checkpoint_save_resumes_cleanly(tmp_path):
    run, ref = tmp_path / "run", tmp_path / "ref"
    kw = dict(SMALL, max_steps=4, save_steps=2, output_dir=str(run))
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_MID_SAVE, repr(kw)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()                  # blocks until the save is half done
        assert line.strip() == "MIDWAY"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert any(p.name.endswith(".old") for p in run.iterdir()), sorted(p.name for p in run.iterdir())
    resumed = Trainer(_cfg(max_steps=6, save_steps=2, output_dir=str(run)))
    assert resumed.resume() and resumed.global_step in (2, 4)
    resumed.train()
    Trainer(_cfg(max_steps=6, save_steps=2, output_dir=str(ref))).train()
    assert _strip(read_jsonl(run / "metrics.jsonl")) == _strip(read_jsonl(ref / "metrics.jsonl"))
    leftovers = [p.name for p in run.iterdir() if p.name.endswith((".old", ".tmp", ".del"))]
    assert leftovers == []
    assert Trainer(_cfg(output_dir=str(run))).last_checkpoint().name == "checkpoint-6"


# ---------------------------------------------------------------- 5. strict JSON, safe loading
def _strict(line):
    def no_constant(name):
        raise ValueError(f"non-JSON constant {name}")
    return json.loads(line, parse_constant=no_constant)


def test_metrics_jsonl_is_strict_json_with_null_for_nan(tmp_path):
    tr = Trainer(_cfg(max_steps=1, output_dir=str(tmp_path)))
    with torch.no_grad():
        tr.model.model.norm.weight[0] = float("nan")      # a non-finite gradient: NaN metrics
    tr.train()
    assert any(isinstance(v, float) and not math.isfinite(v) for v in tr.history[0].values())
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    rows = [_strict(line) for line in lines]
    assert any(v is None for v in rows[0].values())
    for row in rows:
        json.dumps(row, allow_nan=False)
    from rl_lab.utils import read_metrics
    df = read_metrics(tmp_path / "metrics.jsonl")
    assert df["grad_norm"].dtype.kind == "f" and df["grad_norm"].isna().all()


class _Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_trainer_state_loads_with_weights_only_and_models_are_safetensors(tmp_path):
    run = tmp_path / "run"
    tr = Trainer(_cfg(max_steps=2, output_dir=str(run), beta=0.04, sampler_staleness=1,
                      lr_scheduler_type="length_triggered"))
    tr.train()
    ckpt = run / "checkpoint-2"
    torch.load(ckpt / "trainer_state.pt", weights_only=True)      # only tensors and plain containers
    for d in (ckpt, run / "final"):
        assert (d / "model.safetensors").exists() and not list(d.glob("*.bin"))
    # resume must not unpickle arbitrary objects from a checkpoint folder
    marker = tmp_path / "pwned"
    state = torch.load(ckpt / "trainer_state.pt", weights_only=True)
    state["num_tokens"] = _Evil(str(marker))
    torch.save(state, ckpt / "trainer_state.pt")
    with pytest.raises(Exception):
        Trainer(_cfg(max_steps=2, output_dir=str(run), beta=0.04, sampler_staleness=1)).resume()
    assert not marker.exists()


# ---------------------------------------------------------------- 6. make clean
def test_make_clean_never_deletes_runs():
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = lines.index(next(line for line in lines if line.startswith("clean:")))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    assert recipe, "make clean has a recipe"
    assert not any("runs" in word for cmd in recipe for word in cmd.split()[1:]), recipe
