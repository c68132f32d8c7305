"""How many bits an episode can teach: the entropy figures of the information-bandwidth
theorem, measurements on a trained policy, and parameter-count arithmetic for real models.

Theorem (scalar advantage): a gradient g = grad log p(tau) * Adv carries at most
H(Adv | tau, history) <= log2 B bits about the optimal policy, B = number of values Adv can
take.  With per-timestep advantages (reward-to-go or TD errors) the ceiling is
H(r | tau, history) = sum_t H(r_t | r_<t, tau, history), which is T log2 B_r when the per-step
rewards are independent.  Everything here is in bits.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from rl_lab.presets import get_preset, preset_name
from rl_lab.toolkits.lora import (
    LORA_ALPHA,
    LORA_LR_FACTOR,
    apply_lora,
    lora_learning_rate,
    lora_parameter_count,
    num_trainable,
)

# ---------------------------------------------------------------- entropies


def entropy_bits(pmf) -> float:
    """Shannon entropy -sum p log2 p of a probability vector (zeros allowed)."""
    p = np.asarray(pmf, dtype=np.float64)
    if p.ndim != 1 or np.any(p < 0) or not np.isclose(p.sum(), 1.0, atol=1e-9):
        raise ValueError("entropy_bits needs a 1-D vector of probabilities >= 0 summing to 1")
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum())


def binary_entropy_bits(p) -> np.ndarray:
    """h(p) = -p log2 p - (1-p) log2 (1-p), elementwise (h(0) = h(1) = 0)."""
    p = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -(p * np.log2(p) + (1 - p) * np.log2(1 - p))
    return np.nan_to_num(h, nan=0.0)


def sum_pmf(step_pmf, T: int) -> np.ndarray:
    """pmf of r_0 + ... + r_{T-1} for T independent draws from `step_pmf` on consecutive
    integers (length K -> result length T (K - 1) + 1), by repeated squaring of convolutions."""
    step = np.asarray(step_pmf, dtype=np.float64)
    if T < 1:
        raise ValueError(f"T={T} must be >= 1")
    result, power, n = np.array([1.0]), step, T
    while n:
        if n & 1:
            result = np.convolve(result, power)
        power = np.convolve(power, power) if n > 1 else power
        n >>= 1
    return result / result.sum()


def scalar_advantage_bits(step_pmf, T: int, quantization_levels: int | None = None) -> dict:
    """Scalar advantage Adv = G - b with G the sum of T independent per-step rewards.

    Returns the exact entropy H(G) (what the scalar carries when the per-step rewards are
    independent and distributed as `step_pmf`; quantising can only lower it), the support
    bound log2(#values of G), and that bound capped at log2(`quantization_levels`).
    """
    pmf = sum_pmf(step_pmf, T)
    bound = math.log2(len(pmf))
    out = {"exact": entropy_bits(pmf), "support_bound": bound}
    if quantization_levels is not None:
        out["quantized_bound"] = min(bound, math.log2(quantization_levels))
    return out


def per_timestep_bits(step_pmf, T: int) -> float:
    """H(r | tau) for T independent per-step rewards: T * H(r_t) (chain rule with equality)."""
    return T * entropy_bits(step_pmf)


def bandwidth_table(T: int = 1000, likert_levels: int = 5, quantization_levels: int = 256) -> pd.DataFrame:
    """The theorem's table: bits per episode for scalar vs per-timestep advantages, with the
    reward values uniformly likely (the most informative prior).

    Rows: terminal binary reward, terminal Likert reward, dense independent ternary rewards
    over T steps.  Columns: exact entropy of the scalar advantage, its log2 B ceiling (B the
    number of values, capped by quantisation), and the per-timestep ceiling H(r | tau).
    """
    binary, likert, ternary = np.full(2, 0.5), np.full(likert_levels, 1 / likert_levels), np.full(3, 1 / 3)
    dense = scalar_advantage_bits(ternary, T, quantization_levels)
    rows = {
        "terminal binary": (entropy_bits(binary), math.log2(2), entropy_bits(binary)),
        f"terminal Likert-{likert_levels}": (entropy_bits(likert), math.log2(likert_levels),
                                             entropy_bits(likert)),
        f"dense ternary, T={T}": (dense["exact"], dense["quantized_bound"], per_timestep_bits(ternary, T)),
    }
    return pd.DataFrame.from_dict(
        rows, orient="index",
        columns=["scalar: H(Adv)", f"scalar: log2 B (B <= {quantization_levels})", "per-timestep: H(r | tau)"])


def plugin_entropy_bits(samples) -> float:
    """Entropy of the empirical distribution of `samples` (numbers, or rows of a 2-D array
    treated as one outcome each).  Biased low for small samples; use thousands."""
    arr = np.asarray(samples)
    if arr.ndim == 1:
        arr = arr[:, None]
    _, counts = np.unique(np.round(arr.astype(np.float64), 9), axis=0, return_counts=True)
    return entropy_bits(counts / counts.sum())


# ---------------------------------------------------------------- a trained policy


@torch.no_grad()
def answer_probabilities(model, tokenizer, examples: list[dict], batch_size: int = 2048) -> np.ndarray:
    """pi(answer + <eos> | prompt) for each example, exactly, by teacher forcing: the
    probability that sampling at temperature 1 returns the reference answer.  (N,)"""
    out = []
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    for i in range(0, len(examples), batch_size):
        chunk = examples[i:i + batch_size]
        enc = tokenizer([e["prompt"] for e in chunk], return_tensors="pt", padding=True)
        answers = [tokenizer(e["answer"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                   for e in chunk]
        T = max(map(len, answers))
        ans = torch.full((len(chunk), T), tokenizer.pad_token_id)
        ans_mask = torch.zeros((len(chunk), T))
        for j, a in enumerate(answers):
            ans[j, :len(a)], ans_mask[j, :len(a)] = torch.tensor(a), 1.0
        ids = torch.cat([enc["input_ids"], ans], 1).to(device)                    # (N, P+T)
        attn = torch.cat([enc["attention_mask"], torch.ones_like(ans)], 1).to(device)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=attn, position_ids=positions,
                       logits_to_keep=T + 1).logits[:, :-1].float()                # (N, T, V)
        logp = F.log_softmax(logits, -1).gather(-1, ans.to(device)[..., None]).squeeze(-1)
        out.append(((logp * ans_mask.to(device)).sum(-1)).exp().cpu().numpy())
    model.train(was_training)
    return np.concatenate(out).astype(np.float64)


def bernoulli_kl_bits(p, q) -> np.ndarray:
    """KL(Bern(p) || Bern(q)) in bits, elementwise (p, q clipped to [1e-12, 1 - 1e-12])."""
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1 - 1e-12)
    q = np.clip(np.asarray(q, dtype=np.float64), 1e-12, 1 - 1e-12)
    return (p * np.log2(p / q) + (1 - p) * np.log2((1 - p) / (1 - q)))


def run_ceiling_bits(episodes, reward_entropy) -> float:
    """Integral over episodes of the pass/fail reward's sampling entropy h(p), p the policy's
    success rate at the time (trapezoid rule), in bits.

    This is the total entropy of the reward signal a run received, not Theorem 1's ceiling:
    that is H(Adv | tau, history), which conditions on the sampled completion and measures the
    learner's predictive uncertainty about the reward function.  The two agree only under the
    assumption that the learner's prediction of each episode's outcome is the success rate p.

    episodes: (K,) increasing episode counts at which the policy was evaluated (start at 0);
    reward_entropy: (K,) mean binary entropy of the success probability there."""
    e, h = np.asarray(episodes, dtype=np.float64), np.asarray(reward_entropy, dtype=np.float64)
    if e.shape != h.shape or e.ndim != 1 or len(e) < 2 or np.any(np.diff(e) <= 0):
        raise ValueError("run_ceiling_bits needs two 1-D arrays of equal length >= 2, episodes increasing")
    return float(np.sum(np.diff(e) * (h[1:] + h[:-1]) / 2))


def bits_learned(p_before, p_after) -> dict:
    """What training did to the success pattern over a set of prompts, in bits.

    p_before, p_after: (N,) success probabilities pi(answer | x) before and after RL.
      code_length_gain: sum_x log2(p_after / p_before) -- bits saved coding the reference
                  answers with the trained policy instead of the initial one: the improvement
                  of behaviour, counted prompt by prompt (negative if the answers became less
                  likely overall).  It is not capped by the theorem: one learned fact shared by
                  many prompts is counted once per prompt.
      success_kl: sum_x KL(Bern(p_after(x)) || Bern(p_before(x))) -- how far the success
                  pattern moved; noise-driven drift counts too.
    """
    p0 = np.clip(np.asarray(p_before, dtype=np.float64), 1e-12, 1.0)
    p1 = np.clip(np.asarray(p_after, dtype=np.float64), 1e-12, 1.0)
    return {"code_length_gain": float(np.log2(p1 / p0).sum()),
            "success_kl": float(bernoulli_kl_bits(p1, p0).sum())}


# ---------------------------------------------------------------- real model shapes

# Published sizes (the models' config.json on the Hugging Face hub); totals are computed.
PUBLISHED_SHAPES: dict[str, tuple[str, dict]] = {
    "Llama-3.1-8B": ("llama", dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                                   num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                   tie_word_embeddings=False)),
    "Qwen2.5-7B": ("qwen2", dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                                 num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                                 tie_word_embeddings=False)),
    "Qwen3-0.6B": ("qwen3", dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                                 num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                                 head_dim=128, tie_word_embeddings=True)),
}


def published_config(name: str):
    """A transformers config object (LlamaConfig / Qwen2Config / Qwen3Config) with a
    published model's sizes, built locally (no download)."""
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    if name not in PUBLISHED_SHAPES:
        raise ValueError(f"model {name!r} is unknown; choose one of {list(PUBLISHED_SHAPES)}")
    kind, sizes = PUBLISHED_SHAPES[name]
    return {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}[kind](**sizes)


def count_parameters(config) -> int:
    """Total parameters of the causal LM that `config` describes, counted by transformers
    itself: a one-block model is built on the meta device (no memory), and the remaining
    blocks are added as copies of its block."""
    from transformers import AutoModelForCausalLM

    d = config.to_dict()
    d["num_hidden_layers"] = 1
    d.pop("layer_types", None)
    one = type(config)(**{k: v for k, v in d.items() if k not in ("transformers_version", "model_type")})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(one)
    block = sum(p.numel() for p in model.model.layers[0].parameters())
    return sum(p.numel() for p in model.parameters()) + (config.num_hidden_layers - 1) * block


def capacity_table(models=("Llama-3.1-8B", "Qwen2.5-7B"), ranks=(1, 8, 64), episodes: int = 320_000,
                   bits_per_episode: float = 1.0, bits_per_parameter: float = 2.0) -> pd.DataFrame:
    """Signal vs capacity: `episodes` x `bits_per_episode` bits can reach the weights; a
    model with n trainable parameters stores about `bits_per_parameter` x n bits.

    Defaults: the "LoRA Without Regret" back-of-envelope (MATH: 10,000 problems x 32
    samples, 1 bit each) and about 2 bits per parameter (Allen-Zhu & Li's measured
    knowledge capacity).  One row per (model, adapter)."""
    signal = episodes * bits_per_episode
    rows = []
    for name in models:
        cfg = published_config(name)
        adapters = [("full fine-tuning", count_parameters(cfg))]
        adapters += [(f"LoRA r={r}", lora_parameter_count(cfg, r)) for r in ranks]
        for adapter, n in adapters:
            rows.append({"model": name, "adapter": adapter, "trainable parameters": n,
                         "capacity (bits)": bits_per_parameter * n, "signal (bits)": signal,
                         "capacity / signal": bits_per_parameter * n / signal})
    return pd.DataFrame(rows)


# ------------------------------------------ chapter 10's rank sweep: one run, full FT or LoRA


def train_adapter_run(config, rank: int | None, task=None, reward_funcs=None, lr_factor: float = LORA_LR_FACTOR,
                      eval_examples: list[dict] | None = None, eval_every: int = 0, alpha: float = LORA_ALPHA):
    """Train the shipped warm start of `config.task` with full fine-tuning (`rank=None`, at
    config.learning_rate) or rank-`rank` LoRA (at lr_factor x config.learning_rate).

    Every `eval_every` steps (and at the end) the exact success probability
    pi(answer + <eos> | prompt), averaged over `eval_examples`, is recorded as `success`
    (teacher forcing: no sampling noise), with `reward_entropy` = mean h(p(x)), the sampling
    entropy of a pass/fail reward per episode at that point (not Theorem 1's ceiling, which needs
    the learner's predictive uncertainty, see `run_ceiling_bits`); `df.attrs` holds `success_start`,
    `reward_entropy_start` and the per-prompt probabilities `p_start`, `p_end` (N,).  Returns
    (trainer, metrics DataFrame with `episodes` = prompts x generations
    so far and `trainable` = number of trained parameters).
    """
    from rl_lab.models import load_warm_start
    from rl_lab.trainer import Trainer

    model, tok = load_warm_start(config.task)
    if rank is not None:
        model = apply_lora(model, rank, alpha, seed=config.seed)
        config = config.replace(learning_rate=lora_learning_rate(config.learning_rate, lr_factor))
    trainer = Trainer(config, model=model, tokenizer=tok, task=task, reward_funcs=reward_funcs)

    def success():
        return answer_probabilities(trainer.model, tok, eval_examples) if eval_examples else np.full(1, np.nan)

    p_start = p_end = success()
    for step in range(config.max_steps):
        metrics = trainer.step()
        if eval_examples and eval_every and ((step + 1) % eval_every == 0 or step + 1 == config.max_steps):
            p_end = success()
            metrics["success"] = float(p_end.mean())
            metrics["reward_entropy"] = float(binary_entropy_bits(p_end).mean())
        trainer.history.append(metrics)
    df = trainer.metrics()
    df.attrs.update(success_start=float(p_start.mean()), p_start=p_start, p_end=p_end,
                    reward_entropy_start=float(binary_entropy_bits(p_start).mean()))
    df["episodes"] = df["step"] * config.prompts_per_step * config.num_generations
    df["trainable"] = num_trainable(trainer.model)
    return trainer, df


# Sizes of chapter 10's rank sweep (lab 10 and bench/bench_lora_ranks.py), by preset.
LORA_SWEEP_SIZES: dict[str, dict] = {
    "smoke": dict(ranks=(1,), unscaled_ranks=(), seeds=(0, 1), steps=15, prompts_per_step=8, num_generations=8,
                  warmup_steps=5, eval_every=15, eval_prompts=128),
    "laptop": dict(ranks=(1, 4, 16, 64), unscaled_ranks=(1,), seeds=(0, 1, 2), steps=300, prompts_per_step=16,
                   num_generations=8, warmup_steps=10, eval_every=25, eval_prompts=512),
    "gpu": dict(ranks=(1, 2, 4, 8, 16, 32, 64), unscaled_ranks=(1,), seeds=(0, 1, 2, 3, 4), steps=1000,
                prompts_per_step=32, num_generations=16, warmup_steps=20, eval_every=50, eval_prompts=1024),
}
"""ranks: LoRA at LORA_LR_FACTOR x the full-FT learning rate; unscaled_ranks: LoRA at the
full-FT learning rate itself (the rule switched off)."""


def sweep_config(preset: str | None = None, seed: int = 0, **overrides):
    """The `RLConfig` of one run of the rank sweep: the shipped 2-digit addition warm start,
    full-FT learning rate 5e-5 (LoRA gets LORA_LR_FACTOR x), linear warm-up, answers of at
    most 3 digits + <eos> (max_completion_length=4)."""
    sizes = LORA_SWEEP_SIZES[preset_name(preset)]
    base = dict(task="addition", max_steps=sizes["steps"], prompts_per_step=sizes["prompts_per_step"],
                num_generations=sizes["num_generations"], warmup_steps=sizes["warmup_steps"],
                max_completion_length=4, learning_rate=5e-5, seed=seed, progress_bar=False)
    base.update(overrides)
    return get_preset(preset, **base)
