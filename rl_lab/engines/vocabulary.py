"""Dynamic Vocabulary Pruning's safe set, the rule of the sampler's min-p (`SamplingConfig.min_p`)
and of the trainer's pruned forward (`DVPConfig.min_p`).  Chapter 6
(book/ch06_dynamic_vocabulary_pruning.md) derives it."""
from __future__ import annotations

import torch


def safe_vocabulary(logits, min_p: float):
    """Dynamic Vocabulary Pruning's safe set: (..., V) logits -> bool (..., V), True where
    p >= min_p * p_max, i.e. logit >= max logit + log(min_p).  The sampler (process_logits)
    and the trainer (sequence_logprobs) both call this on their own logits."""
    return logits >= logits.max(-1, keepdim=True).values + torch.log(torch.tensor(min_p))
