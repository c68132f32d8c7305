"""Causal LMs: tiny Qwen2 models built from a config (random init, no downloads), the
loading path for any local or hub causal LM, and the shipped warm-start checkpoints.

Chapter 1 and lab 1 introduce the tiny models and the warm start.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

# torch and transformers (5-10 s on a 2-core laptop) load in the functions that build or load a
# model: the sizes, the warm starts' paths and `check_model_spec` (a sweep's plan, the command
# line's checks) do not need them.
if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, Qwen2Config, Qwen2MoeConfig

CHECKPOINT_DIR = Path(__file__).parent / "checkpoints"

# name -> Qwen2 shape (Qwen2-MoE where it has `num_experts`).  Parameter counts include the tied
# 64-token embedding.
MODEL_SIZES: dict[str, dict] = {
    "0.3M": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=256),
    "3M": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, intermediate_size=768),
    "30M": dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                num_key_value_heads=4, intermediate_size=2048),
    # Qwen2.5-0.5B's shape with its real 151,936-row (tied) embedding: ~494M parameters, for
    # GPU benchmarks (bench/gpu_bench.sh). Only the first 64 rows are ever used by our tokenizer.
    "0.5B": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, intermediate_size=4864, vocab_size=151936),
    # 0.3M's shape with a mixture of experts in every MLP (Qwen2-MoE: a softmax router, the top 2 of 4
    # experts renormalised): as many routed parameters as 0.3M's MLP (4 experts of 64 = one MLP of
    # 256), half of them active per token, and a 16-wide shared expert (Qwen2-MoE always has one;
    # 0 would leave empty weight tensors, which reductions over the parameters refuse).  The
    # mismatch.routing source needs a mixture of experts.
    "0.3M-moe": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                     shared_expert_intermediate_size=16, norm_topk_prob=True),
}


MOE_EXPERTS = "rl_lab_all_experts"
"""The MoE sizes' experts implementation (transformers' experts_implementation, registered by
`_register_all_experts`): every expert computes every token in one product of the whole buffer's
shape, and each token keeps its top k, so a token's bits do not depend on which other tokens its
experts serve.  transformers' default on a CPU ("grouped_mm", one product per expert over the tokens
it serves) lets them depend on it: a token's output changed when padding later in the buffer was
routed elsewhere, which broke the exact-zero engine's premise (a position's logits are the same in
every decode step's forward) under mismatch.routing.  transformers' "batched_mm" (one product per
(token, expert) pair) keeps the premise too but gathers a weight matrix per pair: a forward of a
64 x 14 batch of 0.3M-moe took 0.43 s with it, 0.034 s with grouped_mm and 0.033 s with this (one
CPU thread), the tiny experts' extra products costing less than the gathers.  `build_model` sets it, and `load_model` sets it on any loaded
model that has experts (a saved 0.3M-moe warm start included)."""


def all_experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                        top_k_weights: torch.Tensor) -> torch.Tensor:
    """MOE_EXPERTS: (N, H) hidden states, (N, K) chosen experts and their gate weights -> (N, H)."""
    if self.is_transposed or self.has_bias or not self.has_gate:
        raise NotImplementedError(f"{MOE_EXPERTS} covers gated experts without bias in the (out, in) layout "
                                  "(Qwen2-MoE's); use experts_implementation='batched_mm' for this model")
    import torch
    import torch.nn.functional as F
    out = torch.stack([F.linear(self._apply_gate(F.linear(hidden_states, self.gate_up_proj[e])),  # (N, I)
                                self.down_proj[e])                                              # (N, H)
                       for e in range(self.num_experts)], dim=1)                                # (N, E, H)
    picked = out.gather(1, top_k_index[..., None].expand(-1, -1, out.shape[-1]))                # (N, K, H)
    return (picked * top_k_weights[..., None]).sum(dim=1).to(hidden_states.dtype)               # (N, H)


def _register_all_experts() -> None:
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
    if MOE_EXPERTS not in ALL_EXPERTS_FUNCTIONS:
        ALL_EXPERTS_FUNCTIONS.register(MOE_EXPERTS, all_experts_forward)


def is_moe_size(size: str) -> bool:
    """Whether the size preset is a mixture of experts (a Qwen2-MoE)."""
    return "num_experts" in MODEL_SIZES.get(size, {})


def model_config(size: str, vocab_size: int, max_position_embeddings: int = 128) -> Qwen2Config | Qwen2MoeConfig:
    from transformers import Qwen2Config, Qwen2MoeConfig

    from rl_lab.tokenizer import build_tokenizer
    if size not in MODEL_SIZES:
        raise ValueError(f"model size {size!r} is unknown; choose one of {list(MODEL_SIZES)} "
                         "or pass a path to a saved model")
    tok = build_tokenizer()
    shape = dict(MODEL_SIZES[size])
    vocab_size = max(vocab_size, shape.pop("vocab_size", 0))
    config_class = Qwen2MoeConfig if is_moe_size(size) else Qwen2Config
    return config_class(
        vocab_size=vocab_size, max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True, rope_theta=10000.0, attention_dropout=0.0,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        **shape,
    )


def build_model(size: str = "0.3M", seed: int = 0) -> tuple[PreTrainedModel, object]:
    """A randomly initialised Qwen2 (or Qwen2-MoE) causal LM of a size preset, and its tokenizer."""
    import torch
    from transformers import Qwen2ForCausalLM, Qwen2MoeForCausalLM

    from rl_lab.tokenizer import build_tokenizer
    tok = build_tokenizer()
    cfg = model_config(size, vocab_size=len(tok))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = (Qwen2MoeForCausalLM if is_moe_size(size) else Qwen2ForCausalLM)(cfg)
    if is_moe_size(size):
        _register_all_experts()
        model.set_experts_implementation(MOE_EXPERTS)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok


def num_parameters(model: torch.nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


@contextlib.contextmanager
def quiet_hf_progress():
    """Hide transformers' per-load progress bars (noise in notebooks and logs)."""
    from transformers.utils import logging as hf_logging
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def load_model(path: str | Path, dtype: torch.dtype | None = None):
    """Load any Hugging Face causal LM saved with `save_pretrained` (a local folder or,
    with network access, a hub id), in `dtype` (default float32).  Never runs remote code."""
    import torch
    from transformers import AutoModelForCausalLM

    from rl_lab.tokenizer import load_tokenizer
    dtype = torch.float32 if dtype is None else dtype
    with quiet_hf_progress():
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, trust_remote_code=False)
    if getattr(model.config, "num_experts", None):
        _register_all_experts()
        model.set_experts_implementation(MOE_EXPERTS)   # as build_model: a token's bits do not depend on its batch
    local = Path(path)
    if local.is_dir() and (local / "tokenizer.json").exists():
        tok = load_tokenizer(local)
    else:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        tok.padding_side = "left"
    return model, tok


def warm_start_path(task: str, size: str = "0.3M") -> Path:
    return CHECKPOINT_DIR / f"{task}-{size}"


def load_warm_start(task: str, size: str = "0.3M"):
    """The shipped supervised warm start for `task` (see `rl_lab.tools.warmstart`)."""
    path = warm_start_path(task, size)
    if not (path / "model.safetensors").exists():
        have = sorted(p.name for p in CHECKPOINT_DIR.glob("*-*") if p.is_dir())
        raise FileNotFoundError(
            f"no warm-start checkpoint for task={task!r} size={size!r} at {path}; shipped: {have}. "
            f"Make one with: python -m rl_lab.tools.warmstart --task {task} --size {size}")
    return load_model(path)


def shipped_warm_starts() -> list[str]:
    """Names ("<task>-<size>") of the warm-start checkpoints present in CHECKPOINT_DIR."""
    return sorted(p.name for p in CHECKPOINT_DIR.glob("*-*") if (p / "model.safetensors").exists())


def check_model_spec(spec: str, task: str) -> None:
    """Raise ConfigError unless `resolve_model(spec, task)` can find its model: the warm start
    for `task` exists, the size preset is known, or the path exists.  Costs a few stat calls, so
    the CLI and the Trainer call it before doing any work."""
    from rl_lab.errors import ConfigError
    if not isinstance(spec, str):
        raise ConfigError(f"RLConfig.model={spec!r} must be a string")
    if spec == "warm-start" or spec.startswith("warm-start:"):
        size = spec.split(":", 1)[1] if ":" in spec else "0.3M"
        if size not in MODEL_SIZES:
            raise ConfigError(f"RLConfig.model={spec!r}: the size after 'warm-start:' must be one of "
                              f"{list(MODEL_SIZES)}")
        if not (warm_start_path(task, size) / "model.safetensors").exists():
            raise ConfigError(
                f"RLConfig.model={spec!r}: there is no {size} warm start for task={task!r} "
                f"(shipped warm starts: {shipped_warm_starts()}).  Build one with "
                f"`python -m rl_lab.tools.warmstart --task {task} --size {size}` (it writes "
                f"{warm_start_path(task, size)}), or set model to a size preset {list(MODEL_SIZES)} "
                "(random init) or to the path of a saved causal LM")
        return
    if spec in MODEL_SIZES or Path(spec).exists():
        return
    raise ConfigError(f"RLConfig.model={spec!r}: not 'warm-start', 'warm-start:<size>', a size "
                      f"preset {list(MODEL_SIZES)}, nor an existing path")


def resolve_model(spec: str, task: str, seed: int = 0):
    """RLConfig.model -> (model, tokenizer): "warm-start", a size preset, or a path.
    A spec that names nothing (see `check_model_spec`) raises ConfigError (a ValueError)."""
    check_model_spec(spec, task)
    if spec == "warm-start":
        return load_warm_start(task)
    if spec.startswith("warm-start:"):
        return load_warm_start(task, spec.split(":", 1)[1])
    if spec in MODEL_SIZES:
        return build_model(spec, seed=seed)
    return load_model(spec)
