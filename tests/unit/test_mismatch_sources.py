"""The mismatch sources (issue 49): the registry's rows and configs, the exact-zero control (k3 = 0
and rho = 1 bit for bit over real rollouts and optimizer steps), and each source's dial and fix."""
import dataclasses

import pytest
import torch

from rl_lab.algos.losses import token_logprobs
from rl_lab.config import RLConfig
from rl_lab.engines import make_engine
from rl_lab.engines.exact import ExactEngine
from rl_lab.engines.rollout import process_logits
from rl_lab.engines.sources.batch_variant import splits_for
from rl_lab.engines.sources.truncation import kept_set
from rl_lab.errors import ConfigError
from rl_lab.mismatch_specs import SOURCE_SPECS, MismatchConfig
from rl_lab.presets import get_preset
from rl_lab.toolkits.mismatch_sources import measure, sync_check
from rl_lab.trainer import Trainer

BASE = dict(task="addition", model="warm-start", prompts_per_step=4, num_generations=4, progress_bar=False,
            learning_rate=1e-3)
EXACT = {"k3": 0.0, "logp_diff_max": 0.0, "rho_min": 1.0, "rho_mean": 1.0, "rho_max": 1.0}


def run(mismatch, steps=1, **changes):
    return measure(RLConfig(**{**BASE, **changes}, mismatch=mismatch), steps)


# ------------------------------------------------------------------ the registry and its configs
def test_every_dial_row_is_a_mismatch_config_field_and_loads():
    fields = {f.name for f in dataclasses.fields(MismatchConfig)}
    assert fields == {s.name for s in SOURCE_SPECS if s.config is not None}
    for spec in SOURCE_SPECS:
        assert spec.load() is not None and spec.mirrors and spec.fix
        assert (spec.config is None) == (spec.name not in fields)
    assert {s.name for s in SOURCE_SPECS} >= {"precision", "batch_variant", "tensor_parallel", "truncation",
                                              "weight_sync", "staleness", "routing"}


def test_mismatch_loads_as_python_yaml_and_dotted_keys():
    a = RLConfig(mismatch={"precision": {"dtype": "float16"}})
    b = RLConfig.from_dict({"mismatch.precision.dtype": "float16"})
    c = get_preset("smoke", **{"mismatch.precision.dtype": "float16", "mismatch.batch_variant.max_splits": 8})
    assert a.mismatch == b.mismatch and a.mismatch.precision.dtype == "float16" and a.mismatch.batch_variant is None
    assert c.mismatch.batch_variant.max_splits == 8 and c.mismatch.precision.dtype == "float16"
    assert RLConfig(mismatch=True).mismatch == MismatchConfig() == RLConfig(mismatch={}).mismatch
    assert RLConfig().mismatch is None and RLConfig(mismatch=False).mismatch is None
    again = RLConfig.from_dict(c.to_dict())            # a run's config.yaml reads back
    assert again.mismatch == c.mismatch


@pytest.mark.parametrize("mismatch, words", [
    ({"precision": {"dtype": "float64"}}, "PrecisionConfig.dtype"),
    ({"precision": {"lm_head": "fp32"}}, "PrecisionConfig.lm_head"),
    ({"precision": {"fix": "both"}}, "PrecisionConfig.fix"),
    ({"batch_variant": {"max_splits": 1}}, "BatchVariantConfig.max_splits"),
    ({"batch_variant": {"parallel_rows": 0}}, "BatchVariantConfig.parallel_rows"),
    ({"tensor_parallel": {"sampler_shards": 3}}, "TensorParallelConfig.sampler_shards"),
    ({"tensor_parallel": {"reduce": "butterfly"}}, "TensorParallelConfig.reduce"),
    ({"truncation": True}, "truncates nothing"),
    ({"truncation": {"top_p": 1.5}}, "TruncationConfig.top_p"),
    ({"weight_sync": {"fault": "drop"}}, "WeightSyncConfig.fault"),
    ({"weight_sync": {"steps": -1}}, "WeightSyncConfig.steps"),
    ({"precision": 3}, "MismatchConfig.precision=3"),
    ({"routing": {"router_dtype": "int8"}}, "RoutingConfig.router_dtype"),
    ({"routing": {"router_noise": -0.1}}, "RoutingConfig.router_noise"),
    ({"routing": {"router_dtype": "float32"}}, "perturbs nothing"),
    ({"routing": {"replay": "yes"}}, "RoutingConfig.replay"),
    ({"moe_routing": True}, "unknown MismatchConfig field"),
])
def test_a_bad_value_names_the_field(mismatch, words):
    with pytest.raises(ConfigError, match=words.replace(".", r"\.").replace("=", "=")):
        RLConfig(mismatch=mismatch)


@pytest.mark.parametrize("flat, words", [
    ({"sampler_dtype": "bfloat16"}, "mismatch.precision.dtype"), ({"top_p": 0.9}, "mismatch.truncation.top_p"),
    ({"sampler_logit_noise": 0.1}, "sampler_logit_noise"), ({"use_vllm": True}, "use_vllm"),
    ({"task": "multiplication_tool"}, "tool environment"),
])
def test_the_flat_injectors_are_refused_with_the_dial_to_use(flat, words):
    with pytest.raises(ConfigError, match=words):
        RLConfig(mismatch={}, **flat)


def test_bad_layer_names_and_splits_fail_when_the_engine_is_built():
    with pytest.raises(ConfigError, match="weight_sync.layer='model.layer9.'"):
        Trainer(RLConfig(**BASE, mismatch={"weight_sync": {"layer": "model.layer9."}}))
    with pytest.raises(ConfigError, match="batch_variant.max_splits=6"):
        Trainer(RLConfig(**BASE, mismatch={"batch_variant": {"max_splits": 6}}))
    with pytest.raises(ConfigError, match="mismatch.routing needs a mixture-of-experts model.*0.3M-moe"):
        Trainer(RLConfig(**BASE, mismatch={"routing": True}))          # the warm start is dense


def test_the_flat_injectors_keep_their_engines():
    from rl_lab.engines import HFEngine, MismatchEngine
    from rl_lab.models import build_model
    model, tok = build_model("0.3M")
    assert type(make_engine(RLConfig(), model, tok)) is HFEngine
    assert type(make_engine(RLConfig(sampler_staleness=1), model, tok)) is MismatchEngine
    assert type(make_engine(RLConfig(mismatch={}), model, tok)) is ExactEngine


# ------------------------------------------------------------------ exact zero
@pytest.mark.parametrize("prompts, generations, share_prefix", [(2, 3, True), (3, 4, True), (8, 8, True),
                                                                 (4, 4, False)])
def test_exact_zero_over_rollouts_and_optimizer_steps(prompts, generations, share_prefix):
    """k3 = 0 and rho = 1 exactly, on every sampled token of every step, while AdamW moves the weights."""
    trainer = Trainer(RLConfig(**{**BASE, "prompts_per_step": prompts, "num_generations": generations},
                               share_prefix=share_prefix, mismatch={}))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    for _ in range(3):
        m = trainer.step()
        assert m["rollout_corr/k3_kl"] == 0.0 and m["sampling/sampling_logp_difference/max"] == 0.0
        assert m["sampling/importance_sampling_ratio/min"] == m["sampling/importance_sampling_ratio/max"] == 1.0
    assert any(not torch.equal(a, p) for a, p in zip(before, trainer.model.parameters())), "nothing was trained"


def test_exact_zero_tokens_are_the_trainers_distribution():
    """The engine's reported log-probs are the trainer's log pi of the tokens, bitwise (not only their
    difference's summary), with PPO's two iterations and a warm start's real prompts."""
    trainer = Trainer(RLConfig(**BASE, mismatch={}, num_iterations=2))
    trainer.step()
    examples = [trainer.task.sample(trainer.rng) for _ in range(4)]
    trainer.engine.sync_weights(trainer.model)
    batch = trainer.engine.generate([e["prompt"] for e in examples], 4, trainer.config.sampling(), trainer.generator)
    pi = trainer._logprobs(batch).logp
    mask = batch.completion_mask.bool()
    assert torch.equal(pi[mask], batch.sampler_logprobs[mask])


def test_the_fast_sampler_is_not_exact():
    """The control is worth having: the default sampler differs from the trainer in rounding."""
    (m,) = measure(RLConfig(**BASE))
    assert m["logp_diff_max"] > 0


# ------------------------------------------------------------------ one dial per source, and its fix
@pytest.mark.parametrize("off", [
    {"batch_variant": {"parallel_rows": 1}},                       # one split for any batch: the trainer's order
    {"tensor_parallel": {"sampler_shards": 1}},                    # one shard on both sides
    {"weight_sync": {"start_step": 99}},                           # the fault never comes
    {"weight_sync": {"fault": "bf16", "layer": "model.layers.1.", "verify": True}},  # repaired at once
])
def test_a_dial_at_its_off_value_is_the_control(off):
    assert run(off, steps=2) == [EXACT, EXACT]


@pytest.mark.parametrize("on, fixed", [
    ({"precision": {"dtype": "bfloat16"}}, {"precision": {"dtype": "bfloat16", "fix": "same_dtype"}}),
    ({"precision": {"dtype": "float16"}}, {"precision": {"dtype": "float16", "fix": "same_dtype"}}),
    ({"precision": {"dtype": "bfloat16", "lm_head": "float32"}},
     {"precision": {"dtype": "bfloat16", "lm_head": "float32", "fix": "same_dtype"}}),
    ({"batch_variant": True}, {"batch_variant": {"batch_invariant": True}}),
    ({"tensor_parallel": {"sampler_shards": 4, "trainer_shards": 2}},
     {"tensor_parallel": {"sampler_shards": 4, "trainer_shards": 2, "fix": True}}),
    ({"truncation": {"top_k": 5}}, {"truncation": {"top_k": 5, "keep_mask": True}}),
    ({"weight_sync": {"fault": "bf16"}}, {"weight_sync": {"fault": "bf16", "verify": True}}),
])
def test_each_dial_makes_a_mismatch_and_its_fix_removes_it(on, fixed):
    (broken,) = run(on)
    assert broken["k3"] > 0 and broken["logp_diff_max"] > 0
    (repaired,) = run(fixed)
    assert repaired == EXACT


def test_precision_sizes_fp32_head_and_fp16():
    """bf16 disagrees more than fp16 (3 more mantissa bits); the fp32 head's logits are float32."""
    (bf16,) = run({"precision": {"dtype": "bfloat16"}})
    (fp16,) = run({"precision": {"dtype": "float16"}})
    assert bf16["k3"] > 4 * fp16["k3"] > 0
    trainer = Trainer(RLConfig(**BASE, mismatch={"precision": {"dtype": "bfloat16", "lm_head": "float32"}}))
    ids = torch.randint(3, 60, (2, 5))
    logits = trainer.engine.sampler_logits(ids, torch.ones_like(ids), ids)
    assert logits.dtype == torch.float32
    plain = Trainer(RLConfig(**BASE, mismatch={"precision": {"dtype": "bfloat16"}}))
    assert plain.engine.sampler_logits(ids, torch.ones_like(ids), ids).dtype == torch.bfloat16


def test_batch_variant_bits_move_with_the_batch_and_not_when_invariant():
    assert [splits_for(r, 2048, 4) for r in (1, 600, 700, 1024, 4096)] == [4, 3, 2, 2, 1]
    ids = torch.randint(3, 60, (16, 6))
    mask = torch.ones_like(ids)
    for invariant, moves in ((False, True), (True, False)):
        engine = Trainer(RLConfig(**BASE, mismatch={"batch_variant": {"batch_invariant": invariant,
                                                                      "parallel_rows": 256}})).engine
        alone = engine.sampler_logits(ids[:2], mask[:2], ids[:2])                 # 12 rows: 4 splits
        within = engine.sampler_logits(ids, mask, ids)[:2]                          # 96 rows: 2 splits
        assert (not torch.equal(alone, within)) == moves


def test_tensor_parallel_orders_differ():
    ids = torch.randint(3, 60, (4, 6))
    out = {}
    for shards, order in ((1, "ring"), (4, "ring"), (4, "tree")):
        engine = Trainer(RLConfig(**BASE, mismatch={"tensor_parallel": {"sampler_shards": shards,
                                                                        "reduce": order}})).engine
        out[shards, order] = engine.sampler_logits(ids, torch.ones_like(ids), ids)
    assert not torch.equal(out[1, "ring"], out[4, "ring"]) and not torch.equal(out[4, "ring"], out[4, "tree"])
    assert torch.allclose(out[1, "ring"], out[4, "tree"], atol=1e-5)       # the same products


def test_truncation_biases_rho_by_the_kept_mass():
    """On the exact engine rho = pi / mu is exactly the kept mass S of each sampled token's position."""
    trainer = Trainer(RLConfig(**BASE, mismatch={"truncation": {"top_p": 0.7}}))
    trainer.engine.record_full_logprobs = True
    examples = [trainer.task.sample(trainer.rng) for _ in range(4)]
    trainer.engine.sync_weights(trainer.model)
    batch = trainer.engine.generate([e["prompt"] for e in examples], 4, trainer.config.sampling(), trainer.generator)
    pi = trainer._logprobs(batch)
    with torch.no_grad():                               # pi over the whole vocabulary
        logp_all = token_logprobs(trainer.model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                  with_all=True).logp_all                                   # (B, T, V)
    kept = ~torch.isneginf(batch.sampler_logprobs_full)
    mass = (logp_all.exp() * kept).sum(-1)                                                  # (B, T)
    mask = batch.completion_mask.bool()
    rho = (pi.logp - batch.sampler_logprobs).exp()
    assert (mass[mask] < 1).any()
    assert torch.allclose(rho[mask], mass[mask], rtol=1e-5)


def test_kept_set_follows_the_fast_samplers_rules():
    from rl_lab.config import SamplingConfig
    logits = torch.randn(32, 64) * 3
    for knobs in ({"top_p": 0.8}, {"top_k": 7}, {"min_p": 0.05}, {"top_p": 0.6, "top_k": 10, "min_p": 0.01}):
        expected = ~torch.isneginf(process_logits(logits, SamplingConfig(**knobs)))
        assert torch.equal(kept_set(logits, **knobs), expected), knobs


def test_weight_sync_skip_shows_once_the_weights_move_and_verify_repairs_it():
    skip = {"weight_sync": {"fault": "skip_layer", "layer": "model.layers.0.mlp.", "start_step": 1}}
    first, second = run(skip, steps=2)
    assert first == EXACT and second["k3"] > 0
    trainer = Trainer(RLConfig(**BASE, mismatch={"weight_sync": {**skip["weight_sync"], "verify": True}}))
    a, b = trainer.step(), trainer.step()
    assert a["mismatch/sync_repairs"] == 0 and b["mismatch/sync_repairs"] == 1 and b["mismatch/sync_max_abs_diff"] > 0
    assert b["rollout_corr/k3_kl"] == 0.0


def test_sync_check_at_lr_zero():
    assert sync_check(RLConfig(**BASE, mismatch={}))["passed"]
    failed = sync_check(RLConfig(**BASE, mismatch={"weight_sync": {"fault": "bf16"}}))
    assert not failed["passed"] and failed["k3"] > 0


def test_staleness_on_the_exact_engine_and_its_resume(tmp_path):
    """sampler_staleness (the existing field) on the exact engine: 0 at the first step (nothing is
    stale yet), then the stale weights alone; a resumed run repeats the uninterrupted one."""
    cfg = RLConfig(**BASE, mismatch={}, sampler_staleness=1, max_steps=3)
    steps = measure(cfg, steps=3)
    assert steps[0] == EXACT and steps[1]["k3"] > 0
    out = tmp_path / "run"
    Trainer(cfg.replace(output_dir=str(out), max_steps=2, save_steps=1)).train()
    resumed = Trainer(cfg.replace(output_dir=str(out)))
    resumed.resume()
    assert resumed.step()["rollout_corr/k3_kl"] == steps[2]["k3"]


# ------------------------------------------------------------------ routing, on the tiny MoE
MOE = {**BASE, "model": "0.3M-moe"}
NOISE = {"router_dtype": "float32", "router_noise": 0.02}       # flips enough decisions to see in one batch


def rollout(trainer, prompts=4):
    """One rollout of the exact engine, after a sync (no optimizer step)."""
    examples = [trainer.task.sample(trainer.rng) for _ in range(prompts)]
    trainer.engine.sync_weights(trainer.model)
    return trainer.engine.generate([e["prompt"] for e in examples], trainer.config.num_generations,
                                   trainer.config.sampling(), trainer.generator)


def own_routing(trainer, batch) -> torch.Tensor:
    """(L, B, P+T, K) the experts the trainer's own routers choose in its plain forward of the batch."""
    from rl_lab.engines.sources.routing import moe_routers
    chosen = []
    hooks = [g.register_forward_hook(lambda m, i, out: chosen.append(out[2])) for g in moe_routers(trainer.model)]
    with torch.no_grad():
        token_logprobs(trainer.model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, share_prefix=False)
    for h in hooks:
        h.remove()
    B, S = batch.completion_ids.shape[0], batch.prompt_ids.shape[1] + batch.completion_ids.shape[1]
    return torch.stack(chosen).view(len(chosen), B, S, -1)


def test_the_moe_size_builds_and_trains_on_the_fast_sampler():
    from rl_lab.engines import HFEngine
    from rl_lab.engines.fast_decode import supports
    from rl_lab.models import build_model, check_model_spec, num_parameters
    moe, _ = build_model("0.3M-moe")
    dense, _ = build_model("0.3M")
    check_model_spec("0.3M-moe", "addition")
    assert type(moe).__name__ == "Qwen2MoeForCausalLM" and not supports(moe)   # the HF-forward decoder
    assert abs(num_parameters(moe) / num_parameters(dense) - 1) < 0.1
    trainer = Trainer(RLConfig(**MOE))
    assert type(trainer.engine) is HFEngine
    for _ in range(2):
        m = trainer.step()
        assert 0 < m["sampling/sampling_logp_difference/max"] < 1e-4      # float32 rounding, as the dense models


def test_exact_zero_on_the_moe():
    assert run({}, steps=2, model="0.3M-moe") == [EXACT, EXACT]


@pytest.mark.parametrize("knobs, prompts", [(NOISE, 4), ({"router_dtype": "bfloat16"}, 8)])
def test_routing_flips_make_the_mismatch_and_nothing_else(knobs, prompts):
    """Replay off: some routing decisions flip, and a token's log-prob differs only where a flip sits
    at or before its context's last position (a flip moves that position's hidden state, and
    attention carries it to later ones); everywhere else it is the trainer's bit for bit."""
    trainer = Trainer(RLConfig(**{**MOE, "num_generations": prompts}, share_prefix=False,
                               mismatch={"routing": knobs}))
    batch = rollout(trainer, prompts)
    from rl_lab.engines.sources.routing import flipped
    flips = flipped(batch.sampler_routing, own_routing(trainer, batch))                # (L, B, P+T)
    P = batch.prompt_ids.shape[1]
    real = torch.cat([batch.prompt_mask, batch.completion_mask], 1).bool()
    share = flips[:, real].float().mean().item()
    assert 0 < share < 0.5, share
    tainted = flips.any(0).cummax(-1).values[:, P - 1:-1]        # (B, T): a flip in token t's context
    with torch.no_grad():
        diff = trainer._logprobs(batch).logp - batch.sampler_logprobs                  # (B, T)
    mask = batch.completion_mask.bool()
    assert (diff[mask & ~tainted] == 0).all()
    assert (diff[mask & tainted] != 0).any()
    assert batch.engine_metrics["mismatch/routing_flips"] > 0


@pytest.mark.parametrize("share_prefix", [True, False])
def test_routing_replay_gives_the_trainer_the_samplers_tokens_bit_for_bit(share_prefix):
    trainer = Trainer(RLConfig(**MOE, share_prefix=share_prefix, mismatch={"routing": {**NOISE, "replay": True}}))
    batch = rollout(trainer)
    assert batch.sampler_routing.shape[:3] == (2, 16, batch.prompt_ids.shape[1] + batch.completion_ids.shape[1])
    assert batch.engine_metrics["mismatch/routing_flips"] > 0
    pi = trainer._logprobs(batch).logp
    mask = batch.completion_mask.bool()
    assert torch.equal(pi[mask], batch.sampler_logprobs[mask])


def test_routing_replay_checks_the_record_it_is_given():
    import dataclasses as dc
    trainer = Trainer(RLConfig(**MOE, mismatch={"routing": {**NOISE, "replay": True}}))
    batch = rollout(trainer)
    with pytest.raises(ConfigError, match="sampler_routing"):
        trainer._logprobs(dc.replace(batch, sampler_routing=None))
    with pytest.raises(ValueError, match=r"the batch needs \(L, 16"):
        trainer._logprobs(dc.replace(batch, sampler_routing=batch.sampler_routing[:, :8]))


def test_routing_through_the_trainer_and_its_replay():
    """Three GRPO steps: the flips show in k3; with replay k3 and tokens_differ are exactly 0, and the
    routers still get a gradient (through the gate weights of the replayed experts)."""
    broken = Trainer(RLConfig(**MOE, mismatch={"routing": NOISE}))
    steps = [broken.step() for _ in range(3)]
    assert all(m["rollout_corr/k3_kl"] > 0 and m["mismatch/routing_flips"] > 0 for m in steps)
    fixed = Trainer(RLConfig(**MOE, mismatch={"routing": {**NOISE, "replay": True}}))
    for _ in range(3):
        m = fixed.step()
        assert m["rollout_corr/k3_kl"] == 0.0 and m["rollout_corr/tokens_differ"] == 0.0
        assert m["mismatch/routing_flips"] > 0
    batch = rollout(fixed)
    fixed.model.zero_grad()
    fixed._logprobs(batch).logp[batch.completion_mask.bool()].sum().backward()
    assert all(g.weight.grad.abs().sum() > 0 for g in (layer.mlp.gate for layer in fixed.model.model.layers))
