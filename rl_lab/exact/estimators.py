"""Every gradient estimator of the series, as an exact object and as a Monte-Carlo sampler.

Each estimator is one rule for a per-token weight w_t, applied to sequences y drawn from
the sampler mu (from pi for on-policy REINFORCE):

    g_hat(y) = (R(y) - b) * sum_t w_t(y) * grad log pi(y_t | y_<t).

`estimator_weights` is that rule, on a (B, T) batch of log-ratios log(pi/mu).  The exact
object applies it to all N = V**T sequences at once and weights each by its probability;
the Monte-Carlo sampler applies it to a sampled batch and back-propagates the surrogate
mean_i sum_t stopgrad((R_i - b) w_it) log pi(y_it | .), as a trainer does.  Same function,
so the two must agree as the batch grows.

Names, and their verl counterparts (rollout_is / rollout_rs; see Part 2 of the series):
  on_policy  REINFORCE on samples from pi             -
  naive      no correction, w = 1                     rollout_is=None
  token_is   w_t = rho_t                              -
  token_tis  w_t = min(rho_t, C)                      rollout_is="token"
  token_mis  w_t = rho_t 1{C_low <= rho_t <= C}       token IS + rollout_rs="token_k1"
  seq_is     w_t = rho(y) = prod_s rho_s              -
  seq_tis    w_t = min(rho(y), C)                     rollout_is="sequence"
  seq_mis    w_t = rho(y) 1{C_low <= rho(y) <= C}     sequence IS + rollout_rs="seq_sum_k1"
  geo_mask   w_t = 1{C_low <= rho(y)^(1/T) <= C}      rollout_rs="seq_mean_k1" (Geo-Mask)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rl_lab.config import ConfigError
from rl_lab.exact.policies import TabularPolicy, flat_grad, log_probs, score_sqnorm, score_table
from rl_lab.exact.quantities import divergences, exact_gradient
from rl_lab.exact.space import DTYPE, SequenceSpace

ESTIMATORS = ("on_policy", "naive", "token_is", "token_tis", "token_mis",
              "seq_is", "seq_tis", "seq_mis", "geo_mask")
LABELS = {"on_policy": "on-policy", "naive": "naive", "token_is": "token-IS",
          "token_tis": "token-TIS", "token_mis": "token-MIS", "seq_is": "sequence-IS",
          "seq_tis": "sequence-TIS", "seq_mis": "sequence-MIS", "geo_mask": "geometric mask"}
_THRESHOLDED = ("token_tis", "token_mis", "seq_tis", "seq_mis", "geo_mask")


@dataclass(frozen=True)
class Estimator:
    """name: one of ESTIMATORS; C: truncation level / upper mask bound; C_low: lower mask
    bound (token_mis, seq_mis: default 0; geo_mask: default 1/C); baseline: b in R - b."""
    name: str
    C: float = 2.0
    C_low: float | None = None
    baseline: float = 0.0

    def __post_init__(self):
        if self.name not in ESTIMATORS:
            raise ConfigError(f"Estimator.name={self.name!r} is not allowed; "
                              f"choose one of {list(ESTIMATORS)}")
        if not self.C > 0:
            raise ConfigError(f"Estimator.C={self.C!r} must be > 0")
        if self.C_low is not None and not 0 <= self.C_low <= self.C:
            raise ConfigError(f"Estimator.C_low={self.C_low!r} must be in [0, C={self.C}]")

    @property
    def lower(self) -> float:
        if self.C_low is not None:
            return self.C_low
        return 1.0 / self.C if self.name == "geo_mask" else 0.0

    @property
    def samples_from(self) -> str:
        return "pi" if self.name == "on_policy" else "mu"

    @property
    def label(self) -> str:
        base = LABELS[self.name]
        if self.name in _THRESHOLDED:
            base += f"(C={self.C:g})"
        return base + (f", b={self.baseline:.3g}" if self.baseline else "")


def estimator_weights(est: Estimator, log_rho: torch.Tensor) -> torch.Tensor:
    """(B, T) log(pi/mu) of the sampled tokens -> (B, T) weights w_t (see the module table).
    For on-policy samples log_rho is 0 and every weight is 1."""
    lo, C = est.lower, est.C
    zero = torch.zeros_like(log_rho)
    if est.name in ("on_policy", "naive"):
        return torch.ones_like(log_rho)
    rho_t = log_rho.exp()                                            # (B, T) per-token ratios
    log_seq = log_rho.sum(-1, keepdim=True).expand_as(log_rho)       # (B, T) log rho(y), every t
    rho = log_seq.exp()
    if est.name == "token_is":
        return rho_t
    if est.name == "token_tis":
        return rho_t.clamp(max=C)
    if est.name == "token_mis":
        return torch.where((rho_t >= lo) & (rho_t <= C), rho_t, zero)
    if est.name == "seq_is":
        return rho
    if est.name == "seq_tis":
        return rho.clamp(max=C)
    if est.name == "seq_mis":
        return torch.where((rho >= lo) & (rho <= C), rho, zero)
    geo = (log_seq / log_rho.shape[-1]).exp()                        # rho(y)^(1/T)
    return ((geo >= lo) & (geo <= C)).to(log_rho.dtype)              # geo_mask


class ExactProblem:
    """pi (a differentiable policy), mu (fixed logits) and R (N,), enumerated.

    Cached, detached: pi_logp, mu_logp (n_contexts, V); lp_pi, lp_mu (N, T) log-prob of
    every token of every sequence; p_pi, p_mu (N,) sequence probabilities; J; grad (P,) =
    grad J; div (Divergences).  Call refresh() after changing the policy's parameters."""

    def __init__(self, space: SequenceSpace, policy, mu_logits: torch.Tensor, reward: torch.Tensor):
        if mu_logits.shape != (space.n_contexts, space.V):
            raise ConfigError(f"mu_logits has shape {tuple(mu_logits.shape)}; expected "
                              f"(n_contexts, V) = {(space.n_contexts, space.V)}")
        if reward.shape != (space.N,):
            raise ConfigError(f"reward has shape {tuple(reward.shape)}; expected (N,) = ({space.N},)")
        self.space, self.policy = space, policy
        self.reward = reward.to(DTYPE)
        self.mu_logp = F.log_softmax(mu_logits.detach().to(DTYPE), -1)
        self.lp_mu = space.per_token(self.mu_logp)
        self.p_mu = space.prefix_probs(self.mu_logp)[1]
        self.refresh()

    def refresh(self) -> None:
        with torch.no_grad():
            self.pi_logp = log_probs(self.policy)
            self.lp_pi = self.space.per_token(self.pi_logp)
            self.p_pi = self.space.prefix_probs(self.pi_logp)[1]
            self.J = float((self.p_pi * self.reward).sum())
        self.grad = exact_gradient(self.space, self.policy, self.reward)
        self.div = divergences(self.space, self.pi_logp, self.mu_logp)
        self._q, self._scores = None, None

    @property
    def scores(self) -> torch.Tensor:
        """(n_contexts, V, P) score table of the current policy (computed once per refresh)."""
        if self._scores is None:
            self._scores = score_table(self.policy)
        return self._scores

    def sampler(self, est: Estimator):
        """(p (N,), lp (N, T)) of the distribution the estimator samples from."""
        return (self.p_pi, self.lp_pi) if est.samples_from == "pi" else (self.p_mu, self.lp_mu)

    def coefficients(self, est: Estimator) -> torch.Tensor:
        """(N, T) coefficient (R(y) - b) w_t(y) of grad log pi(y_t | y_<t); 0 where the
        sampler cannot produce y."""
        p, lp = self.sampler(est)
        w = estimator_weights(est, self.lp_pi - lp)
        coef = (self.reward - est.baseline)[:, None] * w
        return torch.where(p[:, None] > 0, coef, torch.zeros_like(coef))

    def expected_gradient(self, weights: torch.Tensor) -> torch.Tensor:
        """(N, T) weights m[y, t] -> (P,) sum_{y,t} m[y, t] grad log pi(y_t | y_<t),
        by one backward pass through the (n_contexts, V) log-prob table."""
        W = self.space.per_context(weights)                          # (n_contexts, V)
        return flat_grad((W * log_probs(self.policy)).sum(), self.policy)

    def second_moment(self, coef: torch.Tensor, p: torch.Tensor) -> float:
        """E_p || sum_t coef_t grad log pi(y_t | y_<t) ||^2 for (N, T) coef and (N,) p."""
        if isinstance(self.policy, TabularPolicy):
            # the per-token scores of one sequence live in different context blocks: orthogonal
            if self._q is None:
                self._q = self.space.per_token(score_sqnorm(self.policy))     # (N, T)
            return float((p[:, None] * coef.square() * self._q).sum())
        total = 0.0
        for idx, g in per_sequence_vectors(self.space, self.scores, coef):
            total += float((p[idx] * g.square().sum(-1)).sum())
        return total


def per_sequence_vectors(space: SequenceSpace, scores: torch.Tensor, coef: torch.Tensor,
                         chunk: int = 2 ** 15):
    """Yield (codes (n,), vectors (n, P)) with vectors[i] = sum_t coef[y, t] * scores[y_<t, y_t],
    y = codes[i], in chunks of sequences.  scores: (n_contexts, V, P) from score_table."""
    flat = scores.reshape(-1, scores.shape[-1])                      # (n_contexts * V, P)
    for k0 in range(0, space.N, chunk):
        k = torch.arange(k0, min(space.N, k0 + chunk))
        g = torch.zeros(len(k), flat.shape[1], dtype=flat.dtype)
        for t in range(space.T):
            node = space.offsets[t] * space.V + k // space.V ** (space.T - t - 1)
            g += coef[k, t, None] * flat[node]
        yield k, g


@dataclass
class Moments:
    """Exact first two moments of one estimator's single-sample gradient estimate.
    mean, bias: (P,);  var = trace of the covariance = E||g_hat||^2 - ||E g_hat||^2."""
    estimator: Estimator
    mean: torch.Tensor
    bias: torch.Tensor
    second_moment: float
    grad_norm: float

    @property
    def bias_norm(self) -> float:
        return float(self.bias.norm())

    @property
    def var(self) -> float:
        return max(self.second_moment - float(self.mean.square().sum()), 0.0)

    def mse(self, batch_size: int = 1) -> float:
        """E||mean of batch_size estimates - grad J||^2 = ||bias||^2 + var / batch_size."""
        return self.bias_norm ** 2 + self.var / batch_size

    @property
    def cosine(self) -> float:
        """cos(E g_hat, grad J): below 0 the expected update goes downhill."""
        g = self.mean - self.bias
        return float(self.mean @ g / (self.mean.norm() * g.norm()).clamp(min=1e-300))


def exact_moments(problem: ExactProblem, est: Estimator) -> Moments:
    """Expectation, bias vector and variance of `est`, as exact sums over all sequences."""
    p, _ = problem.sampler(est)
    coef = problem.coefficients(est)                                 # (N, T)
    mean = problem.expected_gradient(p[:, None] * coef)
    return Moments(est, mean, mean - problem.grad, problem.second_moment(coef, p),
                   float(problem.grad.norm()))


def monte_carlo(problem: ExactProblem, est: Estimator, batch_size: int,
                generator: torch.Generator | None = None, codes: torch.Tensor | None = None):
    """One Monte-Carlo gradient estimate (P,) from batch_size sequences drawn token by token
    from the estimator's sampler (or the given (B,) `codes`), computed as a trainer does:
    surrogate = mean_i sum_t stopgrad((R_i - b) w_it) log pi(y_it | .), then backward."""
    space = problem.space
    sampler_logp = problem.pi_logp if est.samples_from == "pi" else problem.mu_logp
    if codes is None:
        codes = space.sample(sampler_logp, batch_size, generator)   # (B,)
    lp = space.gather(log_probs(problem.policy), codes)              # (B, T), differentiable
    log_rho = lp.detach() - space.gather(sampler_logp, codes)        # (B, T)
    w = estimator_weights(est, log_rho)
    adv = problem.reward[codes] - est.baseline                       # (B,)
    surrogate = (adv[:, None] * w * lp).sum() / len(codes)
    return flat_grad(surrogate, problem.policy)


def standard_estimators(C: float = 2.0, baseline: float = 0.0):
    """One Estimator of every kind, thresholded ones at C."""
    return [Estimator(name, C=C, baseline=baseline) for name in ESTIMATORS]
