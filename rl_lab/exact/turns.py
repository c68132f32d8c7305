"""An enumerable two-turn episode, for exact expectations of multi-turn policy-gradient estimators.

Turn 1: the agent picks a1 ~ softmax(theta1) among n1 actions and gets r1[a1].  The actions in
`stops` end the episode; any other a1 leads to turn 2: a2 ~ softmax(theta2[a1]) among n2 actions,
reward r2[a1, a2].  An episode is (a1, a2) with a2 = -1 when it stopped after turn 1, so groups of
N episodes reach turn 2 in different numbers n_2 <= N = n_1: the case where GRPO's self-including
baseline shrinks turns unevenly (rl_lab.algos.trloo).

`expected_update` enumerates every group of N episodes (E**N of them) and returns the exact
expectation of (1/N) sum_i sum_k A_ik grad log pi(a_ik) for a per-turn advantage function with
the signature of rl_lab.algos.trloo.turn_leave_one_out; `true_gradient` is grad J by autograd.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

from rl_lab.algos.trloo import turn_returns
from rl_lab.errors import ConfigError

DTYPE = torch.float64
MAX_GROUPS = 2 ** 20


@dataclass
class TwoTurnToy:
    """The toy's sizes, rewards and tabular logits (seeded)."""
    n1: int = 3
    n2: int = 2
    stops: tuple[int, ...] = (0,)
    seed: int = 0
    gamma: float = 1.0
    theta1: torch.Tensor = field(init=False)
    theta2: torch.Tensor = field(init=False)
    r1: torch.Tensor = field(init=False)
    r2: torch.Tensor = field(init=False)

    def __post_init__(self):
        if self.n1 < 2 or self.n2 < 1:
            raise ConfigError(f"TwoTurnToy(n1={self.n1}, n2={self.n2}): needs n1 >= 2 and n2 >= 1")
        if any(not 0 <= s < self.n1 for s in self.stops):
            raise ConfigError(f"TwoTurnToy.stops={self.stops}: actions are 0..{self.n1 - 1}")
        g = torch.Generator().manual_seed(self.seed)
        self.theta1 = torch.randn(self.n1, generator=g, dtype=DTYPE).requires_grad_()
        self.theta2 = torch.randn(self.n1, self.n2, generator=g, dtype=DTYPE).requires_grad_()
        self.r1 = torch.rand(self.n1, generator=g, dtype=DTYPE)
        self.r2 = torch.rand(self.n1, self.n2, generator=g, dtype=DTYPE)

    def episodes(self) -> list[tuple[int, int]]:
        """Every episode (a1, a2), a2 = -1 for one that stopped after turn 1."""
        return [(a1, -1) if a1 in self.stops else (a1, a2)
                for a1 in range(self.n1) for a2 in (range(self.n2) if a1 not in self.stops else [None])]

    def tables(self):
        """(logp (E, 2) per-turn log-probs with gradient, exists (E, 2), rewards (E, 2))."""
        eps = self.episodes()
        a1 = torch.tensor([e[0] for e in eps])
        a2 = torch.tensor([max(e[1], 0) for e in eps])
        second = torch.tensor([e[1] >= 0 for e in eps])
        lp1 = torch.log_softmax(self.theta1, -1)[a1]                                    # (E,)
        lp2 = torch.log_softmax(self.theta2, -1)[a1, a2] * second                        # (E,)
        rewards = torch.stack([self.r1[a1], self.r2[a1, a2] * second], 1)                # (E, 2)
        exists = torch.stack([torch.ones_like(second), second], 1)
        return torch.stack([lp1, lp2], 1), exists, rewards

    def params(self) -> list[torch.Tensor]:
        return [self.theta1, self.theta2]

    def objective(self) -> torch.Tensor:
        """J = E[sum of rewards] (gamma applies between turns)."""
        logp, exists, rewards = self.tables()
        G = turn_returns(rewards, exists, self.gamma)
        return (logp.sum(-1).exp() * G[:, 0]).sum()


def _flat_grad(value: torch.Tensor, params) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(value, params)])


def true_gradient(toy: TwoTurnToy) -> torch.Tensor:
    """grad J over (theta1, theta2), flattened."""
    return _flat_grad(toy.objective(), toy.params())


def expected_update(toy: TwoTurnToy, group_size: int, advantage_fn) -> torch.Tensor:
    """E over groups of `group_size` i.i.d. episodes of (1/N) sum_i sum_k A_ik grad log pi(a_ik),
    exactly, where A = advantage_fn(G (M*N, 2), exists (M*N, 2), group_ids (M*N,)) and G are the
    turn returns.  Flattened like `true_gradient`."""
    logp, exists, rewards = toy.tables()
    E, N = len(exists), group_size
    if E ** N > MAX_GROUPS:
        raise ConfigError(f"{E} episodes in groups of {N}: {E ** N:,} groups exceed {MAX_GROUPS:,}; "
                          "use a smaller toy or group")
    combos = torch.tensor(list(itertools.product(range(E), repeat=N)))                   # (M, N)
    M = len(combos)
    flat = combos.reshape(-1)                                                            # (M*N,)
    p_ep = logp.detach().sum(-1).exp()                                                   # (E,)
    p_group = p_ep[combos].prod(-1)                                                      # (M,)
    G = turn_returns(rewards, exists, toy.gamma)                                         # (E, 2)
    group_ids = torch.arange(M).repeat_interleave(N)
    A = advantage_fn(G[flat], exists[flat], group_ids)                                   # (M*N, 2)
    weight = (p_group.repeat_interleave(N)[:, None] * A / N).detach()                   # (M*N, 2)
    coef = torch.zeros(E, 2, dtype=DTYPE).index_add_(0, flat, weight)                   # (E, 2)
    return _flat_grad((coef * logp).sum(), toy.params())


def angle_degrees(u: torch.Tensor, v: torch.Tensor) -> float:
    """The angle between two flattened gradients, in degrees."""
    cos = (u @ v / (u.norm() * v.norm())).clamp(-1, 1)
    return float(torch.rad2deg(torch.arccos(cos)))
