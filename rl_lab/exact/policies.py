"""Differentiable autoregressive policies over an enumerable SequenceSpace.

A policy is an `nn.Module` whose forward() returns the next-token logits of *every* context,
shape (n_contexts, V), in float64.  Two kinds:

* `TabularPolicy`: one free logit vector per context (the most expressive, and the
  parametrisation in which per-token scores of one sequence are orthogonal);
* `NetworkPolicy`: a tiny MLP (or, with hidden=0, a linear softmax policy) from features of
  the prefix, shared by all contexts, so what the next token sees matters through a few
  parameters, as in a language model.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from rl_lab.errors import ConfigError
from rl_lab.exact.space import DTYPE, SequenceSpace


class TabularPolicy(nn.Module):
    """logits[c] is a free parameter for every context c: theta has shape (n_contexts, V)."""

    def __init__(self, space: SequenceSpace, scale: float = 1.0, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.space = space
        self.logits = nn.Parameter(scale * torch.randn(space.n_contexts, space.V, generator=g,
                                                       dtype=DTYPE))

    def forward(self) -> torch.Tensor:                                 # (n_contexts, V)
        return self.logits


def prefix_features(space: SequenceSpace) -> torch.Tensor:
    """(n_contexts, 2V+2) features of each prefix y_<t: a constant 1, the frequency of every
    token in the prefix (V), the last token one-hot (V; zeros for the empty prefix), t/T."""
    V, T = space.V, space.T
    rows = []
    for t in range(T):
        toks = space.context_tokens(t)                                 # (V**t, t)
        onehot = F.one_hot(toks, V).to(DTYPE)                          # (V**t, t, V)
        freq = onehot.mean(1) if t > 0 else torch.zeros(1, V, dtype=DTYPE)
        last = onehot[:, -1] if t > 0 else torch.zeros(1, V, dtype=DTYPE)
        n = V ** t
        rows.append(torch.cat([torch.ones(n, 1, dtype=DTYPE), freq, last,
                               torch.full((n, 1), t / T, dtype=DTYPE)], dim=1))
    return torch.cat(rows)                                             # (n_contexts, 2V+2)


class NetworkPolicy(nn.Module):
    """A tiny network shared by all contexts: features(y_<t) -> [tanh MLP] -> V logits.

    hidden=0 gives a linear softmax policy, logits = features @ W (2V+2 features, so
    (2V+2)*V parameters whatever T).  The parameter count does not grow with T, which makes
    it the right policy for scaling in T.
    """

    def __init__(self, space: SequenceSpace, hidden: int = 0, scale: float = 1.0, seed: int = 0):
        super().__init__()
        if not isinstance(hidden, int) or hidden < 0:
            raise ConfigError(f"NetworkPolicy.hidden={hidden!r} must be an int >= 0 (0 = linear)")
        g = torch.Generator().manual_seed(seed)
        self.space = space
        self.register_buffer("features", prefix_features(space))       # (n_contexts, F)
        n_in = self.features.shape[1]
        dims = [n_in, hidden, space.V] if hidden else [n_in, space.V]
        self.weights = nn.ParameterList(
            nn.Parameter(scale * torch.randn(a, b, generator=g, dtype=DTYPE) / a ** 0.5)
            for a, b in zip(dims[:-1], dims[1:]))

    def forward(self) -> torch.Tensor:                                 # (n_contexts, V)
        h = self.features
        for i, w in enumerate(self.weights):
            h = h @ w
            if i < len(self.weights) - 1:
                h = torch.tanh(h)
        return h


def feedback_policy(space: SequenceSpace, bias: float = 0.0, feedback: float = 1.0) -> NetworkPolicy:
    """The series' "Toy A": a linear NetworkPolicy (all 2V+2 x V weights trainable) started at
    logit(1) - logit(0) = bias + feedback * (fraction of 1s in the prefix - 1/2) and every other
    logit 0.  The same conditional rule at every T, so scaling in T compares like with like;
    feedback != 0 makes the next token depend on what came before."""
    policy = NetworkPolicy(space, hidden=0)
    with torch.no_grad():
        w = policy.weights[0]                                          # (2V+2, V)
        w.zero_()
        w[0, 1] = bias - feedback / 2                                  # constant feature
        w[1 + 1, 1] = feedback                                         # frequency of token 1
    return policy


def log_probs(policy: nn.Module) -> torch.Tensor:
    """(n_contexts, V) next-token log-probs log pi(a | c) (differentiable)."""
    return F.log_softmax(policy(), dim=-1)


def flat_params(policy: nn.Module) -> torch.Tensor:
    """(P,) all parameters of the policy as one detached vector."""
    return torch.cat([p.detach().reshape(-1) for p in policy.parameters()])


def set_flat_params(policy: nn.Module, flat: torch.Tensor) -> None:
    """Overwrite the policy's parameters with the (P,) vector `flat` (in place)."""
    with torch.no_grad():
        i = 0
        for p in policy.parameters():
            p.copy_(flat[i:i + p.numel()].view_as(p))
            i += p.numel()


def flat_grad(output: torch.Tensor, policy: nn.Module) -> torch.Tensor:
    """(P,) gradient of the scalar `output` with respect to all policy parameters."""
    grads = torch.autograd.grad(output, list(policy.parameters()), allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1)
                      for g, p in zip(grads, policy.parameters())])


def logits_at(policy: nn.Module, flat: torch.Tensor) -> torch.Tensor:
    """The policy's (n_contexts, V) logits at the parameter vector `flat` (P,), without
    touching its parameters; works under torch.func.vmap for a batch of vectors."""
    params, i = {}, 0
    for name, p in policy.named_parameters():
        params[name] = flat[i:i + p.numel()].view(p.shape)
        i += p.numel()
    return torch.func.functional_call(policy, params, ())


def score_table(policy: nn.Module) -> torch.Tensor:
    """(n_contexts, V, P): the score vector grad_theta log pi(a | c) for every (context, token).
    Dense, so for small problems (n_contexts * V * P up to ~1e8)."""
    flat = flat_params(policy)
    with warnings.catch_warnings():   # torch's forward-AD set-up warns about its own jit use
        warnings.filterwarnings("ignore", message=".*torch.jit.script", category=DeprecationWarning)
        return torch.func.jacfwd(lambda th: F.log_softmax(logits_at(policy, th), dim=-1))(flat)


def score_sqnorm(policy: nn.Module) -> torch.Tensor:
    """(n_contexts, V): ||grad_theta log pi(a | c)||^2.  Closed form for a TabularPolicy,
    where the score of token a at context c is e_a - pi(.|c) in the block of c."""
    if isinstance(policy, TabularPolicy):
        with torch.no_grad():
            p = torch.softmax(policy(), -1)
            return 1 - 2 * p + (p * p).sum(-1, keepdim=True)
    return score_table(policy).pow(2).sum(-1)
