"""Steps whose groups all have equal rewards: skip them, or filter such groups and draw more.

Shapes: B rows (episodes), G groups (prompts), n rows per group; `group_ids` (B,) says which
prompt each row answers.

A group whose rewards are all equal (all 0 on a task the policy has lost, all 1 on one it has
mastered) gives every one of its rows the advantage 0 under GRPO: it teaches nothing.  When
every group of a step is like that, the policy gradient is exactly 0, and still AdamW moves the
weights: its update m_t / (sqrt(v_t) + eps) decays with beta1 = 0.9 per step but is not 0 (about
lr x sign(g) at first where |g| >> eps, smaller where |g| is near eps = 1e-8).
Chapter 12 ("The zero-gradient collapse") finds tool calls vanishing on such steps.  Two remedies
the field uses:

  skip_zero_spread_steps   skip the optimizer step when no group has reward spread: the weights
                           and AdamW's moments stay exactly as they were.  The decision reads
                           the rewards only, so the step's other gradients (a KL to the
                           reference or a teacher, imitation, EMPG's reward-free bonus) are
                           discarded with it (tests/unit/test_zero_spread.py)
  filter_groups            DAPO's dynamic sampling (Yu et al. 2025; verl `algorithm.filter_groups`):
                           drop the zero-spread groups and train on groups with spread only,
                           drawing up to `filter_groups.max_num_gen_batches` x prompts_per_step prompts to find
                           prompts_per_step of them

rl_lab draws the extra prompts in one rollout, then keeps the first prompts_per_step groups with
spread in order.  verl draws batch after batch and stops once enough groups are kept; the kept
groups are the same in distribution, the cost is not (rl_lab always pays for every batch).  When
fewer groups have spread, verl raises an error; rl_lab trains on those it found and skips the
step when there are none (`filter/groups_kept` says how many).
"""
from __future__ import annotations

import torch

from rl_lab.algos.method import Method, StepState


def group_spread(rewards: torch.Tensor, group_ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """(B,) rewards, (B,) group ids, (B,) bool rows that count -> (G,) max - min reward of each
    group over its counted rows (0 for a group with fewer than two counted rows)."""
    G = int(group_ids.max()) + 1 if len(group_ids) else 0
    r = rewards.double()
    hi = torch.full((G,), float("-inf"), dtype=r.dtype, device=r.device)
    lo = torch.full((G,), float("inf"), dtype=r.dtype, device=r.device)
    hi = hi.scatter_reduce(0, group_ids[rows], r[rows], "amax")
    lo = lo.scatter_reduce(0, group_ids[rows], r[rows], "amin")
    spread = hi - lo
    return torch.where(torch.isfinite(spread), spread, torch.zeros_like(spread))


def keep_spread_groups(rewards: torch.Tensor, group_ids: torch.Tensor, rows: torch.Tensor,
                       max_groups: int) -> tuple[torch.Tensor, int]:
    """(B,) rows that may train -> ((B,) rows kept, number of groups kept): the rows of the first
    `max_groups` groups (in group order) whose rewards differ."""
    spread = group_spread(rewards, group_ids, rows)                                    # (G,)
    has = spread > 0
    keep = has & (has.cumsum(0) <= max_groups)                                         # (G,)
    return rows & keep[group_ids], int(keep.sum())


class ZeroSpreadSkip(Method):
    """RLConfig.skip_zero_spread_steps: no optimizer step when every group's rewards are equal."""
    name = "skip_zero_spread"

    def skip_update(self, s: StepState) -> bool:
        skip = not bool((group_spread(s.rewards, s.batch.group_ids, s.trains) > 0).any())
        s.extra["zero_spread_skipped"] = int(skip)
        return skip

    def metrics(self, s: StepState) -> dict:
        return {"filter/zero_spread_skipped": s.extra.get("zero_spread_skipped", 0)}


class DynamicSampling(Method):
    """RLConfig.filter_groups (FilterGroupsConfig): draw max_num_gen_batches x prompts_per_step
    prompts, train on the first prompts_per_step groups whose rewards differ (DAPO's dynamic
    sampling)."""
    name = "filter_groups"

    def rollout_prompts(self, n: int) -> int:
        return n * self.config.filter_groups.max_num_gen_batches

    def filter_rows(self, s: StepState) -> None:
        drawn = s.batch.num_groups
        s.trains, kept = keep_spread_groups(s.rewards, s.batch.group_ids, s.trains, self.config.prompts_per_step)
        s.extra["filter_groups"] = {"filter/groups_kept": kept, "filter/groups_drawn": drawn}

    def skip_update(self, s: StepState) -> bool:
        return s.extra["filter_groups"]["filter/groups_kept"] == 0

    def metrics(self, s: StepState) -> dict:
        return s.extra["filter_groups"]
