"""Neural Ensemble++: a shared feature network, a mean head, an ensemble head trained on
stop-gradient features, a frozen random prior head, and a symmetrised perturbed loss.
S independent networks (one per seed) live in batched weight tensors.

    f(x, zeta) = w^T h(x) + zeta^T g(x),     g(x) = (W + prior_scale W0)^T sg[h(x)]
                 '-- mean --'   '------------ ensemble part --------------'

h is an MLP (the features), w the mean head, W (d_h x M) the trainable ensemble head, which
starts at zero, W0 the frozen prior head (rows uniform on the unit sphere of R^M) and sg a
stop-gradient, so only the mean loss shapes the features.  With h(x) = x this is exactly the
linear Ensemble++ of `rl_lab.toolkits.bandits.linear`, with A = W + prior_scale W0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from rl_lab.errors import ConfigError
from rl_lab.toolkits.bandits.envs import check_choice, check_int, check_positive
from rl_lab.toolkits.bandits.linear import INDICES, PERTURBATIONS, unit_noise


def symmetrised_loss(mean: torch.Tensor, g: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                     zetas: torch.Tensor, noise_std: float) -> torch.Tensor:
    """Per-seed perturbed squared loss, averaged over data and over a set of indices that is
    closed under negation (zeta and -zeta both in it):

        mean over (b, j) of ( y_b + sigma zeta_j^T z_b  -  [ mean_b + zeta_j^T g_b ] )^2.

    Because the set is symmetric, the cross term 2 (y - mean) zeta^T (sigma z - g) cancels
    exactly and the loss splits into (y - mean)^2 + avg_j (zeta_j^T (sigma z - g))^2: the mean
    head does plain regression on the rewards, the ensemble head regresses the noise sigma z.

    mean (S, B), g (S, B, M), y (S, B), z (S, B, M), zetas (S, B, J, M) -> (S,)."""
    target = y.unsqueeze(-1) + noise_std * (zetas @ z.unsqueeze(-1)).squeeze(-1)   # (S, B, J)
    prediction = mean.unsqueeze(-1) + (zetas @ g.unsqueeze(-1)).squeeze(-1)        # (S, B, J)
    return ((target - prediction) ** 2).mean(dim=(1, 2))


def _batched_linear(S: int, n_in: int, n_out: int, gen: torch.Generator):
    """PyTorch's default Linear init, for S independent layers: W (S, in, out), b (S, 1, out)."""
    bound = 1 / math.sqrt(n_in)
    W = (2 * torch.rand(S, n_in, n_out, generator=gen) - 1) * bound
    b = (2 * torch.rand(S, 1, n_out, generator=gen) - 1) * bound
    return W.requires_grad_(), b.requires_grad_()


@dataclass
class NeuralEnsemblePlusPlus:
    """Neural Ensemble++ agent for finite action sets (S seeds batched).

    Each observation is stored with a perturbation z ~ P_z drawn once ("buffer noise"); every
    step takes `updates_per_step` Adam steps on minibatches of the symmetrised loss; each
    decision draws one index zeta ~ P_zeta ("action noise") and acts greedily on f(., zeta).
    `index="onehot"` acts on one ensemble member at a time (classic ensemble sampling with
    randomised prior functions); `greedy=True` acts on the mean head alone."""
    d: int = 10
    M: int = 8
    hidden: tuple = (32, 32)
    noise_std: float = 1.0
    """sigma: scale of the target perturbation (eta, the reward noise, in the linear case)."""
    prior_scale: float = 1.0
    """Scale of the frozen prior head (sigma0, the prior standard deviation, in the linear case)."""
    perturbation: str = "sphere"
    index: str = "gaussian"
    update_index: str = "coordinate"
    """"coordinate": the loss averages over all 2M indices +-sqrt(M) e_i (exact); any other
    distribution: over `update_pairs` pairs (zeta, -zeta) drawn afresh for every datum."""
    update_pairs: int = 4
    learning_rate: float = 1e-3
    batch_size: int = 32
    updates_per_step: int = 1
    weight_decay: float = 1.0
    """lambda of the ridge penalty lambda ||params||^2 on the summed loss (divided by the data count)."""
    greedy: bool = False
    name = "neural Ensemble++"
    params: list = field(default_factory=list, init=False, repr=False)

    def __post_init__(self):
        check_int(self, "d", 1)
        check_int(self, "M", 1)
        if not isinstance(self.hidden, (tuple, list)) or not self.hidden or \
                not all(isinstance(h, int) and h >= 1 for h in self.hidden):
            raise ConfigError(f"{type(self).__name__}.hidden={self.hidden!r} must be a non-empty "
                              "tuple of positive layer widths, e.g. (32, 32)")
        self.hidden = tuple(self.hidden)
        check_positive(self, "noise_std", allow_zero=True)
        check_positive(self, "prior_scale", allow_zero=True)
        check_choice(self, "perturbation", PERTURBATIONS)
        check_choice(self, "index", INDICES)
        check_choice(self, "update_index", ("coordinate", "gaussian", "sphere", "rademacher"))
        check_int(self, "update_pairs", 1)
        check_positive(self, "learning_rate")
        check_int(self, "batch_size", 1)
        check_int(self, "updates_per_step", 0)
        check_positive(self, "weight_decay", allow_zero=True)

    @property
    def label(self) -> str:
        if self.greedy:
            return "neural greedy"
        if self.index == "onehot":
            return f"neural ensemble sampling M={self.M}"
        return f"{self.name} M={self.M}"

    # --- model ------------------------------------------------------------------------------
    def reset(self, num_seeds: int, generator: torch.Generator) -> None:
        S, M, gen = num_seeds, self.M, generator
        self.gen, self.S = gen, S
        self.layers = []
        n_in = self.d
        for width in self.hidden:
            self.layers.append(_batched_linear(S, n_in, width, gen))
            n_in = width
        self.w, self.w_bias = _batched_linear(S, n_in, 1, gen)           # mean head
        self.W = torch.zeros(S, n_in, M, requires_grad=True)             # ensemble head
        W0 = torch.randn(S, n_in, M, generator=gen)
        self.W0 = W0 / W0.norm(dim=-1, keepdim=True)                     # frozen prior head
        self.params = [p for layer in self.layers for p in layer] + [self.w, self.w_bias, self.W]
        self.optimizer = torch.optim.Adam(self.params, lr=self.learning_rate, foreach=True)
        self._n = 0
        self._x = torch.empty(S, 64, self.d)
        self._y = torch.empty(S, 64)
        self._z = torch.empty(S, 64, M)

    def forward(self, X: torch.Tensor):
        """X (S, N, d) -> mean (S, N) and ensemble part g (S, N, M)."""
        h = X
        for W, b in self.layers:
            h = torch.relu(torch.baddbmm(b, h, W))                       # (S, N, width)
        mean = torch.baddbmm(self.w_bias, h, self.w).squeeze(-1)         # (S, N)
        h_sg = h.detach()                                                # stop-gradient
        g = h_sg @ self.W + self.prior_scale * (h_sg @ self.W0)          # (S, N, M)
        return mean, g

    # --- protocol ---------------------------------------------------------------------------
    def act(self, actions: torch.Tensor | None):
        if actions is None:
            raise ValueError("NeuralEnsemblePlusPlus needs a finite action set; the unit ball is "
                             "for the linear agents")
        if actions.shape[-1] != self.d:
            raise ValueError(f"{type(self).__name__}.d={self.d} but the actions have "
                             f"{actions.shape[-1]} features")
        with torch.no_grad():
            mean, g = self.forward(actions.float())                      # (S, K), (S, K, M)
            if self.greedy:
                scores = mean
            else:
                zeta = unit_noise(self.index, (self.S,), self.M, self.gen).float()   # (S, M)
                scores = mean + (g @ zeta.unsqueeze(-1)).squeeze(-1)
        index = scores.argmax(dim=-1)                                    # (S,)
        return actions[torch.arange(self.S), index], index

    def _store(self, x, y, z):
        if self._n == self._x.shape[1]:                                  # grow the buffer
            self._x = torch.cat([self._x, torch.empty_like(self._x)], 1)
            self._y = torch.cat([self._y, torch.empty_like(self._y)], 1)
            self._z = torch.cat([self._z, torch.empty_like(self._z)], 1)
        self._x[:, self._n], self._y[:, self._n], self._z[:, self._n] = x, y, z
        self._n += 1

    def _update_indices(self, B: int) -> torch.Tensor:
        """(S, B, J, M) loss indices, closed under negation."""
        M = self.M
        if self.update_index == "coordinate":
            eye = math.sqrt(M) * torch.eye(M)
            return torch.cat([eye, -eye]).expand(self.S, B, 2 * M, M)
        zeta = unit_noise(self.update_index, (self.S, B, self.update_pairs), M, self.gen).float()
        return torch.cat([zeta, -zeta], dim=2)

    def update(self, x: torch.Tensor, y: torch.Tensor) -> None:
        z = unit_noise(self.perturbation, (self.S,), self.M, self.gen) / math.sqrt(self.M)
        self._store(x.float(), y.float(), z.float())
        B = min(self.batch_size, self._n)
        seeds = torch.arange(self.S).unsqueeze(-1)                       # (S, 1)
        for _ in range(self.updates_per_step):
            rows = torch.randint(0, self._n, (self.S, B), generator=self.gen)   # (S, B)
            xb, yb, zb = self._x[seeds, rows], self._y[seeds, rows], self._z[seeds, rows]
            mean, g = self.forward(xb)
            loss = symmetrised_loss(mean, g, yb, zb, self._update_indices(B), self.noise_std)
            # the ridge penalty (lambda / n) ||params||^2, applied by Adam as the gradient term
            # 2 (lambda / n) params; summing the per-seed losses keeps the seeds independent
            self.optimizer.param_groups[0]["weight_decay"] = 2 * self.weight_decay / self._n
            self.optimizer.zero_grad(set_to_none=True)
            loss.sum().backward()
            self.optimizer.step()
