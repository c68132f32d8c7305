"""SimpleTIR (Xue, Zheng, Liu, Li, Zheng, Ma, An; arXiv 2509.02479): multi-turn tool-integrated
reasoning, its diagnosis and its filter.  Shapes: B rows (episodes), T tokens, V vocabulary; `mask`
(B, T) is 1 on the model's sampled tokens that count, `env_mask` (B, T) on tokens the environment
appended (rl_lab.agents.episodes).

What the source claims (abstract and README of github.com/ltzheng/SimpleTIR; the paper's tables
were not read here): tool outputs are out of the model's training distribution; although masked
out of the loss they condition what the model writes next, which raises the chance of sampling
low-probability tokens; such tokens carry the largest logit gradients, and the spikes compound
over turns into gradient-norm explosions.  The fix: drop every trajectory that contains a *void
turn* (a turn that yields neither a complete tool call nor a final answer) from the policy loss
(the repository's flag is `mask_void_turns`).  In SimpleTIR's trainer the void mask multiplies the
loss mask only: the group's advantages are computed over every rollout of the prompt, void ones
included (scope "loss", rl_lab's default).  rl_lab first also dropped them from the group
statistics (scope "loss_and_groups", kept as a named option for the runs that used it).

What this module computes:
  mask_void_rows              scope "loss": the loss mask less the void rows, and the count
  drop_void_trajectories      scope "loss_and_groups": the rows that stay in the loss and the group
                              statistics, and the count
  logit_gradient_norm         ||d loss_t / d z_t|| = |A| rho sqrt(1 - 2 pi(y) + sum_v pi_v^2) per token
  after_tool_output           (B, T) the first `window` sampled tokens after each tool output
  tool_conditioned_token_stats the share of low-probability tokens and their logit gradient norm,
                               right after tool outputs vs elsewhere
"""
from __future__ import annotations

import torch


def mask_void_rows(mask: torch.Tensor, trains: torch.Tensor, void: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """(B, T) loss mask, (B,) rows that train, (B,) rows with a void turn -> (B, T) loss mask
    without the void rows' tokens, metrics.

    SimpleTIR's filter as its trainer applies it: the void rows keep their place in the group's
    statistics (the advantages are computed before, over every row that trains); only their tokens
    leave the loss.  `filter/void_trajectories` counts the training rows masked."""
    void = void.to(torch.bool)
    return mask & ~void[:, None], {"filter/void_trajectories": int((trains & void).sum())}


def drop_void_trajectories(valid: torch.Tensor, void: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """(B,) rows that may train, (B,) rows with a void turn -> (B,) rows kept, metrics.

    A dropped row leaves the loss *and* the group statistics (its reward is not part of the
    group's mean or std): the trainer passes the kept rows as `valid` to the advantages.
    `filter/void_trajectories` counts the valid rows dropped."""
    void = void.to(torch.bool)
    kept = valid & ~void                                                               # (B,)
    return kept, {"filter/void_trajectories": int((valid & void).sum())}


def logit_gradient_norm(logp_all: torch.Tensor, tokens: torch.Tensor, advantages=None,
                        ratio=None) -> torch.Tensor:
    """(B, T, V) log pi, (B, T) sampled ids [, (B, T) or (B,) advantages, (B, T) ratios] -> (B, T)
    the norm of the gradient of the token's policy-gradient term with respect to its logits.

    d(-A rho log pi(y)) / dz = -A rho (e_y - pi), and ||e_y - pi||^2 = 1 - 2 pi(y) + sum_v pi_v^2, so
    the norm is |A| rho sqrt(1 - 2 pi(y) + sum_v pi_v^2): at most sqrt(2) |A| rho, largest for a
    token the policy thought unlikely (pi(y) -> 0) in a peaked distribution.  Without `advantages`
    and `ratio` (A = rho = 1) it is ||e_y - pi||, the score's norm in logit space."""
    pi_y = logp_all.gather(-1, tokens[..., None]).squeeze(-1).exp()                   # (B, T)
    sum_sq = torch.exp(torch.logsumexp(2 * logp_all, dim=-1))                          # (B, T)
    norm = (1 - 2 * pi_y + sum_sq).clamp(min=0).sqrt()                                 # (B, T)
    if advantages is not None:
        A = advantages[:, None] if advantages.dim() == 1 else advantages
        norm = norm * A.abs()
    if ratio is not None:
        norm = norm * ratio
    return norm


def after_tool_output(env_mask: torch.Tensor, mask: torch.Tensor, window: int = 1) -> torch.Tensor:
    """(B, T) environment tokens, (B, T) counted sampled tokens -> (B, T) bool: the first `window`
    counted tokens the model wrote after each tool output (those the output conditions most
    directly).  A row without environment tokens has none."""
    if window < 1:
        raise ValueError(f"window={window}: count at least the first token after a tool output (window >= 1)")
    env = env_mask.to(torch.bool)
    counted = mask.to(torch.bool)
    # number of counted tokens since the most recent environment token, per position
    since = torch.zeros_like(counted, dtype=torch.long)                                # (B, T)
    running = torch.full((env.shape[0],), window + 1, dtype=torch.long, device=env.device)
    for t in range(env.shape[1]):
        running = torch.where(env[:, t], torch.zeros_like(running), running + counted[:, t].long())
        since[:, t] = running
    return counted & ~env & (since >= 1) & (since <= window)


def tool_conditioned_token_stats(logp_all: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor,
                                 env_mask: torch.Tensor, low_prob: float = 0.1, window: int = 1,
                                 advantages=None, ratio=None, logp_diff=None) -> dict:
    """SimpleTIR's measurement on one batch: among the counted tokens right after a tool output
    (`after_tool_output`) and among all other counted tokens, the share whose probability under
    pi is below `low_prob`, and the mean and max logit gradient norm (`logit_gradient_norm`).

    Returns {"tir/low_prob_share/after_tool", "tir/low_prob_share/elsewhere",
    "tir/logit_grad_norm/after_tool_mean", .../elsewhere_mean, .../after_tool_max,
    .../elsewhere_max, "tir/tokens/after_tool", "tir/tokens/elsewhere"}; a share or norm over
    no tokens is NaN (not 0, which would read as a measurement).  With `logp_diff` ((B, T),
    log pi - log mu) also "tir/abs_logp_diff/after_tool" and ".../elsewhere": the mean
    |log pi - log mu| of each group, the post's question whether the sampler disagrees more right
    after a tool output."""
    if not 0 < low_prob < 1:
        raise ValueError(f"low_prob={low_prob}: a probability threshold in (0, 1), e.g. 0.1")
    counted = mask.to(torch.bool)
    after = after_tool_output(env_mask, counted, window)                               # (B, T)
    elsewhere = counted & ~after
    pi_y = logp_all.gather(-1, tokens[..., None]).squeeze(-1).exp()                   # (B, T)
    low = pi_y < low_prob
    norm = logit_gradient_norm(logp_all, tokens, advantages, ratio)                    # (B, T)
    out = {}
    for name, where in (("after_tool", after), ("elsewhere", elsewhere)):
        n = int(where.sum())
        nan = float("nan")
        out[f"tir/tokens/{name}"] = n
        out[f"tir/low_prob_share/{name}"] = (low & where).sum().item() / n if n else nan
        out[f"tir/logit_grad_norm/{name}_mean"] = norm[where].mean().item() if n else nan
        out[f"tir/logit_grad_norm/{name}_max"] = norm[where].max().item() if n else nan
        if logp_diff is not None:
            out[f"tir/abs_logp_diff/{name}"] = logp_diff.detach()[where].abs().mean().item() if n else nan
    return out


# ----------------------------------------------------------------------------- the trainer's plug-ins
from rl_lab.algos.method import Method, StepState  # noqa: E402


class VoidFilter(Method):
    """RLConfig.mask_void_turns (VoidFilterConfig): rows with a void turn leave the loss (a
    single-turn batch's void turn is a truncated completion).  Scope "loss": after the advantages
    are computed over every row, so the void rows still count in their group's mean and std (and
    in the zero-spread checks of skip_zero_spread_steps and filter_groups); "loss_and_groups": before,
    so they leave the group statistics too.  Either way the reference KL, the teacher KL and EMPG's
    whitening see the masked loss mask.  By design, not a fault: filter/."""
    name = "void_filter"

    def _void(self, s: StepState) -> torch.Tensor:
        b = s.batch
        return b.has_void_turn if b.has_void_turn is not None else b.is_truncated

    def filter_rows(self, s: StepState) -> None:
        if self.knobs.scope == "loss_and_groups":
            s.trains, s.extra["filter_metrics"] = drop_void_trajectories(s.trains, self._void(s))

    def advantages(self, s: StepState) -> None:
        if self.knobs.scope == "loss":
            s.mask, s.extra["filter_metrics"] = mask_void_rows(s.mask, s.trains, self._void(s))
            s.advantages = torch.where(s.mask, s.advantages, torch.zeros_like(s.advantages))

    def metrics(self, s: StepState) -> dict:
        return s.extra["filter_metrics"]


class ToolTokenStats(Method):
    """RLConfig.tool_token_stats: SimpleTIR's measurement, on pi before the update (multi-turn
    batches only)."""
    name = "tool_token_stats"
    needs_full_logprobs = True

    def metrics(self, s: StepState) -> dict:
        b = s.batch
        if b.env_mask is None:
            return {}
        return tool_conditioned_token_stats(s.first_logp_all.detach(), b.completion_ids, s.counted, b.env_mask,
                                            advantages=s.advantages.detach(),
                                            logp_diff=s.old_logp_safe - s.rollout_logp)
