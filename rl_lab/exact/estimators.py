"""Every gradient estimator of the series, as an exact object and as a Monte-Carlo sampler.

Each estimator is one rule for a per-token weight w_t, applied to sequences y drawn from
the sampler mu (from pi for on-policy REINFORCE):

    g_hat(y) = (R(y) - b) * sum_t w_t(y) * grad log pi(y_t | y_<t).

A token-level rule (`token_weights`) sees one token's ratio rho_t = pi/mu; a sequence-level
rule (`sequence_weights`) sees the whole sequence's log-ratio and gives all its tokens the
same weight.  `estimator_weights` applies them to a (B, T) batch of log-ratios; the
Monte-Carlo sampler uses it on a sampled batch and back-propagates the surrogate
mean_i sum_t stopgrad((R_i - b) w_it) log pi(y_it | .), as a trainer does.  The exact object
applies the *same two functions* to every (context, token) node or every sequence, and sums
over the tree of all N = V**T sequences with two O(N) passes (subtree and path sums), so the
two must agree as the batch grows.

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

The two combined estimators of Part 3 (not in ESTIMATORS, so not in standard_estimators;
listed in COMBINED), a geometric gate G(y) = 1{1/geo <= rho(y)^(1/T) <= geo} times a
truncated weight:
  geo_token_tis  w_t = G(y) min(rho_t, C)    Geo-Mask-Token-TIS   rollout_is="token" + seq_mean_k1
  geo_seq_tis    w_t = G(y) min(rho(y), C)   Geo-RS-Seq-TIS       rollout_is="sequence" + seq_mean_k1
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rl_lab.errors import ConfigError
from rl_lab.exact.policies import TabularPolicy, flat_grad, log_probs, score_sqnorm, score_table
from rl_lab.exact.quantities import divergences, exact_gradient
from rl_lab.exact.space import DTYPE, SequenceSpace

ESTIMATORS = ("on_policy", "naive", "token_is", "token_tis", "token_mis",
              "seq_is", "seq_tis", "seq_mis", "geo_mask")
LABELS = {"on_policy": "on-policy", "naive": "naive", "token_is": "token-IS",
          "token_tis": "token-TIS", "token_mis": "token-MIS", "seq_is": "sequence-IS",
          "seq_tis": "sequence-TIS", "seq_mis": "sequence-MIS", "geo_mask": "geometric mask"}
COMBINED = ("geo_token_tis", "geo_seq_tis")
LABELS.update({"geo_token_tis": "geo-mask x token-TIS", "geo_seq_tis": "geo-mask x sequence-TIS"})
_THRESHOLDED = ("token_tis", "token_mis", "seq_tis", "seq_mis", "geo_mask") + COMBINED


@dataclass(frozen=True)
class Estimator:
    """name: one of ESTIMATORS; C: truncation level / upper mask bound; C_low: lower mask
    bound (token_mis, seq_mis: default 0; geo_mask: default 1/C); baseline: b in R - b;
    geo: the geometric gate's band [1/geo, geo] of the combined estimators (COMBINED only)."""
    name: str
    C: float = 2.0
    C_low: float | None = None
    baseline: float = 0.0
    geo: float | None = None

    def __post_init__(self):
        if self.name not in ESTIMATORS + COMBINED:
            raise ConfigError(f"Estimator.name={self.name!r} is not allowed; "
                              f"choose one of {list(ESTIMATORS + COMBINED)}")
        if (self.geo is not None) != (self.name in COMBINED):
            raise ConfigError(f"Estimator.geo={self.geo!r}: give geo (> 1) exactly for {list(COMBINED)}")
        if self.geo is not None and not self.geo >= 1:
            raise ConfigError(f"Estimator.geo={self.geo!r} must be >= 1")
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
            base += f"(C={self.C:g}" + (f", geo={self.geo:g})" if self.geo is not None else ")")
        return base + (f", b={self.baseline:.3g}" if self.baseline else "")


TOKEN_LEVEL = ("token_is", "token_tis", "token_mis", "geo_token_tis")


def geo_gate(est: Estimator, log_rho_seq: torch.Tensor, T: int) -> torch.Tensor:
    """(B,) 1{1/geo <= rho(y)^(1/T) <= geo} of a combined estimator; 1 for every other."""
    if est.geo is None:
        return torch.ones_like(log_rho_seq)
    bound = torch.log(torch.tensor(est.geo, dtype=log_rho_seq.dtype))
    mean = log_rho_seq / T
    return ((mean >= -bound) & (mean <= bound)).to(log_rho_seq.dtype)


def token_weights(est: Estimator, log_rho: torch.Tensor) -> torch.Tensor:
    """Token-level rules, elementwise: log(pi/mu) of a token -> its weight, any shape."""
    rho = log_rho.exp()
    if est.name == "token_is":
        return rho
    if est.name in ("token_tis", "geo_token_tis"):                  # the gate is applied per sequence
        return rho.clamp(max=est.C)
    return torch.where((rho >= est.lower) & (rho <= est.C), rho, torch.zeros_like(rho))  # token_mis


def sequence_weights(est: Estimator, log_rho_seq: torch.Tensor, T: int) -> torch.Tensor:
    """Sequence-level rules: (B,) log(pi(y)/mu(y)) of T-token sequences -> (B,) weight of
    every token of the sequence."""
    lo, C = est.lower, est.C
    if est.name in ("on_policy", "naive"):
        return torch.ones_like(log_rho_seq)
    if est.name == "geo_mask":
        geo = (log_rho_seq / T).exp()                                # rho(y)^(1/T)
        return ((geo >= lo) & (geo <= C)).to(log_rho_seq.dtype)
    rho = log_rho_seq.exp()
    if est.name == "seq_is":
        return rho
    if est.name == "seq_tis":
        return rho.clamp(max=C)
    if est.name == "geo_seq_tis":
        return geo_gate(est, log_rho_seq, T) * rho.clamp(max=C)
    return torch.where((rho >= lo) & (rho <= C), rho, torch.zeros_like(rho))     # seq_mis


def estimator_weights(est: Estimator, log_rho: torch.Tensor) -> torch.Tensor:
    """(B, T) log(pi/mu) of the sampled tokens -> weights: (B, T) for a token-level rule,
    (B, 1) for a sequence-level one.  For on-policy samples every weight is 1."""
    if est.name in TOKEN_LEVEL:
        return token_weights(est, log_rho) * geo_gate(est, log_rho.sum(-1), log_rho.shape[-1])[:, None]
    return sequence_weights(est, log_rho.sum(-1), log_rho.shape[-1])[:, None]


class ExactProblem:
    """pi (a differentiable policy), mu (fixed logits) and R (N,), enumerated.

    Cached, detached: pi_logp, mu_logp (n_contexts, V) next-token log-probs; log_rho_tab
    (n_contexts, V) = log pi - log mu per (context, token); p_pi, p_mu (N,) sequence
    probabilities and log_rho_seq (N,) = log pi(y)/mu(y); J; grad (P,) = grad J; div
    (Divergences).  lp_pi, lp_mu (N, T) are built on first use.  Call refresh() after
    changing the policy's parameters."""

    def __init__(self, space: SequenceSpace, policy, mu_logits: torch.Tensor, reward: torch.Tensor):
        if mu_logits.shape != (space.n_contexts, space.V):
            raise ConfigError(f"mu_logits has shape {tuple(mu_logits.shape)}; expected "
                              f"(n_contexts, V) = {(space.n_contexts, space.V)}")
        if reward.shape != (space.N,):
            raise ConfigError(f"reward has shape {tuple(reward.shape)}; expected (N,) = ({space.N},)")
        self.space, self.policy = space, policy
        self.reward = reward.to(DTYPE)
        self.mu_logp = F.log_softmax(mu_logits.detach().to(DTYPE), -1)
        self.refresh()

    def refresh(self) -> None:
        space = self.space
        with torch.no_grad():
            self.pi_logp = log_probs(self.policy)
            self.div = divergences(space, self.pi_logp, self.mu_logp)
            self.p_pi, self.p_mu = self.div.p_pi, self.div.p_mu
            self.J = float((self.p_pi * self.reward).sum())
            self.log_rho_tab = self.pi_logp - self.mu_logp            # +inf where mu cannot sample
            self.log_rho_seq = space.path_sum(self.log_rho_tab)       # (N,)
        self.grad = exact_gradient(space, self.policy, self.reward)
        self._cache = {}

    def _cached(self, key, fn):
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]

    @property
    def lp_pi(self) -> torch.Tensor:
        """(N, T) log pi(y_t | y_<t) of every token of every sequence."""
        return self._cached("lp_pi", lambda: self.space.per_token(self.pi_logp))

    @property
    def lp_mu(self) -> torch.Tensor:
        return self._cached("lp_mu", lambda: self.space.per_token(self.mu_logp))

    @property
    def scores(self) -> torch.Tensor:
        """(n_contexts, V, P) score table of the current policy."""
        return self._cached("scores", lambda: score_table(self.policy))

    @property
    def tabular(self) -> bool:
        return isinstance(self.policy, TabularPolicy)

    @property
    def q_tab(self) -> torch.Tensor:
        """(n_contexts, V) ||grad log pi(a | c)||^2."""
        return self._cached("q", lambda: score_sqnorm(self.policy) if self.tabular
                            else self.scores.square().sum(-1))

    def sampler(self, est: Estimator):
        """(p (N,), next-token log-probs (n_contexts, V)) of the distribution est samples from."""
        return (self.p_pi, self.pi_logp) if est.samples_from == "pi" else (self.p_mu, self.mu_logp)

    def coefficients(self, est: Estimator) -> torch.Tensor:
        """The literal definition: (N, T) or (N, 1) coefficient (R(y) - b) w_t(y) of
        grad log pi(y_t | y_<t), from estimator_weights on the (N, T) log-ratio table;
        0 where the sampler cannot produce y."""
        p, _ = self.sampler(est)
        log_rho = self.lp_pi - self.lp_mu if est.samples_from == "mu" else torch.zeros_like(self.lp_pi)
        coef = (self.reward - est.baseline)[:, None] * estimator_weights(est, log_rho)
        return torch.where(p[:, None] > 0, coef, torch.zeros_like(coef))

    def expected_gradient(self, weights: torch.Tensor) -> torch.Tensor:
        """(N, T) weights m[y, t] -> (P,) sum_{y,t} m[y, t] grad log pi(y_t | y_<t)."""
        return self.gradient_from_table(self.space.per_context(weights))

    def gradient_from_table(self, W: torch.Tensor) -> torch.Tensor:
        """(n_contexts, V) node weights W -> (P,) sum_{c,a} W[c, a] grad log pi(a | c),
        by one backward pass through the log-prob table."""
        return flat_grad((W * log_probs(self.policy)).sum(), self.policy)


def per_sequence_vectors(space: SequenceSpace, scores: torch.Tensor, coef: torch.Tensor,
                         chunk: int = 2 ** 15):
    """Yield (codes (n,), vectors (n, P)) with vectors[i] = sum_t coef[y, t] * scores[y_<t, y_t],
    y = codes[i], in chunks of sequences.  The literal per-sequence estimates, for checks.
    scores: (n_contexts, V, P); coef: (N, T), or (N, 1) for one coefficient per sequence."""
    flat = scores.reshape(-1, scores.shape[-1])                      # (n_contexts * V, P)
    for k0 in range(0, space.N, chunk):
        k = torch.arange(k0, min(space.N, k0 + chunk))
        g = torch.zeros(len(k), flat.shape[1], dtype=flat.dtype)
        for t in range(space.T):
            node = space.offsets[t] * space.V + k // space.V ** (space.T - t - 1)
            g += coef[k, min(t, coef.shape[1] - 1), None] * flat[node]
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
    """Expectation, bias vector and variance of `est`, as exact sums over all sequences.

    g_hat(y) = A(y) sum_t w_t grad log pi(y_t|y_<t), A = R - b.  A token-level w_t depends on
    the node (y_<t, y_t) only, a sequence-level one on y only, so with p the sampler's
    sequence probabilities:
      token:    E g_hat = sum_nodes w(node) [sum_{y through node} p A] score(node)
      sequence: E g_hat = sum_nodes [sum_{y through node} p A w(y)] score(node)
    and E||g_hat||^2 is a sum over sequences of p A^2 ||path sum of (w x score)||^2."""
    space = problem.space
    p, sampler_logp = problem.sampler(est)
    adv = problem.reward - est.baseline                               # (N,)
    reachable = torch.isfinite(sampler_logp)                          # tokens the sampler can draw
    if est.name in TOKEN_LEVEL:
        w_tab = torch.where(reachable, token_weights(est, problem.log_rho_tab), torch.zeros(1, dtype=DTYPE))
        gate = geo_gate(est, problem.log_rho_seq, space.T)            # (N,) 0/1, all 1 unless combined
        W = w_tab * space.subtree_sum(p * adv * gate)                 # (n_contexts, V)
        if problem.tabular:                                           # orthogonal per-token scores
            second = (w_tab.square() * problem.q_tab * space.subtree_sum(p * adv.square() * gate)).sum()
        else:
            H = space.path_sum(w_tab[..., None] * problem.scores)     # (N, P)
            second = (p * gate * adv.square() * H.square().sum(-1)).sum()
    else:
        log_rho = problem.log_rho_seq if est.samples_from == "mu" else torch.zeros_like(p)
        c = adv * sequence_weights(est, log_rho, space.T)             # (N,)
        c = torch.where(p > 0, c, torch.zeros_like(c))
        W = space.subtree_sum(p * c)
        if problem.tabular:
            second = (p * c.square() * problem._cached("Q", lambda: space.path_sum(problem.q_tab))).sum()
        else:
            S = problem._cached("S", lambda: space.path_sum(problem.scores))  # (N, P)
            second = (p * c.square() * S.square().sum(-1)).sum()
    mean = problem.gradient_from_table(W)
    return Moments(est, mean, mean - problem.grad, float(second), float(problem.grad.norm()))


def monte_carlo(problem: ExactProblem, est: Estimator, batch_size: int,
                generator: torch.Generator | None = None, codes: torch.Tensor | None = None):
    """One Monte-Carlo gradient estimate (P,) from batch_size sequences drawn token by token
    from the estimator's sampler (or the given (B,) `codes`), computed as a trainer does:
    surrogate = mean_i sum_t stopgrad((R_i - b) w_it) log pi(y_it | .), then backward."""
    space = problem.space
    _, sampler_logp = problem.sampler(est)
    if codes is None:
        codes = space.sample(sampler_logp, batch_size, generator)   # (B,)
    lp = space.gather(log_probs(problem.policy), codes)              # (B, T), differentiable
    log_rho = lp.detach() - space.gather(sampler_logp, codes)        # (B, T)
    w = estimator_weights(est, log_rho)                              # (B, T) or (B, 1)
    adv = problem.reward[codes] - est.baseline                       # (B,)
    surrogate = (adv[:, None] * w * lp).sum() / len(codes)
    return flat_grad(surrogate, problem.policy)


def standard_estimators(C: float = 2.0, baseline: float = 0.0):
    """One Estimator of every kind, thresholded ones at C."""
    return [Estimator(name, C=C, baseline=baseline) for name in ESTIMATORS]
