"""Rollout engines: samplers that return, with each completion, the log-probs they sampled it with.

  rollout        RolloutBatch (what every engine returns) and HFEngine (the plain HF sampling loop)
  fast_decode    StaticDecoder: HFEngine's static-cache decode loop (same tokens, faster)
  shared_prefix  one prompt forward shared by the G completions of a group
  vllm_engine    VLLMEngine (optional: needs vllm)
  injectors      MismatchEngine: a sampler made to differ from the trainer on purpose

Chapter 1 (book/ch01_rl_on_one_page.md) shows the sampling loop; chapter "When speed kills
stability" and the lab "measure your own mismatch" use the injectors.
"""
from rl_lab.engines.injectors import MismatchEngine, make_engine
from rl_lab.engines.rollout import HFEngine, RolloutBatch

__all__ = ["HFEngine", "MismatchEngine", "RolloutBatch", "make_engine"]
