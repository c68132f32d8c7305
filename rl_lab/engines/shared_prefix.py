"""The trainer's forward over a GRPO batch, with each distinct prompt run once.

A GRPO batch repeats every prompt `num_generations` times.  The plain forward runs the
transformer over all B x (P + T) tokens, so each prompt's P tokens are computed G times --
in the forward and again in the backward.  Causal attention makes that redundant: a prompt
token never sees the completion, so its keys and values are the same in every row of its
group.  `completion_logits` runs the U distinct prompts once (U x P tokens), hands each row
its prompt's key/value cache (an index, which autograd turns into a sum of the G rows'
gradients), then runs the B x (T - 1) completion tokens on top.  The logits, and so the
log-probs and the gradient, are the plain forward's up to float rounding
(tests/unit/test_shared_prefix.py holds them to 1e-5); the arithmetic saved is (B - U) x P tokens
of forward and backward -- a quarter of the update for the book's 7-token prompts and 16-token
completions, most of it for the long prompts of real reasoning and agent tasks.  It is the
trainer-side twin of the prefix cache that vLLM and `HFEngine` use when sampling (the same
idea as the "shared-prefix forward" of Prefix Grouper, Liu et al. 2025).

Sharing is not free.  The completion pass attends from T queries to P + T keys through the
cache, so the attention needs an explicit mask: Hugging Face's SDPA path then expands the
grouped key/value heads and torch keeps a float copy of the mask for the backward, about
B x T x (P + T) floats per layer.  With short prompts under long completions that costs more
than it saves: 3M, 64 rows, P = 7, T = 512 took about 1.1x the plain forward's time and 750 MiB
more memory for 1% fewer tokens.  So the prompt is shared only when the repeated prompt tokens
are at least `MIN_SAVED_FRACTION` of the batch's tokens.  Measured on 0.3M and 3M at P = 7 to 128
and T = 16 to 512 (BENCHMARKS.md section 5), sharing lost at 1.2% saved, was a toss-up at 4.5-8.6%
and won or tied from 17.5% up; 15% sits in the unmeasured gap between.

Any Hugging Face causal LM with a key/value cache works; with no repeated prompt, too few
repeated tokens, or `share_prefix=False`, it is the plain single forward.

Chapter 1 (book/ch01_rl_on_one_page.md) explains the shared-prompt forward.
"""
from __future__ import annotations

import functools
import inspect

import torch

MIN_SAVED_FRACTION = 0.15
"""Share the prompt only when (B - U) x P, the prompt tokens it skips, is at least this fraction
of the B x (P + T) tokens of the plain forward."""


def cache_argument(model) -> str:
    """transformers 5 renamed `past_key_values` to `cache`; accept both."""
    return _cache_argument_of(type(model))


@functools.lru_cache(maxsize=None)
def _cache_argument_of(model_class) -> str:   # the signature is the class's: read it once
    params = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def returned_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def saved_fraction(batch_size: int, distinct_prompts: int, prompt_len: int, completion_len: int) -> float:
    """The fraction of the plain forward's tokens that sharing the prompt skips:
    (B - U) x P / (B x (P + T))."""
    return (batch_size - distinct_prompts) * prompt_len / (batch_size * (prompt_len + completion_len))


def shared_prompts(prompt_ids, prompt_mask, completion_len: int, share_prefix: bool = True,
                   min_saved_fraction: float = MIN_SAVED_FRACTION):
    """`completion_logits`' choice: (distinct, inverse), the U distinct (prompt, mask) rows (U, 2P)
    and each row's index among them (B,), when it shares the prompts; None for the plain forward."""
    B, P = prompt_ids.shape
    if not share_prefix or B < 2:
        return None
    rows = torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1)            # (B, 2P)
    distinct, inverse = torch.unique(rows, dim=0, return_inverse=True)                 # (U, 2P), (B,)
    # worth it only if a prompt repeats and enough tokens repeat to pay for the masked attention
    if len(distinct) < B and saved_fraction(B, len(distinct), P, completion_len) >= min_saved_fraction:
        return distinct, inverse
    return None


def token_layout(prompt_ids, prompt_mask, completion_ids, share_prefix: bool = True,
                 min_saved_fraction: float = MIN_SAVED_FRACTION):
    """Where the tokens of each model call `completion_logits` makes sit in the (B, P+T) input
    (prompt then completion): a list with one (N_c,) tensor per call, in call order, of indices
    into the flattened B x (P+T) positions (a module inside the model sees call c's N_c tokens in
    that order); and `representative` (B*(P+T),), for each position the one whose computation it
    shares (a repeated prompt's token: its first row's), -1 where no call runs it (the last
    completion token of the shared forward).  For what a module records per token (routed experts)."""
    B, P = prompt_ids.shape
    T = completion_ids.shape[1]
    S = P + T
    grid = torch.arange(B * S, device=prompt_ids.device).view(B, S)                    # (B, S)
    plan = shared_prompts(prompt_ids, prompt_mask, T, share_prefix, min_saved_fraction)
    if plan is None:
        return [grid.reshape(-1)], grid.reshape(-1)
    _, inverse = plan
    first = torch.full((int(inverse.max()) + 1,), B, device=inverse.device)
    first = first.scatter_reduce(0, inverse, torch.arange(B, device=inverse.device), "amin")   # (U,)
    calls = [grid[first, :P].reshape(-1)]                                              # U x P prompt tokens
    if T > 1:
        calls.append(grid[:, P:S - 1].reshape(-1))                                    # B x (T-1)
    representative = grid.clone()
    representative[:, :P] = grid[first[inverse], :P]
    representative[:, S - 1] = -1
    return calls, representative.reshape(-1)


def completion_logits(model, prompt_ids, prompt_mask, completion_ids, share_prefix: bool = True,
                      min_saved_fraction: float = MIN_SAVED_FRACTION):
    """Raw logits predicting each completion token: (B, T, V), row b position t is the
    distribution of completion_ids[b, t] given the prompt and completion_ids[b, :t].

    prompt_ids, prompt_mask: (B, P) left-padded; completion_ids: (B, T).  Position ids count
    real tokens only, as the sampler's do.  The prompts are shared when `share_prefix` and the
    tokens skipped are at least `min_saved_fraction` of the batch's (0: whenever one repeats).
    `token_layout` says which tokens each model call runs.
    """
    B, P = prompt_ids.shape
    T = completion_ids.shape[1]
    attn = torch.cat([prompt_mask, torch.ones_like(completion_ids)], dim=1)            # (B, P+T)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)                                     # (B, P+T)
    plan = shared_prompts(prompt_ids, prompt_mask, T, share_prefix, min_saved_fraction)
    if plan is None:                            # the plain forward
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)                     # (B, P+T)
        return model(input_ids=input_ids, attention_mask=attn, position_ids=positions,
                     logits_to_keep=T + 1).logits[:, :-1]                              # (B, T, V)

    # 1. the U distinct prompts, once: their cache and the logits of the first completion token
    distinct, inverse = plan
    u_ids, u_mask = distinct[:, :P], distinct[:, P:].to(prompt_mask.dtype)            # (U, P) each
    u_pos = (u_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=u_ids, attention_mask=u_mask, position_ids=u_pos, use_cache=True,
                logits_to_keep=1)
    first = out.logits[:, -1][inverse]                                                 # (B, V)
    if T == 1:
        return first[:, None]
    cache = returned_cache(out)
    cache.batch_select_indices(inverse)       # row b gets its prompt's keys/values: (B, ..., P, D)
    # 2. the completions on top: token t predicts token t + 1
    out = model(input_ids=completion_ids[:, :-1], attention_mask=attn[:, :-1],
                position_ids=positions[:, P:-1], use_cache=True, **{cache_argument(model): cache})
    return torch.cat([first[:, None], out.logits], dim=1)                              # (B, T, V)
