"""The tool task (rl_lab.tasks.MultiplicationTool, issue 17): its scoring and per-turn rewards,
the out-of-distribution tool output, the warm start's multi-turn SFT (the tool's output comes
from the real calculator and is masked from the loss), RLConfig.max_turns and its errors, and
multi-turn runs from the CLI that resume."""
import subprocess
import sys

import pytest
import torch

from rl_lab import RLConfig, Trainer
from rl_lab.config import ConfigError
from rl_lab.demonstrations import sft_batch, sft_example
from rl_lab.models import build_model
from rl_lab.tasks import GroupedNumberEnvironment, get_task, group_thousands, turn_reward_metrics
from rl_lab.trainer import TIMING_KEYS
from rl_lab.utils import read_jsonl

EXAMPLE = {"prompt": "347*28=", "answer": "9716"}
RL = [sys.executable, "-m", "rl_lab.tools.cli"]


def test_the_demonstration_is_a_call_the_real_tool_output_and_the_answer():
    task = get_task("multiplication_tool")
    assert task.trace_segments(EXAMPLE) == [("(347*28)", False), ("=9716|", True), ("9716", False)]
    assert task.target(EXAMPLE) == "(347*28)=9716|9716"
    ood = get_task("multiplication_tool", tool_output_style="ood")
    assert ood.target(EXAMPLE) == "(347*28)=9,716|9716"
    assert isinstance(ood.environment, GroupedNumberEnvironment)


def test_max_answer_length_is_the_longest_episode():
    for style in ("plain", "ood"):
        task = get_task("multiplication_tool", tool_output_style=style)
        longest = {"prompt": "999*99=", "answer": str(999 * 99)}
        assert task.max_answer_length == len(task.target(longest))


def test_score_reads_the_answer_after_the_tool_output():
    task = get_task("multiplication_tool")
    assert task.score("(347*28)=9716|9716", EXAMPLE) == 1.0
    assert task.score("(347*28)=9716|9715", EXAMPLE) == 0.0
    assert task.score("(347*28)=9,716|9,716", EXAMPLE) == 0.0      # the answer is plain digits
    assert task.score("9716", EXAMPLE) == 1.0                      # a product written without the tool counts
    assert task.score("(347*28)", EXAMPLE) == 0.0                  # a call and no answer
    assert task.score("", EXAMPLE) == 0.0


def test_turn_rewards_split_the_reward_by_model_turn():
    task = get_task("multiplication_tool", call_reward=0.1)
    assert task.turn_rewards("(347*28)=9716|9716", EXAMPLE) == [0.1, 1.0]
    assert task.turn_rewards("(347*28)=9716|12", EXAMPLE) == [0.1, 0.0]
    assert task.turn_rewards("(34a*28)=error|12", EXAMPLE) == [0.0, 0.0]   # the calculator refuses the call
    assert task.turn_rewards("9716", EXAMPLE) == [1.0]                     # no call: one turn
    assert task.score("(347*28)=9716|9716", EXAMPLE) == pytest.approx(1.1)
    columns = {"answer": ["9716", "9716"]}
    metrics = turn_reward_metrics(task, ["(347*28)=9716|9716", "5"], columns, max_turns=3)
    assert metrics == {"rewards/turn_0/mean": pytest.approx(0.05), "rewards/turn_1/mean": 1.0,
                       "rewards/turn_2/mean": pytest.approx(float("nan"), nan_ok=True)}
    assert turn_reward_metrics(get_task("addition"), ["5"], {"answer": ["5"]}) == {}


def test_group_thousands_touches_only_integers():
    assert group_thousands("9716") == "9,716" and group_thousands("-1234567") == "-1,234,567"
    assert group_thousands("12") == "12" and group_thousands("0.5") == "0.5"
    assert group_thousands("error: division by zero") == "error: division by zero"


@pytest.mark.parametrize("kwargs, words", [
    ({"digits_a": 0}, "digits_a"), ({"digits_b": 7}, "digits_b"),
    ({"tool_output_style": "words"}, "plain"), ({"call_reward": 2.0}, "call_reward"),
    ({"max_turns": 3}, "accepts"),          # K belongs to the run: RLConfig.max_turns
])
def test_bad_knobs_say_what_to_change(kwargs, words):
    with pytest.raises(ValueError, match=words):
        get_task("multiplication_tool", **kwargs)


def test_sft_trains_on_the_model_turns_and_never_on_the_tool_output():
    """Labels are -100 on the prompt and on every environment token, the ids elsewhere; a
    different tool output changes the context (the ids) and none of the trained positions."""
    _, tok = build_model("0.3M", seed=0)
    task = get_task("multiplication_tool")
    ids, labels = sft_example(tok, task, EXAMPLE)
    text = tok.decode(ids, skip_special_tokens=True)
    assert text == "347*28=(347*28)=9716|9716"
    trained = tok.decode([y for y in labels if y != -100], skip_special_tokens=True)
    assert trained == "(347*28)9716"                               # the call and the answer, no "=9716|"
    assert labels[-1] == tok.eos_token_id                           # <eos> is trained too
    env_start = len(tok("347*28=(347*28)")["input_ids"])
    assert labels[env_start: env_start + len("=9716|")] == [-100] * len("=9716|")
    ood_ids, ood_labels = sft_example(tok, get_task("multiplication_tool", tool_output_style="ood"), EXAMPLE)
    assert len(ood_ids) == len(ids) + 1                            # "=9,716|": one more context token
    assert [y for y in ood_labels if y != -100] == [y for y in labels if y != -100]
    input_ids, attn, label_t = sft_batch(tok, task, [EXAMPLE, {"prompt": "999*99=", "answer": "98901"}])
    assert input_ids.shape == label_t.shape and int(attn[0].sum()) == int(attn[1].sum()) - 2   # right-padded
    assert label_t[0, -2:].tolist() == [-100, -100]


def test_sft_loss_has_no_term_on_the_tool_output():
    """The SFT loss's gradient is the same whatever the model would predict at the environment's
    positions: only the trained positions enter the cross-entropy."""
    model, tok = build_model("0.3M", seed=0)
    task = get_task("multiplication_tool")
    input_ids, attn, labels = sft_batch(tok, task, [EXAMPLE])
    env = labels[0] == -100
    assert int(env.sum()) == len(tok("347*28=")["input_ids"]) + len("=9716|")
    logits = model(input_ids=input_ids, attention_mask=attn).logits
    per_token = torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:], ignore_index=-100,
                                                  reduction="none")
    assert bool((per_token[env[1:]] == 0).all()) and bool((per_token[~env[1:]] > 0).all())


def test_max_turns_is_for_tool_tasks_and_says_so():
    with pytest.raises(ConfigError, match="no tool environment.*multiplication_tool"):
        RLConfig(task="addition", max_turns=2)
    with pytest.raises(ConfigError, match="max_completion_length >= 21"):
        RLConfig(task="multiplication_tool", max_completion_length=8)   # 8 tokens cut every episode
    with pytest.raises(ConfigError, match="max_turns"):
        RLConfig(task="multiplication_tool", max_completion_length=21, max_turns=0)
    # unset: a tool task's longest episode (the Python API and the CLI agree), else 8 tokens
    assert RLConfig(task="multiplication_tool").max_completion_length == 21
    assert RLConfig(task="multiplication_tool", task_kwargs={"tool_output_style": "ood"}).max_completion_length == 22
    assert RLConfig(task="addition").max_completion_length == 8 == RLConfig().max_completion_length
    assert RLConfig(task="addition").replace(max_turns=None).max_completion_length == 8
    assert RLConfig(task="addition").max_turns is None


SMALL = dict(task="multiplication_tool", model="0.3M", prompts_per_step=2, num_generations=2,
             max_completion_length=21, progress_bar=False, learning_rate=1e-3)


def test_max_turns_sets_k_for_the_run():
    """max_turns=1: the call is never executed (no tool), the episode is one model turn."""
    trainer = Trainer(RLConfig(**SMALL, max_steps=1, max_turns=1))
    assert trainer.environment.max_turns == 1 and trainer.environment.call_open == "("
    metrics = trainer.step()
    assert metrics["tools/calls"] == 0 and metrics["turns/mean"] <= 1
    assert Trainer(RLConfig(**SMALL, max_steps=1)).environment.max_turns == 2


def test_a_warm_started_tool_run_resumes_to_the_same_result(tmp_path):
    """Six steps straight, or four, a new Trainer from the checkpoint, and two more: the same
    metrics (the environment holds no state between steps)."""
    base = dict(SMALL, model="warm-start", prompts_per_step=4, num_generations=4, max_steps=6)
    ref = Trainer(RLConfig(**base)).train()
    Trainer(RLConfig(**base, output_dir=str(tmp_path), save_steps=2)).train(max_steps=4)
    again = Trainer(RLConfig(**base, output_dir=str(tmp_path), save_steps=2))
    assert again.resume() and again.global_step == 4
    again.train()
    rows = [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in read_jsonl(tmp_path / "metrics.jsonl")]
    expected = ref.drop(columns=[c for c in ref.columns if c in TIMING_KEYS]).to_dict("records")
    assert len(rows) == 6
    for got, want in zip(rows, expected):
        assert got.keys() == want.keys()
        for k in got:
            assert got[k] == pytest.approx(want[k], nan_ok=True), k
    assert all(r["tools/calls"] > 0 for r in rows) and "rewards/turn_1/mean" in rows[0]


@pytest.mark.slow             # > 20 s: not in the fast tier (make test-fast)
def test_cli_runs_multi_turn_episodes_from_the_warm_start(tmp_path):
    """`rl-lab train --task multiplication_tool --preset smoke` fills in the episode length and
    trains on calculator episodes from the shipped warm start; `--resume` continues the run."""
    out = tmp_path / "run"
    args = ["train", "--task", "multiplication_tool", "--preset", "smoke", "--out", str(out),
            "--set", "max_steps=3", "--set", "save_steps=3", "--set", "progress_bar=false",
            "--set", "prompts_per_step=4", "--set", "num_generations=4"]
    first = subprocess.run(RL + args, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "task=multiplication_tool model=warm-start steps=3" in first.stdout
    more = subprocess.run(RL + ["train", "--out", str(out), "--resume", "--set", "max_steps=4"],
                          capture_output=True, text=True, timeout=300)
    assert more.returncode == 0, more.stderr
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["turns/mean"] > 1.5 and r["tools/calls"] > 0 for r in rows), rows
    assert rows[0]["reward"] > 0      # the warm start answers through the tool from the first step
    saved = (out / "config.yaml").read_text()
    assert "max_completion_length: 21" in saved


def test_the_verl_export_refuses_tool_episodes_with_a_reason():
    from rl_lab.integrations.verl import VerlExportError, check_exportable
    with pytest.raises(VerlExportError, match="tool task.*single-turn") as err:
        check_exportable(RLConfig(task="multiplication_tool", max_completion_length=21, max_turns=3))
    assert "RLConfig.max_turns=3" in str(err.value)


@pytest.mark.slow
def test_rl_from_the_warm_start_beats_a_frozen_control():
    """Thirty GRPO steps (8 prompts x 8 episodes, lr 5e-4) from the shipped warm start against the
    paired control (learning_rate=0: the same prompt and sampling streams, a frozen policy).
    Measured when written (seed 0, 1 thread, loaded 2-core VM, ~17 s a run): held-out sampled
    success 0.514 -> 0.697 (control 0.514), the tool called in ~99% of episodes.  Criterion, fixed
    before running it: the trained policy's held-out success (512 prompts, sampled) beats the
    control's by more than 0.08 (about 3 standard errors of a difference), its paired reward over
    the last half of the steps is higher, and it still calls the tool."""
    from rl_lab.tools.warmstart import success_rate
    runs = {}
    for lr in (5e-4, 0.0):
        trainer = Trainer(RLConfig(task="multiplication_tool", model="warm-start", max_completion_length=21,
                                   max_steps=30, learning_rate=lr, progress_bar=False, seed=0))
        df = trainer.train()
        runs[lr] = (df, success_rate(trainer.model, trainer.tokenizer, trainer.task, n=512, seed=4242))
    (trained, s_trained), (control, s_control) = runs[5e-4], runs[0.0]
    assert s_trained - s_control > 0.08, (s_trained, s_control)
    assert trained["reward"].values[15:].mean() > control["reward"].values[15:].mean()
    assert trained["tools/calls"].values[15:].mean() > 0.9 * 64
