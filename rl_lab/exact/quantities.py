"""Exact quantities by enumeration: rewards, J, grad J, divergences and visitation.

Divergences take *log*-probabilities on the last axis (so a truncated sampler's -inf is
handled exactly: KL and chi^2 become +inf when pi puts mass where mu puts none).
Directions follow the book: chi2(pi || mu) = E_mu[(pi/mu)^2] - 1 governs importance-weight
variance; KL is reported both ways.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rl_lab.errors import ConfigError
from rl_lab.exact.policies import flat_grad, log_probs
from rl_lab.exact.space import DTYPE, SequenceSpace

REWARDS = ("all", "majority", "mean", "last", "random")


def make_reward(space: SequenceSpace, name: str = "majority", token: int = 1,
                seed: int = 0) -> torch.Tensor:
    """(N,) float64 reward of every sequence, in [0, 1]:
    all: 1 if every token is `token`; majority: 1 if more than half are; mean: the fraction
    that are (separable across positions); last: 1 if y_T is; random: i.i.d. U(0,1)."""
    if name not in REWARDS:
        raise ConfigError(f"reward={name!r} is not allowed; choose one of {list(REWARDS)}")
    if not 0 <= token < space.V:
        raise ConfigError(f"reward token={token!r} must be in [0, {space.V - 1}]")
    if name == "random":
        return torch.rand(space.N, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)
    hits = (space.tokens() == token).to(DTYPE)                         # (N, T)
    if name == "all":
        return hits.prod(1)
    if name == "majority":
        return (hits.sum(1) > space.T / 2).to(DTYPE)
    if name == "mean":
        return hits.mean(1)
    return hits[:, -1]


def sequence_probs(space: SequenceSpace, logp: torch.Tensor) -> torch.Tensor:
    """(n_contexts, V) next-token log-probs -> (N,) probability of every sequence."""
    return space.prefix_probs(logp)[1]


def objective(space: SequenceSpace, policy, reward: torch.Tensor) -> torch.Tensor:
    """J(pi) = sum_y pi(y) R(y), exactly, as a differentiable scalar."""
    return (sequence_probs(space, log_probs(policy)) * reward).sum()


def exact_gradient(space: SequenceSpace, policy, reward: torch.Tensor) -> torch.Tensor:
    """(P,) grad J, by autograd through the exact sum over all V**T sequences."""
    return flat_grad(objective(space, policy, reward), policy)


# ---- divergences between categorical distributions given as log-probs (..., V) -> (...) ----

def tv(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    """Total variation 1/2 sum |p - q|."""
    return 0.5 * (lp.exp() - lq.exp()).abs().sum(-1)


def kl(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    """KL(p || q) = sum p log(p/q); +inf where q = 0 < p."""
    p = lp.exp()
    return torch.where(p > 0, p * (lp - lq), torch.zeros_like(p)).sum(-1)


def chi2(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    """chi^2(p || q) = sum p^2/q - 1 = E_q[(p/q)^2] - 1; +inf where q = 0 < p."""
    p = lp.exp()
    return (torch.where(p > 0, p * (lp - lq).exp(), torch.zeros_like(p)).sum(-1) - 1).clamp(min=0)


@dataclass
class Divergences:
    """Per-context divergences between pi(.|c) and mu(.|c), the visitation of every context
    under each policy, and the sequence-level divergences between P^pi and P^mu.

    Per-context tensors have shape (n_contexts,); d_pi[c] = d_t^pi(c) for c of depth t."""
    tv: torch.Tensor
    kl_pi_mu: torch.Tensor
    kl_mu_pi: torch.Tensor
    chi2: torch.Tensor                 # chi^2(pi(.|c) || mu(.|c))
    d_pi: torch.Tensor
    d_mu: torch.Tensor
    p_pi: torch.Tensor                 # (N,) sequence probabilities P^pi(y)
    p_mu: torch.Tensor
    delta_max: float                   # max_c TV:  the bias measure of Parts 1-2
    chi2_max: float                    # max_c chi^2: the variance measure
    tv_seq: float
    kl_seq_pi_mu: float
    kl_seq_mu_pi: float
    chi2_seq: float                    # chi^2(P^pi || P^mu) = E_mu[rho(y)^2] - 1

    def by_depth(self, space: SequenceSpace, values: torch.Tensor, weights: torch.Tensor):
        """(T,) sum over the contexts of each depth of weights * values, e.g.
        by_depth(space, div.tv, div.d_mu)[t] = E_{c ~ d_t^mu} TV(pi_c, mu_c)."""
        prod = torch.where(weights > 0, weights * values, torch.zeros_like(values))
        return torch.stack([space.level(prod, t).sum() for t in range(space.T)])


@torch.no_grad()
def divergences(space: SequenceSpace, pi_logp: torch.Tensor, mu_logp: torch.Tensor) -> Divergences:
    """All divergences between two policies given as (n_contexts, V) next-token log-probs."""
    d_pi, p_pi = space.prefix_probs(pi_logp)
    d_mu, p_mu = space.prefix_probs(mu_logp)
    lp_pi, lp_mu = p_pi.log(), p_mu.log()
    per_ctx_chi2 = chi2(pi_logp, mu_logp)
    per_ctx_tv = tv(pi_logp, mu_logp)
    return Divergences(
        tv=per_ctx_tv, kl_pi_mu=kl(pi_logp, mu_logp), kl_mu_pi=kl(mu_logp, pi_logp),
        chi2=per_ctx_chi2, d_pi=d_pi, d_mu=d_mu, p_pi=p_pi, p_mu=p_mu,
        delta_max=per_ctx_tv.max().item(), chi2_max=per_ctx_chi2.max().item(),
        tv_seq=tv(lp_pi, lp_mu).item(), kl_seq_pi_mu=kl(lp_pi, lp_mu).item(),
        kl_seq_mu_pi=kl(lp_mu, lp_pi).item(), chi2_seq=chi2(lp_pi, lp_mu).item())
