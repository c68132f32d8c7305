"""`rl-lab diagnose` (issue 35): every class on synthetic runs, every input format, the exit codes,
and two shipped stability-map runs whose cause is known."""
import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rl_lab.errors import ConfigError
from rl_lab.tools.cli import main
from rl_lab.tools.diagnose import K3_WARN, diagnose, load_run, report

ROOT = Path(__file__).resolve().parents[2]
N = 200


def run(k3=None, fall: int | None = None, k3_from: int | None = None, k3_high: float = 0.05, k3_first=None,
        grad_blowup: int | None = None, seed: int = 0) -> pd.DataFrame:
    """A synthetic run: the reward climbs to ~0.8 and, with `fall`, drops to ~0.02 from that step;
    k3 is `k3` per token (None: not logged), `k3_high` from step `k3_from` on."""
    rng = np.random.default_rng(seed)
    step = np.arange(1, N + 1)
    reward = np.clip(0.8 * (1 - np.exp(-step / 20)) + rng.normal(0, 0.03, N), 0, 1)
    if fall is not None:
        reward[step >= fall] = 0.02
    df = pd.DataFrame({"step": step, "reward": reward, "grad_norm": 1 + rng.normal(0, 0.05, N),
                       "entropy": 0.5 + rng.normal(0, 0.01, N)})
    if grad_blowup is not None:
        df.loc[df.step >= grad_blowup, "grad_norm"] = 50.0
    if k3 is not None:
        values = np.full(N, k3) * np.exp(rng.normal(0, 0.1, N))
        if k3_from is not None:
            values[step >= k3_from] = k3_high
        if k3_first is not None:
            values[0] = k3_first
        df["rollout_corr/k3_kl"] = values
    return df


@pytest.mark.parametrize("df, verdict, cause", [
    (run(k3=1e-4), "healthy", None),
    (run(k3=0.05, fall=120), "collapsed", "mismatch-level"),
    (run(k3=1e-4, k3_from=90, fall=130), "collapsed", "mismatch-led"),
    (run(k3=1e-4, fall=120), "collapsed", "not-the-mismatch"),
    (run(k3=None, fall=120), "collapsed", "blind"),
    (run(k3=1e-4, k3_first=0.3), "warning", "suspect-bug"),
    (run(k3=0.05), "warning", "mismatch-level"),
    (run(k3=1e-4, grad_blowup=150), "warning", None),
    (run(k3=1e-4, k3_from=150, fall=130), "collapsed", "not-the-mismatch"),   # the rise came after the fall
], ids=["healthy", "level", "led", "not-mismatch", "blind", "bug", "warning-level", "warning-grad", "rise-after"])
def test_every_class(df, verdict, cause):
    d = diagnose(df)
    assert (d.verdict, d.cause) == (verdict, cause), report(d)
    assert d.exit_code == {"healthy": 0, "collapsed": 1, "warning": 3}[verdict]
    text = report(d)
    assert verdict.upper() in text and len(text.splitlines()) < 60
    if verdict == "collapsed":
        assert d.timeline["reward fall"] in range(120, 160) and d.overrides
        assert any("resume_from_path" in o.lines for o in d.overrides)
    if cause in ("mismatch-level", "mismatch-led"):
        assert "bypass_mode=true" in d.overrides[0].lines and "book map" in d.overrides[0].evidence


def test_mismatch_led_reports_the_lead():
    d = diagnose(run(k3=1e-4, k3_from=90, fall=130))
    rise = d.timeline["rollout_corr/k3_kl rises"]
    assert 90 <= rise < d.timeline["reward fall"]
    assert f"{d.timeline['reward fall'] - rise} steps before the fall" in report(d)


def write_formats(df: pd.DataFrame, folder: Path) -> dict[str, Path]:
    """The same run in every supported input format."""
    verl = {"reward": "critic/score/mean", "grad_norm": "actor/grad_norm", "entropy": "actor/entropy"}
    paths = {}
    run_dir = folder / "rl_lab_run"
    run_dir.mkdir()
    with open(run_dir / "metrics.jsonl", "w") as f:
        for row in df.to_dict("records"):
            f.write(json.dumps(row) + "\n")
    paths["rl_lab folder"] = run_dir
    paths["verl file logger"] = folder / "verl.jsonl"
    with open(paths["verl file logger"], "w") as f:
        for row in df.to_dict("records"):
            data = {verl.get(k, k): v for k, v in row.items() if k != "step"}
            f.write(json.dumps({"step": int(row["step"]), "data": data}) + "\n")
    paths["verl console"] = folder / "console.log"
    with open(paths["verl console"], "w") as f:
        f.write("(TaskRunner pid=1) some startup line\n")
        for row in df.to_dict("records"):
            parts = [f"{verl.get(k, k)}:{v}" for k, v in row.items() if k != "step"]
            f.write(f"step:{int(row['step'])} - " + " - ".join(parts) + "\n")
    paths["flat JSONL"] = folder / "flat.jsonl"
    with open(paths["flat JSONL"], "w") as f:
        for row in df.to_dict("records"):
            f.write(json.dumps({"_step": int(row["step"]), **{verl.get(k, k): v for k, v in row.items() if k != "step"}})
                    + "\n")
    paths["W&B CSV"] = folder / "wandb.csv"
    with open(paths["W&B CSV"], "w", newline="") as f:
        names = [c for c in df.columns if c != "step"]
        cols = ["Step"] + [f"my-run - {verl.get(c, c)}" for c in names] + [f"my-run - {verl.get(names[0], names[0])}__MIN"]
        w = csv.writer(f)
        w.writerow(cols)
        for row in df.to_dict("records"):
            w.writerow([int(row["step"])] + [row[c] for c in names] + [0])
    return paths


def test_every_input_format_gives_the_same_diagnosis(tmp_path):
    df = run(k3=0.05, fall=120)
    expected = diagnose(df)
    for name, path in write_formats(df, tmp_path).items():
        loaded = load_run(path)
        assert {"step", "reward", "rollout_corr/k3_kl", "grad_norm", "entropy"} <= set(loaded.columns), name
        d = diagnose(loaded)
        assert (d.verdict, d.cause, d.timeline) == (expected.verdict, expected.cause, expected.timeline), name


def test_critic_rewards_mean_is_a_fallback_reward(tmp_path):
    path = tmp_path / "v.jsonl"
    df = run(k3=1e-4, fall=120)
    with open(path, "w") as f:
        for row in df.to_dict("records"):
            f.write(json.dumps({"step": int(row["step"]), "data": {"critic/rewards/mean": row["reward"],
                                                                     "rollout_corr/k3_kl": row["rollout_corr/k3_kl"]}})
                    + "\n")
    d = diagnose(load_run(path))
    assert d.verdict == "collapsed" and "grad_norm" in d.missing
    assert "not in the input: " in report(d)


def test_unreadable_inputs_say_what_was_expected(tmp_path):
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(ConfigError, match="neither metrics.jsonl .* nor trainer_state.json"):
        load_run(tmp_path / "empty_dir")
    no_reward = tmp_path / "x.jsonl"
    no_reward.write_text(json.dumps({"step": 1, "loss": 0.1}) + "\n")
    with pytest.raises(ConfigError, match="no reward column"):
        diagnose(load_run(no_reward))
    assert main(["diagnose", str(no_reward)]) == 2
    assert main(["diagnose", str(tmp_path / "missing.jsonl")]) == 2


def test_the_command_line_exit_codes_json_and_figure(tmp_path, capsys):
    paths = write_formats(run(k3=0.05, fall=120), tmp_path)
    out, png = tmp_path / "diagnosis.json", tmp_path / "d.png"
    assert main(["diagnose", str(paths["verl file logger"]), "--out", str(out), "--plot", str(png)]) == 1
    assert "verdict: COLLAPSED  cause: mismatch-level" in capsys.readouterr().out
    saved = json.loads(out.read_text())
    assert saved["exit_code"] == 1 and saved["cause"] == "mismatch-level" and png.stat().st_size > 10_000
    healthy = tmp_path / "healthy"
    healthy.mkdir()
    write_formats(run(k3=1e-4), healthy)
    assert main(["diagnose", str(healthy / "verl.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "healthy"


def test_shipped_map_runs_whose_cause_is_known():
    """A stale sampler (4 steps) at lr 5e-4 that collapsed, and a fresh one at lr 1e-3 that collapsed."""
    series = pd.read_csv(ROOT / "research" / "stability_map" / "results" / "monitor_series.csv.gz")
    from rl_lab.tools.sweep import load_results
    labels = load_results(ROOT / "research" / "stability_map" / "results").drop_duplicates("run_id")
    collapsed = labels[labels.collapsed.astype(bool) & labels.run_id.isin(series.run_id)]
    stale = collapsed[(collapsed.sampler_staleness == 4) & (collapsed.learning_rate == 5e-4)].run_id.iloc[0]
    fresh = collapsed[(collapsed.sampler_staleness == 0) & (collapsed.learning_rate == 1e-3)].run_id.iloc[0]
    for run_id, cause in ((stale, "mismatch-level"), (fresh, "not-the-mismatch")):
        df = series[series.run_id == run_id].drop(columns=["spec", "run_id"]).reset_index(drop=True)
        d = diagnose(df)
        assert (d.verdict, d.cause) == ("collapsed", cause), report(d)
    assert K3_WARN == 1e-2      # the pre-registered constant (research/diagnose/NOTES.md)


def test_watch_follows_a_live_log_and_stops_at_the_collapse(tmp_path):
    """`--watch` on a flat JSONL that grows between reads: it waits while the file is missing or
    too short, prints a line when the verdict changes (healthy -> collapsed), and returns 1 with the
    full report at the collapse; a run that stays healthy returns 0 after its reads."""
    import io

    from rl_lab.tools.diagnose import watch
    df = run(k3=0.05, fall=120)
    path = tmp_path / "live.jsonl"
    chunks = iter([0, 60, 100, 130, 200])          # rows written before each read

    def write_more(_seconds):
        rows = next(chunks)
        with open(path, "w") as f:
            for record in df.iloc[:rows].to_dict("records"):
                f.write(json.dumps(record) + "\n")
            f.write('{"step": ')                    # a torn last line, as a live logger leaves it

    out = io.StringIO()
    code = watch(path, interval=1, polls=10, out=out, sleep=write_more)
    text = out.getvalue()
    assert code == 1, text
    assert "[watch] waiting" in text                  # no file yet, then too few rows
    verdicts = [line for line in text.splitlines() if line.startswith("[watch] step")]
    assert len(verdicts) >= 2 and "COLLAPSED" in verdicts[-1] and "COLLAPSED" not in verdicts[0]
    assert "verdict: COLLAPSED" in text               # the full report at the end

    healthy = tmp_path / "healthy.jsonl"
    healthy.write_text("".join(json.dumps(r) + "\n" for r in run(k3=1e-4).to_dict("records")))
    out = io.StringIO()
    assert watch(healthy, interval=1, polls=3, out=out, sleep=lambda s: None) == 0
    assert out.getvalue().count("[watch] step") == 1  # the verdict did not change: one line
    with pytest.raises(ConfigError, match="positive"):
        watch(healthy, interval=0)
    assert main(["diagnose", str(healthy), "--watch", "0.01", "--watch-polls", "2"]) == 0


def test_verl_config_adds_setup_findings(tmp_path, capsys):
    """--config reads verl's Hydra config.yaml (nested) or a file of overrides: several optimizer
    steps per batch, bypass with IS weights, a tempered/truncated sampler and a mirrored k1 band
    each give a finding with its evidence; a plain config gives none; a file with no verl keys is
    refused with what was expected."""
    from rl_lab.tools.diagnose import read_verl_setup, setup_findings
    nested = tmp_path / "config.yaml"
    nested.write_text(
        "data: {train_batch_size: 256}\n"
        "actor_rollout_ref:\n"
        "  actor: {ppo_mini_batch_size: 64, ppo_epochs: 2, optim: {lr: 1.0e-6}}\n"
        "  rollout: {temperature: 0.7, top_p: 0.95, dtype: bfloat16}\n"
        "algorithm:\n"
        "  rollout_correction: {rollout_is: token, bypass_mode: true, rollout_rs: token_k1,"
        " rollout_rs_threshold: 0.6_1.6}\n")
    setup = read_verl_setup(nested)
    assert setup["optimizer_steps_per_batch"] == 8 and setup["lr"] == 1e-6 and setup["bypass_mode"]
    rules = [f.rule for f in setup_findings(setup)]
    assert rules == ["several optimizer steps per batch", "weights computed, never applied",
                     "a tempered or truncated sampler", "a k1 rejection band that is not reciprocal"]
    overrides = tmp_path / "overrides.txt"
    overrides.write_text("python3 -m verl.trainer.main_ppo data.train_batch_size=64 \\\n"
                         "  actor_rollout_ref.actor.ppo_mini_batch_size=64 actor_rollout_ref.rollout.temperature=1.0\n")
    plain = read_verl_setup(overrides)
    assert plain["optimizer_steps_per_batch"] == 1 and setup_findings(plain) == []
    notverl = tmp_path / "other.yaml"
    notverl.write_text("model: {lr: 1}\n")
    with pytest.raises(ConfigError, match="no verl keys"):
        read_verl_setup(notverl)
    paths = write_formats(run(k3=1e-4), tmp_path)
    assert main(["diagnose", str(paths["verl file logger"]), "--config", str(nested), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["setup"]["optimizer_steps_per_batch"] == 8 and len(out["findings"]) >= 4
    assert main(["diagnose", str(paths["verl file logger"]), "--config", str(tmp_path / "nope.yaml")]) == 2
