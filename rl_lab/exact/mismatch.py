"""Behaviour policies: how a sampler's mu arises from the trainer's pi.

Every mechanism maps pi's (n_contexts, V) logits to mu's, in float64 (truncation puts -inf on
the tokens mu can never sample).  The top-k / top-p rules are those of the rollout engine
(`rl_lab.engines.rollout.process_logits`), computed here in float64 so that they add no rounding.
"""
from __future__ import annotations

import torch

from rl_lab.errors import ConfigError
from rl_lab.exact.policies import flat_params, logits_at
from rl_lab.exact.quantities import exact_gradient
from rl_lab.exact.space import DTYPE, SequenceSpace

MECHANISMS = ("shift", "noise", "bfloat16", "float16", "temperature", "top_k", "top_p",
              "stale", "sparse")


def logit_shift(logits, delta: float, token: int = 1):
    """mu: the logit of `token` is raised by delta in every context (a systematic skew)."""
    out = logits.clone()
    out[:, token] += delta
    return out


def logit_noise(logits, sigma: float, seed: int = 0):
    """mu: i.i.d. N(0, sigma^2) noise on every logit of every context (kernel nondeterminism)."""
    g = torch.Generator().manual_seed(seed)
    return logits + sigma * torch.randn(logits.shape, generator=g, dtype=DTYPE)


def round_logits(logits, dtype: str = "bfloat16", offset: float = 0.0):
    """mu: logits rounded to a low-precision dtype.  Real logits carry a large common offset
    (softmax ignores it); rounding error grows with the magnitude, so `offset` is added
    before rounding and removed after: offset 0 gives the smallest mismatch."""
    low = getattr(torch, dtype)
    return (logits + offset).to(low).to(DTYPE) - offset


def with_temperature(logits, tau: float):
    """mu: sampling at temperature tau (the trainer scores at temperature 1)."""
    return logits / tau


def top_k(logits, k: int):
    """mu: only the k largest logits survive (ties kept), others get -inf."""
    kth = torch.topk(logits, k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p(logits, p: float):
    """mu: nucleus sampling, a token is dropped when the mass strictly before it (sorted by
    probability) already reaches p."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    drop_sorted = (probs.cumsum(-1) - probs) >= p
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def sparse_mismatch(space: SequenceSpace, logits, delta: float, depth: int | None = None):
    """mu = pi except at ONE rare context: the least likely context of depth `depth` (default
    T//2) under pi, where the logit of pi's favourite token is lowered by delta.  Small TV,
    large chi^2: the pattern of a sampler that is wrong only on rare prefixes."""
    depth = space.T // 2 if depth is None else depth
    if not 0 <= depth < space.T:
        raise ConfigError(f"sparse_mismatch depth={depth} must be in [0, {space.T - 1}]")
    reach, _ = space.prefix_probs(torch.log_softmax(logits, -1))
    c = space.offsets[depth] + int(space.level(reach, depth).argmin())
    out = logits.clone()
    out[c, int(logits[c].argmax())] -= delta
    return out


def stale_logits(space: SequenceSpace, policy, reward, distance: float):
    """mu: the same policy `distance` (in parameter norm) behind along the ascent direction,
    theta_mu = theta - distance * grad J / ||grad J||: samples from before the last update."""
    g = exact_gradient(space, policy, reward)
    theta = flat_params(policy)
    with torch.no_grad():
        return logits_at(policy, theta - distance * g / g.norm().clamp(min=1e-30))


@torch.no_grad()
def behaviour_logits(space: SequenceSpace, policy, mechanism: str, size: float,
                     reward: torch.Tensor | None = None, seed: int = 0):
    """(n_contexts, V) logits of mu derived from the policy pi by `mechanism` with strength
    `size`:  shift: delta on token 1's logit; noise: sigma; bfloat16/float16: the common
    logit offset before rounding; temperature: tau; top_k: k; top_p: p; stale: parameter
    distance (needs `reward`); sparse: delta at one rare context."""
    logits = policy().detach()
    if mechanism == "shift":
        return logit_shift(logits, size)
    if mechanism == "noise":
        return logit_noise(logits, size, seed)
    if mechanism in ("bfloat16", "float16"):
        return round_logits(logits, mechanism, size)
    if mechanism == "temperature":
        if size <= 0:
            raise ConfigError(f"temperature size={size} must be > 0")
        return with_temperature(logits, size)
    if mechanism == "top_k":
        if int(size) != size or not 1 <= size <= space.V:
            raise ConfigError(f"top_k size={size} must be an integer in [1, {space.V}]")
        return top_k(logits, int(size))
    if mechanism == "top_p":
        if not 0 < size <= 1:
            raise ConfigError(f"top_p size={size} must be in (0, 1]")
        return top_p(logits, size)
    if mechanism == "stale":
        if reward is None:
            raise ConfigError("mechanism='stale' needs the reward (to know the update direction)")
        with torch.enable_grad():
            return stale_logits(space, policy, reward, size)
    if mechanism == "sparse":
        return sparse_mismatch(space, logits, size)
    raise ConfigError(f"mechanism={mechanism!r} is not allowed; choose one of {list(MECHANISMS)}")
