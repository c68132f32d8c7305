"""Multi-turn episodes on VLLMEngine (rl_lab.engines.vllm_engine): the same env_mask, turn_ids and
turns/tools metrics as HFEngine, max_turns = 1 is today's single-turn sampling, the sampler's
log-probs of the model's tokens equal the trainer's, tool errors are counted, and the trainer steps.

A random tiny model almost never writes a complete call, so most tests give the model weights that
make it a *successor machine*: with attention and MLP outputs scaled down (or off), the last hidden
state is about the current token's one-hot embedding, and the untied output layer gives token `SUCCESSOR[a]` a
logit `margin` above every other token after `a`.  Greedy, it writes a fixed script; sampled, it
follows the script most of the time.  One engine is started for the module (about 20 s on a CPU);
each test loads its weights with `sync_weights`.

These tests need vLLM (`bash tools/install_vllm.sh`); where it cannot be imported they skip and say
why, or fail with RL_LAB_REQUIRE_VLLM=1 (CI).
"""
import copy
import math
import os
from dataclasses import replace

import pytest
import torch

from rl_lab import RLConfig, Trainer
from rl_lab.agents import ToolEnvironment
from rl_lab.agents.registry import TOOLS
from rl_lab.config import SamplingConfig
from rl_lab.engines.rollout import HFEngine
from rl_lab.engines.vllm_engine import vllm_available
from rl_lab.models import build_model

ok, why = vllm_available()
if not ok:
    reason = f"vLLM does not import here: {why}"
    if os.environ.get("RL_LAB_REQUIRE_VLLM", "") == "1":
        pytest.fail(f"{reason} (RL_LAB_REQUIRE_VLLM=1 makes this a failure)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)

# the character tokenizer has no '<': a call is "(2*3)", the environment's answer "=6|"
ENV = ToolEnvironment(max_turns=3, call_open="(", call_close=")", output_open="=", output_close="|")
# after a prompt ending in '=' the script is "(2*3)" (a call), then after the tool's "|" the same
# call again, and in the last turn ")" -> "7" -> <eos>; after '+' it is "*3)7": a ')' that closes
# no call; after 'k' it is 'k' forever: a void turn cut by the length limit
SUCCESSOR = {"=": "(", "(": "2", "2": "*", "*": "3", "3": ")", ")": "7", "7": "<eos>", "|": "(",
             "+": "*", "k": "k"}
PROMPTS = ["1+1=", "4+", "kk"]


def untied_model(seed: int = 0):
    """The 0.3M model with its own output layer (untied), which the successor weights need."""
    from transformers import Qwen2ForCausalLM
    base, tok = build_model("0.3M", seed=seed)
    config = copy.deepcopy(base.config)
    config.tie_word_embeddings = False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    return model, tok


@torch.no_grad()
def successor_machine(tok, margin: float, context_scale: float = 0.0, seed: int = 0):
    """An untied model whose next-token logits after token a are `margin` on SUCCESSOR[a], 0 elsewhere,
    plus the (random, `context_scale`-scaled) attention and MLP outputs: the context's influence."""
    model, _ = untied_model(seed)
    V, d = model.model.embed_tokens.weight.shape
    assert d >= V, "one-hot embeddings need hidden_size >= vocab_size"
    model.model.embed_tokens.weight.copy_(torch.eye(V, d))
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight.mul_(context_scale)
        layer.mlp.down_proj.weight.mul_(context_scale)
    head = torch.zeros(V, d)
    for a, b in SUCCESSOR.items():   # RMSNorm turns the one-hot e_a into sqrt(d) e_a
        head[tok.convert_tokens_to_ids(b), tok.convert_tokens_to_ids(a)] = margin / math.sqrt(d)
    model.lm_head.weight.copy_(head)
    return model


@pytest.fixture(scope="module")
def setup():
    from rl_lab.engines.vllm_engine import VLLMEngine
    model, tok = untied_model()
    return tok, VLLMEngine(model, tok, dtype="float32")


def trainer_logprobs(model, batch):
    from rl_lab.algos.losses import sequence_logprobs
    with torch.no_grad():
        return sequence_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids)


def test_a_greedy_episode_is_the_hf_engines_episode(setup):
    tok, eng = setup
    model = successor_machine(tok, margin=30.0)
    eng.sync_weights(model)
    greedy = SamplingConfig(max_completion_length=24, top_k=1)
    batch = eng.generate(PROMPTS, 2, greedy, torch.Generator().manual_seed(0), environment=ENV)
    assert batch.completions == ["(2*3)=6|(2*3)=6|(2*3)7"] * 2 + ["*3)7"] * 2 + ["k" * 24] * 2
    env = batch.env_mask[0].tolist()
    assert [i for i, e in enumerate(env) if e] == [5, 6, 7, 13, 14, 15]
    assert batch.turn_ids[0].tolist() == [0] * 8 + [1] * 8 + [2] * 7 + [-1]
    assert batch.turn_ids[2].tolist() == [0] * 5 + [-1] * 19 and (batch.turn_ids[4] == 0).all()
    assert not (batch.env_mask & batch.completion_mask.bool()).any()
    assert (batch.sampler_logprobs[batch.env_mask] == 0).all()
    assert batch.is_truncated.tolist() == [False] * 4 + [True] * 2
    assert batch.episode_metrics == {"turns/mean": (3 + 3 + 1 + 1 + 1 + 1) / 6, "turns/void_fraction": 2 / 6,
                                     "turns/void_eos_fraction": 0.0, "tools/calls": 4, "tools/errors": 0, "tools/timeouts": 0,
                                     "tools/truncated": 0}
    hf = HFEngine(model, tok).generate(PROMPTS, 2, greedy, torch.Generator().manual_seed(0), environment=ENV)
    assert batch.has_void_turn.tolist() == [False] * 4 + [True] * 2
    for name in ("completion_ids", "completion_mask", "env_mask", "turn_ids", "is_truncated", "has_void_turn",
                 "group_ids", "prompt_ids", "prompt_mask"):
        assert torch.equal(getattr(batch, name), getattr(hf, name)), name
    assert batch.completions == hf.completions and batch.episode_metrics == hf.episode_metrics
    assert torch.allclose(batch.sampler_logprobs, hf.sampler_logprobs, atol=1e-5)


def test_a_failed_call_ends_the_episode_as_on_the_hf_engine(setup):
    """A flaky tool (ToolEnvironment.failure_rate): a failed call's output ends the row, on both
    engines alike (the failures are a hash of row, turn and call)."""
    tok, eng = setup
    model = successor_machine(tok, margin=30.0)
    eng.sync_weights(model)
    greedy, env = SamplingConfig(max_completion_length=24, top_k=1), replace(ENV, failure_rate=0.5)
    batch = eng.generate(["1+1="], 8, greedy, torch.Generator().manual_seed(0), environment=env)
    hf = HFEngine(model, tok).generate(["1+1="], 8, greedy, torch.Generator().manual_seed(0), environment=env)
    first = [env.fails(b, 0, "2*3") for b in range(8)]
    assert any(first) and not all(first)
    for b, failed in enumerate(first):
        assert (batch.completions[b] == "(2*3)=error|") == failed, batch.completions[b]
    assert batch.completions == hf.completions and not batch.is_truncated.any()
    for name in ("completion_ids", "completion_mask", "env_mask", "turn_ids", "is_truncated", "has_void_turn"):
        assert torch.equal(getattr(batch, name), getattr(hf, name)), name
    assert batch.episode_metrics == hf.episode_metrics


def test_max_turns_one_is_todays_single_turn_sampling(setup):
    tok, eng = setup
    model, _ = untied_model(seed=3)
    eng.sync_weights(model)
    sampling = SamplingConfig(max_completion_length=12)
    plain = eng.generate(PROMPTS, 4, sampling, torch.Generator().manual_seed(7))
    one = eng.generate(PROMPTS, 4, sampling, torch.Generator().manual_seed(7), environment=replace(ENV, max_turns=1))
    for name in ("completion_ids", "completion_mask", "sampler_logprobs", "is_truncated"):
        assert torch.equal(getattr(plain, name), getattr(one, name)), name
    assert plain.env_mask is None and not one.env_mask.any()
    assert torch.equal(one.turn_ids, torch.where(one.completion_mask.bool(), 0, -1))
    assert one.episode_metrics["turns/mean"] == 1.0 and one.episode_metrics["tools/calls"] == 0


def test_sampled_episodes_logprobs_equal_the_trainers(setup):
    """Temperature 1, a model whose context matters: vLLM's log mu of every model token, written
    after tool outputs too, equals the trainer's log pi on the whole episode (fp32)."""
    tok, eng = setup
    model = successor_machine(tok, margin=6.0, context_scale=1.0)
    eng.sync_weights(model)
    batch = eng.generate(PROMPTS, 8, SamplingConfig(max_completion_length=32), torch.Generator().manual_seed(1),
                         environment=ENV)
    assert batch.episode_metrics["tools/calls"] >= 8 and batch.turn_ids.max() == 2    # not vacuous
    pi = trainer_logprobs(model, batch)
    gap = ((pi - batch.sampler_logprobs).abs() * batch.completion_mask).max().item()
    assert gap < 1e-5, f"vLLM vs trainer log-prob gap {gap:.2e} on the model's tokens"
    # the tool's output conditions what follows: the same model tokens after other output differ
    after_call = batch.completion_mask.bool() & (batch.turn_ids >= 1)
    blank = batch.completion_ids.masked_fill(batch.env_mask, tok.convert_tokens_to_ids("0"))
    moved = trainer_logprobs(model, replace(batch, completion_ids=blank))
    assert ((moved - pi).abs() * after_call).max() > 1e-3


def test_a_raising_tool_is_counted_and_the_episode_goes_on(setup, monkeypatch):
    tok, eng = setup
    monkeypatch.setitem(TOOLS, "boom", lambda text: 1 / 0)
    model = successor_machine(tok, margin=30.0)
    eng.sync_weights(model)
    env = replace(ENV, tool="boom", max_output_chars=5)     # the model reads "=error|"
    greedy = SamplingConfig(max_completion_length=40, top_k=1)
    batch = eng.generate(PROMPTS[:1], 2, greedy, torch.Generator().manual_seed(0), environment=env)
    m = batch.episode_metrics
    assert (m["tools/calls"], m["tools/errors"], m["turns/mean"]) == (4, 4, 3.0)
    assert batch.completions == ["(2*3)=error|(2*3)=error|(2*3)7"] * 2
    hf = HFEngine(model, tok).generate(PROMPTS[:1], 2, greedy, torch.Generator().manual_seed(0), environment=env)
    assert hf.completions == batch.completions and hf.episode_metrics == m


def distinct_characters(completions, **kw):
    return [float(len(set(c))) for c in completions]


def test_a_trainer_step_on_vllm_with_an_environment(setup):
    tok, eng = setup
    model = successor_machine(tok, margin=6.0, context_scale=1.0)
    cfg = RLConfig(model="0.3M", prompts_per_step=2, num_generations=4, max_completion_length=24,
                   progress_bar=False, learning_rate=1e-3, max_steps=2, seed=0, rollout_is="token")
    trainer = Trainer(cfg, model=model, tokenizer=tok, engine=eng, reward_funcs=[distinct_characters],
                      environment=ENV)
    syncs = eng.syncs
    rows = trainer.train().to_dict("records")
    assert len(rows) == 2 and eng.syncs >= syncs + 2
    assert sum(r["tools/calls"] for r in rows) > 0
    for r in rows:
        assert math.isfinite(r["loss"]) and r["grad_norm"] > 0 and r["faults/masked_samples"] == 0
        assert abs(r["rollout_corr/k3_kl"]) < 1e-6          # fp32 vLLM: mu = pi on every model token


def test_min_tokens_with_multi_turn_is_refused(setup):
    """vLLM's min_tokens holds back every stop token, the call delimiter too: refused, not bent."""
    tok, eng = setup
    with pytest.raises(ValueError, match="min_tokens=2 with multi-turn episodes on VLLMEngine"):
        eng.generate(PROMPTS, 1, SamplingConfig(max_completion_length=8, min_tokens=2), environment=ENV)


def test_the_tool_task_runs_on_vllm_from_the_config():
    """use_vllm=True on the tool task (the environment comes from the task): the warm start's greedy
    episodes on vLLM are HFEngine's, and two trainer steps run with executed calls.  A second
    vLLM engine (the warm start's tied layout): 5 s here once the module's first one has loaded vLLM."""
    import numpy as np

    from rl_lab.engines.vllm_engine import VLLMEngine
    from rl_lab.models import load_warm_start
    model, tok = load_warm_start("multiplication_tool")
    cfg = RLConfig(task="multiplication_tool", max_steps=2, prompts_per_step=4, num_generations=4,
                   max_completion_length=24, progress_bar=False, use_vllm=True, sampler_dtype="float32",
                   eval_steps=2, eval_prompts=16)
    trainer = Trainer(cfg, model=model, tokenizer=tok)
    assert isinstance(trainer.engine, VLLMEngine) and trainer.environment is not None
    prompts = [e["prompt"] for e in trainer.task.make_dataset(16, seed=5)]
    greedy = SamplingConfig(max_completion_length=24, top_k=1)
    on_vllm = trainer.engine.generate(prompts, 1, greedy, torch.Generator().manual_seed(0),
                                      environment=trainer.environment)
    on_hf = HFEngine(model, tok).generate(prompts, 1, greedy, torch.Generator().manual_seed(0),
                                          environment=trainer.environment)
    assert on_vllm.completions == on_hf.completions and on_vllm.episode_metrics == on_hf.episode_metrics
    assert torch.equal(on_vllm.env_mask, on_hf.env_mask) and torch.equal(on_vllm.turn_ids, on_hf.turn_ids)
    assert on_vllm.episode_metrics["tools/calls"] >= 12                  # the warm start calls the tool
    rows = trainer.train().to_dict("records")
    assert len(rows) == 2 and all(r["tools/calls"] > 0 and np.isfinite(r["loss"]) for r in rows)
    assert 0 < rows[-1]["eval/reward"] <= 1                 # greedy episodes on vLLM, scored by the task
    # 256 seeded multi-turn requests: their second turns hold more tokens than vLLM's scheduler
    # takes in one step (4096 here), so one call would chunk the prefill and rewind the requests'
    # CPU generators, which crashed ("CPU Generator does not use offset"); the engine splits them
    # into groups that fit
    many = [e["prompt"] for e in trainer.task.make_dataset(256, seed=6)]
    sampled = SamplingConfig(max_completion_length=24)
    big = trainer.engine.generate(many, 1, sampled, torch.Generator().manual_seed(1), environment=trainer.environment)
    assert len(big.completions) == 256 and big.episode_metrics["tools/calls"] > 100   # second turns ran
    again = trainer.engine.generate(many, 1, sampled, torch.Generator().manual_seed(1), environment=trainer.environment)
    assert again.completions == big.completions            # the groups are reproducible, seed for seed
