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
(tests/unit/test_trloo.py checks both claims exactly on an enumerable two-turn toy, rl_lab.exact.turns).

The claim is about GRPO grouped per (prompt, turn), `grpo_per_turn_advantages` here
(`advantage_estimator="grpo_per_turn"`).  rl_lab's `grpo` is trajectory-level: one mean per
prompt over whole episodes, the same advantage on every turn, so E[(R_i - mean R) S_i] =
(1 - 1/N) grad J for any number of turns (S_i the episode's summed score): a rescaling, no turn
(tests/unit/test_grpo_per_turn.py).
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


def trajectory_self_included(G: torch.Tensor, exists: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """(B, K) -> (B, K) rl_lab's trajectory-level `grpo` mean-centring on the same table: the
    episode's return R_i = G_i0 minus its group's mean over whole episodes, the same on every
    present turn (no per-turn grouping).  Its expectation is (1 - 1/N) grad J whatever the turns."""
    n_groups = int(group_ids.max()) + 1
    R = G[:, 0]
    count = torch.zeros(n_groups, dtype=G.dtype, device=G.device).index_add_(0, group_ids, torch.ones_like(R))
    mean = torch.zeros_like(count).index_add_(0, group_ids, R) / count
    A = (R - mean[group_ids])[:, None].expand_as(G)
    return torch.where(exists, A, torch.zeros_like(A))


def turn_group_normalized(G: torch.Tensor, exists: torch.Tensor, group_ids: torch.Tensor,
                          scale_rewards: str = "group", eps: float = 1e-6) -> torch.Tensor:
    """(B, K) -> (B, K) multi-turn GRPO per (prompt, turn): `turn_self_included`'s G_ik - mean_k,
    divided by the std of the group's returns at turn k ("group": unbiased, + eps, as
    rl_lab.algos.losses.group_advantages does per prompt), by the std over every present (row, turn)
    ("batch"), or not at all ("none").  0 on absent turns and where a row is alone at its turn."""
    A = turn_self_included(G, exists, group_ids)
    e = exists.to(G.dtype)
    if scale_rewards == "group":
        n, sq = _group_turn_sums(A ** 2, exists, group_ids)                          # count, sum of squares
        A = A / ((sq / (n - 1).clamp(min=1)).sqrt() + eps)
    elif scale_rewards == "batch":
        present = A[exists]
        std = present.std() if present.numel() > 1 else torch.zeros((), dtype=A.dtype, device=A.device)
        A = A / (std + eps)
    elif scale_rewards != "none":
        raise ValueError(f"scale_rewards={scale_rewards!r}: choose 'group', 'batch' or 'none'")
    return A * e


def per_token(values: torch.Tensor, turn_ids: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor:
    """(B, K) per-turn values -> (B, T): each counted token gets its turn's value, 0 elsewhere."""
    m = mask.to(torch.bool)
    turns = torch.zeros_like(m, dtype=torch.long) if turn_ids is None else turn_ids.long().clamp(min=0)
    out = values.gather(1, turns.clamp(max=values.shape[1] - 1))
    return torch.where(m, out, torch.zeros_like(out))


def turn_table(rewards: torch.Tensor, mask: torch.Tensor, turn_ids: torch.Tensor | None, valid: torch.Tensor,
               gamma: float = 1.0, turn_rewards: torch.Tensor | None = None):
    """(B,) episode rewards (or (B, K) `turn_rewards`) -> (G (B, K) turn returns in float64,
    exists (B, K), m (B, T) the counted tokens of valid rows).  Without per-turn rewards the
    episode's reward sits on its last turn, so with gamma = 1 every turn's return is the outcome."""
    m = mask.to(torch.bool) & valid[:, None]
    exists = turns_present(m, turn_ids)                                                  # (B, K)
    if turn_rewards is None:
        r = outcome_turn_rewards(torch.where(valid, rewards, torch.zeros_like(rewards)).double(), exists)
    else:
        if turn_rewards.shape[1] < exists.shape[1]:
            raise ValueError(f"turn_rewards has {turn_rewards.shape[1]} turns but the batch has "
                             f"{exists.shape[1]}: give a reward (0 if none) for every model turn")
        r = torch.nan_to_num(turn_rewards[:, : exists.shape[1]].double())
    return turn_returns(r, exists, gamma), exists, m


@torch.no_grad()
def trloo_advantages(rewards: torch.Tensor, mask: torch.Tensor, turn_ids: torch.Tensor | None,
                     group_ids: torch.Tensor, valid: torch.Tensor, gamma: float = 1.0,
                     turn_rewards: torch.Tensor | None = None) -> torch.Tensor:
    """(B,) episode rewards (or (B, K) `turn_rewards`, where the task gives them) -> (B, T) TRLOO
    advantages on the counted tokens of valid rows (`turn_table`)."""
    G, exists, m = turn_table(rewards, mask, turn_ids, valid, gamma, turn_rewards)
    A = turn_leave_one_out(G, exists, group_ids)
    return per_token(A, turn_ids, m).to(rewards.dtype)


@torch.no_grad()
def grpo_per_turn_advantages(rewards: torch.Tensor, mask: torch.Tensor, turn_ids: torch.Tensor | None,
                             group_ids: torch.Tensor, valid: torch.Tensor, scale_rewards: str = "group",
                             gamma: float = 1.0, turn_rewards: torch.Tensor | None = None) -> torch.Tensor:
    """(B,) episode rewards (or (B, K) `turn_rewards`) -> (B, T) multi-turn GRPO advantages
    grouped per (prompt, turn) (`turn_group_normalized`) on the counted tokens of valid rows: the
    turn returns of TRLOO with a self-included mean per turn.  With one turn per row (or no turn
    ids) it is the trajectory-level `grpo` (rl_lab.algos.losses.group_advantages) on every valid row
    with a counted token."""
    G, exists, m = turn_table(rewards, mask, turn_ids, valid, gamma, turn_rewards)
    A = turn_group_normalized(G, exists, group_ids, scale_rewards)
    return per_token(A, turn_ids, m).to(rewards.dtype)


def turn_group_metrics(mask: torch.Tensor, turn_ids: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    """What makes per-turn baselines differ, for one batch of counted tokens `mask` (B, T):
    turns/varying_groups  the share of groups whose episodes do not all have the same number of
                          model turns (some n_k differs from n_0)
    turns/shrink_spread   the largest minus the smallest, over turns k, of the mean of 1 - 1/n_k
                          over the rows present at turn k: how unevenly a self-included mean per
                          (prompt, turn) shrinks the turns (0 when every n_k is equal)."""
    exists = turns_present(mask, turn_ids)                                                # (B, K)
    n, _ = _group_turn_sums(exists.double(), exists, group_ids)                          # (B, K)
    rows = exists.any(-1)
    if not rows.any():
        return {"turns/varying_groups": 0.0, "turns/shrink_spread": 0.0}
    varying = ((n > 0) & (n < n[:, :1])).any(-1)                 # (B,) the row's group: 0 < n_k < n_0 somewhere
    n_groups = int(group_ids.max()) + 1
    seen = torch.zeros(n_groups, dtype=torch.bool, device=mask.device).index_fill_(0, group_ids[rows], True)
    flag = torch.zeros(n_groups, dtype=torch.bool, device=mask.device).index_fill_(0, group_ids[rows & varying], True)
    share = flag[seen].double().mean()
    shrink = torch.where(exists, 1 - 1 / n.clamp(min=1), torch.zeros_like(n))
    per_turn = shrink.sum(0) / exists.sum(0).clamp(min=1)                                # (K,)
    present = exists.any(0)
    spread = per_turn[present].max() - per_turn[present].min()
    return {"turns/varying_groups": float(share), "turns/shrink_spread": float(spread)}


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
