"""Multi-turn episodes (rl_lab.agents.episodes with rl_lab.engines.rollout.HFEngine): the
environment's tokens condition the model but are never sampled, so they add nothing to the loss,
the ratios, the monitors, the KL or the token counts; max_turns = 1 is the single-turn trainer
bit for bit; tool errors are counted, not raised."""
import copy
from dataclasses import replace

import pytest
import torch
from helpers import CHARS, SMALL, FixedEngine, distinct_characters, scripted_batch, step_on, strip_timing  # noqa: F401

from rl_lab import RLConfig, Trainer
from rl_lab.agents import ToolEnvironment, ToolResult
from rl_lab.agents.registry import TOOLS
from rl_lab.config import ConfigError, SamplingConfig
from rl_lab.engines.scripted import ScriptedEngine, script_token_ids
from rl_lab.models import build_model
from rl_lab.trainer import TIMING_KEYS  # noqa: F401


def test_an_episode_alternates_model_and_tool_turns():
    batch, tok = scripted_batch()
    assert batch.completions == ["(2*3)=6|6", "7", "(1/0)=error: division by zero|x", "(9)=9|(8)=8|5"]
    row = batch.completion_ids[0].tolist()
    env = batch.env_mask[0].tolist()
    text = [(tok.decode([i]), e) for i, e in zip(row, env)][:10]
    assert text == [("(", 0), ("2", 0), ("*", 0), ("3", 0), (")", 0), ("=", 1), ("6", 1), ("|", 1), ("6", 0),
                    ("<eos>", 0)]
    assert batch.turn_ids[0, :10].tolist() == [0, 0, 0, 0, 0, 0, 0, 0, 1, 1] and batch.turn_ids[0, 10] == -1
    # environment tokens: not sampled (mask 0, log mu 0), disjoint from the model's
    assert not (batch.env_mask & batch.completion_mask.bool()).any()
    assert (batch.sampler_logprobs[batch.env_mask] == 0).all()
    assert batch.completion_mask[0].sum() == 7 and batch.env_mask[0].sum() == 3
    # the third turn of row 3 is the last allowed (max_turns = 3): no fourth call
    assert batch.turn_ids[3].max() == 2
    assert batch.episode_metrics == {"turns/mean": (2 + 1 + 2 + 3) / 4, "turns/void_fraction": 0.0,
                                     "turns/void_eos_fraction": 0.0, "tools/calls": 4, "tools/errors": 1, "tools/timeouts": 0, "tools/truncated": 0}


def test_a_script_leaves_room_for_each_tool_answer_and_checks_itself():
    """rl_lab.engines.scripted.ScriptedEngine: a '|' follows a complete call and reserves as many (pad)
    positions as the tool's answer has tokens; a misplaced '|' or a wrong row count says what to change."""
    model, tok = build_model("0.3M", seed=0)
    ids = script_token_ids("(2*3)|6", tok, CHARS)
    enc = lambda text: tok(text, add_special_tokens=False)["input_ids"]   # noqa: E731
    assert ids == enc("(2*3)") + [tok.pad_token_id] * len(enc("=6|")) + enc("6") + [tok.eos_token_id]
    assert script_token_ids("7", tok, CHARS) == enc("7") + [tok.eos_token_id]
    with pytest.raises(ValueError, match=r"turn 0 \('2\*3'\) .* does not end with a complete call \(\.\.\.\)"):
        script_token_ids("2*3|6", tok, CHARS)
    engine = ScriptedEngine(model, tok, ["7", "8", "9"], CHARS)
    with pytest.raises(ValueError, match="3 scripts but generate.. asks for 2 prompts x 2 = 4 rows"):
        engine.generate(["1+1=", "2+2="], 2, SamplingConfig(max_completion_length=8), environment=CHARS)


def test_the_last_turn_executes_no_call_and_a_cut_turn_is_void():
    batch, _ = scripted_batch(env=replace(CHARS, max_turns=1), scripts=("(2*3)6", "(1+1)" + "1" * 50, "7", "(2*3)"))
    assert batch.completions[0] == "(2*3)6" and batch.completions[3] == "(2*3)" and not batch.env_mask.any()
    assert batch.episode_metrics["tools/calls"] == 0
    assert batch.episode_metrics["turns/void_fraction"] == 0.25   # row 1 hit the length limit mid-turn


def test_max_turns_one_is_the_single_turn_trainer_bit_for_bit():
    def run(environment):
        cfg = RLConfig(**{**SMALL, "max_completion_length": 6}, max_steps=3, seed=5, beta=0.05)
        return strip_timing(Trainer(cfg, reward_funcs=[distinct_characters],
                                    environment=environment).train().to_dict("records"))
    plain, one_turn = run(None), run(replace(CHARS, max_turns=1))
    extra = {"turns/mean", "turns/void_fraction", "turns/void_eos_fraction", "tools/calls", "tools/errors",
             "tools/timeouts", "tools/truncated"}
    assert [{k: v for k, v in r.items() if k not in extra} for r in one_turn] == plain
    assert all(r["tools/calls"] == 0 and r["turns/mean"] == 1.0 for r in one_turn)
    assert plain[0]["grad_norm"] > 0 and plain[0]["kl"] >= 0     # a real update, not a vacuous comparison


def test_an_environment_token_conditions_what_follows_but_adds_nothing_to_the_loss(monkeypatch):
    import rl_lab.trainer as trainer_module
    captured = []
    original = trainer_module.token_logprobs

    def keep(*args, **kwargs):
        out = original(*args, **kwargs)
        if out.logp.requires_grad:
            out.logp.retain_grad()
            captured.append(out.logp)
        return out
    monkeypatch.setattr(trainer_module, "token_logprobs", keep)

    a, tok = scripted_batch()
    b = copy.deepcopy(a)
    six, seven = tok.convert_tokens_to_ids("6"), tok.convert_tokens_to_ids("7")
    assert a.completion_ids[0, 6] == six and a.env_mask[0, 6]
    b.completion_ids[0, 6] = seven                        # the tool "said" 7: same text reward, other context
    metrics_a, metrics_b = step_on(a, captured, beta=0.1), step_on(b, captured, beta=0.1)
    logp_a, logp_b = captured[0], captured[1]
    assert torch.equal(logp_a[0, :6], logp_b[0, :6])      # causal: nothing before the change moves
    assert not torch.equal(logp_a[0, 7:9], logp_b[0, 7:9])   # what follows it is conditioned on it
    for logp, batch in ((logp_a, a), (logp_b, b)):
        grad = logp.grad
        assert (grad[batch.env_mask] == 0).all()            # no loss term on any environment token
        assert (grad[0, 8] != 0) and batch.completion_mask[0, 8]   # the model's answer after it has one
    # on-policy the loss's value is -mean(A) either way, but its gradient flows through the new context
    assert metrics_a["grad_norm"] != metrics_b["grad_norm"]


def test_environment_tokens_are_outside_ratios_monitors_kl_and_counts():
    a, _ = scripted_batch()
    wild = copy.deepcopy(a)
    wild.sampler_logprobs[wild.env_mask] = -30.0          # what a sampler might report there: ignored
    one = strip_timing([step_on(a, [], beta=0.1)])
    two = strip_timing([step_on(wild, [], beta=0.1)])
    assert one == two
    row = one[0]
    assert row["faults/masked_samples"] == 0
    assert row["completions/mean_length"] == a.completion_mask.sum().item() / 4   # the model's tokens only
    assert row["num_tokens"] == int(a.prompt_mask.sum() + a.completion_mask.sum())
    assert row["tools/calls"] == 4 and row["tools/errors"] == 1


def test_a_raising_tool_is_counted_and_training_goes_on(monkeypatch):
    monkeypatch.setitem(TOOLS, "flaky", lambda text: 1 / 0 if "1" in text else ToolResult("ok"))
    model, tok = build_model("0.3M", seed=0)
    env = replace(CHARS, tool="flaky")
    engine = ScriptedEngine(model, tok, ["(1)|2", "(2)|2", "3", "4"], env)
    trainer = Trainer(RLConfig(**{**SMALL, "max_completion_length": 64}, max_steps=2, seed=0), model=model, tokenizer=tok,
                      engine=engine, reward_funcs=[distinct_characters], environment=env)
    rows = trainer.train().to_dict("records")
    assert [r["tools/calls"] for r in rows] == [2, 2] and [r["tools/errors"] for r in rows] == [1, 1]
    assert all(r["faults/masked_samples"] == 0 and r["grad_norm"] > 0 for r in rows)


def test_multi_turn_needs_an_engine_that_takes_an_environment():
    class SingleTurn:                        # a RolloutEngine that runs single-turn completions only
        supports_episodes = perturbed = record_full_logprobs = False

        def generate(self, prompts, n, sampling, generator=None):
            raise AssertionError("not called")

        def sync_weights(self, model):
            pass
    model, tok = build_model("0.3M", seed=0)
    with pytest.raises(ConfigError, match="SingleTurn's does not"):
        Trainer(RLConfig(**SMALL), model=model, tokenizer=tok, engine=SingleTurn(), environment=CHARS)

    class Bare:                              # not a RolloutEngine: says which members it lacks
        def generate(self, prompts, n, sampling, generator=None):
            raise AssertionError("not called")
    with pytest.raises(ConfigError, match=r"lacks \['sync_weights', 'supports_episodes'"):
        Trainer(RLConfig(**SMALL), model=model, tokenizer=tok, engine=Bare())
    with pytest.raises(ValueError, match="max_turns"):
        ToolEnvironment(max_turns=0)


def test_a_python_tool_that_hangs_is_a_counted_timeout(monkeypatch):
    """The sandboxed Python tool inside an episode: 'while 1:pass' is killed at its timeout, the
    model reads the timeout note, and the step counts it."""
    from functools import partial

    from rl_lab.agents import SandboxLimits, run_python
    monkeypatch.setitem(TOOLS, "python_fast", partial(run_python, limits=SandboxLimits(timeout_s=1.5)))
    model, tok = build_model("0.3M", seed=0)
    env = replace(CHARS, tool="python_fast", call_open=">", call_close=">")   # code has parentheses
    engine = ScriptedEngine(model, tok, [">while 1:pass>|1", ">print(6*7)>|2", "3", "4"], env)
    trainer = Trainer(RLConfig(**{**SMALL, "max_completion_length": 64}, max_steps=1, seed=0), model=model,
                      tokenizer=tok, engine=engine, reward_funcs=[distinct_characters], environment=env)
    row = trainer.train().to_dict("records")[0]
    assert (row["tools/calls"], row["tools/timeouts"], row["tools/errors"]) == (2, 1, 0)
    batch = engine.generate(["1+1="], 4, SamplingConfig(max_completion_length=64), torch.Generator(), environment=env)
    # what the model reads: characters outside the tiny vocabulary ('[', ']', '.', newline) are <unk>, dropped
    assert batch.completions[0] == ">while 1:pass>=timeout: killed after 15 s|1"   # "1.5 s", the "." dropped
    assert batch.completions[1] == ">print(6*7)>=42|2"
