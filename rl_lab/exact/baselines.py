"""Baselines for the score-function estimator, exactly, on an enumerable SequenceSpace.

With an outcome reward R(y), the single-sample estimator with per-position constants b_t is

    g(y) = sum_t s_t(y) (R(y) - b_t),      s_t(y) = grad_theta log pi(y_t | y_<t),

unbiased for every choice of the constants b = (b_1..b_T), since E[s_t | y_<t] = 0.  Its total
variance tr Cov g = E||g||^2 - ||grad J||^2 is computed here by summing over all V**T sequences for

  none           b_t = 0
  mean           b_t = J, the expected reward (what a group mean tends to as the group grows)
  optimal scalar b_t = E[||S||^2 R] / E[||S||^2], S = sum_t s_t (the classical optimal constant)
  OTB (proxy)    b_t = E[W_t R] / E[W_t],  W_t = sum_{j<=t} ||e_{y_j} - pi_j||^2 (logit-gradient proxy)
  OTB (exact)    b_t = E[||S_<=t||^2 R] / E[||S_<=t||^2], the true prefix score energy
  oracle         the b in R^T that minimises the variance (a T x T linear system)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from rl_lab.algos.advantages import optimal_token_baseline, sum_pi_squared
from rl_lab.exact.policies import log_probs, score_table
from rl_lab.exact.quantities import sequence_probs
from rl_lab.exact.space import SequenceSpace

BASELINES = ("none", "mean", "optimal scalar", "OTB (proxy)", "OTB (exact)", "oracle")


def logit_grad_sqnorm(logits: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """(..., V) logits, (...) long tokens -> (...) ||d log softmax(z)_y / dz||^2 = ||e_y - pi||^2
    = 1 - 2 pi(y) + sum_v pi_v^2, from the forward pass only."""
    logp = F.log_softmax(logits, dim=-1)                                      # (..., V)
    p_y = logp.gather(-1, token[..., None]).squeeze(-1).exp()                 # (...)
    return 1 - 2 * p_y + sum_pi_squared(logp)


def per_token_scores(space: SequenceSpace, policy) -> torch.Tensor:
    """(N, T, P): the score s_t(y) of every sequence y (row = its code) at every position t."""
    return space.gather(score_table(policy), torch.arange(space.N))


def per_token_proxy(space: SequenceSpace, policy) -> torch.Tensor:
    """(N, T): the logit-gradient proxy w_t(y) = 1 - 2 pi(y_t | y_<t) + sum_v pi(v | y_<t)^2."""
    with torch.no_grad():
        logp = log_probs(policy)                                              # (n_contexts, V)
        w = 1 - 2 * logp.exp() + sum_pi_squared(logp)[:, None]               # (n_contexts, V)
    return space.per_token(w)


def _weighted_return(p, weight, reward):
    """(N,) probs, (N, T) weights, (N,) reward -> (T,) E[weight_t R] / E[weight_t]."""
    pw = p[:, None] * weight                                                  # (N, T)
    return (pw * reward[:, None]).sum(0) / pw.sum(0)


def baseline_values(space: SequenceSpace, policy, reward: torch.Tensor, scores=None):
    """The per-position constants b (T,) of every baseline in BASELINES -> dict name -> (T,)."""
    s = per_token_scores(space, policy) if scores is None else scores         # (N, T, P)
    with torch.no_grad():
        p = sequence_probs(space, log_probs(policy))                          # (N,)
        T = space.T
        S = s.sum(1)                                                          # (N, P)
        J = (p * reward).sum()
        energy = S.pow(2).sum(-1)                                             # (N,) ||S||^2
        prefix_energy = s.cumsum(1).pow(2).sum(-1)                            # (N, T) ||S_<=t||^2
        W = per_token_proxy(space, policy).cumsum(1)                          # (N, T)
        # oracle: minimise E||R S - sum_t b_t s_t||^2 over b: M b = c with
        # M_tu = E[s_t . s_u], c_t = E[R s_t . S]
        M = torch.einsum("n,ntp,nup->tu", p, s, s)                            # (T, T)
        c = torch.einsum("n,n,ntp,np->t", p, reward, s, S)                    # (T,)
        oracle = torch.linalg.lstsq(M, c[:, None]).solution.squeeze(-1)
        return {"none": torch.zeros(T, dtype=s.dtype),
                "mean": J.expand(T).clone(),
                "optimal scalar": ((p * energy * reward).sum() / (p * energy).sum()).expand(T).clone(),
                "OTB (proxy)": _weighted_return(p, W, reward),
                "OTB (exact)": _weighted_return(p, prefix_energy, reward),
                "oracle": oracle}


def estimator_variance(space: SequenceSpace, policy, reward: torch.Tensor, b: torch.Tensor,
                       scores=None) -> torch.Tensor:
    """tr Cov of g(y) = sum_t s_t(y) (R(y) - b_t) under y ~ pi, exactly.  b: (T,) or scalar."""
    s = per_token_scores(space, policy) if scores is None else scores         # (N, T, P)
    with torch.no_grad():
        p = sequence_probs(space, log_probs(policy))                          # (N,)
        b = torch.as_tensor(b, dtype=s.dtype).expand(space.T)
        g = torch.einsum("ntp,nt->np", s, reward[:, None] - b[None, :])       # (N, P)
        mean = (p[:, None] * g).sum(0)                                        # (P,) = grad J
        return (p * g.pow(2).sum(-1)).sum() - mean.pow(2).sum()


def variance_table(space: SequenceSpace, policy, reward: torch.Tensor) -> dict:
    """name -> exact total variance of the single-sample estimator, for every baseline."""
    s = per_token_scores(space, policy)
    values = baseline_values(space, policy, reward, scores=s)
    return {name: float(estimator_variance(space, policy, reward, values[name], scores=s))
            for name in BASELINES}


def group_estimator_mse(space: SequenceSpace, policy, reward: torch.Tensor, group_size: int,
                        n_groups: int, advantage: str = "grpo", seed: int = 0) -> float:
    """Monte Carlo E||g_hat - grad J||^2 of the group estimator g_hat = (1/n) sum_i sum_t s_it A_it,
    groups of `group_size` sampled from pi, with advantages computed as a trainer does:
    advantage="grpo": A = R - group mean (no std scaling); "otb": rl_lab's optimal_token_baseline.
    The error includes the O(1/n) bias of a baseline that contains the sample itself."""
    if advantage not in ("grpo", "otb"):
        raise ValueError(f"advantage={advantage!r} must be one of ['grpo', 'otb']")
    if not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size={group_size!r} must be an int >= 2")
    table = score_table(policy)                                               # (n_contexts, V, P)
    with torch.no_grad():
        logp = log_probs(policy)                                              # (n_contexts, V)
        p = sequence_probs(space, logp)
        s_all = space.gather(table, torch.arange(space.N))                    # (N, T, P)
        grad_j = torch.einsum("n,n,np->p", p, reward, s_all.sum(1))           # (P,)
        gen = torch.Generator().manual_seed(seed)
        codes = space.sample(logp, group_size * n_groups, generator=gen)     # (B,)
        s = s_all[codes]                                                      # (B, T, P)
        r = reward[codes]                                                     # (B,)
        group_ids = torch.arange(n_groups).repeat_interleave(group_size)
        if advantage == "grpo":
            mean = r.view(n_groups, group_size).mean(1).repeat_interleave(group_size)
            adv = (r - mean)[:, None].expand(-1, space.T)                     # (B, T)
        else:
            mask = torch.ones(len(codes), space.T, dtype=torch.bool)
            token_r = torch.zeros(len(codes), space.T, dtype=r.dtype)
            token_r[:, -1] = r
            old_logp = space.gather(logp, codes)                              # (B, T)
            spsq = space.gather(sum_pi_squared(logp)[:, None].expand(-1, space.V), codes)
            adv, _ = optimal_token_baseline(token_r, mask, group_ids, old_logp, spsq)
        g = torch.einsum("btp,bt->bp", s, adv).view(n_groups, group_size, -1).mean(1)  # (groups, P)
        return float((g - grad_j).pow(2).sum(-1).mean())
