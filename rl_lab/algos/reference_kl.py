"""The KL penalty to a frozen reference policy (RLConfig.beta > 0; TRL's `beta`, verl's
`use_kl_loss` with the k3 estimator): beta x k3(pi_theta, pi_ref) per token, added to the loss."""
from __future__ import annotations

import copy

import torch

from rl_lab.algos.losses import kl_k3, sequence_logprobs
from rl_lab.algos.method import Method, RunContext, StepState, masked_token_mean


class ReferenceKL(Method):
    name = "reference_kl"

    def setup(self, run: RunContext) -> None:
        """The reference is the policy's weights when the Trainer is built."""
        self.ref_model = copy.deepcopy(run.model).requires_grad_(False).eval()

    def state_dict(self) -> dict:
        return {"ref_model": self.ref_model.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.ref_model.load_state_dict(state["ref_model"])

    def prepare(self, s: StepState) -> None:
        cfg, b = self.config, s.batch
        with torch.no_grad():
            s.extra["ref_logp"] = sequence_logprobs(self.ref_model, b.prompt_ids, b.prompt_mask, b.completion_ids,
                                                    cfg.temperature, share_prefix=cfg.share_prefix,
                                                    **s.run.forward_for(b))              # (B, T)

    def token_loss(self, s: StepState):
        ref = s.extra["ref_logp"]
        kl = kl_k3(s.logp_safe, torch.where(s.mask, ref, torch.zeros_like(ref)))         # (B, T)
        s.extra["kl"] = masked_token_mean(kl, s.loss_mask)
        return self.config.beta * kl

    def metrics(self, s: StepState) -> dict:
        return {"kl": s.extra.get("kl", float("nan"))}   # NaN: no update this step (a skipped step)
