"""rl_lab.tools.sweep and `rl-lab sweep`: grid expansion, ids, validation, resumability, workers."""
import copy
import csv
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from rl_lab.config import ConfigError
from rl_lab.tools.sweep import SweepError, plan_sweep, run_sweep, summary_row
from rl_lab.trainer import TIMING_KEYS, Trainer
from rl_lab.utils import read_jsonl

RL = [sys.executable, "-m", "rl_lab.tools.cli"]
BASE = dict(task="addition", preset="smoke", max_steps=6, prompts_per_step=2, num_generations=2)
SPEC = dict(base=BASE, grid={"learning_rate": ["5e-5", 3e-4], "sampler_dtype": ["float32", "bfloat16"]},
            seeds=[0], metrics={"window": 3, "warn": {"k3_kl": 1e-6}})
TIMING_COLUMNS = ["wall_s", "train_s"]


def _spec(out, **changes):
    spec = copy.deepcopy(SPEC)
    spec.update(changes, out=str(out))
    return spec


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def _strip(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The 2x2 sweep, uninterrupted, one worker, one thread."""
    out = tmp_path_factory.mktemp("ref") / "sweep"
    df = run_sweep(_spec(out), threads=1, progress=False)
    return out, df


def test_grid_expansion_and_stable_ids(tmp_path):
    spec = _spec(tmp_path / "a", seeds=[0, 1])
    sweep = plan_sweep(spec)
    assert len(sweep.runs) == 8 and sweep.grid_keys == ["learning_rate", "sampler_dtype"]
    ids = [r.run_id for r in sweep.runs]
    assert len(set(ids)) == 8 and all(len(i) == 10 for i in ids)
    first = sweep.runs[0]
    assert first.name == "learning_rate=5e-05,sampler_dtype=float32,seed=0"
    assert sweep.runs[5].name == "learning_rate=0.0003,sampler_dtype=float32,seed=1"
    assert first.cell == {"learning_rate": 5e-5, "sampler_dtype": "float32"}       # YAML's "5e-5" -> float
    assert [(r.cell["sampler_dtype"], r.seed) for r in sweep.runs[:4]] == [
        ("float32", 0), ("float32", 1), ("bfloat16", 0), ("bfloat16", 1)]
    cfg = first.config
    assert cfg.output_dir == str(tmp_path / "a" / first.run_id) and cfg.max_steps == 6
    assert cfg.progress_bar is False and cfg.save_steps == 1                        # max(1, 6 // 10)
    # the id depends on what the run computes, not on where it is written or how 5e-5 is spelt
    again = plan_sweep(_spec(tmp_path / "b", seeds=[0, 1],
                             grid={"learning_rate": [0.00005, 3e-4], "sampler_dtype": ["float32", "bfloat16"]}))
    assert [r.run_id for r in again.runs] == ids and [r.name for r in again.runs] == [r.name for r in sweep.runs]
    changed = plan_sweep(_spec(tmp_path / "a", seeds=[0, 1], base={**BASE, "max_steps": 7}))
    assert not set(r.run_id for r in changed.runs) & set(ids)
    assert len(plan_sweep(_spec(tmp_path / "c", grid={})).runs) == 1                  # no grid: base x seeds


@pytest.mark.parametrize("changes, words", [
    ({"grid": {"loss_agg_mode": ["token-mean", "mean"]}}, ["loss_agg_mode=mean", "token-mean", "'mean'"]),
    ({"grid": {"learning_rat": [1e-4]}}, ["learning_rat", "learning_rate"]),
    ({"grid": {"seed": [0, 1]}}, ["seeds:"]),
    ({"grid": {"max_steps": 3}}, ["non-empty list"]),
    ({"grid": {"task": ["addition"]}}, ["both base: and grid:"]),
    ({"seeds": []}, ["seeds"]),
    ({"metrics": {"windw": 3}}, ["windw", "window"]),
    ({"metrics": {"drop": 2.0}}, ["drop=2.0"]),
    ({"outt": "x"}, ["outt"]),
])
def test_an_invalid_spec_fails_before_anything_runs(tmp_path, monkeypatch, changes, words):
    monkeypatch.setattr("rl_lab.tools.sweep._run_job", lambda job: pytest.fail("a run started"))
    with pytest.raises(ConfigError) as err:
        run_sweep(_spec(tmp_path / "s", **changes), progress=False)
    for w in words:
        assert w in str(err.value)
    assert not (tmp_path / "s").exists()


def test_a_2x2_sweep_writes_4_rows_and_a_rerun_runs_nothing(reference, monkeypatch):
    out, df = reference
    rows = _rows(out / "results.csv")
    assert len(rows) == 4 and len(df) == 4 and df["run_id"].is_unique
    assert list(df["run_id"]) == [r.run_id for r in plan_sweep(_spec(out)).runs]
    for col in ["run_id", "name", "learning_rate", "sampler_dtype", "seed", "steps", "reward_first",
                "reward_last", "reward_peak", "eval_reward", "collapsed", "collapse_step", "grad_blowup",
                "k3_kl_mean", "k3_kl_last", "log_ppl_abs_diff_mean", "grad_norm_mean", "warn_k3_kl_step",
                "wall_s"]:
        assert col in df, col
    assert (df["steps"] == 6).all() and (df["resumed_from"] == 0).all()
    # the bfloat16 sampler disagrees with the float32 trainer; the float32 one only by rounding
    bf16 = df["sampler_dtype"] == "bfloat16"
    assert (df.loc[bf16, "k3_kl_mean"] > 100 * df.loc[~bf16, "k3_kl_mean"].max()).all()
    for run_id in df["run_id"]:
        metrics = read_jsonl(out / run_id / "metrics.jsonl")
        assert [m["step"] for m in metrics] == list(range(1, 7))
        rewards = np.array([m["reward"] for m in metrics])
        assert df.set_index("run_id").loc[run_id, "reward_last"] == pytest.approx(rewards[-1:].mean())
    monkeypatch.setattr("rl_lab.tools.sweep._run_job", lambda job: pytest.fail("a finished run ran again"))
    again = run_sweep(_spec(out), progress=False)
    pd.testing.assert_frame_equal(again, df)
    assert len(_rows(out / "results.csv")) == 4


def _same_results(df, ref):
    a = df.drop(columns=TIMING_COLUMNS + ["resumed_from"]).set_index("run_id").sort_index()
    b = ref.drop(columns=TIMING_COLUMNS + ["resumed_from"]).set_index("run_id").sort_index()
    pd.testing.assert_frame_equal(a, b)


def test_a_killed_sweep_completes_without_duplicates(reference, tmp_path):
    """Simulated kill: one row written and a torn one, a run killed after its step-2 checkpoint
    (its metrics already at step 3), a run killed before its first checkpoint."""
    ref_out, ref = reference
    out = tmp_path / "sweep"
    runs = plan_sweep(_spec(out)).runs
    out.mkdir()
    header, first = (ref_out / "results.csv").read_text().splitlines()[:2]
    (out / "results.csv").write_text(f"{header}\n{first}\n{runs[1].run_id},learning_rate=5e-05,sampl")
    torch.set_num_threads(1)                          # the thread count of the reference
    Trainer(runs[1].config).train(max_steps=3)        # checkpoints 2 and 3, metrics to step 3
    shutil.rmtree(out / runs[1].run_id / "checkpoint-3")
    shutil.rmtree(out / runs[1].run_id / "final")
    (out / runs[2].run_id).mkdir()
    (out / runs[2].run_id / "metrics.jsonl").write_text('{"step": 1, "reward": 0.0}\n{"step": 2, "rew')
    assert run_sweep(_spec(out), dry_run=True)["status"].tolist() == ["done", "resume@2", "new", "new"]
    df = run_sweep(_spec(out), threads=1, progress=False)
    rows = _rows(out / "results.csv")
    assert len(rows) == 4 and len({r["run_id"] for r in rows}) == 4
    assert df.set_index("run_id").loc[runs[1].run_id, "resumed_from"] == 2
    _same_results(df, ref)
    for r in runs[1:]:                                # runs[0] was "done": its row only
        assert _strip(read_jsonl(out / r.run_id / "metrics.jsonl")) == \
            _strip(read_jsonl(ref_out / r.run_id / "metrics.jsonl"))


def test_a_sweep_killed_in_a_subprocess_finishes_on_rerun(reference, tmp_path):
    ref_out, ref = reference
    out = tmp_path / "sweep"
    spec_path = tmp_path / "grid.yaml"
    spec_path.write_text(yaml.safe_dump(_spec(out)))
    proc = subprocess.Popen(RL + ["sweep", str(spec_path), "--threads", "1", "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if (out / "results.csv").exists() and len(_rows(out / "results.csv")) >= 1:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 1 <= len(_rows(out / "results.csv")) < 4, "the sweep was not killed mid-way"
    df = run_sweep(spec_path, threads=1, progress=False)
    rows = _rows(out / "results.csv")
    assert len(rows) == 4 and len({r["run_id"] for r in rows}) == 4
    _same_results(df, ref)


def test_two_workers_give_the_same_rows_as_one(reference, tmp_path):
    _, ref = reference
    df = run_sweep(_spec(tmp_path / "w2"), workers=2, threads=1, progress=False)
    assert list(df["run_id"]) == list(ref["run_id"])
    _same_results(df, ref)


def test_a_failing_run_is_reported_and_the_others_are_written(tmp_path, monkeypatch):
    import rl_lab.tools.sweep as sweep_mod
    real = sweep_mod.execute_run
    spec = _spec(tmp_path / "f", base={**BASE, "max_steps": 2})
    bad = plan_sweep(spec).runs[2].run_id

    def flaky(config, options=None, threads=None):
        if config["output_dir"].endswith(bad):
            raise RuntimeError("boom")
        return real(config, options, threads)

    monkeypatch.setattr(sweep_mod, "execute_run", flaky)
    with pytest.raises(SweepError, match="1 of 4 runs failed"):
        run_sweep(spec, threads=1, progress=False)
    assert len(_rows(tmp_path / "f" / "results.csv")) == 3


def test_summary_row_flags_a_collapse_at_the_trainers_step():
    n = 60
    reward = np.r_[np.full(30, 0.8), np.full(30, 0.05)]
    k3 = np.r_[np.full(25, 1e-5), np.full(35, 1e-2)]
    grad = np.r_[np.full(50, 1.0), np.full(10, 40.0)]
    df = pd.DataFrame({"step": np.arange(1, n + 1), "reward": reward, "rollout_corr/k3_kl": k3,
                       "grad_norm": grad, "eval/reward": [np.nan] * (n - 1) + [0.1]})
    opts = plan_sweep({"out": "x", "metrics": {"window": 10, "warn": {"k3_kl": 1e-3}}}).options
    row = summary_row(df, opts)
    assert row["collapsed"] and row["collapse_step"] == 36 and row["collapse_peak_step"] == 10
    assert row["reward_first"] == pytest.approx(0.8) and row["reward_last"] == pytest.approx(0.05)
    assert row["eval_reward"] == 0.1
    assert row["grad_blowup"] and row["grad_blowup_step"] == 51
    assert row["warn_k3_kl_step"] == 26 and row["warn_k3_kl_lead"] == 10
    assert np.isnan(row["entropy_mean"])                           # not logged: NaN, not an error


def test_cli_sweep_dry_run_run_and_a_bad_field(tmp_path, capsys):
    from rl_lab.tools.cli import main
    spec = _spec(tmp_path / "cli", base={**BASE, "max_steps": 3},
                 grid={"learning_rate": [5e-5, 3e-4]})
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(path), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "learning_rate=5e-05,seed=0" in dry and "2 runs: 2 new" in dry
    assert not (tmp_path / "cli").exists()
    run = subprocess.run(RL + ["sweep", str(path), "--threads", "1"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert "2 runs, 0 collapsed" in run.stdout and "collapses=0" in run.stderr     # the bar's postfix
    assert len(_rows(tmp_path / "cli" / "results.csv")) == 2
    spec["grid"] = {"learning_rat": [1e-4]}
    path.write_text(yaml.safe_dump(spec))
    shutil.rmtree(tmp_path / "cli")
    assert main(["sweep", str(path)]) == 2                      # the exit code of `rl-lab sweep`
    err = capsys.readouterr().err
    assert "config error" in err and "learning_rat" in err and "Traceback" not in err
    assert not (tmp_path / "cli").exists()
    assert main(["sweep", str(tmp_path / "nope.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_missing_model_fails_up_front(tmp_path):
    from rl_lab.models import check_model_spec  # noqa: F401  (a rename fails here, it does not skip)
    with pytest.raises(ConfigError, match="nonexistent"):
        plan_sweep(_spec(tmp_path / "m", grid={"model": ["0.3M", str(tmp_path / "nonexistent")]}))



def test_status_reads_only_real_checkpoint_folders(tmp_path):
    """A sweep killed while a checkpoint was being replaced leaves `checkpoint-N.old`: --dry-run's
    status (and the resume) must read only `checkpoint-N` folders, not crash on the leftover."""
    from rl_lab.tools.sweep import _status
    sweep = plan_sweep(_spec(tmp_path / "sweep"))
    first = tmp_path / "sweep" / sweep.runs[0].run_id
    (first / "checkpoint-4.old").mkdir(parents=True)
    (first / "checkpoint-4.old" / "trainer_state.pt").write_bytes(b"")
    assert _status(sweep, set())[0] == "new"
    (first / "checkpoint-2").mkdir()
    (first / "checkpoint-2" / "trainer_state.pt").write_bytes(b"")
    assert _status(sweep, set())[0] == "resume@2"


def test_load_results_concatenates_specs(tmp_path):
    from rl_lab.tools.sweep import load_results
    for spec, val in [("a", 1), ("b", 2)]:
        (tmp_path / spec).mkdir()
        pd.DataFrame({"seed": [0, 1], "x": [val, val]}).to_csv(tmp_path / spec / "results.csv", index=False)
    df = load_results(tmp_path)
    assert list(df["spec"]) == ["a", "a", "b", "b"] and list(df["x"]) == [1, 1, 2, 2]
    with pytest.raises(FileNotFoundError, match="results.csv"):
        load_results(tmp_path / "a")


def test_a_grid_axis_can_be_a_nested_knob(tmp_path):
    """`empg.k: [1, 2]` varies one knob of a nested config (and turns the method on)."""
    spec = {"base": {"task": "multiplication_tool", "model": "0.3M", "max_steps": 2}, "grid": {"empg.k": [1.0, 2.0]},
            "seeds": [0], "out": str(tmp_path)}
    runs = plan_sweep(spec).runs
    assert [r.config.empg.k for r in runs] == [1.0, 2.0] and [r.name for r in runs] == ["empg.k=1,seed=0",
                                                                                        "empg.k=2,seed=0"]
    assert len({r.run_id for r in runs}) == 2
