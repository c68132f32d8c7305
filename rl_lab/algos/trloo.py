"""TRLOO, turn-level REINFORCE leave-one-out (Dr. Kernel: Liu, Xu, Li, Zheng, Li, Liu, He; arXiv
2602.05885; verl fork github.com/hkust-nlp/KernelGYM, `compute_multi_turn_rloo_outcome_advantage`).
Shapes: B rows (episodes), K model turns, T tokens; `exists` (B, K) marks the turns a row has;
`turn_ids` (B, T) the model turn of each token (rl_lab.engines.rollout.RolloutBatch.turn_ids).

What the source claims (abstract and code; the paper's tables were not read here): in multi-turn
GRPO the group-mean baseline includes the sample itself, which shrinks each turn's expected update
by (1 - 1/n_k), n_k the number of the group's episodes that reached turn k; since n_k differs
across turns and prompts, the shrinkage reweights turns unevenly and biases the update's
direction.  TRLOO's baseline leaves the sample out:

  G_{i,k} = sum_{k' >= k} gamma^(k'-k) r_{i,k'}                      the turn return
  A_{i,k} = G_{i,k} - mean_{j != i, j reached turn k} G_{j,k}         (A = G when n_k = 1)

broadcast to every token of turn k.  The others' returns do not depend on sample i's action at
turn k, so the baseline adds no bias and the expected update is the policy gradient
(tests/test_trloo.py checks both claims exactly on an enumerable two-turn toy, rl_lab.exact.turns).
"""
from __future__ import annotations

import torch


def turns_present(mask: torch.Tensor, turn_ids: torch.Tensor | None) -> torch.Tensor:
    """(B, T) counted tokens and turn ids -> (B, K) bool: the turns in which the row has a counted
    token (no turn ids: one turn, present where the row has any)."""
    m = mask.to(torch.bool)
    if turn_ids is None:
        return m.any(-1, keepdim=True)
    K = int(turn_ids[m].max()) + 1 if m.any() else 1
    return ((turn_ids[..., None] == torch.arange(K, device=turn_ids.device)) & m[..., None]).any(1)


def outcome_turn_rewards(rewards: torch.Tensor, exists: torch.Tensor) -> torch.Tensor:
    """(B,) episode rewards -> (B, K) per-turn rewards: the reward on each row's last present turn."""
    k = torch.arange(exists.shape[1], device=exists.device)
    last = torch.where(exists, k, torch.full_like(k, -1)).max(-1).values                  # (B,)
    out = torch.zeros(exists.shape, dtype=rewards.dtype, device=rewards.device)
    rows = last >= 0
    out[rows.nonzero().squeeze(-1), last[rows]] = rewards[rows]
    return out


def turn_returns(turn_rewards: torch.Tensor, exists: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """(B, K) per-turn rewards -> (B, K) G_k = sum_{k' >= k} gamma^(k'-k) r_k' over present turns
    (0 on absent turns)."""
    r = torch.where(exists, turn_rewards, torch.zeros_like(turn_rewards))
    G, running = torch.zeros_like(r), torch.zeros_like(r[:, 0])
    for k in reversed(range(r.shape[1])):
        running = r[:, k] + gamma * running
        G[:, k] = running
    return torch.where(exists, G, torch.zeros_like(G))


def _group_turn_sums(G: torch.Tensor, exists: torch.Tensor, group_ids: torch.Tensor):
    """(B, K) -> (count (B, K), total (B, K)): per row, the number of its group's rows present at
    each turn and the sum of their returns."""
    n_groups = int(group_ids.max()) + 1
    e = exists.to(G.dtype)
    count = torch.zeros(n_groups, G.shape[1], dtype=G.dtype, device=G.device).index_add_(0, group_ids, e)
    total = torch.zeros_like(count).index_add_(0, group_ids, G * e)
    return count[group_ids], total[group_ids]


def turn_leave_one_out(G: torch.Tensor, exists: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """(B, K) turn returns -> (B, K) TRLOO advantages G_ik - mean_{j != i} G_jk over the rows of the
    same group present at turn k; A = G where the row is alone at that turn; 0 on absent turns."""
    n, total = _group_turn_sums(G, exists, group_ids)
    loo = (total - G) / (n - 1).clamp(min=1)
    A = torch.where(n > 1, G - loo, G)
    return torch.where(exists, A, torch.zeros_like(A))


def turn_self_included(G: torch.Tensor, exists: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """(B, K) -> (B, K) multi-turn GRPO's mean-centred advantage G_ik - mean_j G_jk, the mean over
    the group's rows present at turn k *including* row i (no std scaling): the biased baseline
    TRLOO replaces."""
    n, total = _group_turn_sums(G, exists, group_ids)
    A = G - total / n.clamp(min=1)
    return torch.where(exists, A, torch.zeros_like(A))


def per_token(values: torch.Tensor, turn_ids: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor:
    """(B, K) per-turn values -> (B, T): each counted token gets its turn's value, 0 elsewhere."""
    m = mask.to(torch.bool)
    turns = torch.zeros_like(m, dtype=torch.long) if turn_ids is None else turn_ids.long().clamp(min=0)
    out = values.gather(1, turns.clamp(max=values.shape[1] - 1))
    return torch.where(m, out, torch.zeros_like(out))


@torch.no_grad()
def trloo_advantages(rewards: torch.Tensor, mask: torch.Tensor, turn_ids: torch.Tensor | None,
                     group_ids: torch.Tensor, valid: torch.Tensor, gamma: float = 1.0,
                     turn_rewards: torch.Tensor | None = None) -> torch.Tensor:
    """(B,) episode rewards (or (B, K) `turn_rewards`, where the task gives them) -> (B, T) TRLOO
    advantages on the counted tokens of valid rows.  Without per-turn rewards the episode's reward
    sits on its last turn, so with gamma = 1 every turn's return is the outcome."""
    m = mask.to(torch.bool) & valid[:, None]
    exists = turns_present(m, turn_ids)                                                  # (B, K)
    if turn_rewards is None:
        r = outcome_turn_rewards(torch.where(valid, rewards, torch.zeros_like(rewards)).double(), exists)
    else:
        if turn_rewards.shape[1] < exists.shape[1]:
            raise ValueError(f"turn_rewards has {turn_rewards.shape[1]} turns but the batch has "
                             f"{exists.shape[1]}: give a reward (0 if none) for every model turn")
        r = torch.nan_to_num(turn_rewards[:, : exists.shape[1]].double())
    G = turn_returns(r, exists, gamma)
    A = turn_leave_one_out(G, exists, group_ids)
    return per_token(A, turn_ids, m).to(rewards.dtype)


def task_turn_rewards(task, reward_funcs, batch, rows: list[dict], device=None):
    """(B, K) per-turn rewards when the task is the only reward and gives them
    (`task.turn_rewards(completion, example)`), else None (the outcome then sits on the last turn).
    A row's last reward (the answer's) sits on its last turn, the others on its turns from the
    first on; a list longer than the row's turns adds its surplus to the last turn."""
    if batch.turn_ids is None or list(reward_funcs) != [task] or not hasattr(task, "turn_rewards"):
        return None
    turns = (batch.turn_ids.max(-1).values + 1).clamp(min=1).tolist()                  # (B,) turns per row
    out = torch.zeros(len(rows), max(turns), dtype=torch.float64)
    for i, (completion, example) in enumerate(zip(batch.completions, rows)):
        *head, last = [float(x) for x in task.turn_rewards(completion, example)] or [0.0]
        out[i, turns[i] - 1] += last
        for k, r in enumerate(head):
            out[i, min(k, turns[i] - 1)] += r
    return out.to(device) if device is not None else out
