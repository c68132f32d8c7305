"""The RL trainer: rollout -> reward -> trainer log-probs -> correction hook -> advantages ->
policy loss -> AdamW.  One `step()` is one rollout batch; `train()` loops, logs metrics with
TRL's names (and verl's under `rollout_corr/` and `actor/`), checkpoints atomically and
resumes bit for bit.

Off-policy handling follows verl: decoupled mode (three policies; the hook weights and masks
once per batch with pi_old / mu) or bypass mode (pi_old := mu; recomputed from pi_theta / mu
at every iteration), one component built from the RLConfig (rl_lab.algos.correction).  Methods
(rl_lab.method_specs) change the step only through their hooks; the trainer knows none of them.

Faults never crash a step: a reward function that raises or returns NaN/None, NaN/inf
sampler or trainer log-probs, and empty completions are masked out of the loss and counted
under `faults/`; a step whose gradient is not finite is skipped, so the weights stay clean.

Chapter 1 (book/ch01_rl_on_one_page.md) explains the step; chapter 5 the correction hook.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from rl_lab.algos.correction import Correction
from rl_lab.algos.estimators import ADV_ESTIMATORS, step_advantages
from rl_lab.algos.losses import LogProbs, aggregate_loss, token_logprobs
from rl_lab.algos.method import Method, RunContext, StepState
from rl_lab.algos.methods import build_methods
from rl_lab.config import RLConfig, SamplingConfig
from rl_lab.engines import RolloutEngine, make_engine
from rl_lab.engines.rollout import HFEngine, RolloutBatch
from rl_lab.errors import ConfigError
from rl_lab.models import resolve_model
from rl_lab.runs import RunFolder, check_resume_overwrite, load_checkpoint, save_model
from rl_lab.schedules import scheduled_lr_factor
from rl_lab.tasks import get_task
from rl_lab.utils import null_to_nan, pick_device, seed_everything

log = logging.getLogger(__name__)
TIMING_KEYS = ("step_time", "time/rollout", "time/update", "time/eval")


def call_reward_funcs(reward_funcs, prompts, completions, completion_ids, columns):
    """Sum of the reward functions' outputs, (B,) float64 with NaN where a function failed.

    A function that raises on the batch is retried sample by sample, so one bad completion
    costs one NaN, not the batch.  None (TRL: "not applicable") and non-numbers become NaN.
    Returns (rewards, per-function means, number of failed samples).
    """
    B = len(completions)
    total = np.zeros(B)
    per_func, errors = {}, np.zeros(B, dtype=bool)

    def to_float(v):
        try:
            return float(v) if v is not None else math.nan
        except (TypeError, ValueError):
            return math.nan

    for func in reward_funcs:
        name = getattr(func, "__name__", type(func).__name__)
        try:
            values = list(func(prompts=prompts, completions=completions,
                               completion_ids=completion_ids, **columns))
            if len(values) != B:
                raise ValueError(f"reward function {name} returned {len(values)} values for {B} completions")
        except Exception as exc:  # isolate the failing samples
            log.warning("reward function %s raised %r; scoring samples one by one", name, exc)
            values = []
            for i in range(B):
                try:
                    one = func(prompts=prompts[i:i + 1], completions=completions[i:i + 1],
                               completion_ids=completion_ids[i:i + 1],
                               **{k: v[i:i + 1] for k, v in columns.items()})
                    values.append(one[0])
                except Exception:
                    values.append(None)
        vals = np.array([to_float(v) for v in values])
        errors |= ~np.isfinite(vals)
        total += vals
        per_func[name] = vals
    return total, per_func, int(errors.sum())


class Trainer:
    """GRPO/REINFORCE trainer for a causal LM on a verifiable task.

    Trainer(config) builds the task, model and engine from the config; notebooks can pass
    their own `model`/`tokenizer`/`task`/`engine`/`reward_funcs` instead.  An `environment`
    (rl_lab.agents.ToolEnvironment; default: the task's `environment` attribute, if any) makes
    every completion a multi-turn episode with tool calls (on HFEngine or VLLMEngine).
    """

    def __init__(self, config: RLConfig, model=None, tokenizer=None, task=None, engine=None,
                 reward_funcs=None, environment=None):
        if not isinstance(config, RLConfig):
            raise ConfigError(f"Trainer needs an RLConfig, got {type(config).__name__}")
        if (model is None) != (tokenizer is None):
            raise ConfigError("pass both model= and tokenizer=, or neither (then config.model is used)")
        self.config = cfg = config                     # and the rollout correction (rl_lab.algos.correction)
        self.device = pick_device(cfg.device)
        seed_everything(cfg.seed)
        self.task = task if task is not None else get_task(cfg.task, **cfg.task_kwargs)
        if model is None:
            model, tokenizer = resolve_model(cfg.model, cfg.task, seed=cfg.seed)
        self.model, self.tokenizer = model.to(self.device), tokenizer
        self.model.train()
        self.reward_funcs = list(reward_funcs) if reward_funcs is not None else [self.task]
        self.environment = environment if environment is not None else getattr(self.task, "environment", None)
        if self.environment is not None and cfg.max_turns is not None:   # K for this run
            self.environment = dataclasses.replace(self.environment, max_turns=cfg.max_turns)
        self.methods = build_methods(cfg)              # rl_lab.method_specs' rows, in hook order
        forward = {k: v for m in self.methods for k, v in m.forward_options().items()}
        self.run = RunContext(cfg, self.task, self.model, tokenizer, self.device, tuple(self.reward_funcs),
                              self.environment, forward)
        for method in self.methods:
            method.setup(self.run)
        self.engine = engine if engine is not None else make_engine(cfg, self.model, tokenizer)
        if not isinstance(self.engine, RolloutEngine):
            missing = [m for m in ("generate", "sync_weights", "supports_episodes", "perturbed", "record_full_logprobs")
                       if not hasattr(self.engine, m)]
            raise ConfigError(f"engine={type(self.engine).__name__} lacks {missing} of rl_lab.engines.RolloutEngine; "
                              "subclass rl_lab.engines.HFEngine, or give it those members")
        if self.correction.needs_distributions or any(m.needs_sampler_distributions for m in self.methods):
            self.engine.record_full_logprobs = True    # mu's (B, T, V) in every batch
        # evaluation measures the trainer's policy, not a deliberately perturbed sampler
        self.eval_engine = (HFEngine(self.model, tokenizer, cfg.sampler_dtype)
                            if self.engine.perturbed else self.engine)
        if self.environment is not None and not self.engine.supports_episodes:
            raise ConfigError(f"multi-turn episodes (an environment) need an engine whose generate() takes "
                              f"environment= (supports_episodes: HFEngine, VLLMEngine); "
                              f"{type(self.engine).__name__}'s does not")
        params = [p for p in self.model.parameters() if p.requires_grad]
        fused = all(p.device.type in ("cpu", "cuda") for p in params)  # one kernel, the same update
        self.optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, eps=1e-8,
                                           betas=(cfg.adam_beta1, cfg.adam_beta2),
                                           weight_decay=cfg.weight_decay, fused=fused or None)
        self.rng = np.random.default_rng(cfg.seed)                     # prompt stream
        self.generator = torch.Generator(self.device).manual_seed(cfg.seed)  # sampling stream
        self.eval_set = self.task.make_dataset(cfg.eval_prompts, seed=1_000_003 + cfg.seed)
        self.global_step = 0
        self.num_tokens = 0
        self.history: list[dict] = []
        self.output_dir = Path(cfg.output_dir) if cfg.output_dir else None
        self.run_folder = RunFolder(self.output_dir) if self.output_dir is not None else None   # rl_lab.runs
        self._continues_output_dir = False   # True once resume() or train() took the folder on

    @property
    def config(self) -> RLConfig:
        return self._config

    @config.setter
    def config(self, config: RLConfig) -> None:
        """A new config takes effect at the next step for the schedule, the loss and the rollout
        correction (rebuilt from it); the methods and the engine keep the ones they were built with."""
        self._config = config
        self.correction = Correction(config)

    # ------------------------------------------------------------------ schedule
    def _lr_factor(self, step: int) -> float:
        """The fixed schedule's factor (rl_lab.schedules) times every method's lr_scale."""
        factor = scheduled_lr_factor(self.config, step)
        for m in self.methods:
            factor *= m.lr_scale(step)
        return factor

    def method(self, name: str) -> Method:
        """The run's method called `name` (e.g. "reference_kl": its `ref_model`)."""
        for m in self.methods:
            if m.name == name:
                return m
        raise KeyError(f"this run has no method {name!r}; it has {[m.name for m in self.methods]}")

    # ------------------------------------------------------------------ one step
    def step(self) -> dict:
        """One rollout batch and its update(s).  Returns the step's metrics.  Methods change the
        step only through their hooks (rl_lab.algos.method), in the order of `self.methods`."""
        cfg, t0 = self.config, time.perf_counter()
        # ROLLOUT: G completions for each of N prompts, with the sampler's log-probs (mu)
        examples = [self.task.sample(self.rng) for _ in range(self._rollout_prompts())]
        self.engine.sync_weights(self.model)
        batch: RolloutBatch = self.engine.generate([e["prompt"] for e in examples], cfg.num_generations,
                                                   cfg.sampling(), self.generator,
                                                   **self._episode_kwargs()).to(self.device)
        rows = [e for e in examples for _ in range(cfg.num_generations)]
        rewards, per_func, reward_errors = self._rewards(batch, rows)                   # (B,), NaN on failure
        s = StepState(self.run, batch, examples, rows, rewards, batch.completion_mask.bool())  # mask (B, T)
        t_rollout = time.perf_counter()

        # TRAINER LOG-PROBS (pi), with gradient; the first iteration's copy is pi_old
        nonempty = s.mask.any(-1)                                                        # (B,)
        pi = self._logprobs(batch, with_entropy=True)
        s.logp, s.entropy, s.logp_all = pi.logp, pi.entropy, pi.logp_all  # (B, T) x2, (B, T, V) or None
        s.first_logp_all, s.old_logp = s.logp_all, s.logp.detach()
        self._hook("mask_tokens", s)                                       # truncation, DVP

        # VALIDITY: mask (and count) rows that cannot be trusted
        mu = self.correction.sampler_logprobs(batch, s.old_logp)                         # (B, T)
        finite = (torch.isfinite(mu) | ~s.mask).all(-1) & (torch.isfinite(s.old_logp) | ~s.mask).all(-1)
        s.valid = s.trains = torch.isfinite(rewards) & finite & nonempty                # (B,)
        self._hook("filter_rows", s)                                       # SimpleTIR's void filter
        s.mask &= s.trains[:, None]
        s.rollout_logp = torch.where(s.mask, mu, torch.zeros_like(s.old_logp))
        s.old_logp_safe = torch.where(s.mask, s.old_logp, torch.zeros_like(s.old_logp))
        s.counted = s.mask.clone()

        # CORRECTION HOOK (decoupled mode): weights and mask from rho = pi_old / mu, once
        corr_metrics = self.correction.per_batch(s)

        # ADVANTAGES, per token; like verl they see the corrected mask and weights
        s.advantages = step_advantages(s)                                               # (B, T)
        self._hook("advantages", s)                                        # EMPG
        self._hook("prepare", s)                                           # reference/teacher log-probs, demos

        # UPDATE: num_iterations optimizer steps on this batch (loss/grad_norm logged from the last)
        skipped, grad_norm, loss_value, pg_metrics = 0, float("nan"), float("nan"), {}
        self._set_learning_rate()
        skip = any(self._hook("skip_update", s))                          # zero-spread steps
        for it in range(0 if skip else cfg.num_iterations):
            if it > 0:
                pi = self._logprobs(batch)
                s.logp, s.logp_all = pi.logp, pi.logp_all
            s.logp_safe = torch.where(s.mask, s.logp, torch.zeros_like(s.logp))
            per_token, pg_metrics, corr_metrics = self.correction.policy_loss(s, corr_metrics)  # s.loss_mask
            for term in self._hook("token_loss", s):                       # reference KL, teacher KL
                per_token = per_token + term
            loss = aggregate_loss(per_token, s.loss_mask, cfg.loss_agg_mode, cfg.max_completion_length)
            for term in self._hook("batch_loss", s):                       # imitation
                loss = loss + term
            grad_norm, loss_value, stepped = self._optimizer_step(loss, s.loss_mask)
            skipped += not stepped
        self.global_step += 1

        # METRICS (TRL's names where they exist), timing, evaluation
        metrics = self._step_metrics(batch, rewards, s.valid, per_func, reward_errors, s.counted, s.entropy,
                                     s.old_logp_safe - s.rollout_logp, finite, nonempty)
        metrics.update({"loss": loss_value, "grad_norm": grad_norm, "faults/skipped_steps": skipped,
                        **corr_metrics, **pg_metrics, **(batch.episode_metrics or {})})
        for method_metrics in self._hook("metrics", s):
            metrics.update(method_metrics)
        return self._timing_and_eval(metrics, t0, t_rollout)

    def _rewards(self, batch: RolloutBatch, rows: list) -> tuple[torch.Tensor, dict, dict]:
        """The reward functions on the batch (TRL's keyword arguments, the rows' dataset columns):
        rewards (B,) float32, NaN where a function failed; per-function rewards; the errors."""
        columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
        rewards_np, per_func, reward_errors = call_reward_funcs(
            self.reward_funcs, batch.prompts, batch.completions, batch.completion_ids.tolist(), columns)
        return torch.tensor(rewards_np, dtype=torch.float32, device=self.device), per_func, reward_errors

    def _set_learning_rate(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.learning_rate * self._lr_factor(self.global_step)

    def _timing_and_eval(self, metrics: dict, t0: float, t_rollout: float) -> dict:
        """The step's timing, and the greedy evaluation every eval_steps steps."""
        t1 = time.perf_counter()
        metrics.update({"time/rollout": t_rollout - t0, "time/update": t1 - t_rollout, "step_time": t1 - t0})
        if self.config.eval_steps and self.global_step % self.config.eval_steps == 0:
            t2 = time.perf_counter()
            metrics.update(self.evaluate())
            metrics["time/eval"] = time.perf_counter() - t2
        return metrics

    def _rollout_prompts(self) -> int:
        """Prompts the step draws: prompts_per_step, unless a method draws more (dynamic sampling)."""
        n = self.config.prompts_per_step
        for m in self.methods:
            n = m.rollout_prompts(n)
        return n

    def _hook(self, name: str, s: StepState) -> list:
        """Call every method's hook `name` on the step's state, in order; the non-None results."""
        out = [getattr(m, name)(s) for m in self.methods]
        return [r for r in out if r is not None]

    def _optimizer_step(self, loss, loss_mask) -> tuple[float, float, bool]:
        """Backward, clip, and step: (grad_norm, loss, stepped).  A NaN/inf never reaches the
        weights, and an all-masked batch teaches nothing (AdamW would still move the weights by
        its momentum): both skip the step."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in self.model.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm).item()
        loss_value = loss.item()
        if math.isfinite(grad_norm) and math.isfinite(loss_value) and bool(loss_mask.any()):
            self.optimizer.step()
            return grad_norm, loss_value, True
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm, loss_value, False

    def _needs_full_logprobs(self) -> bool:
        """Whether the advantage estimator, a method, or the correction reads pi's whole
        distribution per token.  Otherwise no (B, T, V) tensor outlives the backward pass (the
        graph holds one, as it must)."""
        return (ADV_ESTIMATORS[self.config.advantage_estimator].needs_full_logprobs
                or any(m.needs_full_logprobs for m in self.methods) or self.correction.needs_distributions)

    def _logprobs(self, batch: RolloutBatch, with_entropy: bool = False) -> LogProbs:
        """The trainer's log-probs of the batch's tokens, with their entropy if asked, and the
        (B, T, V) `logp_all` only when `_needs_full_logprobs()`."""
        cfg = self.config
        return token_logprobs(self.model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                              cfg.temperature, with_entropy=with_entropy, with_all=self._needs_full_logprobs(),
                              share_prefix=cfg.share_prefix, **self.run.forward_for(batch))

    def _episode_kwargs(self) -> dict:
        """The engine's `environment` argument when episodes are multi-turn (none otherwise, so
        engines without multi-turn support keep working for single-turn tasks)."""
        return {"environment": self.environment} if self.environment is not None else {}

    def _step_metrics(self, batch, rewards, valid, per_func, reward_errors, counted, entropy, log_ratio,
                      finite, nonempty) -> dict:
        lengths = batch.completion_mask.sum(-1).float()
        self.num_tokens += int(batch.prompt_mask.sum() + batch.completion_mask.sum())
        metrics = {"step": self.global_step}
        metrics.update(self._reward_metrics(rewards, batch.group_ids, valid, per_func))
        term = lengths[~batch.is_truncated]
        metrics.update({
            "completions/mean_length": lengths.mean().item(),
            "completions/min_length": lengths.min().item(),
            "completions/max_length": lengths.max().item(),
            "completions/clipped_ratio": batch.is_truncated.float().mean().item(),
            "completions/mean_terminated_length": term.mean().item() if len(term) else 0.0,
            "entropy": (entropy.detach() * counted).sum().item() / max(1, int(counted.sum())),
            "learning_rate": self.optimizer.param_groups[0]["lr"],
            "num_tokens": self.num_tokens,
            "faults/reward_errors": reward_errors,
            "faults/nonfinite_logprobs": int((~finite).sum()),
            "faults/empty_completions": int((~nonempty).sum()),
            "faults/masked_samples": int((~valid).sum()),
        })
        lr_tok = log_ratio[counted]
        if lr_tok.numel():
            ratio = lr_tok.clamp(-20, 20).exp()
            metrics.update({"sampling/sampling_logp_difference/mean": lr_tok.abs().mean().item(),
                            "sampling/sampling_logp_difference/max": lr_tok.abs().max().item(),
                            "sampling/importance_sampling_ratio/min": ratio.min().item(),
                            "sampling/importance_sampling_ratio/mean": ratio.mean().item(),
                            "sampling/importance_sampling_ratio/max": ratio.max().item()})
        return metrics

    def _reward_metrics(self, rewards, group_ids, valid, per_func) -> dict:
        r_all = rewards.double().cpu().numpy()                    # numpy: a few dozen tiny reductions
        ok_all, gid = valid.cpu().numpy(), group_ids.cpu().numpy()
        r = r_all[ok_all]
        out = {"reward": float(r.mean()) if len(r) else float("nan")}
        stds, zero = [], 0
        for g in range(int(gid.max()) + 1):
            rg = r_all[(gid == g) & ok_all]
            s = float(rg.std(ddof=1)) if len(rg) > 1 else 0.0
            stds.append(s)
            zero += s == 0.0
        out["reward_std"] = float(np.mean(stds))
        out["frac_reward_zero_std"] = zero / len(stds)
        for name, vals in per_func.items():
            ok = vals[np.isfinite(vals)]
            out[f"rewards/{name}/mean"] = float(ok.mean()) if len(ok) else float("nan")
            out[f"rewards/{name}/std"] = float(ok.std(ddof=1)) if len(ok) > 1 else 0.0
        return out

    @torch.no_grad()
    def evaluate(self, examples: list[dict] | None = None) -> dict:
        """Greedy accuracy (mean reward) on held-out prompts."""
        examples = examples or self.eval_set
        self.eval_engine.sync_weights(self.model)
        greedy = SamplingConfig(max_completion_length=self.config.max_completion_length, top_k=1)
        gen = torch.Generator(self.device).manual_seed(0)
        batch = self.eval_engine.generate([e["prompt"] for e in examples], 1, greedy, gen, **self._episode_kwargs())
        columns = {k: [e[k] for e in examples] for k in examples[0] if k != "prompt"}
        rewards, _, _ = call_reward_funcs(self.reward_funcs, batch.prompts, batch.completions,
                                          batch.completion_ids.tolist(), columns)
        return {"eval/reward": float(np.nanmean(rewards))}

    # ------------------------------------------------------------------ loop
    def train(self, max_steps: int | None = None, resume: bool = False, overwrite: bool = False) -> pd.DataFrame:
        """Run until `max_steps` (default config.max_steps).  With `resume`, continue from the
        last checkpoint in output_dir.  Returns the metrics as a DataFrame.

        An output_dir that already holds another run (metrics, checkpoints) is refused unless
        `resume` continues it or `overwrite` deletes its files first: two runs never mix."""
        from tqdm.auto import tqdm

        cfg = self.config
        max_steps = max_steps or cfg.max_steps
        check_resume_overwrite(resume, overwrite, self.output_dir)   # before resume() loads anything
        if resume:
            self.resume()
        own = self._continues_output_dir     # the folder's run is this one: resume() or an earlier train() took it on
        RunFolder.begin(cfg, resume=own, overwrite=overwrite and not own, step=self.global_step)
        self._continues_output_dir = True
        bar = tqdm(total=max_steps, initial=self.global_step, desc=f"RL {cfg.task}",
                   disable=not cfg.progress_bar, leave=True)
        while self.global_step < max_steps:
            metrics = self.step()
            self.history.append(metrics)
            if self.run_folder is not None:
                self.run_folder.append_metrics(metrics)
                if cfg.save_steps and self.global_step % cfg.save_steps == 0:
                    self.save_checkpoint()
            bar.update(1)
            bar.set_postfix(reward=f"{metrics['reward']:.3f}")
        bar.close()
        if self.run_folder is not None:
            self.save_checkpoint()
            self.save_model(self.output_dir / "final")
        return self.metrics()

    def metrics(self) -> pd.DataFrame:
        return pd.DataFrame(self.history)

    # ------------------------------------------------------------------ checkpoints (rl_lab.runs)
    def save_model(self, path: str | Path) -> None:
        save_model(self.model, self.tokenizer, path)

    def save_checkpoint(self, keep: int = 2) -> Path:
        """Weights, optimizer, scheduler, RNG states and step, written atomically."""
        if self.run_folder is None:
            raise ConfigError("save_checkpoint needs RLConfig.output_dir")
        # tensors and plain containers only: resume() reads it with torch.load(weights_only=True)
        methods = {m.name: m.state_dict() for m in self.methods}
        state = {"global_step": int(self.global_step), "num_tokens": int(self.num_tokens),
                 "optimizer": self.optimizer.state_dict(),
                 "rng": self.rng.bit_generator.state, "generator": self.generator.get_state(),
                 "methods": {name: st for name, st in methods.items() if st is not None},
                 "engine": self.engine.state_dict() if hasattr(self.engine, "state_dict") else None}
        return self.run_folder.save_checkpoint(self.global_step, self.model, self.tokenizer, state, keep=keep)

    def last_checkpoint(self) -> Path | None:
        """The newest checkpoint of the run that last saved in output_dir (RunFolder.last_checkpoint)."""
        return self.run_folder.last_checkpoint() if self.run_folder is not None else None

    def resume(self, path: str | Path | None = None) -> bool:
        """Load the last (or given) checkpoint; trims metrics.jsonl to it.  False if none."""
        if self.run_folder is not None:
            self._continues_output_dir = True
            changes = self.run_folder.config_changes(self.config)
            if changes:
                log.warning("resuming %s with a config that differs from its config.yaml: %s", self.output_dir,
                            ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items()))
        path = Path(path) if path else self.last_checkpoint()
        if path is None:
            return False
        state = load_checkpoint(path, self.model, self.device)
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.bit_generator.state = state["rng"]
        self.generator.set_state(state["generator"].cpu() if self.device.type == "cpu" else state["generator"])
        for m in self.methods:   # its entry, or (an earlier checkpoint) its top-level keys
            own = state.get("methods", {}).get(m.name) or \
                {k: state[k] for k in m.spec.legacy_checkpoint_keys if state.get(k) is not None} or None
            if own is not None:
                m.load_state_dict(own)
        if state.get("engine") is not None and hasattr(self.engine, "load_state_dict"):
            self.engine.load_state_dict(state["engine"])
        self.global_step, self.num_tokens = state["global_step"], state["num_tokens"]
        if self.run_folder is not None and self.run_folder.metrics_path.exists():
            self.history = null_to_nan(self.run_folder.trim_metrics(self.global_step))
        return True


def first_last_fifth(df: pd.DataFrame, key: str = "reward") -> tuple[float, float]:
    """Mean of `key` over the first and the last fifth of the steps."""
    n = max(1, len(df) // 5)
    return float(df[key].iloc[:n].mean()), float(df[key].iloc[-n:].mean())
