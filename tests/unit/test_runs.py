"""rl_lab.runs without a model: what a run folder holds, the one "already holds a run" refusal,
RunFolder.begin (a run's folder policy in one place), metrics.jsonl trimmed to the step a run
continues from, config.until-step-N.yaml, checkpoint rotation, recovery after a kill during a
save, and latest_checkpoint."""
import pytest
import torch
import yaml

from rl_lab import RLConfig
from rl_lab.errors import ConfigError
from rl_lab.runs import LATEST, RunFolder, check_resume_overwrite, config_changes
from rl_lab.utils import json_line, read_jsonl


class _Saves:
    """What save_checkpoint needs of a model and a tokenizer: save_pretrained."""

    def save_pretrained(self, path, **kw):
        path.mkdir(parents=True, exist_ok=True)
        (path / "model.safetensors").write_bytes(b"w")


def _metrics(folder, steps, torn=False):
    folder.path.mkdir(parents=True, exist_ok=True)
    text = "".join(json_line({"step": s, "reward": float("nan") if s == 2 else 0.5}) for s in steps)
    folder.metrics_path.write_text(text + ('{"step": 9, "rew' if torn else ""))


def test_describe_refuse_and_clear(tmp_path):
    folder = RunFolder(tmp_path / "run")
    assert folder.describe() is None
    folder.refuse_if_taken()                                   # nothing there: fine
    _metrics(folder, [1, 2, 3])
    (folder.path / "checkpoint-3").mkdir()
    (folder.path / "notes.txt").write_text("mine")
    assert folder.describe() == "metrics.jsonl (3 rows, steps 1-3); checkpoint-3"
    with pytest.raises(ConfigError, match=r"(?s)already holds a run: metrics\.jsonl.*--resume.*--overwrite"):
        folder.refuse_if_taken()
    folder.clear()
    assert folder.describe() is None and (folder.path / "notes.txt").read_text() == "mine"


def test_resume_and_overwrite_exclude_each_other():
    check_resume_overwrite(True, False, "runs/x")
    check_resume_overwrite(False, True, "runs/x")
    with pytest.raises(ConfigError, match="--overwrite"):
        check_resume_overwrite(True, True, "runs/x")


def test_begin_refuses_a_taken_folder_clears_on_overwrite_and_continues_on_resume(tmp_path):
    run = tmp_path / "run"
    cfg = RLConfig(seed=1, output_dir=str(run))
    assert RunFolder.begin(RLConfig()) is None                 # no output_dir: nothing to take on
    with pytest.raises(ConfigError, match="choose one"):
        RunFolder.begin(RLConfig(), resume=True, overwrite=True)
    folder = RunFolder.begin(cfg)                              # a new run: the folder and its config
    assert folder.path == run and folder.saved_config()["seed"] == 1 and not folder.metrics_path.exists()
    _metrics(folder, [1, 2, 3, 4])
    (run / "checkpoint-4").mkdir()
    (run / "notes.txt").write_text("mine")
    for refused in (lambda: RunFolder.check(cfg), lambda: RunFolder.begin(cfg)):
        with pytest.raises(ConfigError, match=r"(?s)already holds a run: metrics\.jsonl \(4 rows.*--resume.*--overwrite"):
            refused()
    with pytest.raises(ConfigError, match="choose one"):
        RunFolder.check(cfg, resume=True, overwrite=True)
    assert RunFolder.check(cfg, overwrite=True).describe() == folder.describe()   # a check writes nothing
    # resume at step 3 with a changed config: rows after 3 go, the earlier config is kept
    RunFolder.begin(RLConfig(seed=2, output_dir=str(run)), resume=True, step=3)
    assert [r["step"] for r in read_jsonl(folder.metrics_path)] == [1, 2, 3]
    assert yaml.safe_load((run / "config.until-step-3.yaml").read_text())["seed"] == 1
    assert folder.saved_config()["seed"] == 2 and (run / "checkpoint-4").exists()
    RunFolder.begin(cfg, overwrite=True)                       # a run's files go, the rest stays
    assert folder.describe() == "config.yaml" and folder.saved_config()["seed"] == 1
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "notes.txt"]


def test_trim_metrics_keeps_the_rows_up_to_the_step_and_drops_a_torn_line(tmp_path):
    folder = RunFolder(tmp_path)
    assert folder.trim_metrics(3) == []
    _metrics(folder, [1, 2, 3, 4], torn=True)
    kept = folder.trim_metrics(3)
    assert [r["step"] for r in kept] == [1, 2, 3] and kept[1]["reward"] is None
    assert [r["step"] for r in read_jsonl(folder.metrics_path)] == [1, 2, 3]
    before = folder.metrics_path.stat().st_mtime_ns
    assert len(folder.trim_metrics(3)) == 3 and folder.metrics_path.stat().st_mtime_ns == before  # no rewrite
    folder.append_metrics({"step": 4, "reward": float("inf")})
    assert read_jsonl(folder.metrics_path)[-1] == {"step": 4, "reward": None}
    assert folder.trim_metrics(0) == [] and folder.metrics_path.read_text() == ""


def test_write_config_keeps_the_earlier_config_of_a_continued_run(tmp_path):
    folder = RunFolder(tmp_path)
    first, second = RLConfig(seed=1), RLConfig(seed=2)
    folder.write_config(first, 0)
    assert folder.saved_config()["seed"] == 1 and folder.config_changes(second) == {"seed": (1, 2)}
    folder.write_config(first, 4)                              # unchanged: no copy
    assert not list(tmp_path.glob("config.until-step-*"))
    folder.write_config(second, 4)
    assert yaml.safe_load((tmp_path / "config.until-step-4.yaml").read_text())["seed"] == 1
    assert folder.saved_config()["seed"] == 2
    assert config_changes({"seed": 2, "output_dir": "elsewhere"}, second) == {}
    folder.config_path.write_text("[not, a, mapping]")
    assert folder.saved_config() is None and folder.config_changes(second) == {}


def test_checkpoints_rotate_recover_and_the_latest_is_named(tmp_path):
    folder = RunFolder(tmp_path)
    for step in (100, 200):                                    # an older run's, higher steps
        (tmp_path / f"checkpoint-{step}").mkdir()
        torch.save({}, tmp_path / f"checkpoint-{step}" / "trainer_state.pt")
    for step in (1, 2, 3):
        folder.save_checkpoint(step, _Saves(), _Saves(), {"global_step": step}, keep=2)
    assert sorted(folder.checkpoints()) == [2, 3, 100, 200]
    assert (tmp_path / LATEST).read_text() == "checkpoint-3\n"
    assert folder.last_checkpoint().name == "checkpoint-3"
    assert torch.load(tmp_path / "checkpoint-3" / "trainer_state.pt", weights_only=True) == {"global_step": 3}
    # killed mid-save: checkpoint-3 moved aside, its replacement not in yet, a temp folder left
    (tmp_path / "checkpoint-3").rename(tmp_path / "checkpoint-3.old")
    (tmp_path / ".checkpoint-4.tmp").mkdir()
    (tmp_path / "checkpoint-5").mkdir()                        # incomplete: no trainer state
    assert sorted(folder.checkpoints(complete=True)) == [2, 100, 200]
    assert folder.last_checkpoint().name == "checkpoint-3"     # recovered, and named in latest_checkpoint
    assert not list(tmp_path.glob("*.old")) and not list(tmp_path.glob(".*.tmp"))
    (tmp_path / LATEST).unlink()
    assert folder.last_checkpoint().name == "checkpoint-200"   # without the name: the highest step
    assert RunFolder(tmp_path / "absent").last_checkpoint() is None


def test_a_saved_bare_void_filter_keeps_the_filter_it_ran_with(tmp_path):
    """issue 53: `mask_void_turns: true` in a config.yaml written before the filter had a scope meant
    rl_lab's loss-and-groups filter; a resume keeps it (with a warning) instead of switching the run
    to SimpleTIR's loss-only filter, which is what `true` means in a new config."""
    import warnings

    import yaml

    from rl_lab.config import RLConfig
    from rl_lab.errors import ConfigWarning
    from rl_lab.runs import RunFolder

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"task": "multiplication_tool", "mask_void_turns": True}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        saved = RunFolder(run).saved_config()
    assert saved["mask_void_turns"] == {"scope": "loss_and_groups"}
    assert any(issubclass(w.category, ConfigWarning) and "loss_and_groups" in str(w.message) for w in caught)
    assert RLConfig.from_dict(saved).mask_void_turns.scope == "loss_and_groups"
    assert RLConfig.from_dict({"task": "multiplication_tool", "mask_void_turns": True}).mask_void_turns.scope == "loss"
    (run / "config.yaml").write_text(yaml.safe_dump(RLConfig.from_dict(saved).to_dict()))   # what this version saves
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        assert RunFolder(run).saved_config()["mask_void_turns"] == {"scope": "loss_and_groups"}
