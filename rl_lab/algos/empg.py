"""EMPG, Entropy-Modulated Policy Gradients (Wang, Liu, Fu, Li et al.; arXiv 2509.09265, ICLR 2026).
Shapes: B rows (episodes), T tokens, K steps (model turns); `mask` (B, T) is 1 on counted tokens,
`turn_ids` (B, T) the model turn of each token (rl_lab.engines.rollout.RolloutBatch.turn_ids).

What the source claims (abstract, project page and its pseudocode; the paper's tables were not
read here): a policy gradient's size is coupled to the policy's entropy.  For a softmax policy
the expected squared norm of the score with respect to the logits is the Gini impurity,
E_{c~P} ||e_c - P||^2 = 1 - sum_j P_j^2 = 1 - exp(-H_2(P)) (Proposition 1; H_2 the Renyi-2
entropy), so confident steps get small updates and uncertain steps large, noisy ones.  EMPG
re-weights each step's outcome advantage by its uncertainty:

  H_t        the step's uncertainty: the mean token entropy over the step's tokens
  H~_t       batch min-max normalisation (H - min H) / (max H - min H + 1e-8)
  g(H_t)     exp(-k H~_t) / mean_batch exp(-k H~): the self-calibrating scale, batch mean exactly 1
  f(H_{t+1}) exp(-k_f H~_{t+1}): the future-clarity bonus, for steps that lead to a clear next step
  A^_t       g(H_t) A + zeta f(H_{t+1}), then normalised over the batch

The project page's pseudocode gives H~, g and f with defaults k = k_f = 1, zeta = 0.1; it stops
before the last line, so where the final normalisation sits is not known here: RLConfig's
EMPGConfig.normalize offers both readings ("sum", the default, whitens the sum; "scaled_advantage"
whitens g A before the bonus is added).  A step with no next step (the episode's last) gets no
bonus.
"""
from __future__ import annotations

import torch

from rl_lab.algos.advantages import masked_whiten


def gini_impurity(probs: torch.Tensor) -> torch.Tensor:
    """(..., V) probabilities -> (...) 1 - sum_j P_j^2 = E_{c~P} ||e_c - P||^2 = 1 - exp(-H_2)."""
    return 1 - (probs ** 2).sum(-1)


def renyi2_entropy(probs: torch.Tensor) -> torch.Tensor:
    """(..., V) probabilities -> (...) H_2(P) = -log sum_j P_j^2 (the collision entropy)."""
    return -torch.log((probs ** 2).sum(-1))


def step_entropies(entropy: torch.Tensor, mask: torch.Tensor, turn_ids: torch.Tensor | None = None):
    """(B, T) token entropies -> (H (B, K) the mean entropy of each step's counted tokens,
    exists (B, K) bool).  Steps are the model turns of `turn_ids` (None: one step per row)."""
    m = mask.to(torch.bool)
    turns = torch.zeros_like(m, dtype=torch.long) if turn_ids is None else turn_ids.long()
    K = int(turns[m].max()) + 1 if m.any() else 1
    onehot = (turns[..., None] == torch.arange(K, device=turns.device)) & m[..., None]   # (B, T, K)
    w = onehot.to(entropy.dtype)
    count = w.sum(1)                                                                     # (B, K)
    H = (entropy[..., None] * w).sum(1) / count.clamp(min=1)                             # (B, K)
    return H, count > 0


def normalized_entropy(H: torch.Tensor, exists: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(B, K) -> (B, K) (H - min) / (max - min + eps) over the batch's existing steps (0 elsewhere)."""
    if not exists.any():
        return torch.zeros_like(H)
    lo, hi = H[exists].min(), H[exists].max()
    return torch.where(exists, (H - lo) / (hi - lo + eps), torch.zeros_like(H))


def self_calibrating_scale(H_norm: torch.Tensor, exists: torch.Tensor, k: float = 1.0) -> torch.Tensor:
    """(B, K) normalised entropies -> (B, K) g = exp(-k H~) / mean_batch exp(-k H~), 0 on missing
    steps.  The mean over existing steps is exactly 1; g falls as the entropy rises, and
    max g / min g <= e^k."""
    w = torch.exp(-k * H_norm)
    if not exists.any():
        return torch.zeros_like(H_norm)
    return torch.where(exists, w / w[exists].mean(), torch.zeros_like(w))


def future_clarity_bonus(H_norm: torch.Tensor, exists: torch.Tensor, k_f: float = 1.0) -> torch.Tensor:
    """(B, K) -> (B, K) f_t = exp(-k_f H~_{t+1}) where step t+1 exists, else 0."""
    nxt = torch.zeros_like(H_norm)
    has_next = torch.zeros_like(exists)
    nxt[:, :-1], has_next[:, :-1] = H_norm[:, 1:], exists[:, 1:] & exists[:, :-1]
    return torch.where(has_next, torch.exp(-k_f * nxt), torch.zeros_like(nxt))


def empg_advantages(advantages: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor,
                    turn_ids: torch.Tensor | None = None, k: float = 1.0, k_f: float = 1.0, zeta: float = 0.1,
                    normalize: bool | str = True) -> tuple[torch.Tensor, dict]:
    """(B, T) advantages and token entropies -> (B, T) EMPG advantages per token of step t, 0 off
    the mask, whitened over the counted tokens as `normalize` says:

      "sum" (or True)     whiten(g(H_t) A + zeta f(H_{t+1}))
      "scaled_advantage"  whiten(g(H_t) A) + zeta f(H_{t+1})
      "none" (or False)   g(H_t) A + zeta f(H_{t+1})

    The bonus does not depend on the reward.  In a batch without reward spread (A = 0 everywhere)
    "sum" whitens the bonus alone to unit variance: every turn followed by a clear turn is pushed
    up, every last turn down, at full size.  "scaled_advantage" leaves a push of at most zeta.
    Also returns metrics: empg/scale_min, empg/scale_max, empg/bonus_mean."""
    normalize = {True: "sum", False: "none"}.get(normalize, normalize)
    if normalize not in ("sum", "scaled_advantage", "none"):
        raise ValueError(f"normalize={normalize!r}: choose 'sum', 'scaled_advantage' or 'none'")
    m = mask.to(torch.bool)
    H, exists = step_entropies(entropy.detach().to(torch.float64), m, turn_ids)         # (B, K)
    Hn = normalized_entropy(H, exists)
    g = self_calibrating_scale(Hn, exists, k)                                           # (B, K)
    f = future_clarity_bonus(Hn, exists, k_f)                                           # (B, K)
    turns = torch.zeros_like(m, dtype=torch.long) if turn_ids is None else turn_ids.long().clamp(min=0)
    g_tok, f_tok = g.gather(1, turns), f.gather(1, turns)                               # (B, T)
    scaled, bonus = g_tok * advantages.to(torch.float64), zeta * f_tok                # (B, T) x2
    whiten = (lambda x: masked_whiten(x, m)) if int(m.sum()) > 1 else (lambda x: x)
    if normalize == "sum":
        out = whiten(scaled + bonus)
    elif normalize == "scaled_advantage":
        out = whiten(scaled) + bonus
    else:
        out = scaled + bonus
    out = torch.where(m, out, torch.zeros_like(out)).to(advantages.dtype)
    metrics = {"empg/scale_min": g[exists].min().item() if exists.any() else float("nan"),
               "empg/scale_max": g[exists].max().item() if exists.any() else float("nan"),
               "empg/bonus_mean": f[exists].mean().item() if exists.any() else float("nan")}
    return out, metrics


# ----------------------------------------------------------------------------- the trainer's plug-in
from rl_lab.algos.method import Method, StepState  # noqa: E402


class EMPG(Method):
    """RLConfig.empg (EMPGConfig): each model turn's advantage modulated by its entropy (empg_advantages)."""
    name = "empg"

    def advantages(self, s: StepState) -> None:
        cfg = self.config
        s.advantages, s.extra["empg_metrics"] = empg_advantages(s.advantages, s.entropy, s.mask, s.batch.turn_ids,
                                                                cfg.empg.k, cfg.empg.k_f, cfg.empg.zeta,
                                                                cfg.empg.normalize)

    def metrics(self, s: StepState) -> dict:
        return s.extra["empg_metrics"]
