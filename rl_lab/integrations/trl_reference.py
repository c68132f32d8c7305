"""TRL 1.16's own importance-sampling code, run on inputs of your choosing (the TRL conformance
suite, tests/integration/test_trl_conformance.py, and chapter 13's side-by-side cell).

TRL computes its vLLM importance-sampling ratio inline, in GRPOTrainer._generate_and_score_completions,
and applies it in GRPOTrainer._compute_loss; there is no function to call.  `TrlCorrectionProbe`
drives the smallest piece that runs that code:
  * a GRPOTrainer on rl_lab's 0.3M Qwen2 and character tokenizer, built in memory (no download);
  * a `rollout_func` (TRL's hook for a custom generator) that returns fixed completions, rewards and
    the sampler's log-probs -- the stand-in for what vLLM would return;
  * use_vllm and vllm_importance_sampling_{correction,mode,clip_max,clip_min} set on the trainer
    after it is built (TRL computes the ratio only when it samples with vLLM, which a CPU lacks).
One call of _generate_and_score_completions then computes TRL's old log-probs with the model's own
forward, the ratio exp(old - sampling) per token or per sequence, its truncation or mask, and the
logged sampling/* metrics; _compute_loss gives TRL's loss on that batch.  The sampler's log-probs
are chosen as old - log_ratio, so the caller sets the log-ratios.

Imports TRL (about 12 s) when a probe is built.
"""
from __future__ import annotations

import os
import tempfile
import warnings

import torch


class TrlCorrectionProbe:
    """A GRPOTrainer whose generation returns fixed completions: `run(log_ratio, mode, ...)` gives
    TRL's importance-sampling ratio, advantages, loss and sampling/* metrics for them."""

    def __init__(self, lengths: list[int], rewards: list[float], num_generations: int, seed: int = 0,
                 loss_type: str = "dapo"):
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")     # rollout_func is marked experimental
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer

        from rl_lab.models import build_model
        if len(lengths) != len(rewards) or len(lengths) % num_generations:
            raise ValueError("lengths and rewards need one entry per completion, a multiple of num_generations")
        self.model, self.tokenizer = build_model("0.3M", seed=seed)
        g = torch.Generator().manual_seed(seed)
        self.completions = [torch.randint(4, 14, (n,), generator=g).tolist() for n in lengths]   # digits
        self.rewards, self.sampling = list(rewards), None
        self.T = max(lengths)
        self._tmp = tempfile.TemporaryDirectory(prefix="trl_probe_")
        args = GRPOConfig(output_dir=self._tmp.name, use_cpu=True, bf16=False, gradient_checkpointing=False,
                          per_device_train_batch_size=len(lengths), num_generations=num_generations,
                          max_completion_length=self.T, loss_type=loss_type, beta=0.0, report_to="none",
                          save_strategy="no", disable_tqdm=True, max_steps=1, use_vllm=False, seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.trainer = GRPOTrainer(model=self.model, reward_funcs=[_given_reward], args=args,
                                       train_dataset=Dataset.from_list([{"prompt": "1+1="}] * len(lengths)),
                                       processing_class=self.tokenizer, rollout_func=self._rollout)
        self.trainer.use_vllm = True                        # what a vLLM run sets; generation stays ours
        self.trainer._last_loaded_step = self.trainer.state.global_step   # no vLLM weight sync to do
        self.trainer.current_gradient_accumulation_steps = 1
        self.prompts = [{"prompt": f"{10 + i}+{20 + i}="} for i in range(len(lengths))]

    def _rollout(self, prompts, trainer):
        """TRL's rollout_func: prompt and completion ids, the sampler's log-probs, and the rewards
        (an extra column, passed to the reward function)."""
        ids = [self.tokenizer(p)["input_ids"] for p in prompts]
        logps = [[0.0] * len(c) if self.sampling is None else self.sampling[i][:len(c)]
                 for i, c in enumerate(self.completions)]
        return {"prompt_ids": ids, "completion_ids": self.completions, "logprobs": logps,
                "given_reward": self.rewards}

    def _score(self) -> dict:
        self.trainer._metrics["train"].clear()
        return self.trainer._generate_and_score_completions(self.prompts)

    def old_logprobs(self) -> torch.Tensor:
        """(B, T) the trainer's log-probs of the completions (TRL's old_per_token_logps)."""
        t = self.trainer
        t.vllm_importance_sampling_correction, self.sampling = True, None
        t.vllm_importance_sampling_mode, t.vllm_importance_sampling_clip_max = "token_truncate", 3.0
        t.vllm_importance_sampling_clip_min = None
        return self._score()["old_per_token_logps"]

    def run(self, log_ratio: torch.Tensor, mode: str = "sequence_mask", clip_max: float | None = 3.0,
            clip_min: float | None = None) -> dict:
        """TRL on the completions with sampler log-probs old - log_ratio ((B, T); padding ignored).
        Returns old, sampling, mask (B, T), ratio ((B, T) token modes, (B, 1) sequence modes),
        advantages (B,), loss (TRL's, a float) and metrics (the sampling/* values TRL logged)."""
        old = self.old_logprobs()
        self.sampling = (old - log_ratio.to(old.dtype)).tolist()
        t = self.trainer
        t.vllm_importance_sampling_mode = mode
        t.vllm_importance_sampling_clip_max, t.vllm_importance_sampling_clip_min = clip_max, clip_min
        out = self._score()
        metrics = {k: v[-1] for k, v in t._metrics["train"].items() if k.startswith("sampling/")}
        with torch.no_grad():
            loss = t._compute_loss(t.model, out).item()
        return {"old": out["old_per_token_logps"], "sampling": out["sampling_per_token_logps"],
                "mask": out["completion_mask"], "ratio": out["importance_sampling_ratio"],
                "advantages": out["advantages"], "loss": loss, "metrics": metrics}


def _given_reward(completions, given_reward, **kwargs):
    """The rewards the probe's rollout_func returned, in order."""
    return list(given_reward)
