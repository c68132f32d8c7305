"""The exact-zero sampler: it decodes with the trainer's own forward, so mu = pi bit for bit.

Every run of the fast sampler has a mismatch of about 1e-13 in k3 (research/stability_map: the
static-cache decoder and the trainer's forward are two code paths).  `ExactEngine` removes it by
construction: at each decoding position t it runs the trainer's scoring functions
(rl_lab.engines.scoring: `forward_logits`, the shared-prefix forward the trainer uses, and
`score_logits`) on a fixed-shape buffer, the batch's prompts and a (B, T) completion buffer padded
to max_completion_length, and samples position t from that.  The trainer later calls the same
functions on the same tensors, the sampled tokens in the buffer.  Causal attention makes the
tokens after t irrelevant to position t, and their masked attention weights are exact zeros, so
position t's logits come out of the same operations on the same operands in the same shapes: the
same bits, on any machine, whatever its vector units (what the matrix library does for a given
shape is its business; it does the same thing twice).  The sampler works on its own copy of the
weights, synced with a bitwise copy; the mismatch sources (rl_lab.engines.sources; rows in
rl_lab.mismatch_specs) perturb one stage of it each.

What torch 2.13 does on a CPU (measured on this project's AVX2 AMD EPYC, one thread, MKL;
tests/unit/test_exact_engine.py asserts the part this engine relies on):
  * F.linear: a row's output bits are the same for any batch of 4 rows or more, and in any place
    in the batch, but 1, 2 or 3 rows (the matrix library's small-M path) give other bits for the
    same row: a one-token decode step (gemv-like) is not the many-token forward (gemm).  The HF
    forward over (B, P + T) tokens always has many rows, so there a row's logits did not depend
    on B (1 to 16) on this machine; on AVX-512 or AMX machines the thresholds are the library's
    and may differ.  The engine does not rely on any of it: it repeats the trainer's shapes.
  * the forward under torch.no_grad gives the trainer's bits under autograd (the same kernels), but
    only if the weights require grad in both: F.linear on a 3-D strided input (the shared-prefix
    forward's last prompt position, into the LM head) folds it into a contiguous matrix when the
    weight requires grad and runs a batched product on the strided view when it does not (at::matmul's
    should_fold), other bits for the same numbers (3e-7 in the logits).  So the sampler's copy keeps
    requires_grad=True like the trainer's parameters; torch.no_grad keeps it from building a graph.
  * the cost: one forward over the whole (B, P + T) buffer per generated token, no KV cache, so
    about T times the arithmetic of one trainer forward per rollout; bench/bench_exact_engine.py
    measures the ratio to the fast decoder.

The trainer's side needs nothing but the same options: temperature, share_prefix, DVP's min-p
(the sampler's min_p, RLConfig.sampling) and the sources' fixes (rl_lab.algos.mismatch_fixes).
The trainer scores the whole batch in one forward; a trainer that split it into micro-batches
would have to split the sampler's buffer the same way (each row's bits could then depend on its
micro-batch's shape).  Single-turn tasks only (no environment).
"""
from __future__ import annotations

import collections
import copy
import dataclasses

import torch

from rl_lab.config import SamplingConfig
from rl_lab.engines.rollout import RolloutBatch, follow_device, sample_tokens
from rl_lab.engines.scoring import forward_logits, score_logits
from rl_lab.engines.sources.base import compose
from rl_lab.errors import ConfigError
from rl_lab.utils import generator_on


def build_sources(config) -> list:
    """The sources a run turns on (rl_lab.mismatch_specs' rows, in order), built."""
    from rl_lab.mismatch_specs import active_sources
    return [spec.load()(spec.knobs(config), config) for spec in active_sources(config)]


class ExactEngine:
    """The exact-zero sampler (module docstring), with the run's mismatch sources applied."""
    supports_episodes = False
    perturbed = True             # the trainer evaluates with the fast HFEngine (the same policy)

    def __init__(self, model: torch.nn.Module, tokenizer, sources=(), share_prefix: bool = True):
        self.tokenizer = tokenizer
        self.model = copy.deepcopy(model)    # requires_grad as the trainer's: see the module docstring
        self.sources = list(sources)
        for s in self.sources:
            s.setup(self.model)
        self.share_prefix = share_prefix
        self.history: collections.deque = collections.deque(maxlen=1 + max([0] + [s.history() for s in self.sources]))
        self.syncs = 0
        self.metrics: dict = {}
        self.record_full_logprobs = False

    @classmethod
    def from_config(cls, config, model, tokenizer) -> "ExactEngine":
        return cls(model, tokenizer, build_sources(config), config.share_prefix)

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy the trainer's weights (those of `history()` syncs ago under staleness), each tensor
        through the sources' `synced` (faults); then the sources' checks."""
        self.history.append({n: p.detach().clone() for n, p in model.named_parameters()})
        follow_device(self.model, model)
        for name, p in self.model.named_parameters():
            value = self.history[0][name]
            for s in self.sources:
                value = s.synced(name, value, p.detach(), self.syncs)
            p.copy_(value)
        self.metrics = {}
        for s in self.sources:
            self.metrics.update(s.after_sync(self, self.syncs))
        self.syncs += 1

    def intended_weights(self) -> dict:
        """The weights the sampler should hold after this sync (before any fault)."""
        return self.history[0]

    @torch.no_grad()
    def load_weights(self, weights: dict) -> None:
        for name, p in self.model.named_parameters():
            p.copy_(weights[name])

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "history": list(self.history), "syncs": self.syncs}

    def load_state_dict(self, state: dict | None) -> None:
        if state is None:
            return
        self.model.load_state_dict(state["model"])
        self.history.clear()
        self.history.extend(state.get("history", []))
        self.syncs = int(state.get("syncs", 0))

    # ------------------------------------------------------------------ sampling
    def sampler_logits(self, prompt_ids, prompt_mask, completion_ids) -> torch.Tensor:
        """(B, T, V) logits of the sampler at every position of the buffer: the trainer's forward
        (`forward_logits`) under the sources' sampler contexts."""
        with compose([s.sampler_forward(self.model) for s in self.sources]):
            return forward_logits(self.model, prompt_ids, prompt_mask, completion_ids, self.share_prefix)

    def _kept(self, kept, logits_t, t: int, T: int, temperature: float):
        """Record the sources' kept set at position t in `kept` (B, T, V), allocated on first use."""
        masks = [m for m in (s.kept(logits_t.float() / temperature) for s in self.sources) if m is not None]
        if not masks:
            return kept
        if kept is None:
            B, V = logits_t.shape
            kept = torch.ones(B, T, V, dtype=torch.bool, device=logits_t.device)
        for m in masks:
            kept[:, t] &= m
        return kept

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, sampling: SamplingConfig,
                 generator: torch.Generator | None = None, environment=None) -> RolloutBatch:
        """n completions per prompt, each position sampled from the trainer's forward on the buffer."""
        if environment is not None:
            raise ConfigError("the exact-zero engine (RLConfig.mismatch) runs single-turn tasks only")
        if sampling.top_p < 1 or sampling.top_k or sampling.min_tokens:
            raise ConfigError("the exact-zero engine truncates through RLConfig.mismatch.truncation; leave top_p, "
                              "top_k and min_tokens at their defaults")
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        generator = generator_on(device, generator)
        enc = tok(prompts, return_tensors="pt", padding=True)
        prompt_ids = enc["input_ids"].to(device).repeat_interleave(n, 0)   # (B, P)
        prompt_mask = enc["attention_mask"].to(device).repeat_interleave(n, 0)  # (B, P)
        B, T = prompt_ids.shape[0], sampling.max_completion_length
        eos, pad = tok.eos_token_id, tok.pad_token_id
        completion_ids = torch.full((B, T), pad, dtype=torch.long, device=device)  # the buffer
        sampler_logprobs = torch.zeros((B, T), dtype=torch.float32, device=device)
        completion_mask = torch.zeros((B, T), dtype=torch.long, device=device)
        finished = torch.zeros(B, dtype=torch.bool, device=device)
        full, kept = None, None
        for t in range(T):
            logits = self.sampler_logits(prompt_ids, prompt_mask, completion_ids)        # (B, T, V)
            kept = self._kept(kept, logits[:, t], t, T, sampling.temperature)
            logp_all = score_logits(logits, sampling.temperature, sampling.min_p, kept)   # (B, T, V)
            if self.record_full_logprobs:
                full = torch.zeros_like(logp_all) if full is None else full
                full[:, t] = logp_all[:, t]
            tokens, token_logp = sample_tokens(logp_all[:, t], generator)               # (B,), (B,)
            completion_ids[:, t] = tokens.masked_fill_(finished, pad)
            sampler_logprobs[:, t] = token_logp.masked_fill_(finished, 0.0)
            completion_mask[:, t] = ~finished
            finished |= tokens == eos
            if finished.all():
                break
        has_eos = ((completion_ids == eos) & completion_mask.bool()).any(-1)
        batch = RolloutBatch(prompts=[p for p in prompts for _ in range(n)], prompt_ids=prompt_ids,
                            prompt_mask=prompt_mask, completion_ids=completion_ids,
                            completion_mask=completion_mask, sampler_logprobs=sampler_logprobs,
                            completions=tok.batch_decode(completion_ids.tolist(), skip_special_tokens=True),
                            is_truncated=~has_eos, group_ids=torch.arange(len(prompts), device=device).repeat_interleave(n),
                            sampler_logprobs_full=full, engine_metrics=dict(self.metrics))
        for s in self.sources:                  # what the sampler's last forward recorded (routed experts)
            batch = dataclasses.replace(batch, **s.record(batch))
        return batch
