"""Rollout engines: sample completions and return the sampler's own per-token log-probs.

The log-probs a rollout engine reports are those of the behaviour policy mu: the
distribution it actually sampled from, in its own precision, after temperature, top-k and
top-p.  The trainer later recomputes pi on the same tokens; the gap between the two is the
training-inference mismatch this book is about.

Any engine implements `generate(prompts, n, sampling) -> RolloutBatch` and
`sync_weights(model)`.  `HFEngine` is a KV-cached sampling loop on Hugging Face models: one loop
over a `Decoder` (prefill, then one token per step), the static-cache `StaticDecoder` for
Qwen2/Llama or `HFCacheDecoder` (the Hugging Face forward) for any causal LM.

Chapter 1 (book/ch01_rl_on_one_page.md, "Why the two log-probs") explains why the engine returns them.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, fields
from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F

from rl_lab.config import SamplingConfig
from rl_lab.engines.fast_decode import StaticDecoder, supports
from rl_lab.engines.shared_prefix import cache_argument, returned_cache
from rl_lab.engines.vocabulary import safe_vocabulary
from rl_lab.utils import generator_on

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class RolloutBatch:
    """B = len(prompts) * n rows, grouped: rows [g*n, (g+1)*n) share prompt g.

    Every engine fills the first nine fields.  The two blocks after them are None unless asked for:
    the sampler's full distributions when the trainer sets `record_full_logprobs`, the episode
    fields when generate() ran with an environment."""
    prompts: list[str]               # (B,) prompt text, repeated n times
    prompt_ids: torch.Tensor         # (B, P) left-padded
    prompt_mask: torch.Tensor        # (B, P) 1 on real prompt tokens
    completion_ids: torch.Tensor     # (B, T) right-padded with pad_token_id
    completion_mask: torch.Tensor    # (B, T) 1 on generated tokens, up to and including <eos>
    sampler_logprobs: torch.Tensor | None  # (B, T) log mu(y_t | x, y_<t), 0 where mask is 0; None: not reported
    completions: list[str]           # (B,) decoded, special tokens removed
    is_truncated: torch.Tensor       # (B,) bool: no <eos> within max_completion_length (nor ended by the environment)
    group_ids: torch.Tensor          # (B,) index of the prompt each row belongs to
    # -- mu's whole distributions, for the corrections and methods that declare they need them
    sampler_logprobs_full: torch.Tensor | None = None  # (B, T, V) log mu(. | x, y_<t), if recorded
    # -- multi-turn episodes (rl_lab.agents.episodes), all four None without an environment.
    # completion_ids then holds the whole episode; completion_mask is 1 on the model's sampled tokens only.
    # Read by SimpleTIR (env_mask, has_void_turn), EMPG and the per-turn estimators and metrics
    # (turn_ids), and logged by the step (episode_metrics).
    env_mask: torch.Tensor | None = None        # (B, T) bool: tokens the environment appended
    turn_ids: torch.Tensor | None = None        # (B, T) the model turn of each token; -1 on padding
    episode_metrics: dict | None = None         # turns/..., tools/... of the batch
    has_void_turn: torch.Tensor | None = None   # (B,) bool: the episode has a void turn (SimpleTIR)
    # -- what the engine measured about itself (the exact engine's sync check), logged by a method
    engine_metrics: dict | None = None
    # -- the experts a mixture-of-experts sampler routed each token to (the exact engine under
    # mismatch.routing), for routing replay: layer l, row b, position s of prompt + completion
    # (the (B, P+T) input the trainer's forward runs), its K experts; -1 where the forward ran no token
    sampler_routing: torch.Tensor | None = None  # (L, B, P+T, K) long

    @property
    def num_groups(self) -> int:
        return int(self.group_ids.max().item()) + 1 if len(self.group_ids) else 0

    def to(self, device) -> "RolloutBatch":
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for k, v in moved.items():
            if isinstance(v, torch.Tensor):
                moved[k] = v.to(device)
        return RolloutBatch(**moved)


@runtime_checkable
class RolloutEngine(Protocol):
    """What the trainer asks of a sampler (HFEngine, MismatchEngine, VLLMEngine, or your own).

    generate(prompts, n, sampling, generator, environment=None) -> RolloutBatch
        n completions per prompt, with the log-probs they were sampled with (`sampler_logprobs`;
        None if the engine cannot report them, then the corrections that need mu refuse to run).
        With an `environment` (when `supports_episodes`) every completion is a multi-turn episode.
    sync_weights(model)      before each rollout: take the trainer's current weights.
    supports_episodes        generate() takes environment= (multi-turn tool use).
    perturbed                the engine differs from the trainer on purpose (an injector): the
                             trainer then evaluates its policy with a plain HFEngine instead.
    record_full_logprobs     set by the trainer when a correction needs mu's (B, T, V) distributions.
    """
    supports_episodes: bool
    perturbed: bool
    record_full_logprobs: bool

    def generate(self, prompts: list[str], n: int, sampling: SamplingConfig,
                 generator: torch.Generator | None = None, environment=None) -> RolloutBatch: ...

    def sync_weights(self, model: torch.nn.Module) -> None: ...


def process_logits(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """(B, V) raw logits -> (B, V) log-probs of the distribution actually sampled from:
    temperature, then min-p, top-k and top-p (removed tokens get -inf)."""
    logits = logits.float()
    if sampling.temperature != 1.0:
        logits = logits / sampling.temperature
    if sampling.min_p > 0:  # p >= min_p * p_max: Dynamic Vocabulary Pruning's safe set
        logits = logits.masked_fill(~safe_vocabulary(logits, sampling.min_p), float("-inf"))
    if sampling.top_k and sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token when the mass strictly before it already reaches top_p
        drop_sorted = (probs.cumsum(-1) - probs) >= sampling.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return F.log_softmax(logits, dim=-1)


def sample_tokens(logp: torch.Tensor, generator: torch.Generator | None):
    """Sample one token per row of (B, V) log-probs.  Rows that are not a valid
    distribution (NaN/inf from a broken sampler) draw uniformly and report NaN, so the
    trainer can mask and count them instead of crashing.

    Inverse-CDF sampling: the first token whose cumulative probability exceeds u * total,
    u ~ U[0, 1).  The cumulative sum is float64, so a token with probability 1e-9 far down a
    150k vocabulary keeps its share; on a CPU this is 6x (V = 64) to 40x (V = 32k) faster than
    torch.multinomial (tests/unit/test_rollout.py checks the frequencies)."""
    probs = logp.exp()
    cdf = probs.double().cumsum(-1)                                                 # (B, V)
    total = cdf[:, -1]                                                              # (B,)
    bad = ~(torch.isfinite(total) & (total > 0))           # a NaN/inf anywhere, or nothing left
    if bad.any():
        probs = torch.where(bad[:, None], torch.ones_like(probs), probs)
        cdf = probs.double().cumsum(-1)
    u = torch.rand(len(probs), 1, dtype=torch.float64, device=probs.device, generator=generator)
    tokens = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(-1)      # (B,)
    past = tokens == probs.shape[-1]      # rounding put u * total at the end: take the last
    if past.any():                        # token with positive probability
        tokens[past] = probs.shape[-1] - 1 - (probs[past] > 0).flip(-1).int().argmax(-1)
    token_logp = logp.gather(-1, tokens[:, None]).squeeze(-1)                     # (B,)
    token_logp = torch.where(bad, torch.full_like(token_logp, float("nan")), token_logp)
    return tokens, token_logp


def follow_device(copy: torch.nn.Module, source: torch.nn.Module) -> None:
    """Move a sampler's own copy of the weights to the device of the trainer's model (an engine
    built before the trainer moved the model to CUDA would otherwise sample on the CPU)."""
    device = next(source.parameters()).device
    if next(copy.parameters()).device != device:
        copy.to(device)


class HFEngine:
    """KV-cached sampling on a Hugging Face causal LM.

    With `dtype` equal to the trainer's and `copy_weights=False` (the default for fp32) the
    engine samples from the trainer's own module: no copy, no sync.  Otherwise it keeps its
    own copy in `dtype` and `sync_weights(model)` copies the trainer's weights in memory.
    Qwen2/Llama models decode through `rl_lab.engines.fast_decode.StaticDecoder` (a preallocated cache,
    the model's own modules; set `fast = False` for `HFCacheDecoder`, the Hugging Face forward, the
    reference it is tested against).  With `record_full_logprobs` each batch also carries the
    sampler's full (B, T, V) log-distributions (for exact per-context divergences).  Subclasses perturb the sampler
    through `perturb_logits` and `sync_weights` (see rl_lab.engines.injectors).
    """
    supports_episodes = True     # rl_lab.engines.rollout.RolloutEngine
    perturbed = False

    def __init__(self, model: torch.nn.Module, tokenizer, dtype: str = "float32",
                 copy_weights: bool | None = None):
        if dtype not in _DTYPES:
            raise ValueError(f"HFEngine dtype={dtype!r}: choose one of {list(_DTYPES)}")
        self.tokenizer = tokenizer
        self.dtype = _DTYPES[dtype]
        trainer_dtype = next(model.parameters()).dtype
        if copy_weights is None:
            copy_weights = self.dtype != trainer_dtype
        self.copy_weights = copy_weights
        self.model = copy.deepcopy(model).to(self.dtype) if copy_weights else model
        if copy_weights:
            self.model.requires_grad_(False)
        self.record_full_logprobs = False
        self.fast = True   # rl_lab.engines.fast_decode for Qwen2/Llama models; False: the HF forward

    def perturb_logits(self, logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """Hook on the raw (B, V) logits before sampling; the identity here."""
        return logits

    def state_dict(self) -> dict | None:
        """What a checkpoint must keep to resume the sampler bit for bit (None: nothing)."""
        return {"model": self.model.state_dict()} if self.copy_weights else None

    def load_state_dict(self, state: dict | None) -> None:
        if state is not None and self.copy_weights:
            self.model.load_state_dict(state["model"])

    @torch.no_grad()
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Load the trainer's current weights into the sampler (in memory, cast to dtype)."""
        if not self.copy_weights:
            return
        src = dict(model.named_parameters())
        follow_device(self.model, model)
        for name, p in self.model.named_parameters():
            p.copy_(src[name].detach())

    def _decoder(self, batch_size: int, max_len: int) -> Decoder:
        """The static-cache decoder for a Qwen2/Llama model (same modules and math, no per-call HF
        overhead), unless `fast` is off; else the Hugging Face forward."""
        if self.fast and supports(self.model):
            return StaticDecoder(self.model, batch_size, max_len)
        return HFCacheDecoder(self.model, batch_size, max_len)

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, sampling: SamplingConfig,
                 generator: torch.Generator | None = None, environment=None) -> RolloutBatch:
        """n completions per prompt.  With an `environment` (rl_lab.agents.ToolEnvironment) each
        completion is a multi-turn episode: where a row's turn ends with a tool call, the tool's
        output is appended token by token (not sampled: log-prob 0, completion_mask 0)."""
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        generator = generator_on(device, generator)    # e.g. a CUDA trainer's generator, a CPU sampler
        rows = [p for p in prompts for _ in range(n)]
        enc = tok(prompts, return_tensors="pt", padding=True)              # each prompt once
        prompt_ids = enc["input_ids"].to(device).repeat_interleave(n, 0)   # (B, P)
        prompt_mask = enc["attention_mask"].to(device).repeat_interleave(n, 0)  # (B, P)
        B, T = prompt_ids.shape[0], sampling.max_completion_length
        eos, pad = tok.eos_token_id, tok.pad_token_id

        completion_ids = torch.full((B, T), pad, dtype=torch.long, device=device)
        sampler_logprobs = torch.zeros((B, T), dtype=torch.float32, device=device)
        full = [] if self.record_full_logprobs else None
        completion_mask = torch.zeros((B, T), dtype=torch.long, device=device)
        finished = torch.zeros(B, dtype=torch.bool, device=device)
        positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)              # (B, P)
        turns = EnvironmentTurns(environment, B, tok)

        # prefill: each prompt once for its n rows, only the last position's logits
        next_pos = positions[:, -1] + 1                                    # (B,)
        decoder = self._decoder(B, prompt_ids.shape[1] + T)
        logits = decoder.prefill(prompt_ids[::n], prompt_mask[::n], positions[::n], repeats=n)  # (B, V)
        for t in range(T):
            if t < sampling.min_tokens:   # vLLM's min_tokens: no <eos> yet
                logits = logits.index_fill(-1, torch.tensor([eos], device=device), float("-inf"))
            logp = process_logits(self.perturb_logits(logits, generator), sampling)  # (B, V)
            if full is not None:
                full.append(logp)
            tokens, token_logp = sample_tokens(logp, generator)            # (B,), (B,)
            # rows in an environment turn take its next token instead
            tokens, token_logp, sampled = turns.override(tokens, token_logp, ~finished)
            completion_ids[:, t] = tokens.masked_fill_(finished, pad)      # rows already done: pad
            sampler_logprobs[:, t] = token_logp.masked_fill_(finished, 0.0)
            completion_mask[:, t] = sampled
            turns.observe(t, completion_ids[:, t], sampled, finished)
            finished |= (tokens == eos) & sampled
            turns.end_rows(finished)                                       # a failed call ended the episode
            if finished.all() or t == T - 1:
                break
            logits = decoder.step(completion_ids[:, t], next_pos)          # (B, V)
            next_pos = next_pos + 1
        decoder.close()

        has_eos = ((completion_ids == eos) & completion_mask.bool()).any(-1)
        texts = tok.batch_decode(completion_ids.tolist(), skip_special_tokens=True)
        group_ids = torch.arange(len(prompts), device=device).repeat_interleave(n)
        if full is not None:  # (B, T, V); positions after the last step repeat nothing: zeros
            full = torch.stack(full, 1)
            full = torch.cat([full, full.new_zeros(B, T - full.shape[1], full.shape[-1])], 1)
        episode_fields, ended = turns.finish(T, has_eos)
        return RolloutBatch(prompts=rows, prompt_ids=prompt_ids, prompt_mask=prompt_mask,
                            completion_ids=completion_ids, completion_mask=completion_mask,
                            sampler_logprobs=sampler_logprobs, completions=texts,
                            is_truncated=~has_eos & ~ended, group_ids=group_ids,
                            sampler_logprobs_full=full, **episode_fields)


class Decoder(Protocol):
    """What HFEngine.generate asks of a decoder: next-token logits, one new token per row.
    `StaticDecoder` (rl_lab.engines.fast_decode) and `HFCacheDecoder` implement it."""

    def prefill(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, positions: torch.Tensor,
                repeats: int = 1) -> torch.Tensor:
        """prompt_ids, prompt_mask, positions: (N, P) left-padded, N = B / repeats distinct prompts,
        each for `repeats` consecutive rows -> (B, V) logits at the last prompt position."""

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """tokens (B,), positions (B,) of the new tokens -> (B, V) next-token logits."""

    def close(self) -> None:
        """Sampling is over: restore what the decoder changed on the model."""


class HFCacheDecoder:
    """`Decoder` on the Hugging Face forward with its own dynamic key/value cache: any causal LM,
    and the reference the static decoder is tested against.  The model is in eval mode (no
    dropout) from construction until `close`, which restores its training mode."""

    def __init__(self, model: torch.nn.Module, batch_size: int, max_len: int):
        self.model, self.batch_size, self.max_len = model, batch_size, max_len
        self.was_training = model.training
        model.eval()
        self.cache_arg = cache_argument(model)     # past_key_values or (transformers 5) cache
        self.cache = self.attn = None
        self.length = 0                            # positions in the cache

    def prefill(self, prompt_ids, prompt_mask, positions, repeats: int = 1):
        """Every row's prompt through the forward (the HF cache holds one row per row) -> (B, V)."""
        prompt_ids, prompt_mask, positions = (x.repeat_interleave(repeats, 0)          # (B, P) each
                                              for x in (prompt_ids, prompt_mask, positions))
        B, P = prompt_ids.shape
        if B != self.batch_size:
            raise ValueError(f"prefill: {B // repeats} prompts x repeats={repeats} != batch size {self.batch_size}")
        self.attn = torch.ones((B, self.max_len), dtype=torch.long, device=prompt_ids.device)
        self.attn[:, :P] = prompt_mask                                     # (B, P + T): 1 past the prompt
        out = self.model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions,
                         use_cache=True, logits_to_keep=1)
        self.length = P
        return self._logits(out)

    def step(self, tokens, positions):
        """tokens (B,), positions (B,) of the new tokens -> (B, V) next-token logits."""
        self.length += 1
        out = self.model(input_ids=tokens[:, None], attention_mask=self.attn[:, : self.length],
                         position_ids=positions[:, None], use_cache=True, **{self.cache_arg: self.cache})
        return self._logits(out)

    def _logits(self, out):
        self.cache = returned_cache(out)
        return out.logits[:, -1]                                           # (B, V)

    def close(self) -> None:
        """Restore the model's training mode."""
        self.model.train(self.was_training)


class EnvironmentTurns:
    """HFEngine.generate's side of a batch of multi-turn episodes (rl_lab.agents.episodes): the
    environment's tokens in place of sampled ones, the turns recorded, the rows it ended.  With no
    environment every method leaves the batch as it is."""

    def __init__(self, environment, batch_size: int, tokenizer):
        self.episodes = environment.start(batch_size, tokenizer) if environment is not None else None

    def override(self, tokens, token_logp, sampled):
        """Replace the sampled token by the environment's next one in rows that are in an
        environment turn: such a token is not sampled (log mu := 0, mask 0)."""
        forced = self.episodes.next_tokens(tokens.device) if self.episodes is not None else None
        if forced is None:
            return tokens, token_logp, sampled
        env_tokens, is_env = forced
        return (torch.where(is_env, env_tokens, tokens), token_logp.masked_fill(is_env, 0.0),
                sampled & ~is_env)

    def observe(self, t: int, tokens, sampled, finished) -> None:
        """Record the (B,) tokens written at position t: sampled ones, and the environment's in
        rows neither sampled nor finished (this runs the tools of turns that end with a call)."""
        if self.episodes is not None:
            self.episodes.observe(t, tokens.tolist(), sampled.tolist(), (~sampled & ~finished).tolist())

    def end_rows(self, finished) -> None:
        """finished (B,) |= the rows whose episode a failed tool call ended, in place."""
        if self.episodes is not None and self.episodes.env.failure_rate > 0:
            finished |= self.episodes.ended_rows(finished.device)

    def finish(self, T: int, has_eos) -> tuple[dict, torch.Tensor]:
        """Once sampling is over, has_eos (B,): (the RolloutBatch's episode fields env_mask,
        turn_ids, episode_metrics, has_void_turn, all None without an environment;
        (B,) bool, the rows the environment ended)."""
        if self.episodes is None:
            return dict(env_mask=None, turn_ids=None, episode_metrics=None, has_void_turn=None), \
                torch.zeros_like(has_eos)
        env_mask, turn_ids, episode_metrics = self.episodes.finish(T, has_eos)
        episode_fields = dict(env_mask=env_mask, turn_ids=turn_ids, episode_metrics=episode_metrics,
                              has_void_turn=self.episodes.void_rows(has_eos))
        return episode_fields, self.episodes.ended_rows(has_eos.device)
