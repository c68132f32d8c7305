"""Bandit environments, each a batch of S independent problems (one per seed).

Every environment follows one protocol, so that agents and the runner never look inside:

    env.reset(num_seeds, generator)      draw S problems (S true parameters, S action sets)
    A = env.actions()                    (S, K, d) features of the K actions on offer now,
                                         or None for the compact unit-ball action set
    reward, regret = env.pull(choice)    choice: (S,) action indices, or (S, d) vectors for
                                         the unit ball; both results are (S,)

`regret` is the *expected* (pseudo-)regret of the choice: the best mean reward on offer minus
the chosen one, so it carries no reward noise.  All randomness (true parameters, action sets,
reward noise) comes from the generator passed to `reset`, drawn in the same order whatever the
agent does, so two agents run with the same seed face the same problems and the same noise
(common random numbers: their regret difference is measured with less noise).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rl_lab.errors import ConfigError

DTYPE = torch.float64
CONTEXTS = ("fixed", "varying")
FEATURES = ("uniform", "sphere")


def check_int(obj, name: str, lo: int) -> None:
    value = getattr(obj, name)
    if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        raise ConfigError(f"{type(obj).__name__}.{name}={value!r} must be an integer >= {lo}")


def check_positive(obj, name: str, allow_zero: bool = False) -> None:
    value = getattr(obj, name)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{type(obj).__name__}.{name}={value!r} must be a finite number {bound}")


def check_choice(obj, name: str, allowed) -> None:
    value = getattr(obj, name)
    if value not in allowed:
        raise ConfigError(f"{type(obj).__name__}.{name}={value!r} is not allowed; "
                          f"choose one of {list(allowed)}")


def unit_sphere(shape: tuple, d: int, generator: torch.Generator) -> torch.Tensor:
    """Points drawn uniformly on the unit sphere of R^d: (*shape, d)."""
    g = torch.randn(*shape, d, generator=generator, dtype=DTYPE)
    return g / g.norm(dim=-1, keepdim=True)


class Bandit:
    """Base class of the protocol above.  Subclasses set `d` and `name`."""
    d: int
    name = "bandit"

    def reset(self, num_seeds: int, generator: torch.Generator) -> None:
        raise NotImplementedError

    def actions(self) -> torch.Tensor | None:
        raise NotImplementedError

    def pull(self, choice: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    @property
    def num_seeds(self) -> int:
        if not hasattr(self, "_S"):
            raise RuntimeError(f"{type(self).__name__}: call reset(num_seeds, generator) first")
        return self._S


@dataclass
class FiniteBandit(Bandit):
    """K actions with features in R^d, drawn once ("fixed") or afresh every round
    ("varying", a contextual bandit); Gaussian reward noise of standard deviation noise_std.
    Subclasses define `_draw_problem`, `_draw_actions` and `mean_reward`."""
    d: int = 10
    num_actions: int = 100
    contexts: str = "fixed"
    noise_std: float = 1.0

    def __post_init__(self):
        self.validate()

    def validate(self):
        check_int(self, "d", 1)
        check_int(self, "num_actions", 2)
        check_choice(self, "contexts", CONTEXTS)
        check_positive(self, "noise_std", allow_zero=True)

    # --- subclass hooks -------------------------------------------------------------------
    def _draw_problem(self, gen: torch.Generator) -> None:
        """Draw the S unknown reward functions."""
        raise NotImplementedError

    def _draw_actions(self, gen: torch.Generator) -> torch.Tensor:
        """(S, K, d) action features."""
        raise NotImplementedError

    def mean_reward(self, X: torch.Tensor) -> torch.Tensor:
        """(S, K, d) features -> (S, K) mean rewards under each seed's true parameters."""
        raise NotImplementedError

    # --- protocol ---------------------------------------------------------------------------
    def reset(self, num_seeds: int, generator: torch.Generator) -> None:
        if not isinstance(num_seeds, int) or num_seeds < 1:
            raise ConfigError(f"num_seeds={num_seeds!r} must be an integer >= 1")
        self._S, self._gen = num_seeds, generator
        self._draw_problem(generator)
        self._new_round()

    def _new_round(self) -> None:
        self._X = self._draw_actions(self._gen)                         # (S, K, d)
        self._means = self.mean_reward(self._X)                         # (S, K)

    def actions(self) -> torch.Tensor:
        return self._X

    def pull(self, choice: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        S = self.num_seeds
        if choice.shape != (S,) or choice.dtype != torch.long:
            raise ValueError(f"{type(self).__name__}.pull expects (S,)={S,} action indices "
                             f"(torch.long), got shape {tuple(choice.shape)} {choice.dtype}")
        chosen = self._means.gather(1, choice[:, None])[:, 0]           # (S,)
        regret = self._means.max(dim=1).values - chosen                  # (S,)
        noise = torch.randn(S, generator=self._gen, dtype=DTYPE)
        reward = chosen + self.noise_std * noise
        if self.contexts == "varying":
            self._new_round()
        return reward, regret


@dataclass
class LinearBandit(FiniteBandit):
    """Gaussian linear bandit: r = <x, theta*> + N(0, noise_std^2), theta* ~ N(0, prior_var I).

    Defaults follow the "Russo" linear bandit of the Ensemble++ and IDS code: features
    i.i.d. Uniform(-1/sqrt(5), 1/sqrt(5)) ("uniform"), prior variance 10, unit noise.
    `features="sphere"` puts the actions on the unit sphere instead."""
    prior_var: float = 10.0
    features: str = "uniform"
    name = "linear"

    def validate(self):
        super().validate()
        check_positive(self, "prior_var")
        check_choice(self, "features", FEATURES)

    def _draw_problem(self, gen):
        self.theta = math.sqrt(self.prior_var) * torch.randn(self._S, self.d, generator=gen,
                                                             dtype=DTYPE)   # (S, d)

    def _draw_actions(self, gen):
        S, K, d = self._S, self.num_actions, self.d
        if self.features == "sphere":
            return unit_sphere((S, K), d, gen)
        half_width = 1 / math.sqrt(5)
        return (2 * torch.rand(S, K, d, generator=gen, dtype=DTYPE) - 1) * half_width

    def mean_reward(self, X):
        return (X @ self.theta.unsqueeze(-1)).squeeze(-1)               # (S, K)


@dataclass
class UnitBallBandit(Bandit):
    """Linear bandit on the compact action set {x : ||x|| <= 1}; the best action is
    theta*/||theta*||, so the regret of x is ||theta*|| - <x, theta*>.  theta* ~ N(0, prior_var I)."""
    d: int = 10
    prior_var: float = 10.0
    noise_std: float = 1.0
    name = "unit-ball"

    def __post_init__(self):
        check_int(self, "d", 1)
        check_positive(self, "prior_var")
        check_positive(self, "noise_std", allow_zero=True)

    def reset(self, num_seeds, generator):
        if not isinstance(num_seeds, int) or num_seeds < 1:
            raise ConfigError(f"num_seeds={num_seeds!r} must be an integer >= 1")
        self._S, self._gen = num_seeds, generator
        self.theta = math.sqrt(self.prior_var) * torch.randn(num_seeds, self.d, generator=generator,
                                                             dtype=DTYPE)

    def actions(self):
        return None

    def pull(self, choice):
        S = self.num_seeds
        if choice.shape != (S, self.d):
            raise ValueError(f"UnitBallBandit.pull expects (S, d)={S, self.d} action vectors, "
                             f"got shape {tuple(choice.shape)}")
        if (choice.norm(dim=-1) > 1 + 1e-9).any():
            raise ValueError("UnitBallBandit.pull: actions must lie in the unit ball (||x|| <= 1)")
        mean = (choice * self.theta).sum(-1)                              # (S,)
        regret = self.theta.norm(dim=-1) - mean
        reward = mean + self.noise_std * torch.randn(S, generator=self._gen, dtype=DTYPE)
        return reward, regret


@dataclass
class QuadraticBandit(FiniteBandit):
    """r = scale * <x, theta*>^2 + noise, with theta* and the actions on the unit sphere.
    Not linear in x: a linear agent cannot represent it; a network can."""
    contexts: str = "varying"
    num_actions: int = 20
    scale: float = 10.0
    name = "quadratic"

    def validate(self):
        super().validate()
        check_positive(self, "scale")

    def _draw_problem(self, gen):
        self.theta = unit_sphere((self._S,), self.d, gen)                 # (S, d)

    def _draw_actions(self, gen):
        return unit_sphere((self._S, self.num_actions), self.d, gen)

    def mean_reward(self, X):
        return self.scale * torch.einsum("skd,sd->sk", X, self.theta) ** 2


@dataclass
class NeuralBandit(FiniteBandit):
    """r = f(x) + noise with f a random one-hidden-layer ReLU network (fixed per seed),
    scaled so that f(x) has standard deviation `scale` over actions on the unit sphere."""
    contexts: str = "varying"
    num_actions: int = 20
    hidden: int = 32
    scale: float = 1.0
    name = "neural"

    def validate(self):
        super().validate()
        check_int(self, "hidden", 1)
        check_positive(self, "scale")

    def _draw_problem(self, gen):
        S, d, h = self._S, self.d, self.hidden
        self.W = torch.randn(S, d, h, generator=gen, dtype=DTYPE)        # (S, d, h)
        self.b = 0.5 * torch.randn(S, 1, h, generator=gen, dtype=DTYPE)   # (S, 1, h)
        self.a = torch.randn(S, h, generator=gen, dtype=DTYPE)           # (S, h)
        probe = unit_sphere((S, 512), d, gen)                             # (S, 512, d)
        f = self._raw(probe)
        self.a = self.a * self.scale / f.std(dim=1, keepdim=True)        # unit spread per seed

    def _raw(self, X):
        hidden = torch.relu(torch.bmm(X, self.W) + self.b)               # (S, K, h)
        return torch.einsum("skh,sh->sk", hidden, self.a)

    def _draw_actions(self, gen):
        return unit_sphere((self._S, self.num_actions), self.d, gen)

    def mean_reward(self, X):
        return self._raw(X)


ENVIRONMENTS = {cls.name: cls for cls in (LinearBandit, UnitBallBandit, QuadraticBandit, NeuralBandit)}
