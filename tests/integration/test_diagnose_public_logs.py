"""`rl-lab diagnose` on real, public verl logs (tests/integration/fixtures/public_logs/README.md says where each
comes from, what its author reported, and which lines were kept).  What is asserted is what can be
checked: the format is recognised, the reward column is found, and the verdict agrees with the
author's account where the author gave one.  No public log of a *collapsed* verl run with enough
steps was found, so none of the collapse classes is tested on real data here."""
import math
from pathlib import Path

import pandas as pd
import pytest

from rl_lab.integrations.verl import parse_console_line
from rl_lab.tools.diagnose import K3, diagnose, load_run, report

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "public_logs"
CONSOLE = FIXTURES / "bihan_dstack_verl_ppo_gsm8k_console.log"
CONSOLE_PLAIN = FIXTURES / "chenyiqun_agentic_rag_verl_ppo_gsm8k_console.log"
FILE_LOGGER = FIXTURES / "hanlindu_verl_resize_filelogger.jsonl"


def test_every_fixture_is_listed_in_the_readme():
    readme = (FIXTURES / "README.md").read_text()
    fixtures = sorted(p.name for p in FIXTURES.iterdir() if p.name != "README.md")
    assert fixtures == sorted([CONSOLE.name, CONSOLE_PLAIN.name, FILE_LOGGER.name])
    for name in fixtures:
        assert name in readme


# ------------------------------------------------------------------- a console log as Ray prints it
@pytest.mark.parametrize("line, step, keys", [
    ("\x1b[36m(TaskRunner pid=14640)\x1b[0m step:101 - actor/grad_norm:2.037 - critic/score/mean:0.941",
     101, {"actor/grad_norm": 2.037, "critic/score/mean": 0.941}),
    ("(TaskRunner pid=15930, ip=10.4.1.33) step:1 - critic/score/mean:0.5760498046875",
     1, {"critic/score/mean": 0.5760498046875}),
    ("\x1b[36m(main_task pid=3982)\x1b[0m step:25 - critic/kl:0.055", 25, {"critic/kl": 0.055}),
    ("(TaskRunner pid=1271585) step:4 - critic/vf_loss:np.float64(0.316579750584412)",
     4, {"critic/vf_loss": 0.316579750584412}),
    ("step:7 - critic/score/mean:0.000", 7, {"critic/score/mean": 0.0}),          # no prefix: as before
], ids=["ansi-taskrunner", "multi-node-ip", "main_task", "np-float", "bare"])
def test_console_lines_with_rays_prefix(line, step, keys):
    """The prefix and colour codes Ray puts on an actor's stdout (shapes seen in the public logs and
    issue threads cited in the fixtures' README) do not hide the step line."""
    parsed = parse_console_line(line)
    assert parsed is not None and parsed[0] == step
    for key, value in keys.items():
        assert parsed[1][key] == pytest.approx(value)


@pytest.mark.parametrize("line", [
    "\x1b[36m(TaskRunner pid=14640)\x1b[0m Setting global step to 100",
    "(TaskRunner pid=1) timing/step:1.25",
    "(WorkerDict pid=1610, ip=172.26.135.50) kwargs: {'n': 1, 'max_tokens': 256}",
    "(TaskRunner pid=14640) wandb:                training/global_step 435",
])
def test_other_prefixed_lines_are_not_steps(line):
    assert parse_console_line(line) is None


def test_real_console_log_loads_and_is_healthy():
    """A PPO run (Qwen2.5-7B-Instruct, GSM8K, 2 x 8 GPUs) resumed at step 100 and run to 435; its
    author marked the command `# Works` and Ray reported the job succeeded.  Before the prefix was
    stripped, load_run found no metrics in this file at all."""
    df = load_run(CONSOLE)
    assert df.attrs["source"].startswith("verl log")
    assert len(df) == 335 and (df["step"].min(), df["step"].max()) == (101, 435)
    assert df["step"].is_monotonic_increasing and df["step"].diff().dropna().eq(1).all()
    assert df["reward"].notna().all() and df["reward"].iloc[0] == pytest.approx(0.941)
    assert df["entropy"].iloc[0] == pytest.approx(0.035)          # verl's older name, actor/entropy_loss
    assert df["grad_norm"].notna().all()
    assert df["val-core/openai/gsm8k/reward/mean@1"].notna().sum() == 34   # every 10 steps, and the last
    d = diagnose(df)
    assert (d.verdict, d.cause) == ("healthy", None), report(d)
    assert "reward fall" not in d.timeline and "gradient blow-up" not in d.timeline
    assert K3 in d.missing and any(f.rule == "blind" for f in d.findings)   # no rollout_corr/* logged


def test_real_console_log_without_colour_codes_loads():
    """The verl quickstart's PPO run (Qwen2.5-0.5B-Instruct, GSM8K, one GPU) as committed after 26 of
    its 435 steps: Ray's prefix without colour codes, and verl's old rollout-vs-trainer probability
    monitor.  The author said nothing about the run; what is asserted beyond loading is what the
    log's own numbers show: the reward rose (0.016 at step 1, 0.340 at step 26; validation 0.000 at
    step 10, 0.247 at step 20), so 'collapsed' would be wrong."""
    df = load_run(CONSOLE_PLAIN)
    assert df["step"].tolist() == list(range(1, 27))
    assert df["reward"].iloc[[0, -1]].tolist() == pytest.approx([0.016, 0.340])
    assert df["training/rollout_probs_diff_mean"].between(0.004, 0.005).all()
    assert df["val-core/openai/gsm8k/reward/mean@1"].dropna().tolist() == pytest.approx([0.0, 0.247])
    d = diagnose(df)
    assert (d.verdict, d.cause) == ("healthy", None), report(d)
    assert d.levels["training/rollout_probs_diff_mean"] == pytest.approx(0.004)
    assert "training/rollout_probs_diff_mean rises" not in d.timeline


# ------------------------------------------------------------------- verl's file logger, real records
def test_real_file_logger_records_load():
    """Four records of verl's FileLogger from a development fork (a validation-only step 0, then three
    training steps): nulls, a string-valued metric and the rollout_corr/* block are read as they are."""
    df = load_run(FILE_LOGGER)
    assert df.attrs["source"].startswith("verl log")
    assert df["step"].tolist() == [0, 1, 2, 3]
    assert math.isnan(df["reward"].iloc[0])                       # step 0 is validation only
    assert df["reward"].iloc[1:].tolist() == [0.0, 0.0, 0.0]
    assert df[K3].iloc[1] == pytest.approx(9.238541362807155)
    assert df[K3].iloc[2:].isna().all()                           # orjson's null for NaN
    assert df["resize/mode"].isna().all()                         # a string, not a metric
    assert df["rollout_corr/training_ppl"].iloc[1] == pytest.approx(4522204.668457031)


def test_real_file_logger_verdict():
    """No account from the log's author exists (see the README), so this pins what the tool says and
    why, not an agreement: three steps are too few to judge a collapse (WINDOW = 20), and k3 = 9.24
    per token at the first step fires 'suspect a bug'.  The log's own numbers agree with that reading
    (the trainer's perplexity of the sampled text 4.5e6 against the sampler's 3.65 at step 1)."""
    d = diagnose(load_run(FILE_LOGGER))
    assert d.verdict != "collapsed"
    assert (d.verdict, d.cause) == ("warning", "suspect-bug"), report(d)


@pytest.mark.parametrize("order", [("actor/entropy_loss", "actor/entropy"), ("actor/entropy", "actor/entropy_loss")])
def test_actor_entropy_wins_over_the_older_name(tmp_path, order):
    """actor/entropy_loss stands in for the entropy only when actor/entropy is absent."""
    values = {"actor/entropy": [0.5, 0.4], "actor/entropy_loss": [9.0, 9.0]}
    df = pd.DataFrame({"step": [1, 2], "critic/score/mean": [0.1, 0.2], **{k: values[k] for k in order}})
    df.to_csv(tmp_path / "run.csv", index=False)
    out = load_run(tmp_path / "run.csv")
    assert out["entropy"].tolist() == [0.5, 0.4]
    assert out["actor/entropy_loss"].tolist() == [9.0, 9.0]
