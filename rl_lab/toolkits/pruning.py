"""Dynamic Vocabulary Pruning (DVP): the (1 - p) bound, the safe set and the price of pruning.

Li et al. (arXiv 2512.23087) prove that a logit perturbation moves a token's log-probability by an
amount that scales as (1 - p), restrict the RL objective to a "safe" vocabulary that drops the
extreme tail, and bound the optimisation bias this costs.  Only the abstract and introduction were
available to us; the functions here implement the book's reading (chapter 6):

  logprob_shift_bound            sup |log p'_a - log p_a| over perturbations |e_v| <= eps
  adversarial_logit_perturbation the perturbation that attains it
  excluded_mass                  1 - p(safe set) = TV(pruned, full)
  pruned_log_softmax             log-softmax restricted to the min-p safe set, renormalised
  binned_gap                     mean / max of a per-token gap in probability bins
  centred_logit_gap              half the range of the logit difference: the smallest eps that
                                 explains two distributions as one perturbed by |e_v| <= eps
  pruned_divergences             per-context k3 / chi^2 / |gap| between pruned sampler and trainer
  pruning_bias_check             exact policy-gradient bias of pruning on a SequenceSpace, with
                                 the chapter's bound in terms of the excluded mass

The safe set is `rl_lab.engines.vocabulary.safe_vocabulary` (p >= min_p * p_max), the rule the sampler
(`SamplingConfig.min_p`) and the trainer (`RLConfig.dvp`, `DVPConfig.min_p`) use.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from rl_lab.engines.vocabulary import safe_vocabulary
from rl_lab.exact import flat_grad, flat_params, logits_at, score_table, sequence_probs


def _check_min_p(min_p: float) -> None:
    if not 0 <= min_p < 1:
        raise ValueError(f"min_p={min_p!r} must be in [0, 1): the safe set keeps p >= min_p * p_max "
                         "(0 keeps every token)")


def logprob_shift_bound(p, eps):
    """The largest |log p'_a - log p_a| when every logit moves by at most eps:
    log(1 + (1 - p)(e^{2 eps} - 1)), about 2 eps (1 - p) for small eps.

    `p` (the token's probability before the perturbation) and `eps` broadcast (tensors or floats);
    returns a tensor of their broadcast shape."""
    p, eps = torch.as_tensor(p, dtype=torch.float64), torch.as_tensor(eps, dtype=torch.float64)
    if (p < 0).any() or (p > 1).any():
        raise ValueError("logprob_shift_bound: p must be a probability in [0, 1]")
    if (eps < 0).any():
        raise ValueError("logprob_shift_bound: eps is a bound on |logit change| and must be >= 0")
    return torch.log1p((1 - p) * torch.expm1(2 * eps))


def adversarial_logit_perturbation(logits, token, eps: float):
    """(..., V) logits, (...) token index -> (..., V) logits + e with e_token = -eps and every
    other e_v = +eps: the perturbation that lowers log p_token by exactly logprob_shift_bound."""
    if eps < 0:
        raise ValueError(f"eps={eps!r} must be >= 0")
    token = torch.as_tensor(token, device=logits.device)
    if token.shape != logits.shape[:-1]:
        raise ValueError(f"token has shape {tuple(token.shape)}; it needs one index per row of the "
                         f"logits, shape {tuple(logits.shape[:-1])}")
    onehot = F.one_hot(token.long(), logits.shape[-1]).to(logits.dtype)              # (..., V)
    return logits + eps * (1 - 2 * onehot)


def excluded_mass(logits, min_p: float):
    """(..., V) logits (or log-probs) -> (...) probability mass outside the safe set
    p >= min_p * p_max.  This is also TV(pruned, full): the pruned distribution gains exactly the
    mass the excluded tokens lose."""
    _check_min_p(min_p)
    if min_p == 0:
        return torch.zeros(logits.shape[:-1], dtype=logits.dtype, device=logits.device)
    p = torch.softmax(logits, -1)                                                     # (..., V)
    return (p * ~safe_vocabulary(logits, min_p)).sum(-1)


def pruned_log_softmax(logits, min_p: float):
    """(..., V) logits -> (..., V) log-probs of the distribution restricted to the safe set and
    renormalised; excluded tokens get -inf.  min_p = 0 is the plain log-softmax.  Gradients flow
    through the kept logits only (the set itself is piecewise constant), as in the trainer."""
    _check_min_p(min_p)
    if min_p > 0:
        logits = logits.masked_fill(~safe_vocabulary(logits.detach(), min_p), float("-inf"))
    return F.log_softmax(logits, dim=-1)


def binned_gap(p, gap, bins, weights=None) -> pd.DataFrame:
    """Per-token probability `p` (N,) and gap (N,) (e.g. log pi - log mu), bin edges (K+1,) ->
    one row per bin [lo, hi): count, (weighted) mean gap, mean |gap|, max |gap|.  `weights` (N,)
    turn the means into exact expectations (e.g. weight mu_a for every token a of every context:
    E_{a ~ mu}[gap | bin]).  Empty bins give NaN."""
    p, gap = np.asarray(p, dtype=float).ravel(), np.asarray(gap, dtype=float).ravel()
    w = np.ones_like(p) if weights is None else np.asarray(weights, dtype=float).ravel()
    bins = np.asarray(bins, dtype=float)
    if p.shape != gap.shape or p.shape != w.shape:
        raise ValueError(f"binned_gap: p has {p.size} values, gap {gap.size} and weights {w.size}; "
                         "pass one gap (and weight) per token")
    if bins.ndim != 1 or len(bins) < 2 or (np.diff(bins) <= 0).any():
        raise ValueError("binned_gap: bins must be at least two strictly increasing edges")
    idx = np.digitize(p, bins) - 1                                                    # bin of each token
    rows = []
    for k in range(len(bins) - 1):
        sel = (idx == k) & (w > 0)
        g, wk = gap[sel], w[sel]
        rows.append({"bin": f"[{bins[k]:.3g}, {bins[k + 1]:.3g})", "count": int(sel.sum()),
                     "mean_gap": (wk * g).sum() / wk.sum() if g.size else np.nan,
                     "mean_abs_gap": (wk * np.abs(g)).sum() / wk.sum() if g.size else np.nan,
                     "max_abs_gap": np.abs(g).max() if g.size else np.nan})
    return pd.DataFrame(rows).set_index("bin")


def centred_logit_gap(logp_a, logp_b):
    """(..., V) two log-distributions over the same vocabulary -> (...) eps = (max_v d_v - min_v d_v) / 2
    with d = logp_a - logp_b over the tokens both allow.  Softmax ignores a common shift, so this is the
    smallest eps for which b's logits plus some |e_v| <= eps give a: the eps of the (1 - p) bound.
    It is at most max_v |z_a - z_b| for the raw logits of the two engines."""
    d = logp_a - logp_b                                                               # (..., V)
    ok = torch.isfinite(d)
    hi = torch.where(ok, d, torch.full_like(d, -math.inf)).max(-1).values
    lo = torch.where(ok, d, torch.full_like(d, math.inf)).min(-1).values
    return ((hi - lo) / 2).clamp(min=0)


def pruned_divergences(logp_mu, logp_pi, min_p: float) -> dict:
    """(..., V) full log-distributions of the sampler mu and the trainer pi -> per-context (...)
    tensors after each prunes its own distribution with `min_p` and renormalises.  With
    r = pi~/mu~ on a token drawn from mu~ and kept by the trainer (in both safe sets; the trainer
    masks the others), the exact expectations of what the trainer logs per token:

    k3        E[r - 1 - log r | kept]  (rollout_corr/k3_kl, the series' vllm-kl; >= 0)
    chi2      E[r^2 | kept] - 1        (rollout_corr/chi2_token)
    abs_gap   E[|log r| | kept]        (sampling/sampling_logp_difference/mean)
    max_gap   max |log r| over the kept tokens: the worst token the sampler can still draw
    outside   mu~ mass on tokens pi's safe set excludes (what dvp/outside_fraction counts)
    excluded_mu, excluded_pi   excluded_mass of mu and pi (= TV(mu~, mu), TV(pi~, pi))
    """
    lmu, lpi = pruned_log_softmax(logp_mu, min_p), pruned_log_softmax(logp_pi, min_p)   # (..., V)
    both = torch.isfinite(lmu) & torch.isfinite(lpi)                                  # (..., V)
    w = lmu.exp() * both
    kept = w.sum(-1)                                                                  # (...)
    log_r = torch.where(both, lpi - lmu, torch.zeros_like(lmu))                       # (..., V)

    def cond_mean(x):                                                                 # E[x | kept]
        return (w * x).sum(-1) / kept.clamp(min=torch.finfo(kept.dtype).tiny)

    return {"k3": cond_mean(torch.expm1(log_r) - log_r), "chi2": cond_mean(torch.exp(2 * log_r)) - 1,
            "abs_gap": cond_mean(log_r.abs()), "max_gap": log_r.abs().max(-1).values,
            "outside": lmu.exp().sum(-1) - kept,
            "excluded_mu": excluded_mass(logp_mu, min_p), "excluded_pi": excluded_mass(logp_pi, min_p)}


def pruning_bias_check(space, policy, reward, min_p: float) -> dict:
    """Exact price of pruning on an enumerable space (rl_lab.exact).

    J(pi) = E_pi[R] and the pruned objective J~ = E_{pi~}[R], pi~ = pi restricted to each
    context's safe set; a DVP trainer with a matching sampler follows grad J~.  Returns

      bias       ||grad J~ - grad J||  (exact, both by autograd through the sums over V**T)
      M          E_{y ~ P~} sum_t m(y_<t): the expected excluded mass along a pruned sequence
      tv_seq     TV(P~, P) between the sequence distributions (<= M, the simulation lemma)
      bound      2 R_max (S_max + G) M, the chapter's bound on `bias`, with
                 S_max = max_y ||grad log P(y)|| and G = max_{c,v} ||grad z_v(c)||
      excluded_max  the largest per-context excluded mass
    """
    _check_min_p(min_p)
    lp_full = F.log_softmax(policy(), -1)                                             # (n_contexts, V)
    p_full = sequence_probs(space, lp_full)                                           # (N,)
    grad_full = flat_grad((p_full * reward).sum(), policy)                            # (P,) grad J
    logits = policy()                                                                 # (n_contexts, V)
    lp_pruned = pruned_log_softmax(logits, min_p)
    p_pruned = sequence_probs(space, lp_pruned)                                       # (N,)
    bias = (flat_grad((p_pruned * reward).sum(), policy) - grad_full).norm()
    with torch.no_grad():
        m = excluded_mass(logits, min_p)                                              # (n_contexts,)
        d_pruned, _ = space.prefix_probs(lp_pruned.detach())                          # (n_contexts,)
        M = (d_pruned * m).sum()
        tv_seq = 0.5 * (p_pruned - p_full).abs().sum()
        s_max = space.path_sum(score_table(policy)).norm(dim=-1).max()                # max_y ||S(y)||
        jac = torch.func.jacfwd(lambda th: logits_at(policy, th))(flat_params(policy))  # (n_ctx, V, P)
        g_max = jac.norm(dim=-1).max()
        r_max = reward.abs().max()
    return {"min_p": min_p, "bias": bias.item(), "M": M.item(), "tv_seq": tv_seq.item(),
            "bound": (2 * r_max * (s_max + g_max) * M).item(), "excluded_max": m.max().item()}
