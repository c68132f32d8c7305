"""Per-token advantage estimators beyond GRPO/RLOO (those are `losses.group_advantages`), with
verl 0.9.1's semantics and names; rl_lab.algos.estimators registers them by name.  Shapes: B rows,
T completion tokens; `mask` (B, T) is 1 on tokens that count; `group_ids` (B,) says which prompt
each row answers.

  reinforce_plus_plus           discounted reward-to-go, whitened over the batch
  reinforce_plus_plus_baseline  (score - group mean), whitened over the batch
  optimal_token_baseline (OTB)  a baseline per group and per position, weighted by the
                                logit-gradient proxy W_t = sum_{j<=t} ||e_{y_j} - pi_j||^2
  trloo                         turn returns with a leave-one-out baseline per group and model
                                turn (Dr. Kernel; rl_lab.algos.trloo)
  grpo_per_turn                 the same turn returns, GRPO-normalised per group and model turn
                                (a self-included mean: the baseline TRLOO replaces)

Chapter 1 (GRPO, RLOO) and chapter 9 (the optimal token baseline) explain these.
"""
from __future__ import annotations

import torch

from rl_lab.monitors import masked_mean


def outcome_token_rewards(rewards, mask):
    """(B,) sequence rewards -> (B, T) token rewards: the reward sits on the last counted token."""
    m = mask.to(rewards.dtype)
    last = (m.cumsum(-1) == m.sum(-1, keepdim=True)) & mask.bool()                     # (B, T)
    last &= last.cumsum(-1) == 1                                                       # first such position
    return torch.where(last, rewards[:, None].expand_as(m), torch.zeros_like(m))


def masked_whiten(x, mask, eps: float = 1e-8):
    """(x - mean) / sqrt(var + eps) over the masked entries, with the unbiased variance (verl)."""
    mean = masked_mean(x, mask)
    n = mask.to(x.dtype).sum()
    var = masked_mean((x - mean) ** 2, mask) * n / (n - 1).clamp(min=1)
    return (x - mean) * torch.rsqrt(var + eps)


def reward_to_go(token_rewards, mask, gamma: float = 1.0):
    """(B, T) -> (B, T) G_t = r_t + gamma G_{t+1} over counted tokens; a position with mask 0
    passes the running return through unchanged (verl 0.9.1) and reports 0."""
    m = mask.to(token_rewards.dtype)
    returns, running = torch.zeros_like(token_rewards), torch.zeros_like(token_rewards[:, 0])
    for t in reversed(range(token_rewards.shape[1])):
        new = token_rewards[:, t] + gamma * running
        returns[:, t] = new * m[:, t]
        running = new * m[:, t] + running * (1 - m[:, t])
    return returns


@torch.no_grad()
def reinforce_plus_plus(token_rewards, mask, gamma: float = 1.0):
    """REINFORCE++ (Hu 2025): A = whiten_batch(G_t) on counted tokens.  -> (A, G), both (B, T)."""
    returns = reward_to_go(token_rewards, mask, gamma)
    return masked_whiten(returns, mask) * mask, returns


@torch.no_grad()
def reinforce_plus_plus_baseline(token_rewards, mask, group_ids):
    """REINFORCE++ with a group baseline: (s_i - mean_g s), broadcast to the tokens and
    whitened over the batch (a one-member group uses baseline 0).  -> (A, A)."""
    scores = token_rewards.sum(-1)                                                     # (B,)
    G = int(group_ids.max()) + 1
    count = torch.zeros(G, dtype=scores.dtype, device=scores.device).index_add_(0, group_ids, torch.ones_like(scores))
    mean = torch.zeros(G, dtype=scores.dtype, device=scores.device).index_add_(0, group_ids, scores) / count
    mean = torch.where(count > 1, mean, torch.zeros_like(mean))
    adv = (scores - mean[group_ids])[:, None] * mask                                   # (B, T)
    adv = masked_whiten(adv, mask) * mask
    return adv, adv


def sum_pi_squared(logp_all):
    """(..., V) log-probabilities -> (...) sum_v pi_v^2, the collision probability."""
    return torch.exp(torch.logsumexp(2 * logp_all, dim=-1))


@torch.no_grad()
def optimal_token_baseline(token_rewards, mask, group_ids, old_logp, sum_pi_sq, is_weights=None,
                           handle_zero_tail: bool = True, eps: float = 1e-8):
    """Optimal token baseline (verl PR #4678).  All inputs (B, T) except group_ids (B,).

    w_t = ||e_{y_t} - pi_t||^2 = 1 - 2 pi(y_t) + sum_v pi_v^2 is the squared norm of the
    gradient of log pi(y_t) with respect to the logits; W_t = sum_{j<=t} w_j (times rho_j^2
    under IS).  Per group and position, B_t = sum_i G_it W_it / sum_i W_it, and A = G - B.
    A one-member group has B = 0.  handle_zero_tail: the unique longest member's baseline is
    0 past the second-longest length (where it would be its own return).  -> (A, G).
    """
    m = mask.to(token_rewards.dtype)
    returns = (token_rewards * m).flip(-1).cumsum(-1).flip(-1)                          # (B, T)
    w = 1 - 2 * old_logp.exp() + sum_pi_sq                                             # (B, T)
    if is_weights is not None:
        w = w * is_weights ** 2
    W = (w * m).cumsum(-1)                                                             # (B, T)
    baseline = torch.zeros_like(returns)
    for g in torch.unique(group_ids):
        rows = (group_ids == g).nonzero().squeeze(-1)
        if len(rows) == 1:
            continue
        num = (returns[rows] * W[rows] * m[rows]).sum(0)                               # (T,)
        den = (W[rows] * m[rows]).sum(0) + eps
        baseline[rows] = num / den
        lengths = m[rows].sum(-1)
        top2 = lengths.sort().values[-2:]
        longest = (lengths == top2[1]).nonzero().squeeze(-1)
        if handle_zero_tail and len(longest) == 1 and top2[1] > top2[0]:
            baseline[rows[longest[0]], int(top2[0]):] = 0.0
    return (returns - baseline) * m, returns
