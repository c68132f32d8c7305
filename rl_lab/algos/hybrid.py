"""Hybrid online RL and imitation (Li, Li, Liu, "A Note on Hybrid Online Reinforcement and Imitation
Learning for LLMs: Formulations and Algorithms", arXiv 2512.23097).  Shapes: B rows, T tokens, V
vocabulary; `mask` (B, T) is 1 on the tokens that count.

What the source claims (abstract and introduction only; the body was not available): one objective
mixes online imitation (a KL to a teacher, on the student's own samples) with the task reward,
J = E[R] - beta KL(pi || pi_T), and its gradient splits into a *dense* part, the exact per-state
gradient of KL(pi(.|s_t) || pi_T(.|s_t)) at every visited prefix, computed over the whole
vocabulary, and a *sparse* Monte Carlo part for the reward and the future KL.  The dense part's
gradient with respect to the logits z has the closed form

    d KL(softmax(z) || q) / d z_j = pi_j (log pi_j - log q_j - KL).

What this module computes (and the trainer uses, RLConfig.teacher_kl / imitation):
  reverse_kl             (B, T) KL(pi(.|s_t) || q(.|s_t)) exactly over the vocabulary: its autograd
                         gradient is the dense gradient (the sparse future-KL term is not added
                         to the reward here)
  kl_logit_gradient      the closed form above, (B, T, V)
  imitation_nll          the mean negative log-likelihood of demonstration tokens (offline
                         imitation: the warm start's SFT loss on the step's prompts)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from rl_lab.demonstrations import sft_batch


def reverse_kl(logp_all: torch.Tensor, teacher_logp_all: torch.Tensor) -> torch.Tensor:
    """(B, T, V) log pi and log q -> (B, T) KL(pi || q) = sum_j pi_j (log pi_j - log q_j).  Tokens
    pi gives no mass contribute 0 (also where q is 0 there)."""
    p = logp_all.exp()
    diff = torch.where(p > 0, logp_all - teacher_logp_all, torch.zeros_like(p))
    return (p * diff).sum(-1)


def kl_logit_gradient(logits: torch.Tensor, teacher_logp_all: torch.Tensor) -> torch.Tensor:
    """(..., V) logits z and log q -> (..., V) the gradient of KL(softmax(z) || q) with respect to z,
    pi_j (log pi_j - log q_j - KL): zero-sum over j, zero where pi = q."""
    logp = F.log_softmax(logits, -1)
    kl = reverse_kl(logp, teacher_logp_all)[..., None]
    return logp.exp() * (logp - teacher_logp_all - kl)


def imitation_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(B, L, V) logits of prompt + demonstration, (B, L) labels (-100 where nothing is imitated:
    the prompt, a tool's output, padding) -> scalar mean -log pi of the next labelled token."""
    if not (labels[:, 1:] != -100).any():
        raise ValueError("imitation_nll: no demonstration token has a label (all -100); "
                         "check the demonstrations' labels")
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)


# ----------------------------------------------------------------------------- the trainer's plug-ins
from rl_lab.algos.method import Method, StepState, masked_token_mean  # noqa: E402


class TeacherKL(Method):
    """RLConfig.teacher_kl (TeacherKLConfig): add coef x KL(pi || teacher) per token, exactly over the
    vocabulary (the dense gradient), on the model's own tokens.  The teacher (TeacherKLConfig.model)
    is loaded once and must share the policy's tokenizer."""
    name = "teacher_kl"
    needs_full_logprobs = True

    def setup(self, run) -> None:
        from rl_lab.errors import ConfigError
        from rl_lab.models import resolve_model
        cfg = self.config
        teacher, teacher_tok = resolve_model(cfg.teacher_kl.model, cfg.task, seed=cfg.seed)
        if teacher_tok.get_vocab() != run.tokenizer.get_vocab():
            raise ConfigError(f"teacher_kl.model={cfg.teacher_kl.model!r} has another tokenizer than the policy: "
                              "a per-token KL needs one vocabulary; choose a teacher trained with the same tokenizer")
        self.teacher = teacher.to(run.device).requires_grad_(False).eval()

    @torch.no_grad()
    def prepare(self, s: StepState) -> None:
        from rl_lab.algos.losses import token_logprobs
        cfg, b = self.config, s.batch
        s.extra["teacher_logp_all"] = token_logprobs(self.teacher, b.prompt_ids, b.prompt_mask, b.completion_ids,
                                                     cfg.temperature, with_all=True,
                                                     share_prefix=cfg.share_prefix).logp_all     # (B, T, V)

    def token_loss(self, s: StepState):
        teacher_kl = reverse_kl(s.logp_all, s.extra["teacher_logp_all"])                 # (B, T)
        s.extra["teacher_kl"] = masked_token_mean(teacher_kl, s.loss_mask)
        return self.config.teacher_kl.coef * teacher_kl

    def metrics(self, s: StepState) -> dict:
        return {"teacher_kl": s.extra.get("teacher_kl", float("nan"))}   # NaN: no update this step


class Imitation(Method):
    """RLConfig.imitation (ImitationConfig): add coef x the mean NLL of the task's demonstrations for the step's
    prompts, in the warm start's SFT format (offline imitation beside the RL loss)."""
    name = "imitation"

    def prepare(self, s: StepState) -> None:
        t = s.run
        s.extra["demos"] = tuple(x.to(t.device) for x in sft_batch(t.tokenizer, t.task, s.examples))

    def batch_loss(self, s: StepState):
        input_ids, attention_mask, labels = s.extra["demos"]
        nll = imitation_nll(s.run.model(input_ids=input_ids, attention_mask=attention_mask).logits, labels)
        s.extra["il/nll"] = nll.item()
        return self.config.imitation.coef * nll

    def metrics(self, s: StepState) -> dict:
        return {"il/nll": s.extra.get("il/nll", float("nan"))}
