"""LoRA on the tiny Qwen2 models: counts, freezing, training changes only adapters, merging."""
import copy

import pytest
import torch

from rl_lab import Trainer, get_preset, get_task, load_warm_start
from rl_lab.config import ConfigError
from rl_lab.toolkits.lora import (
    ALL_LINEAR,
    apply_lora,
    changed_parameters,
    is_lora_parameter,
    linear_shapes,
    lora_learning_rate,
    lora_parameter_count,
    merge_lora,
    num_trainable,
    snapshot,
)


@pytest.fixture(scope="module")
def warm():
    torch.manual_seed(0)
    return load_warm_start("addition")


def logits(model, tok, prompts=("12+34=", "99+99=", "10+7=")):
    enc = tok(list(prompts), return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**enc).logits


def test_linear_shapes_of_the_tiny_model(warm):
    model, _ = warm
    shapes = linear_shapes(model.config)
    for name, (d_in, d_out) in shapes.items():
        layer = model.get_submodule(f"model.layers.0.{'self_attn' if name.endswith(('q_proj', 'k_proj', 'v_proj', 'o_proj')) else 'mlp'}.{name}")
        assert (layer.in_features, layer.out_features) == (d_in, d_out), name


@pytest.mark.parametrize("rank", [1, 4, 64])
def test_only_adapters_train_and_count_matches_formula(warm, rank):
    model = apply_lora(copy.deepcopy(warm[0]), rank)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(is_lora_parameter(n) for n in trainable)
    assert len(trainable) == 2 * len(ALL_LINEAR) * model.config.num_hidden_layers  # A and B per map
    assert num_trainable(model) == lora_parameter_count(model.config, rank)


def test_rank_one_count_by_hand(warm):
    # per block, r (d_in + d_out): q 128+128, k 128+64, v 128+64, o 128+128,
    # gate 128+256, up 128+256, down 256+128  -> 2048; two blocks
    model = apply_lora(copy.deepcopy(warm[0]), 1)
    assert num_trainable(model) == 2 * (256 + 192 + 192 + 256 + 384 + 384 + 384) == 4096


def test_adapter_starts_as_identity_and_is_seeded(warm):
    model, tok = warm
    base = logits(model, tok)
    a = apply_lora(copy.deepcopy(model), 8, seed=3)
    b = apply_lora(copy.deepcopy(model), 8, seed=3)
    c = apply_lora(copy.deepcopy(model), 8, seed=4)
    assert torch.equal(logits(a, tok), base)  # B = 0 at init
    sa, sb, sc = snapshot(a), snapshot(b), snapshot(c)
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa if "lora_A" in k)


def test_bad_ranks_and_targets_raise(warm):
    with pytest.raises(ConfigError, match="rank"):
        apply_lora(copy.deepcopy(warm[0]), 0)
    with pytest.raises(ConfigError, match=r"rank=65 exceeds min\(d_in, d_out\)=64"):
        apply_lora(copy.deepcopy(warm[0]), 65)
    with pytest.raises(ConfigError, match="target_modules"):
        lora_parameter_count(warm[0].config, 1, target_modules=("qkv",))
    assert lora_learning_rate(5e-5) == pytest.approx(5e-4)


def test_training_changes_only_adapters_then_merge_matches(warm):
    model, tok = warm
    lora = apply_lora(copy.deepcopy(model), 2)
    before = snapshot(lora)
    cfg = get_preset("smoke", max_steps=4, prompts_per_step=4, num_generations=4,
                     learning_rate=1e-3, progress_bar=False)
    trainer = Trainer(cfg, model=lora, tokenizer=tok, task=get_task("addition"))
    trainer.train()
    changed = changed_parameters(lora, before)
    assert changed, "four optimizer steps should move the adapters"
    assert all(is_lora_parameter(n) for n in changed), [n for n in changed if not is_lora_parameter(n)]
    assert any("lora_B" in n for n in changed) and any("lora_A" in n for n in changed)
    out_lora = logits(lora, tok)
    assert not torch.allclose(out_lora, logits(model, tok)), "the adapters should change the outputs"

    merged = merge_lora(lora)
    assert not any(is_lora_parameter(n) for n, _ in merged.named_parameters())
    assert sum(p.numel() for p in merged.parameters()) == sum(p.numel() for p in model.parameters())
    assert isinstance(merged.model.layers[0].mlp.up_proj, torch.nn.Linear)
    torch.testing.assert_close(logits(merged, tok), out_lora, rtol=1e-5, atol=1e-5)


def test_llama_8b_rank_one_matches_peft_on_meta():
    from peft import LoraConfig, inject_adapter_in_model
    from transformers import AutoModelForCausalLM

    from rl_lab.toolkits.information import published_config

    cfg = published_config("Llama-3.1-8B")
    assert lora_parameter_count(cfg, 1) == 2_621_440            # 81,920 per block x 32
    small = copy.deepcopy(cfg)
    small.num_hidden_layers = 2                                   # peft's own count, on meta
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(small)
    model = inject_adapter_in_model(LoraConfig(r=4, target_modules=list(ALL_LINEAR)), model,
                                    low_cpu_mem_usage=True)
    assert num_trainable(model) == lora_parameter_count(small, 4)


def test_first_step_kl_is_quadratic_and_the_lr_factor_rank_free(warm):
    from rl_lab import HFEngine, SamplingConfig
    from rl_lab.algos.losses import group_advantages
    from rl_lab.toolkits.lora import first_step_kl, matched_lr_factor

    model, tok = warm
    task = get_task("addition")
    ex = task.make_dataset(6, seed=5)
    batch = HFEngine(model, tok).generate([e["prompt"] for e in ex], 6, SamplingConfig(max_completion_length=5),
                                          torch.Generator().manual_seed(0))
    rewards = torch.tensor(task.reward(completions=batch.completions, answer=[e["answer"] for e in ex for _ in range(6)]))
    adv = group_advantages(rewards, batch.group_ids)
    assert adv.abs().sum() > 0, "the batch needs some reward spread"
    before = snapshot(model)
    k1, k2 = first_step_kl(model, batch, adv, 1e-6), first_step_kl(model, batch, adv, 2e-6)
    assert changed_parameters(model, before) == [], "works on a copy"
    assert 3.0 < k2 / k1 < 5.0                       # KL ~ lr^2 for small steps
    f1, f16 = matched_lr_factor(model, batch, adv, 1), matched_lr_factor(model, batch, adv, 16)  # 3 seeds each
    assert 1.0 < f1 < 100 and 1.0 < f16 < 100
    assert 0.67 < f1 / f16 < 1.5, "with alpha/r scaling the matched factor hardly depends on the rank"


def test_train_adapter_run_records_exact_success_and_scales_the_lr():
    from rl_lab.tasks import Addition
    from rl_lab.toolkits.information import LORA_SWEEP_SIZES, sweep_config, train_adapter_run
    from rl_lab.toolkits.lora import LORA_LR_FACTOR

    for preset in LORA_SWEEP_SIZES:
        assert sweep_config(preset).max_steps == LORA_SWEEP_SIZES[preset]["steps"]
    cfg = sweep_config("smoke", seed=1, max_steps=2, prompts_per_step=2, num_generations=4)
    task = Addition(reward_mode="partial")
    evalset = Addition().make_dataset(8, seed=3)
    trainer, df = train_adapter_run(cfg, 1, task=task, reward_funcs=[task.token_return], eval_examples=evalset,
                                    eval_every=1)
    assert trainer.optimizer.param_groups[0]["lr"] <= cfg.learning_rate * LORA_LR_FACTOR
    assert trainer.config.learning_rate == pytest.approx(cfg.learning_rate * LORA_LR_FACTOR)
    assert list(df.episodes) == [8, 16] and (df.trainable == 4096).all()
    assert df.attrs["p_start"].shape == df.attrs["p_end"].shape == (8,)
    assert df.success.iloc[-1] == pytest.approx(df.attrs["p_end"].mean())
    assert 0 < df.reward_entropy.iloc[-1] <= 1 and 0 < df.attrs["reward_entropy_start"] <= 1
    assert "rewards/token_return/mean" in df.columns
    _, full = train_adapter_run(cfg, None, task=task, reward_funcs=[task.token_return])
    assert (full.trainable == 304_256).all() and "success" not in full


def test_the_sampler_samples_from_the_adapted_model(warm):
    """The sampler follows the adapters: its log-probs of the sampled tokens are the trainer's to
    rounding at every step.  The fast static-cache decoder reads a LoRA layer's base weight only, so
    it must not be used on an adapted model (it once was: the rank sweep then trained off-policy from
    the warm start, its k3 growing to ~6e-2 in twelve steps)."""
    from rl_lab.engines.fast_decode import supports

    model, tok = warm
    assert supports(model)
    lora = apply_lora(copy.deepcopy(model), 4)
    assert not supports(lora), "the fast decoder would sample without the adapters"
    cfg = get_preset("smoke", max_steps=5, prompts_per_step=4, num_generations=4,
                     learning_rate=1e-2, progress_bar=False)
    trainer = Trainer(cfg, model=lora, tokenizer=tok, task=get_task("addition"))
    trainer.train()
    gaps = [m["rollout_corr/log_ppl_abs_diff"] for m in trainer.history]
    assert len(gaps) == 5 and max(gaps) < 1e-4, gaps
