"""The losses of GRPO / REINFORCE and what they are built from, on one screen: group advantages,
the trainer's per-token log-probs, the per-token policy loss, its aggregation and the k3 KL
estimate.  Shapes: B rows (prompts x generations), T completion tokens, V vocabulary.  Masks are
1 on tokens that count.

Deviations from the GRPO paper (as in TRL and verl today): no KL term unless beta > 0, and
the loss aggregation is a choice (`loss_agg_mode`) rather than the paper's per-sequence mean.

Chapter 1 (book/ch01_rl_on_one_page.md) derives every function here.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rl_lab.engines.scoring import forward_logits, score_logits
from rl_lab.monitors import masked_mean


def group_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, valid: torch.Tensor | None = None,
                     estimator: str = "grpo", scale_rewards: str = "group", eps: float = 1e-6) -> torch.Tensor:
    """(B,) sequence rewards -> (B,) advantages, using only `valid` rows for the statistics.

    grpo: A_i = r_i - mean_g(r), divided by std_g(r) + eps ("group"), by the batch std
          ("batch") or not at all ("none", Dr. GRPO).  std is unbiased, as in TRL and verl;
          eps = 1e-6 is verl's (compute_grpo_outcome_advantage; TRL adds 1e-4).
    rloo: A_i = r_i - mean_{j in g, j != i} r_j (leave-one-out baseline, no scaling).
    Invalid rows (and groups with fewer than two valid rows) get advantage 0.
    """
    valid = torch.isfinite(rewards) if valid is None else valid & torch.isfinite(rewards)
    r = torch.where(valid, rewards, torch.zeros_like(rewards)).double()            # (B,)
    v = valid.double()
    G = int(group_ids.max()) + 1
    count = torch.zeros(G, dtype=r.dtype, device=r.device).index_add_(0, group_ids, v)      # (G,)
    total = torch.zeros_like(count).index_add_(0, group_ids, r)                             # (G,)
    mean = total / count.clamp(min=1)                                                        # (G,)
    if estimator == "rloo":
        n = count[group_ids]
        adv = (r - (total[group_ids] - r) / (n - 1).clamp(min=1)) * (n > 1)
        return (adv * v).to(rewards.dtype)
    if estimator != "grpo":
        raise ValueError(f"advantage estimator {estimator!r}: choose 'grpo' or 'rloo'")
    adv = r - mean[group_ids]                                                                # (B,)
    if scale_rewards == "group":
        sq = torch.zeros_like(count).index_add_(0, group_ids, (adv ** 2) * v)
        std = (sq / (count - 1).clamp(min=1)).sqrt()
        adv = adv / (std[group_ids] + eps)
    elif scale_rewards == "batch":
        std = adv[valid].std() if int(valid.sum()) > 1 else torch.zeros((), dtype=adv.dtype, device=adv.device)
        adv = adv / (std + eps)
    elif scale_rewards != "none":
        raise ValueError(f"scale_rewards={scale_rewards!r}: choose 'group', 'batch' or 'none'")
    adv = adv * v * (count[group_ids] > 1)
    return adv.to(rewards.dtype)


@dataclass
class LogProbs:
    """What one forward of the policy over a batch gives (`token_logprobs`); a field not asked for is None."""
    logp: torch.Tensor                        # (B, T) log pi(y_t | x, y_<t)
    entropy: torch.Tensor | None = None       # (B, T) entropy of pi_t, no gradient (a metric)
    logp_all: torch.Tensor | None = None      # (B, T, V) log pi(. | x, y_<t), the whole distributions


def token_logprobs(model, prompt_ids, prompt_mask, completion_ids, temperature: float = 1.0, *,
                   with_entropy: bool = False, with_all: bool = False, dvp_min_p: float = 0.0,
                   share_prefix: bool = True, forward_context=None, sampling_mask=None) -> LogProbs:
    """The trainer's log pi(y_t | x, y_<t) for each completion token, and, if asked, the entropy and
    the full log-distributions (a LogProbs).

    A forward over prompt + completion with the same position ids the sampler used (left
    padding), each distinct prompt computed once (`rl_lab.engines.shared_prefix`; `share_prefix=False`:
    one plain forward over every row), logits divided by the sampling temperature as TRL does.  With
    `dvp_min_p` the distribution is restricted to the safe vocabulary p >= dvp_min_p * p_max
    (Dynamic Vocabulary Pruning; a token outside it gets log pi = -inf).  `forward_context` and
    `sampling_mask` come from a mismatch source's fix (rl_lab.engines.scoring, which the exact-zero
    sampler calls too).
    """
    logits = forward_logits(model, prompt_ids, prompt_mask, completion_ids, share_prefix, forward_context)  # (B, T, V)
    logp_all = score_logits(logits, temperature, dvp_min_p, sampling_mask)             # (B, T, V)
    logp = logp_all.gather(-1, completion_ids[..., None]).squeeze(-1)                 # (B, T)
    entropy = None
    if with_entropy:  # a metric, so no gradient: its (B, T, V) intermediates are freed at once
        with torch.no_grad():
            entropy = torch.special.entr(logp_all.exp()).sum(-1)                       # (B, T)
    return LogProbs(logp, entropy, logp_all if with_all else None)


def sequence_logprobs(model, prompt_ids, prompt_mask, completion_ids, temperature: float = 1.0,
                      dvp_min_p: float = 0.0, share_prefix: bool = True, **options) -> torch.Tensor:
    """(B, T) log pi(y_t | x, y_<t) alone: `token_logprobs(...).logp` (options: forward_context,
    sampling_mask)."""
    return token_logprobs(model, prompt_ids, prompt_mask, completion_ids, temperature, dvp_min_p=dvp_min_p,
                          share_prefix=share_prefix, **options).logp


def policy_loss(logp, old_logp, advantages, mask, loss: str = "ppo_clip", epsilon: float = 0.2,
                epsilon_high: float | None = None, is_weights=None, clip_ratio_c: float | None = None):
    """Per-token policy-gradient loss (B, T) and diagnostics.

    reinforce: -A * log pi                (gradient -A * grad log pi)
    ppo_clip:  -min(r A, clip(r, 1-eps, 1+eps_high) A),  r = pi / pi_old (log r clamped at +-20)
               with clip_ratio_c = c (dual clip): for A < 0 the loss is at most -c A
    On-policy with one iteration, old_logp == logp.detach(), r == 1 and both have the same
    gradient.  `advantages` is (B,) or per token (B, T).  `is_weights` (B, T), detached,
    multiply every token's loss (the correction hook).
    """
    A = advantages[:, None] if advantages.dim() == 1 else advantages                  # (B, 1) or (B, T)
    log_ratio = logp - old_logp                                                        # (B, T)
    clipped = dual = torch.zeros_like(logp, dtype=torch.bool)
    if loss == "reinforce":
        per_token = -A * logp
    elif loss == "ppo_clip":
        log_ratio = log_ratio.clamp(-20, 20)
        ratio = torch.exp(log_ratio)                                                   # (B, T)
        hi = epsilon if epsilon_high is None else epsilon_high
        unclipped_obj, clipped_obj = ratio * A, ratio.clamp(1 - epsilon, 1 + hi) * A
        per_token = -torch.minimum(unclipped_obj, clipped_obj)
        clipped = clipped_obj < unclipped_obj
        if clip_ratio_c is not None:  # dual clip: a negative advantage cannot push r past c
            dual = (A < 0) & (per_token > -A * clip_ratio_c)
            per_token = torch.where(dual, -A * clip_ratio_c, per_token)
    else:
        raise ValueError(f"policy loss {loss!r}: choose 'reinforce' or 'ppo_clip'")
    if is_weights is not None:
        per_token = per_token * is_weights
    clip_frac = masked_mean(clipped.to(logp.dtype), mask).item()
    return per_token, {"clip_ratio/region_mean": clip_frac, "actor/pg_clipfrac": clip_frac,
                       "actor/pg_clipfrac_lower": masked_mean(dual.to(logp.dtype), mask).item(),
                       "actor/ppo_kl": masked_mean(-log_ratio.detach(), mask).item()}


def aggregate_loss(loss_mat, mask, mode: str = "token-mean", norm_length: int | None = None):
    """(B, T) per-token loss -> scalar, with verl's `loss_agg_mode` names.

    token-mean              sum(L m) / sum(m)                      (TRL "dapo")
    token-sum               sum(L m)
    seq-mean-token-mean     mean_i [ sum_t L m / sum_t m ]         (TRL "grpo", the paper)
    seq-mean-token-sum      mean_i [ sum_t L m ]
    seq-mean-token-sum-norm sum(L m) / (B * norm_length)           (TRL "dr_grpo"; default T)
    Rows with no valid token are left out of the seq-mean denominators.
    """
    m = mask.to(loss_mat.dtype)
    loss_mat = torch.where(mask.bool(), loss_mat, torch.zeros_like(loss_mat))  # padding never counts
    rows = (m.sum(-1) > 0).to(m.dtype)                                                 # (B,)
    if mode == "token-mean":
        return (loss_mat * m).sum() / m.sum().clamp(min=1)
    if mode == "token-sum":
        return (loss_mat * m).sum()
    if mode == "seq-mean-token-mean":
        per_seq = (loss_mat * m).sum(-1) / (m.sum(-1) + 1e-8)                          # as verl
        return per_seq.sum() / rows.sum().clamp(min=1)
    if mode == "seq-mean-token-sum":
        return (loss_mat * m).sum() / rows.sum().clamp(min=1)
    if mode == "seq-mean-token-sum-norm":
        L = norm_length if norm_length is not None else loss_mat.shape[-1]
        return (loss_mat * m).sum() / (rows.sum().clamp(min=1) * L)
    raise ValueError(f"loss_agg_mode={mode!r} is unknown; choose token-mean, token-sum, "
                     "seq-mean-token-mean, seq-mean-token-sum or seq-mean-token-sum-norm")


def kl_k3(logp, ref_logp):
    """Per-token k3 estimate of KL(pi || pi_ref) on samples from pi: e^d - d - 1, d = ref - pi.
    Unbiased, always >= 0, low variance (Schulman's approximation note)."""
    d = (ref_logp - logp).clamp(-20, 20)
    return torch.exp(d) - d - 1
