"""Linear-Gaussian agents: exact Thompson sampling, classic ensemble sampling, Ensemble++ and
greedy, each holding S independent copies (one per seed) in batched tensors.

Model: y = <x, theta> + N(0, eta^2), prior theta ~ N(0, sigma0^2 I).  After t observations
the posterior is N(mu_t, Sigma_t) with

    Sigma_t^{-1} = sigma0^{-2} I + eta^{-2} sum_s x_s x_s^T,
    mu_t         = Sigma_t eta^{-2} sum_s x_s y_s          (ridge regression, lambda = eta^2/sigma0^2).

All four agents keep (mu_t, Sigma_t) with the same O(d^2) Sherman-Morrison step and differ only in
how they draw the parameter they act greedily on:

    Greedy            theta~ = mu                                     no exploration
    Thompson sampling theta~ = mu + chol(Sigma) xi,  xi ~ N(0, I_d)    O(d^3) per draw
    Ensemble sampling theta~ = theta_m,  m ~ Unif{1..M}               M perturbed regressions
    Ensemble++        theta~ = mu + A zeta,  zeta ~ P_zeta            shared factor A (d x M)

Shapes: mu (S, d), Sigma (S, d, d), A and the ensemble (S, d, M), x (S, d), y (S,).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rl_lab.errors import ConfigError
from rl_lab.toolkits.bandits.envs import DTYPE, check_choice, check_int, check_positive

PERTURBATIONS = ("sphere", "gaussian", "rademacher", "coordinate")
"""Distributions P_z of the perturbation z in R^M stored with each observation, E[z z^T] = I/M."""
INDICES = ("gaussian", "sphere", "rademacher", "coordinate", "onehot")
"""Distributions P_zeta of the index zeta in R^M drawn at every decision, E[zeta zeta^T] = I."""


def unit_noise(kind: str, batch: tuple, M: int, generator: torch.Generator) -> torch.Tensor:
    """(*batch, M) random vectors with E[xi xi^T] = I_M.

    gaussian: N(0, I).  sphere: uniform on the sphere of radius sqrt(M).  rademacher: +-1
    entries.  coordinate: +-sqrt(M) e_i with i uniform.  onehot: sqrt(M) e_i (no sign: the
    index of classic ensemble sampling, which picks one member)."""
    if kind == "gaussian":
        return torch.randn(*batch, M, generator=generator, dtype=DTYPE)
    if kind == "sphere":
        g = torch.randn(*batch, M, generator=generator, dtype=DTYPE)
        return math.sqrt(M) * g / g.norm(dim=-1, keepdim=True)
    if kind == "rademacher":
        return 2.0 * torch.randint(0, 2, (*batch, M), generator=generator).to(DTYPE) - 1.0
    if kind in ("coordinate", "onehot"):
        i = torch.randint(0, M, batch, generator=generator)
        out = torch.nn.functional.one_hot(i, M).to(DTYPE) * math.sqrt(M)
        if kind == "coordinate":
            sign = 2.0 * torch.randint(0, 2, batch, generator=generator).to(DTYPE) - 1.0
            out = out * sign.unsqueeze(-1)
        return out
    raise ConfigError(f"noise kind {kind!r} is unknown; choose one of {list(INDICES)}")


def posterior_step(Sigma: torch.Tensor, x: torch.Tensor, noise_std: float):
    """One Bayesian linear-regression step by Sherman-Morrison (no matrix inverse, O(d^2)).

    Sigma (S, d, d), x (S, d) -> Sigma_new (S, d, d) and the gain k = Sigma_new x / eta^2 (S, d)."""
    Sx = (Sigma @ x.unsqueeze(-1)).squeeze(-1)                          # (S, d)
    denom = noise_std ** 2 + (x * Sx).sum(-1, keepdim=True)             # (S, 1)
    Sigma_new = Sigma - Sx.unsqueeze(-1) * Sx.unsqueeze(-2) / denom.unsqueeze(-1)
    Sigma_new = 0.5 * (Sigma_new + Sigma_new.transpose(-1, -2))       # stay symmetric in fp
    gain = Sx / denom                                                    # = Sigma_new x / eta^2
    return Sigma_new, gain


def regress_step(F: torch.Tensor, x: torch.Tensor, gain: torch.Tensor, target: torch.Tensor):
    """One recursive least-squares step for M linear models that share their features:
    column m of F moves toward fitting target[:, m] at x.  O(dM).

    F (S, d, M), x (S, d), gain (S, d), target (S, M) -> (S, d, M)."""
    prediction = (x.unsqueeze(1) @ F).squeeze(1)                        # (S, M)
    return F + gain.unsqueeze(-1) * (target - prediction).unsqueeze(1)


def linear_choice(actions: torch.Tensor | None, theta: torch.Tensor):
    """Act greedily for theta (S, d): the best of the (S, K, d) actions -> (x (S, d), index (S,)),
    or, for the unit ball (actions None), x = theta / ||theta|| and index None."""
    if actions is None:
        return theta / theta.norm(dim=-1, keepdim=True).clamp_min(1e-300), None
    index = (actions @ theta.unsqueeze(-1)).squeeze(-1).argmax(dim=-1)  # (S,)
    return actions[torch.arange(len(index)), index], index


@dataclass
class LinearAgent:
    """Shared part: the exact posterior (mu, Sigma), updated in O(d^2) per observation.
    `prior_var` (sigma0^2) and `noise_std` (eta) should match the environment's."""
    d: int = 10
    prior_var: float = 10.0
    noise_std: float = 1.0
    name = "linear"

    def __post_init__(self):
        self.validate()

    def validate(self):
        check_int(self, "d", 1)
        check_positive(self, "prior_var")
        check_positive(self, "noise_std")

    @property
    def label(self) -> str:
        return self.name

    def reset(self, num_seeds: int, generator: torch.Generator) -> None:
        S, d = num_seeds, self.d
        self.gen = generator
        self.mu = torch.zeros(S, d, dtype=DTYPE)
        self.Sigma = self.prior_var * torch.eye(d, dtype=DTYPE).expand(S, d, d).clone()
        self._reset_extra(S)

    def _reset_extra(self, S: int) -> None:
        pass

    def sample_theta(self) -> torch.Tensor:
        raise NotImplementedError

    def act(self, actions: torch.Tensor | None):
        if actions is not None and actions.shape[-1] != self.d:
            raise ValueError(f"{type(self).__name__}.d={self.d} but the actions have "
                             f"{actions.shape[-1]} features")
        return linear_choice(actions, self.sample_theta())

    def update(self, x: torch.Tensor, y: torch.Tensor) -> None:
        Sigma_new, gain = posterior_step(self.Sigma, x, self.noise_std)
        self._update_extra(x, y, gain)
        self.mu = regress_step(self.mu.unsqueeze(-1), x, gain, y.unsqueeze(-1)).squeeze(-1)
        self.Sigma = Sigma_new

    def _update_extra(self, x, y, gain) -> None:
        pass

    def sample_covariance(self) -> torch.Tensor:
        """E[(theta~ - mu)(theta~ - mu)^T] of the agent's sampling distribution: (S, d, d).
        Exact TS gives Sigma; the diagnostic compares the others with it."""
        raise NotImplementedError

    def flops_per_step(self, num_actions: int) -> int:
        """Leading-order multiply-adds of one decision and one update, seeds not counted."""
        d, K = self.d, num_actions
        return 2 * d * d + 2 * d + K * d + self._extra_flops()

    def _extra_flops(self) -> int:
        return 0


@dataclass
class Greedy(LinearAgent):
    """Act on the posterior mean (the ridge-regression estimate): no exploration."""
    name = "greedy"

    def sample_theta(self):
        return self.mu

    def sample_covariance(self):
        return torch.zeros_like(self.Sigma)


@dataclass
class ThompsonSampling(LinearAgent):
    """Exact Thompson sampling: theta~ ~ N(mu, Sigma) through a Cholesky factor, O(d^3)."""
    name = "TS"

    def sample_theta(self):
        L, info = torch.linalg.cholesky_ex(self.Sigma)                   # (S, d, d)
        if info.any():   # lost definiteness to rounding: add a little jitter
            eye = torch.eye(self.d, dtype=DTYPE)
            L = torch.linalg.cholesky(self.Sigma + 1e-10 * self.prior_var * eye)
        xi = torch.randn(self.mu.shape, generator=self.gen, dtype=DTYPE)  # (S, d)
        return self.mu + (L @ xi.unsqueeze(-1)).squeeze(-1)

    def sample_covariance(self):
        return self.Sigma.clone()

    def _extra_flops(self):
        return self.d ** 3 // 3 + self.d ** 2


@dataclass
class EnsembleSampling(LinearAgent):
    """Classic ensemble sampling (Lu and Van Roy, 2017): M models, each drawn from the prior
    and fitted to its own perturbed targets y + w, w ~ N(0, eta^2); act on one member chosen
    uniformly at random.  theta_m = mu + D e_m, so its sampling covariance is D D^T / M."""
    M: int = 8
    name = "ensemble sampling"

    def validate(self):
        super().validate()
        check_int(self, "M", 1)

    @property
    def label(self):
        return f"{self.name} M={self.M}"

    def _reset_extra(self, S):
        self.members = math.sqrt(self.prior_var) * torch.randn(
            S, self.d, self.M, generator=self.gen, dtype=DTYPE)         # (S, d, M)

    def sample_theta(self):
        S = self.mu.shape[0]
        m = torch.randint(0, self.M, (S,), generator=self.gen)          # (S,)
        return self.members[torch.arange(S), :, m]                      # (S, d)

    def _update_extra(self, x, y, gain):
        w = self.noise_std * torch.randn(len(y), self.M, generator=self.gen, dtype=DTYPE)
        self.members = regress_step(self.members, x, gain, y.unsqueeze(-1) + w)

    def sample_covariance(self):
        D = self.members - self.mu.unsqueeze(-1)                        # (S, d, M)
        return D @ D.transpose(-1, -2) / self.M

    def _extra_flops(self):
        return 2 * self.d * self.M + self.d


@dataclass
class EnsemblePlusPlus(LinearAgent):
    """Ensemble++ (Li, Xu, Wang and Luo, 2025), linear closed form.

    Keeps the exact mean mu and a shared factor A (d x M) with E[A A^T] = Sigma:
      act:    theta~ = mu + A zeta,  zeta ~ P_zeta (E zeta zeta^T = I)        O(dM)
      update: draw z ~ P_z (E z z^T = I/M) and regress A's columns on the targets eta z:
              A <- A + k (eta z^T - x^T A),  k = Sigma_new x / eta^2            O(dM)
    A_0 = sigma0 B with B's rows drawn from P_z."""
    M: int = 8
    perturbation: str = "sphere"
    index: str = "gaussian"
    name = "Ensemble++"

    def validate(self):
        super().validate()
        check_int(self, "M", 1)
        check_choice(self, "perturbation", PERTURBATIONS)
        check_choice(self, "index", INDICES)

    @property
    def label(self):
        return f"{self.name} M={self.M}"

    def _perturbation(self, batch: tuple) -> torch.Tensor:
        return unit_noise(self.perturbation, batch, self.M, self.gen) / math.sqrt(self.M)

    def _reset_extra(self, S):
        B = self._perturbation((S, self.d))                             # (S, d, M), rows z ~ P_z
        self.A = math.sqrt(self.prior_var) * B

    def sample_theta(self):
        zeta = unit_noise(self.index, (self.mu.shape[0],), self.M, self.gen)   # (S, M)
        return self.mu + (self.A @ zeta.unsqueeze(-1)).squeeze(-1)

    def _update_extra(self, x, y, gain):
        z = self._perturbation((len(y),))                               # (S, M)
        self.A = regress_step(self.A, x, gain, self.noise_std * z)

    def sample_covariance(self):
        return self.A @ self.A.transpose(-1, -2)

    def _extra_flops(self):
        return 4 * self.d * self.M


LINEAR_AGENTS = {cls.name: cls for cls in (Greedy, ThompsonSampling, EnsembleSampling, EnsemblePlusPlus)}
