"""Rollout engines: samplers that return, with each completion, the log-probs they sampled it with.

  rollout        RolloutEngine (the protocol the trainer uses), RolloutBatch (what every engine
                 returns) and HFEngine (the plain HF sampling loop)
  fast_decode    StaticDecoder: HFEngine's static-cache decode loop (same tokens, faster)
  shared_prefix  one prompt forward shared by the G completions of a group
  vllm_engine    VLLMEngine (optional: needs vllm)
  injectors      MismatchEngine: a sampler made to differ from the trainer on purpose
  scripted       ScriptedEngine: HFEngine writing fixed episode scripts ("(2*3)|6"), for examples and tests
  vocabulary     safe_vocabulary: Dynamic Vocabulary Pruning's safe set (min-p), for sampler and trainer
  scoring        the trainer's forward and log-distributions, which the exact engine calls too
  exact          ExactEngine: the exact-zero sampler (mu = pi bit for bit) and the mismatch sources
  sources/       one module per mismatch source (rows in rl_lab.mismatch_specs)

`make_engine(config, model, tokenizer)` builds the engine an RLConfig asks for.  Chapter 1
(book/ch01_rl_on_one_page.md) shows the sampling loop; chapter "When speed kills stability" and
the lab "measure your own mismatch" use the injectors.
"""
from __future__ import annotations

from rl_lab.engines.injectors import MismatchEngine
from rl_lab.engines.rollout import HFEngine, RolloutBatch, RolloutEngine

__all__ = ["HFEngine", "MismatchEngine", "RolloutBatch", "RolloutEngine", "make_engine"]


def make_engine(config, model, tokenizer) -> RolloutEngine:
    """The rollout engine for an RLConfig: the exact-zero engine with its sources when `mismatch` is
    set, vLLM with `use_vllm`, else a plain HFEngine unless an injector is on (then a MismatchEngine)."""
    if config.mismatch is not None:
        from rl_lab.engines.exact import ExactEngine
        return ExactEngine.from_config(config, model, tokenizer)
    if config.use_vllm:
        from rl_lab.engines.vllm_engine import VLLMEngine
        return VLLMEngine(model, tokenizer, dtype=config.sampler_dtype, seed=config.seed)
    perturbed = (config.sampler_quantization is not None or config.sampler_staleness > 0
                 or config.sampler_logit_noise > 0 or config.sampler_temperature is not None)
    if not perturbed:
        return HFEngine(model, tokenizer, config.sampler_dtype)
    return MismatchEngine(model, tokenizer, config.sampler_dtype, config.sampler_quantization,
                          config.sampler_staleness, config.sampler_logit_noise, config.sampler_temperature)
