"""LoRA through `peft` on the tiny Qwen2 models, for the same `Trainer` and configs.

A LoRA adapter replaces each frozen linear map W (d_out x d_in) by

    W x  ->  W x + (alpha / r) * B (A x),     A: (r, d_in) random,  B: (d_out, r) zeros,

so training starts exactly at the base model and only r * (d_in + d_out) numbers per map
train.  `apply_lora` injects adapters in place with peft's `inject_adapter_in_model` and
returns the *same* Hugging Face model object (not a `PeftModel` wrapper), so the trainer and
the rollout engine see an ordinary causal LM whose base weights have requires_grad=False;
the trainer optimises only parameters with requires_grad.

Conventions (those of Thinking Machines' "LoRA Without Regret"): adapters on every linear
map of every block (attention and MLP; not the tied embedding / lm_head), alpha fixed at 32
with the 1/r factor, and a learning rate `LORA_LR_FACTOR` times the full fine-tuning one.
`first_step_kl` measures the factor that makes one LoRA step move the policy as far as one
full fine-tuning step (see chapter 10).
"""
from __future__ import annotations

import contextlib
import copy
import math

import torch
from peft import LoraConfig, inject_adapter_in_model
from peft.tuners.lora import LoraLayer

from rl_lab.errors import ConfigError

LORA_ALPHA = 32.0
"""alpha in the scale alpha / r; fixed across ranks, so the optimal learning rate hardly
depends on r (a rank-r adapter's first update is the sum of r rank-1 updates, / r)."""
LORA_LR_FACTOR = 10.0
"""LoRA learning rate / full fine-tuning learning rate ("LoRA Without Regret": about 10)."""
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The seven linear maps of a Llama/Qwen2 block."""


def linear_shapes(config) -> dict[str, tuple[int, int]]:
    """(d_in, d_out) of each linear map in one Llama/Qwen2/Qwen3 block, from a
    transformers config (`hidden_size`, `intermediate_size`, heads, kv heads, head_dim)."""
    h, inter = config.hidden_size, config.intermediate_size
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or h // heads
    return {"q_proj": (h, heads * head_dim), "k_proj": (h, kv * head_dim),
            "v_proj": (h, kv * head_dim), "o_proj": (heads * head_dim, h),
            "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}


def lora_parameter_count(config, rank: int, target_modules=ALL_LINEAR) -> int:
    """Trainable numbers of a rank-r LoRA: layers * sum over targeted maps of r (d_in + d_out)."""
    shapes = linear_shapes(config)
    unknown = set(target_modules) - set(shapes)
    if unknown:
        raise ConfigError(f"target_modules {sorted(unknown)} are not linear maps of the block; "
                          f"choose from {list(shapes)}")
    per_layer = sum(rank * (shapes[m][0] + shapes[m][1]) for m in target_modules)
    return config.num_hidden_layers * per_layer


def num_trainable(model: torch.nn.Module) -> int:
    """Number of parameters with requires_grad (what the optimizer updates)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def lora_config(rank: int, alpha: float = LORA_ALPHA, target_modules=ALL_LINEAR) -> LoraConfig:
    """A peft `LoraConfig`: no dropout, no bias, A Kaiming-uniform, B zero (peft's default)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ConfigError(f"LoRA rank={rank!r} must be an integer >= 1 (the chapter uses 1 to 64)")
    if not alpha > 0:
        raise ConfigError(f"LoRA alpha={alpha!r} must be > 0 (default {LORA_ALPHA})")
    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, bias="none",
                      target_modules=list(target_modules))


def apply_lora(model: torch.nn.Module, rank: int, alpha: float = LORA_ALPHA,
               target_modules=ALL_LINEAR, seed: int = 0) -> torch.nn.Module:
    """Inject rank-`rank` LoRA adapters into `model` in place and freeze everything else.

    Returns the same model object (pass it to `Trainer(config, model=..., tokenizer=...)`).
    The adapters' random A matrices are drawn from `seed`, so runs are deterministic.
    A rank larger than the smallest targeted map's min(d_in, d_out) is refused: it adds
    numbers without adding directions.
    """
    cfg = getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "hidden_size"):
        shapes = linear_shapes(cfg)
        max_rank = min(min(shapes[m]) for m in target_modules if m in shapes)
        if rank > max_rank:
            raise ConfigError(f"LoRA rank={rank} exceeds min(d_in, d_out)={max_rank} of the targeted "
                              f"maps of this model; use a rank in [1, {max_rank}]")
    peft_cfg = lora_config(rank, alpha, target_modules)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = inject_adapter_in_model(peft_cfg, model)
    for name, p in model.named_parameters():  # peft already froze the base; make it explicit
        p.requires_grad_("lora_" in name)
    return model


def lora_learning_rate(full_ft_learning_rate: float, factor: float = LORA_LR_FACTOR) -> float:
    """The learning rate for LoRA: `factor` x the full fine-tuning one, for every rank."""
    return factor * full_ft_learning_rate


def is_lora_parameter(name: str) -> bool:
    return "lora_A" in name or "lora_B" in name


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of every parameter, by name (to compare after training)."""
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def changed_parameters(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> list[str]:
    """Names of the parameters that differ (bit for bit) from `before`."""
    return [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]


@torch.no_grad()
def merge_lora(model: torch.nn.Module) -> torch.nn.Module:
    """Fold every adapter into its base weight, W <- W + (alpha/r) B A, and put the plain
    `nn.Linear` back.  In place; returns the model (now without LoRA parameters)."""
    names = [n for n, m in model.named_modules() if isinstance(m, LoraLayer)]
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        layer = getattr(parent, child)
        layer.merge(safe_merge=True)
        setattr(parent, child, layer.get_base_layer())
    for attr in ("peft_config", "_hf_peft_config_loaded"):  # peft's bookkeeping on the model
        with contextlib.suppress(AttributeError):
            delattr(model, attr)
    return model


# ---------------------------------------------------------------- the learning-rate rule


def _completion_log_softmax(model, batch) -> torch.Tensor:
    """log pi(. | x, y_<t) over the vocabulary at every completion position: (B, T, V)."""
    T = batch.completion_ids.shape[1]
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], 1)                      # (B, P+T)
    attn = torch.cat([batch.prompt_mask, torch.ones_like(batch.completion_ids)], 1)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions,
                   logits_to_keep=T + 1).logits[:, :-1]                                # (B, T, V)
    return torch.log_softmax(logits.float(), -1)


def first_step_kl(model, batch, advantages: torch.Tensor, learning_rate: float) -> float:
    """How far one AdamW step moves the policy: mean over completion tokens of
    KL(pi_before || pi_after) in nats, after one step on the REINFORCE loss -A log pi
    (token mean) of `batch` (a `RolloutBatch`) with `advantages` (B,).  Works on a copy.

    Adam's first step is lr * sign(gradient) per parameter, so the KL grows like lr^2 and
    the ratio of two models' KLs at the same lr gives the lr factor that equalises them.
    """
    from rl_lab.algos.losses import aggregate_loss

    m = copy.deepcopy(model).train()
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=learning_rate,
                            weight_decay=0.0)
    mask = batch.completion_mask.bool()                                                # (B, T)
    logp_all = _completion_log_softmax(m, batch)                                       # (B, T, V)
    logp = logp_all.gather(-1, batch.completion_ids[..., None]).squeeze(-1)            # (B, T)
    loss = aggregate_loss(-advantages[:, None] * logp, mask, "token-mean")
    loss.backward()
    opt.step()
    with torch.no_grad():
        before = logp_all.detach()
        after = _completion_log_softmax(m, batch)
        kl = (before.exp() * (before - after)).sum(-1)                                  # (B, T)
    return float((kl * mask).sum() / mask.sum())


def matched_lr_factor(model, batch, advantages: torch.Tensor, rank: int, learning_rate: float = 1e-5,
                      alpha: float = LORA_ALPHA, seeds=(0, 1, 2)) -> float:
    """The factor k such that one LoRA step at k * lr moves the policy as far (in KL) as one
    full fine-tuning step at lr: sqrt(KL_full(lr) / mean KL_lora(lr)), using KL ~ lr^2 for
    small steps.  The LoRA KL is averaged over adapters drawn with `seeds`: at low rank it
    depends on the random A.  `model` is left untouched."""
    kl_full = first_step_kl(model, batch, advantages, learning_rate)
    kl_lora = [first_step_kl(apply_lora(copy.deepcopy(model), rank, alpha, seed=s), batch, advantages,
                             learning_rate) for s in seeds]
    return math.sqrt(kl_full / (sum(kl_lora) / len(kl_lora)))
