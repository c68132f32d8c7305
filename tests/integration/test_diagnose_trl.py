"""`rl-lab diagnose` on TRL's runs as TRL writes them (issue 50).

The runs under fixtures/trl_runs/ were written by TRL 1.16's GRPOTrainer on the CPU
(research/diagnose/make_trl_runs.py; trimmed by its --fixtures: only trainer_state.json, the
console and the label).  The other formats are made here FROM those files, the way the other tool
would write them: a W&B history export (HF's WandbCallback: `train/` prefixes, `train/global_step`,
and W&B's own `_step` counting log calls), a W&B panel export, gzip, a BOM, a torn or broken line.
TRL without vLLM logs no sampling/* metrics, so the tests of TRL's mismatch names add those
columns to TRL's own records."""
from __future__ import annotations

import csv
import gzip
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rl_lab.errors import ConfigError
from rl_lab.tools.cli import main
from rl_lab.tools.diagnose import EXIT_CODES, diagnose, load_run, read_setup, report, watch

TRL = Path(__file__).resolve().parent / "fixtures" / "trl_runs"
COLLAPSE10, COLLAPSE1 = TRL / "lr_collapse-log10-s1", TRL / "lr_collapse-log1-s1"
HEALTHY10, CRASH10 = TRL / "healthy-log10-s1", TRL / "crash-log10-s1"


def history(run: Path) -> list[dict]:
    """TRL's log records (trainer_state.json's log_history), the summary record left out."""
    state = json.loads((run / "trainer_state.json").read_text())
    return [r for r in state["log_history"] if "train_runtime" not in r]


def truth(run: Path) -> dict:
    return json.loads((run / "truth.json").read_text())


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def wandb_history(rows: list[dict], path: Path, prefix: str = "train/") -> Path:
    """W&B's history export of an HF run: WandbCallback's `train/` names, `train/global_step`, and
    W&B's `_step`, which counts log calls (0, 1, 2, ...), not optimizer steps."""
    out = []
    for i, r in enumerate(rows):
        row = {"_step": i, "_runtime": 1.0 + i, f"{prefix}global_step": r["step"]}
        row.update({f"{prefix}{k}": v for k, v in r.items() if k != "step"})
        out.append(row)
    pd.DataFrame(out).to_csv(path, index=False)
    return path


def wandb_panel(rows: list[dict], path: Path, metric: str, prefix: str = "train/") -> Path:
    """A W&B panel export: Step, '<run> - <metric>' and its __MIN/__MAX columns."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        name = f"grpo-run - {prefix}{metric}"
        w.writerow(["Step", name, f"{name}__MIN", f"{name}__MAX"])
        for r in rows:
            w.writerow([r["step"], r[metric], r[metric], r[metric]])
    return path


# ----------------------------------------------------------------------------------- TRL's own files
def test_the_output_folder_is_read_at_its_newest_state_and_judged_in_steps():
    d = diagnose(load_run(COLLAPSE10))
    assert (d.verdict, d.cause) == ("collapsed", "learning-rate"), report(d)
    assert truth(COLLAPSE10)["collapsed"]
    assert d.mismatch_evidence.startswith("on-policy") and d.framework == "trl"
    fall = d.timeline["reward fall"]
    assert 20 <= fall <= 40 and fall % 10 == 0            # a step, not the record index (3)
    assert abs(fall - truth(COLLAPSE10)["fall_step"]) <= 10
    assert d.steps == 100 and d.records == 10
    assert d.exit_code == 1


@pytest.mark.parametrize("path", [COLLAPSE10 / "trainer_state.json", COLLAPSE10 / "checkpoint-100" / "trainer_state.json",
                                  COLLAPSE1, COLLAPSE1 / "trainer_state.json"],
                         ids=["root-file", "checkpoint-file", "log1-folder", "log1-file"])
def test_every_trainer_state_gives_the_same_verdict(path):
    d = diagnose(load_run(path))
    assert (d.verdict, d.cause) == ("collapsed", "learning-rate"), report(d)


def test_logging_steps_1_and_10_agree_on_the_fall():
    falls = [diagnose(load_run(run)).timeline["reward fall"] for run in (COLLAPSE1, COLLAPSE10)]
    assert abs(falls[0] - falls[1]) <= 10 and abs(falls[0] - truth(COLLAPSE1)["fall_step"]) <= 2


def test_a_crashed_run_is_read_from_its_highest_checkpoint():
    df = load_run(CRASH10)
    assert not (CRASH10 / "trainer_state.json").exists() and df["step"].max() == 50
    d = diagnose(df)
    assert d.verdict == "healthy" and not truth(CRASH10)["collapsed"]
    assert any("checkpoint-50" in w for w in d.warnings)
    assert "checkpoint-50" in report(d)


def test_the_runs_own_settings_are_read_and_named():
    d = diagnose(load_run(COLLAPSE10), read_setup(COLLAPSE10 / "training_args.bin"))
    assert d.setup["values"]["use_vllm"] is False and d.setup["values"]["learning_rate"] == 3e-3
    assert "use_vllm=False" in d.mismatch_evidence
    text = report(d)
    assert "try (TRL 1.16 GRPOConfig arguments)" in text and "learning_rate=0.0015" in text
    assert "resume_from_checkpoint" in text and "checkpoint-25" in text   # the last one before the fall
    assert "actor_rollout_ref" not in text and "algorithm.rollout_correction" not in text


def test_training_args_bin_is_never_unpickled(tmp_path, monkeypatch):
    """TRL's training_args.bin is a pickle: its fields are read by walking the opcodes.  Loading is
    made to fail here, and a pickle that would run a command is walked without running it."""
    import torch

    def refuse(*a, **k):
        raise AssertionError("a pickle was loaded")
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    setup = read_setup(COLLAPSE10 / "training_args.bin")
    assert setup["framework"] == "trl" and setup["values"]["lr_scheduler_type"] == "linear"
    assert setup["values"]["warmup_steps"] == 0.2 and setup["separate_sampler"] is False

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))
    bad = tmp_path / "training_args.bin"
    bad.write_bytes(pickle.dumps({"learning_rate": 1e-3, "use_vllm": True, "x": Evil()}))
    monkeypatch.undo()
    setup = read_setup(bad)
    assert setup["values"] == {"learning_rate": 1e-3, "use_vllm": True} and not marker.exists()


# ----------------------------------------------------------------------------------- other formats
def test_wandb_history_and_panel_exports_use_the_trainers_step(tmp_path):
    rows = history(COLLAPSE10)
    expected = diagnose(load_run(COLLAPSE10))
    for path in (wandb_history(rows, tmp_path / "history.csv"),
                 wandb_history(rows, tmp_path / "plain.csv", prefix=""),
                 wandb_panel(rows, tmp_path / "panel.csv", "reward")):
        d = diagnose(load_run(path))
        assert (d.verdict, d.timeline) == (expected.verdict, expected.timeline), path.name
    d = diagnose(load_run(tmp_path / "history.csv"))
    assert d.cause == "learning-rate" and d.framework == "trl"


def test_trl_console_dicts(tmp_path, capsys):
    console = COLLAPSE10 / "console.log"
    d = diagnose(load_run(console))                     # the folder's trainer_state.json gives logging_steps
    assert (d.verdict, d.timeline["reward fall"]) == ("collapsed", diagnose(load_run(COLLAPSE10)).timeline["reward fall"])
    alone = tmp_path / "console.log"
    alone.write_text(console.read_text())
    with pytest.raises(ConfigError, match="--logging-steps"):
        load_run(alone)
    assert main(["diagnose", str(alone), "--logging-steps", "10"]) == 1
    assert main(["diagnose", str(alone)]) == 2


def test_gzip_and_a_byte_order_mark(tmp_path):
    rows = history(COLLAPSE10)
    gz = tmp_path / "history.jsonl.gz"
    gz.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    bom = wandb_panel(rows, tmp_path / "panel.csv", "reward")
    bom.write_bytes(b"\xef\xbb\xbf" + bom.read_bytes())          # Excel's UTF-8 export: the BOM sits on "Step"
    for path in (gz, bom):
        d = diagnose(load_run(path))
        assert d.verdict == "collapsed" and d.timeline["reward fall"] % 10 == 0, path.name


def test_a_broken_record_mid_file_is_an_error_naming_the_line(tmp_path):
    rows = history(COLLAPSE1)
    lines = [json.dumps(r) for r in rows]
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines[:49] + ['{"step": 50, "reward": 0.1'] + lines[50:]) + "\n")
    with pytest.raises(ConfigError, match=r"broken.jsonl:50: not a JSON object"):
        load_run(broken)
    assert main(["diagnose", str(broken)]) == 2
    torn = tmp_path / "live.jsonl"
    torn.write_text("\n".join(lines) + '\n{"step": 101, "rew')
    df = load_run(torn)
    assert df["step"].max() == 100 and any("last line" in w for w in df.attrs["warnings"])
    assert diagnose(df).verdict == "collapsed"
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(("\n".join(lines[:9]) + "\n").encode() + b'{"note": "caf\xe9"}\n'
                      + ("\n".join(lines[9:]) + "\n").encode())
    with pytest.raises(ConfigError, match=r"latin.jsonl:10: not UTF-8"):
        load_run(latin)
    assert main(["diagnose", str(latin)]) == 2


def test_unknown_columns_are_listed_and_can_be_mapped(tmp_path, capsys):
    rows = [{("my/score" if k == "reward" else k): v for k, v in r.items()} for r in history(COLLAPSE10)]
    path = write_jsonl(tmp_path / "renamed.jsonl", rows)
    with pytest.raises(ConfigError, match=r"found: .*my/score.*--map reward=COLUMN"):
        diagnose(load_run(path))
    assert main(["diagnose", str(path)]) == 2
    assert "--map reward=COLUMN" in capsys.readouterr().err
    assert main(["diagnose", str(path), "--map", "reward=my/score"]) == 1
    nostep = write_jsonl(tmp_path / "nostep.jsonl", [{"reward": 0.5}] * 30)
    with pytest.raises(ConfigError, match="no step column"):
        load_run(nostep)


# ----------------------------------------------------------------------------------- verdicts, exit codes
def test_too_short_to_judge_is_never_healthy(tmp_path):
    short = write_jsonl(tmp_path / "short.jsonl", history(COLLAPSE10)[:1])      # step 10 only
    d = diagnose(load_run(short))
    assert d.verdict == "too-short" and d.exit_code == EXIT_CODES["too-short"] != 0
    assert main(["diagnose", str(short)]) == 4
    assert diagnose(load_run(write_jsonl(tmp_path / "s1.jsonl", history(COLLAPSE1)[:15]))).verdict == "too-short"
    import io
    out = io.StringIO()
    assert watch(short, interval=1, polls=1, out=out, sleep=lambda s: None) == 4
    assert "TOO-SHORT" in out.getvalue()


def test_an_internal_error_is_not_a_verdict(monkeypatch, capsys):
    import rl_lab.tools.diagnose as diag

    def boom(*a, **k):
        raise RuntimeError("a bug")
    monkeypatch.setattr(diag, "diagnose", boom)
    assert main(["diagnose", str(COLLAPSE10)]) == 70
    assert "internal error" in capsys.readouterr().err


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["diagnose", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for code in ("0 healthy", "1 collapsed", "2 unreadable", "3 warning", "4 too short", "70 internal error"):
        assert code in text


def test_trl_and_other_libraries_mismatch_names(tmp_path):
    """TRL's sampling/* (W&B: train/sampling/*), NeMo-RL's gen_kl_error: a high mismatch from the
    first steps is measured, not 'blind', and the advice is TRL's token_truncate for a TRL run."""
    rows = history(COLLAPSE10)
    with_trl = [{**r, "sampling/sampling_logp_difference/mean": 0.15, "sampling/importance_sampling_ratio/mean": 1.0}
                for r in rows]
    d = diagnose(load_run(wandb_history(with_trl, tmp_path / "trl_vllm.csv")))
    assert d.cause == "mismatch-level" and d.mismatch_evidence.startswith("measured")
    assert "|log-ratio|" in d.mismatch_evidence
    assert any("vllm_importance_sampling_mode='token_truncate'" in o.lines for o in d.overrides)
    assert not any("bypass" in o.lines for o in d.overrides)          # TRL 1.16 has no bypass mode
    nemo = [{"step": r["step"], "train/reward": r["reward"], "train/gen_kl_error": 1e-4} for r in rows]
    d = diagnose(load_run(write_jsonl(tmp_path / "nemo.jsonl", nemo)))
    assert (d.verdict, d.cause) == ("collapsed", "not-the-mismatch")


def test_a_learning_rate_that_rises_or_a_warmup_that_ends_at_the_fall():
    step = np.arange(1, 121)
    reward = np.where(step < 60, 0.6, 0.01)
    base = pd.DataFrame({"step": step, "reward": reward, "rollout_corr/k3_kl": 1e-4})
    rising = base.assign(learning_rate=np.minimum(step, 55) * 1e-5)
    assert diagnose(rising).cause == "learning-rate"
    constant = base.assign(learning_rate=1e-4)
    assert diagnose(constant).cause == "not-the-mismatch"
    early_warmup = base.assign(learning_rate=np.minimum(step, 5) * 1e-5)      # peak at step 5, fall ~70
    assert diagnose(early_warmup).cause == "not-the-mismatch"


def test_advice_in_the_runs_framework_and_never_what_is_set(tmp_path):
    """rl_lab's own config.yaml is accepted by --config; a run already on bypass PPO-clip is not told to
    use it, and the advice is RLConfig fields."""
    import yaml

    from rl_lab.config import RLConfig
    step = np.arange(1, 201)
    df = pd.DataFrame({"step": step, "reward": np.where(step < 120, 0.7, 0.02), "rollout_corr/k3_kl": 0.03})
    config = RLConfig().to_dict()
    config["rollout_correction"]["bypass_mode"] = True
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    d = diagnose(df, read_setup(path))
    assert d.framework == "rl_lab" and d.cause == "mismatch-level"
    assert not any("bypass_mode" in o.lines for o in d.overrides)
    assert any("bypass_mode" in a for a in d.already_set)
    assert any(o.lines.startswith("rollout_correction.rollout_is=token") for o in d.overrides)
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "metrics.jsonl", df.to_dict("records"))
    (run / "config.yaml").write_text(path.read_text())
    assert diagnose(load_run(run)).cause == "mismatch-level"
    assert main(["diagnose", str(run / "metrics.jsonl"), "--config", str(path)]) == 1


def test_the_figure_names_every_line_and_keeps_legends_off_the_data():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rl_lab.tools.diagnose import figure
    df = load_run(COLLAPSE1)
    d = diagnose(df)
    fig = figure(df, d)
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == ["reward", "gradient norm", "learning rate", "entropy"]
    for ax in fig.axes:
        legend = ax.get_legend()
        assert legend is not None and len(legend.get_texts()) == len(ax.get_lines())
        assert legend.get_bbox_to_anchor().x0 >= ax.get_window_extent().x1 - 1   # beside the panel
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("moving average" in t for t in texts) and any("reward fall" in t for t in texts)
    assert any("reward peak" in t for t in texts)
    assert any("not shown" in t.get_text() for t in fig.axes[1].get_legend().get_texts())   # zero norms
    title = fig.axes[0].get_title(loc="left")
    assert "verdict: COLLAPSED" in title and "mismatch evidence: on-policy" in title
    plt.close(fig)
