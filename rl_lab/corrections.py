"""Rollout correction: importance weights, rejection masks and trust regions between the
trainer's log-probs (pi) and the sampler's (mu), with the semantics and metric names of
verl 0.9.1's `rollout_corr_helper` (checked against it by tests/integration/test_verl_conformance.py).

Every function takes (B, T) tensors: `log_ratio` = log pi - log mu on the sampled tokens and a
0/1 `mask` of the tokens that count.  Weights come back detached and 0 on padding; masks can
only remove tokens; metrics have no prefix (`rollout_correction` adds `rollout_corr/`).

  importance_weights  token / sequence IS, truncated at C (TIS) or zeroed outside [lo, hi]
                      (IcePop), optionally batch-normalised
  rejection_mask      {token, seq_sum, seq_mean, seq_max} x {k1, k2, k3}, comma-combined (AND);
                      plus the exact per-context KL ("kl") when the full distributions are known
  geometric_mask      Part 3's Geo-Mask: bounds on the geometric-mean ratio itself
  token_veto_mask     drop a sequence if one token's ratio is below a floor (verl before PR #4544)
  trust_region_mask   TRM: drop a sequence whose max or average divergence leaves the region
  trust_region_bounds the TRM paper's bound family (classical, Pinsker-marginal, mixed, coupling,
                      adaptive) on the surrogate error
  rollout_correction  all of them for one batch, plus the mismatch monitors
Padding positions never influence a result, even when they hold NaN or inf.

Chapters 3, 4 and 5 (book/ch03_token_vs_sequence.md, ch04_masking_trust_regions.md,
ch05_rollout_correction.md) derive these.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from rl_lab.correction_options import (  # noqa: F401 - re-exported
    CORRECTION_FIELDS,
    EXACT_RS_OPTIONS,
    IS_LEVELS,
    RS_LEVELS,
    RS_OPTIONS,
    VERL_RS_OPTIONS,
    parse_is_threshold,
    parse_rs,
)
from rl_lab.errors import ConfigError
from rl_lab.monitors import SAFETY_BOUND, masked_mean, masked_sum, mismatch_metrics


# ----------------------------------------------------------------------------- IS weights
def importance_weights(log_ratio, mask, level: str = "token", threshold=2.0,
                       batch_normalize: bool = False):
    """(B, T) log(pi/mu) -> (B, T) detached weights, 0 on padding, and metrics.

    token:    rho_t = exp(clamp(lr_t, +-20))
    sequence: rho   = exp(clamp(sum_t lr_t, +-20)), the same for every valid token of the row
    TIS (threshold C): w = min(rho, C), no lower truncation.
    IcePop ("lo_hi"):  w = rho inside [lo, hi], else 0 (the mask is not changed).
    batch_normalize:   divide by the (token- or sequence-) mean weight, after truncation.
    """
    if level not in IS_LEVELS:
        raise ConfigError(f"rollout_is={level!r} is unknown; choose one of {[None, *IS_LEVELS]}")
    upper, lower = parse_is_threshold(threshold)
    valid = mask.bool()
    if level == "token":
        log_w = log_ratio
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))                   # (B, T)
    else:
        log_w = masked_sum(log_ratio, mask, -1)[:, None]                                 # (B, 1)
        raw = torch.exp(log_w.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)  # (B, T)
    raw = torch.where(valid, raw, torch.zeros_like(raw))
    if lower is None:
        w = raw.clamp(max=upper)
    else:
        w = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    w = w.detach()
    metrics = is_metrics(w, raw, log_w, mask, level, upper, lower)
    if batch_normalize:
        if level == "token":
            factor = masked_mean(w, mask)
        else:
            rows = (mask.sum(-1) > 0).to(w.dtype)                                         # (B,)
            factor = (masked_mean(w, mask, -1) * rows).sum() / rows.sum().clamp(min=1e-8)
        metrics["rollout_is_batch_norm_factor"] = factor.item() if factor > 1e-8 else 1.0
        if factor > 1e-8:
            w = w / factor
    return w, metrics


@torch.no_grad()
def is_metrics(w, raw, log_w, mask, level, upper, lower=None) -> dict:
    """verl's rollout_is_* statistics of the applied weights `w` and the raw ones."""
    m, valid = mask.to(w.dtype), mask.bool()
    lo = 1.0 / upper if lower is None else lower
    out = {"rollout_is_mean": masked_mean(w, m).item()}
    if level == "sequence":  # over all rows, empty ones (log_w = 0) included
        out["rollout_is_max"] = torch.exp(log_w.max().clamp(max=SAFETY_BOUND)).item()
        out["rollout_is_min"] = torch.exp(log_w.min()).item()
        # verl compares with float32 logs of the bounds
        out["rollout_is_ratio_fraction_high"] = (log_w > torch.tensor(upper).log()).float().mean().item()
        out["rollout_is_ratio_fraction_low"] = (log_w < torch.tensor(lo).log()).float().mean().item()
    else:
        out["rollout_is_max"] = w.masked_fill(~valid, -math.inf).max().item()
        out["rollout_is_min"] = w.masked_fill(~valid, math.inf).min().item()
        out["rollout_is_ratio_fraction_high"] = masked_mean((raw > upper).to(m.dtype), m).item()
        out["rollout_is_ratio_fraction_low"] = masked_mean((raw < lo).to(m.dtype), m).item()
    wc = w.clamp(0.0, upper)
    var = masked_mean(wc ** 2, m) - masked_mean(wc, m) ** 2
    out["rollout_is_std"] = var.clamp(min=0).sqrt().item() if m.sum() > 1 else 0.0
    second = masked_mean((wc / (masked_mean(wc, m) + 1e-8)) ** 2, m).item()
    out["rollout_is_eff_sample_size"] = 1.0 / second if second != 0 else 0.0  # verl: ZeroDivisionError
    s = masked_mean(w, m, -1)                                                          # (B,) per row
    out.update({"rollout_is_seq_mean": s.mean().item(),
                "rollout_is_seq_std": s.std().item() if s.numel() > 1 else 0.0,
                "rollout_is_seq_max": s.max().item(), "rollout_is_seq_min": s.min().item(),
                "rollout_is_seq_max_deviation": (s - 1).abs().max().item()})
    q = masked_mean(raw, m, -1)
    out["rollout_is_seq_fraction_high"] = (q > upper).float().mean().item()
    out["rollout_is_seq_fraction_low"] = (q < lo).float().mean().item()
    if lower is not None:
        out["rollout_is_oob_ratio"] = masked_mean(((raw < lower) | (raw > upper)).to(m.dtype), m).item()
    return out


# ----------------------------------------------------------------------------- rejection
def token_divergences(log_ratio, token_kl=None) -> dict[str, torch.Tensor]:
    """Per-token divergence statistics, all (B, T), with l = clamp(log pi/mu, +-20):
    k1 = -l (can be < 0),  k2 = l^2/2 (symmetric),  k3 = e^l - 1 - l (>= 0, unbiased for
    KL(mu || pi) under mu), and kl = the exact KL(mu(.|c_t) || pi(.|c_t)) when given."""
    lr = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    stats = {"k1": -lr, "k2": 0.5 * lr ** 2, "k3": torch.exp(lr) - 1 - lr}
    if token_kl is not None:
        stats["kl"] = token_kl
    return stats


def reduce_rows(x, mask, level):
    """(B, T) per-token statistic -> (B,) per-sequence value for a seq_* level."""
    if level == "seq_sum":
        return masked_sum(x, mask, -1)
    if level == "seq_mean":
        return masked_mean(x, mask, -1)
    top = x.masked_fill(~mask.bool(), -math.inf).max(-1).values                       # seq_max
    return torch.where(top == -math.inf, torch.zeros_like(top), top)


def rejection_mask(log_ratio, mask, rollout_rs: str, rollout_rs_threshold, token_kl=None):
    """Hard trust region: (B, T) mask with the tokens/sequences that fail any option removed.

    option = level_estimator.  token_*: each token on its own; seq_sum/seq_mean/seq_max: one
    value per sequence, and a failing sequence loses all its tokens.  k1 keeps
    log(lo) <= stat <= log(hi) -- note stat = -log rho, so the kept ratios are [1/hi, 1/lo];
    k2/k3/kl keep stat <= U.  "*_kl" needs `token_kl` (B, T), the exact per-context KL.
    """
    options = parse_rs(rollout_rs, rollout_rs_threshold)
    if log_ratio.shape[0] == 0:
        return mask, {}
    needs_kl = [o for o in options if o.endswith("_kl")]
    if needs_kl and token_kl is None:
        raise ConfigError(f"rollout_rs options {needs_kl} need the exact per-token KL, i.e. the "
                          "sampler's full distributions (RolloutBatch.sampler_logprobs_full); this "
                          f"batch has none.  Use a sample-based option from {list(VERL_RS_OPTIONS)}")
    stats = token_divergences(log_ratio, token_kl)
    valid, rows = mask.bool(), mask.sum(-1) > 0                                          # (B, T), (B,)
    keep_all = torch.ones_like(log_ratio)
    metrics = {}
    for option, (lo, hi) in options.items():
        level, est = option.rsplit("_", 1)
        k1 = est == "k1"
        lo_b, hi_b = (math.log(lo), math.log(hi)) if k1 else (0.0, hi)
        tok = stats[est]
        seq = None if level == "token" else reduce_rows(tok, mask, level)                 # (B,)
        value = tok if seq is None else seq[:, None].expand_as(tok)                      # (B, T)
        keep = (value <= hi_b) & (value >= lo_b) if k1 else value <= hi_b                # (B, T)
        keep_all = keep_all * keep.to(keep_all.dtype)
        metrics.update(rs_metrics(f"rollout_rs_{option}", value, seq, mask, lo_b, hi_b, k1))
        rejected_rows = (~keep & valid).any(-1)
        metrics[f"rollout_rs_{option}_masked_fraction"] = masked_mean(1 - keep.to(log_ratio.dtype), mask).item()
        n_rows = rows.to(log_ratio.dtype).sum()
        metrics[f"rollout_rs_{option}_seq_masked_fraction"] = \
            ((rejected_rows & rows).to(log_ratio.dtype).sum() / n_rows).item() if n_rows > 0 else 0.0
    metrics["rollout_rs_masked_fraction"] = masked_mean(1 - keep_all, mask).item()
    metrics["rollout_rs_seq_masked_fraction"] = ((keep_all <= 0.5) & valid).any(-1).float().mean().item()
    return (mask * keep_all).to(mask.dtype), metrics


@torch.no_grad()
def rs_metrics(prefix, value, seq, mask, lo_b, hi_b, k1) -> dict:
    """verl's per-option rollout_rs_* statistics.  `value` (B, T) is the token statistic, or
    the sequence statistic `seq` (B,) broadcast; lo_b/hi_b the bounds in statistic space."""
    m, valid = mask.to(value.dtype), mask.bool()
    rows = mask.sum(-1) > 0
    seqv = (masked_mean(value, m, -1) if seq is None else seq)[rows]                    # (valid rows,)
    per_seq = seq is not None and seqv.numel() > 0
    out = {f"{prefix}_mean": masked_mean(value, m).item()}
    if per_seq:
        out[f"{prefix}_max"], out[f"{prefix}_min"] = seqv.max().item(), seqv.min().item()
        out[f"{prefix}_fraction_high"] = (seqv > hi_b).float().mean().item()
        out[f"{prefix}_fraction_low"] = (seqv < lo_b).float().mean().item() if k1 else 0.0
    else:
        out[f"{prefix}_max"] = value.masked_fill(~valid, -math.inf).max().item()
        out[f"{prefix}_min"] = value.masked_fill(~valid, math.inf).min().item()
        out[f"{prefix}_fraction_high"] = masked_mean((value > hi_b).to(m.dtype), m).item()
        out[f"{prefix}_fraction_low"] = masked_mean((value < lo_b).to(m.dtype), m).item() if k1 else 0.0
    c = value.clamp(min=lo_b if k1 else 0.0, max=hi_b)
    var = masked_mean(c ** 2, m) - masked_mean(c, m) ** 2
    out[f"{prefix}_std"] = var.clamp(min=0).sqrt().item() if m.sum() > 1 else 0.0
    n = seqv.numel()
    out.update({f"{prefix}_seq_mean": seqv.mean().item() if n else 0.0,
                f"{prefix}_seq_std": seqv.std().item() if n > 1 else 0.0,
                f"{prefix}_seq_max": seqv.max().item() if n else 0.0,
                f"{prefix}_seq_min": seqv.min().item() if n else 0.0,
                f"{prefix}_seq_max_deviation": seqv.abs().max().item() if n else 0.0,
                f"{prefix}_seq_fraction_high": (seqv > hi_b).float().mean().item() if n else 0.0})
    if k1 or not n:
        out[f"{prefix}_seq_fraction_low"] = (seqv < lo_b).float().mean().item() if n else 0.0
    return out


def geometric_mask(log_ratio, mask, lower: float, upper: float):
    """Part 3's Geo-Mask: keep a sequence iff lower <= rho_geo <= upper, where
    rho_geo = exp(mean_t log rho_t) (length-invariant).  (B, T) -> (B, T) mask.

    verl spells this rollout_rs="seq_mean_k1", which bounds -log rho_geo instead: the same
    set when lower = 1/upper, mirrored ([1/upper, 1/lower]) otherwise."""
    log_geo = masked_mean(log_ratio, mask, -1)                                           # (B,)
    keep = (log_geo >= math.log(lower)) & (log_geo <= math.log(upper))
    return (mask * keep[:, None]).to(mask.dtype)


def token_veto_mask(log_ratio, mask, threshold: float):
    """Per-token veto: drop every token of a sequence in which some valid token has
    rho_t = pi/mu < threshold (a token the trainer finds far less likely than the sampler).
    verl had this as rollout_token_veto_threshold before PR #4544 replaced it."""
    if not 0 < threshold < 1:
        raise ConfigError(f"rollout_token_veto_threshold={threshold!r} is out of range; use a value in (0, 1)")
    bad = (log_ratio < math.log(threshold)) & mask.bool()                                # (B, T)
    vetoed = bad.any(-1)                                                                 # (B,)
    metrics = {"rollout_is_veto_fraction": vetoed.float().mean().item(),
               "rollout_is_catastrophic_token_fraction": masked_mean(bad.to(log_ratio.dtype), mask).item()}
    return (mask * ~vetoed[:, None]).to(mask.dtype), metrics


def trust_region_mask(log_ratio, mask, max_threshold: float | None = None,
                      avg_threshold: float | None = None, token_kl=None):
    """Trust Region Masking (Li et al. 2025; verl PR #4544): drop a whole sequence when its
    divergence leaves the region.  max criterion: max_t D_t <= max_threshold; average:
    mean_t D_t <= avg_threshold.  Sample-based (verl) D: k2 for the max, k3 for the average;
    with `token_kl` (B, T) the exact per-context KL(mu || pi) is used for both."""
    est_max, est_avg = ("kl", "kl") if token_kl is not None else ("k2", "k3")
    parts = [(f"seq_max_{est_max}", max_threshold), (f"seq_mean_{est_avg}", avg_threshold)]
    parts = [(o, t) for o, t in parts if t is not None]
    if not parts:
        raise ConfigError("trust_region_mask needs max_threshold, avg_threshold or both")
    return rejection_mask(log_ratio, mask, ",".join(o for o, _ in parts),
                          ",".join(str(t) for _, t in parts), token_kl)


def token_kl(rollout_logp_all, logp_all):
    """Exact per-context KL(mu(.|c_t) || pi(.|c_t)) from full (B, T, V) log-distributions -> (B, T).
    Tokens the sampler cannot draw (mu = 0) contribute 0."""
    p = rollout_logp_all.exp()
    diff = torch.where(p > 0, rollout_logp_all - logp_all, torch.zeros_like(p))
    return (p * diff).sum(-1)


# ----------------------------------------------------------------------------- the hook
@dataclass
class CorrectionInputs:
    """What a correction mode reads (B rows, T tokens): log rho = log pi - log mu on the sampled
    tokens, the mask so far (earlier modes may have removed tokens), the weights so far (None: no
    mode gave any), the exact per-context KL(mu || pi) when a mode declared it needs it, and the
    rollout batch (None when called on bare tensors)."""
    log_ratio: torch.Tensor                  # (B, T)
    mask: torch.Tensor                       # (B, T)
    weights: torch.Tensor | None = None      # (B, T), detached
    token_kl: torch.Tensor | None = None     # (B, T)
    batch: Any = None                        # rl_lab.engines.rollout.RolloutBatch


@dataclass(frozen=True)
class CorrectionMode:
    """One stage of the rollout correction, in registration order.  `apply(inputs, config)` returns
    (weights or None to keep inputs.weights, mask, metrics): weights are detached, a mask only loses
    tokens, metric names have no prefix.  `config` is the run's CorrectionConfig (RLConfig.
    rollout_correction; for a call on bare tensors, an object with the same fields).  A mode
    registered from outside is on when its name is in config.extra_modes, which holds its knobs."""
    name: str
    apply: Callable[[CorrectionInputs, Any], tuple]
    active: Callable[[Any], bool] | None = None
    """config -> on?  None: `name in config.extra_modes`."""
    gives_weights: bool = False
    needs_distributions: Callable[[Any], bool] = lambda config: False
    """Whether it reads the exact KL, i.e. mu's and pi's full (B, T, V) distributions."""

    def is_active(self, config) -> bool:
        return self.active(config) if self.active is not None else self.name in (config.extra_modes or {})


CORRECTION_MODES: list[CorrectionMode] = []
"""The registered modes, in the order they run: importance weights, rejection, token veto."""


def register_correction_mode(mode: CorrectionMode, before: str | None = None) -> CorrectionMode:
    """Add a mode (at the end, or just before the named one).  The same mode again is a no-op."""
    names = [m.name for m in CORRECTION_MODES]
    if mode.name in names:
        if CORRECTION_MODES[names.index(mode.name)] is mode:
            return mode
        raise ConfigError(f"a correction mode named {mode.name!r} is already registered; choose another name")
    CORRECTION_MODES.insert(names.index(before) if before is not None else len(names), mode)
    return mode


def unregister_correction_mode(name: str) -> None:
    CORRECTION_MODES[:] = [m for m in CORRECTION_MODES if m.name != name]


def _is_mode(x: CorrectionInputs, cfg):
    weights, metrics = importance_weights(x.log_ratio, x.mask, cfg.rollout_is, cfg.rollout_is_threshold,
                                          cfg.rollout_is_batch_normalize)
    return weights, x.mask, metrics


def _rs_mode(x: CorrectionInputs, cfg):
    mask, metrics = rejection_mask(x.log_ratio, x.mask, cfg.rollout_rs, cfg.rollout_rs_threshold, x.token_kl)
    return None, mask, metrics


def _veto_mode(x: CorrectionInputs, cfg):
    mask, metrics = token_veto_mask(x.log_ratio, x.mask, cfg.rollout_token_veto_threshold)
    return None, mask, metrics


for _mode in (
    CorrectionMode("importance_weights", _is_mode,
                   lambda c: c.rollout_is is not None and c.rollout_is_threshold is not None, gives_weights=True),
    CorrectionMode("rejection", _rs_mode, lambda c: c.rollout_rs is not None,
                   needs_distributions=lambda c: c.rollout_rs is not None and "_kl" in c.rollout_rs),
    CorrectionMode("token_veto", _veto_mode, lambda c: c.rollout_token_veto_threshold is not None),
):
    register_correction_mode(_mode)


@dataclass
class _CorrectionFields:
    """rollout_correction's keyword arguments, read by the modes as they read an RLConfig."""
    rollout_is: str | None = None
    rollout_is_threshold: Any = 2.0
    rollout_is_batch_normalize: bool = False
    rollout_rs: str | None = None
    rollout_rs_threshold: Any = None
    rollout_token_veto_threshold: float | None = None
    extra_modes: dict = field(default_factory=dict)


def active_modes(config) -> list[CorrectionMode]:
    """The registered modes a CorrectionConfig turns on, in order."""
    return [m for m in CORRECTION_MODES if m.is_active(config)]


def rollout_correction(old_logp, rollout_logp, mask, rollout_is: str | None = None,
                       rollout_is_threshold=2.0, rollout_is_batch_normalize: bool = False,
                       rollout_rs: str | None = None, rollout_rs_threshold=None,
                       rollout_token_veto_threshold: float | None = None, token_kl=None, *,
                       config=None, batch=None):
    """Weights (or None), mask and `rollout_corr/*` metrics for one batch (all (B, T)).

    log rho = old_logp - rollout_logp: pi_old/mu in decoupled mode, pi_theta/mu in bypass mode.
    The weights never carry gradient; the mask only loses tokens.  Same contract as verl's
    compute_rollout_correction_and_rejection_mask, except that an empty mask returns no
    metrics instead of raising (a batch whose every sample failed must not crash the run).
    The registered modes (CORRECTION_MODES) run in order on `config` (a CorrectionConfig), or on
    the keyword arguments when no config is given.
    """
    if rollout_logp is None:
        raise ConfigError("the rollout correction needs the sampler's log-probs (rollout_logp); this batch "
                          "has none.  Use an engine that reports them, or set rollout_is=None, "
                          "rollout_rs=None and bypass_mode=False")
    if old_logp.shape != rollout_logp.shape or old_logp.shape != mask.shape:
        raise ValueError(f"shapes differ: old_logp {tuple(old_logp.shape)}, rollout_logp "
                         f"{tuple(rollout_logp.shape)}, mask {tuple(mask.shape)}")
    if config is None:
        config = _CorrectionFields(rollout_is, rollout_is_threshold, rollout_is_batch_normalize, rollout_rs,
                                   rollout_rs_threshold, rollout_token_veto_threshold)
    modes = active_modes(config)
    old_logp = old_logp.detach()
    log_ratio = old_logp - rollout_logp
    x, metrics = CorrectionInputs(log_ratio, mask.clone(), None, token_kl, batch), {}
    if not mask.any():
        zeros = torch.zeros_like(log_ratio)
        return (zeros if any(m.gives_weights for m in modes) else None), x.mask, metrics
    for mode in modes:
        weights, x.mask, m = mode.apply(x, config)
        x.weights = x.weights if weights is None else weights
        metrics.update(m)
    metrics.update(mismatch_metrics(old_logp, rollout_logp, mask))
    return x.weights, x.mask, {f"rollout_corr/{k}": v for k, v in metrics.items()}


# ----------------------------------------------------------------------------- TRM bounds
def trust_region_bounds(T: int, delta: float, eps: float | None = None, kl_seq: float | None = None,
                        tv_seq: float | None = None, tv_per_step=None) -> dict[str, float]:
    """The bounds on |J(pi_theta) - J(pi_roll) - L(pi_theta)| of Li et al. (2025, TRM), rewards
    in [0, 1], from the per-context maxima delta = max KL(pi_roll || pi_theta) and eps = max TV
    (Pinsker: eps = sqrt(delta/2) when not given), the sequence-level divergences kl_seq and
    tv_seq (default: their worst cases T delta and Pinsker), and optionally the per-position
    mean TV D_t (length T) for the adaptive bound.

    classical  T(T-1) delta (KL) and 2T(T-1) eps^2 (TV)                       O(T^2)
    pm_kl/pm_tv  4 min(1, sqrt(delta/2) or eps) sum_t min(1, sqrt((t-1) delta/2))  O(T^1.5)
    mixed_kl/mixed_tv  4T min(1, sqrt(delta/2)) min(1, sqrt(kl_seq/2)) / 4T min(1, eps) min(1, tv_seq)  O(T)
    coupling   4 min(1, eps) sum_t min(1, (t-1) eps)
    adaptive   4 sum_t D_t min(1, (T-t) eps, sqrt((T-t) delta/2)), and its _tv / _kl routes
               (needs tv_per_step)
    unified    the smallest of them
    """
    eps = math.sqrt(delta / 2) if eps is None else eps
    kl_seq = T * delta if kl_seq is None else kl_seq
    tv_seq = min(1.0, math.sqrt(kl_seq / 2)) if tv_seq is None else tv_seq
    t = torch.arange(1, T + 1, dtype=torch.float64)                                   # 1..T
    pinsker_past = ((t - 1) * delta / 2).sqrt().clamp(max=1)                           # context shift
    out = {"classical_kl": T * (T - 1) * delta, "classical_tv": 2 * T * (T - 1) * eps ** 2,
           "pm_kl": 4 * min(1.0, math.sqrt(delta / 2)) * pinsker_past.sum().item(),
           "pm_tv": 4 * min(1.0, eps) * pinsker_past.sum().item(),
           "mixed_kl": 4 * T * min(1.0, math.sqrt(delta / 2)) * min(1.0, math.sqrt(kl_seq / 2)),
           "mixed_tv": 4 * T * min(1.0, eps) * min(1.0, tv_seq),
           "coupling": 4 * min(1.0, eps) * ((t - 1) * eps).clamp(max=1).sum().item()}
    if tv_per_step is not None:   # future TV after position t: coupling route, Pinsker route, or 1
        d = torch.as_tensor(tv_per_step, dtype=torch.float64)
        coup, pins = ((T - t) * eps).clamp(max=1), ((T - t) * delta / 2).sqrt().clamp(max=1)
        out.update({"adaptive_tv": 4 * (d * coup).sum().item(), "adaptive_kl": 4 * (d * pins).sum().item(),
                    "adaptive": 4 * (d * torch.minimum(coup, pins)).sum().item()})
    out["unified"] = min(v for k, v in out.items() if not k.startswith(("classical", "adaptive_")))
    return out


# ----------------------------------------------------------------------------- presets
def _preset(source: str, verl: str | None, **fields) -> dict:
    """A named correction: its source, verl's preset name, and the RLConfig fields (the correction's
    own under rollout_correction)."""
    return {"source": source, "verl": verl, "config": _nested(fields)}


def _nested(fields: dict) -> dict:
    """RLConfig fields with the correction's options (CORRECTION_FIELDS) under rollout_correction."""
    rc = {k: fields.pop(k) for k in list(fields) if k in CORRECTION_FIELDS}
    return {**fields, "rollout_correction": rc} if rc else fields


_GEO, _K3 = dict(rollout_rs="seq_mean_k1", rollout_rs_threshold="0.999_1.001"), \
    dict(rollout_rs="seq_mean_k3", rollout_rs_threshold=0.01)
_BYPASS_PPO, _BYPASS_PG = dict(bypass_mode=True, policy_loss="ppo_clip"), \
    dict(bypass_mode=True, policy_loss="reinforce")
_TOKEN_TIS, _SEQ_TIS = dict(rollout_is="token", rollout_is_threshold=2.0), \
    dict(rollout_is="sequence", rollout_is_threshold=2.0)

# method -> where it comes from, verl 0.9.1's RolloutCorrectionConfig preset, RLConfig fields.
# Thresholds are the published defaults; the tiny models of the labs may need others.
CORRECTION_PRESETS: dict[str, dict] = {
    "None (monitor only)": _preset("verl rollout-correction docs: start by watching the metrics", "disabled"),
    "Token-TIS": _preset("Yao et al. 2025 (TIS); Liu, Li et al. 2025", "decoupled_token_is", **_TOKEN_TIS),
    "Seq-TIS": _preset("Liu, Li et al. 2025, When Speed Kills Stability", "decoupled_seq_is", **_SEQ_TIS),
    "Seq-MIS": _preset("Li & Liu 2025, Part 3 (masked sequence IS)", "decoupled_seq_is_rs", **_SEQ_TIS,
                       rollout_rs="seq_sum_k1", rollout_rs_threshold="0.5_2.0"),
    "Token-IcePop": _preset("IcePop (Ling team 2025): zero token weights outside [0.5, 5]",
                            "decoupled_token_icepop", rollout_is="token", rollout_is_threshold="0.5_5.0"),
    "Geo-RS": _preset("Li & Liu 2025, Part 3 (geometric-mean mask)", "decoupled_geo_rs", **_GEO),
    "Geo-RS-Token-TIS": _preset("Part 3, newer version (Geo-Mask-Token-TIS)", "decoupled_geo_rs_token_tis",
                                **_GEO, **_TOKEN_TIS),
    "Geo-RS-Seq-TIS": _preset("Part 3, older version", "decoupled_geo_rs_seq_tis", **_GEO, **_SEQ_TIS),
    "K3-RS": _preset("verl docs (mean k3 <= 0.01)", "decoupled_k3_rs", **_K3),
    "K3-RS-Token-TIS": _preset("verl docs", "decoupled_k3_rs_token_tis", **_K3, **_TOKEN_TIS),
    "K3-RS-Seq-TIS": _preset("verl docs", "decoupled_k3_rs_seq_tis", **_K3, **_SEQ_TIS),
    "Token-veto": _preset("verl before PR #4544 (rollout_token_veto_threshold)", None,
                          rollout_token_veto_threshold=1e-4),
    "TRM-Max": _preset("Li et al. 2025, Trust Region Masking (max criterion, k2 proxy)", None,
                       rollout_rs="seq_max_k2", rollout_rs_threshold=0.05),
    "TRM-Avg": _preset("Li et al. 2025, Trust Region Masking (average criterion, k3 proxy)", None,
                       rollout_rs="seq_mean_k3", rollout_rs_threshold=0.001),
    "TRM": _preset("Li et al. 2025, TRM (loose max and average together); verl PR #4544", None,
                   rollout_rs="seq_mean_k3,seq_max_k2", rollout_rs_threshold="0.002,0.1"),
    "TRM-Exact": _preset("TRM with the exact per-context KL (rl_lab: full sampler distributions)", None,
                         rollout_rs="seq_mean_kl,seq_max_kl", rollout_rs_threshold="0.002,0.1"),
    "Bypass-PPO-clip": _preset("verl bypass mode: pi_old := mu, the ratio corrects", "bypass_ppo_clip",
                               **_BYPASS_PPO),
    "Bypass-PPO-clip-Geo-RS": _preset("verl", "bypass_ppo_clip_geo_rs", **_BYPASS_PPO, **_GEO),
    "Bypass-PPO-clip-K3-RS": _preset("verl", "bypass_ppo_clip_k3_rs", **_BYPASS_PPO, **_K3),
    "Bypass-PG-Seq-TIS": _preset("verl bypass + REINFORCE with sequence TIS", "bypass_pg_is",
                                 **_BYPASS_PG, **_SEQ_TIS),
    "Bypass-PG-Token-IcePop": _preset("verl", "bypass_pg_token_icepop", **_BYPASS_PG, rollout_is="token",
                                      rollout_is_threshold="0.5_5.0"),
    "Bypass-PG-Geo-RS": _preset("verl", "bypass_pg_geo_rs", **_BYPASS_PG, **_GEO),
    "Bypass-PG-Geo-RS-Seq-TIS": _preset("verl", "bypass_pg_geo_rs_seq_tis", **_BYPASS_PG, **_GEO, **_SEQ_TIS),
    "Bypass-PG-Geo-RS-Token-TIS": _preset("verl", "bypass_pg_geo_rs_token_tis", **_BYPASS_PG, **_GEO,
                                          **_TOKEN_TIS),
    "Multi-RS (verl example)": _preset("verl examples/rollout_correction/run_with_rollout_corr_multi_rs.sh",
                                       None, **_BYPASS_PPO, **_TOKEN_TIS, rollout_rs="token_k1,seq_max_k2",
                                       rollout_rs_threshold="0.6_1.6,2.5"),
    "DVP": _preset("Li et al. 2025, Dynamic Vocabulary Pruning (safe set p >= 1e-3 p_max: rl_lab's "
                   "reading; the paper's exact rule was not available)", None, dvp={"min_p": 1e-3}),
}


def correction_preset(name: str, **overrides) -> dict:
    """RLConfig fields of a named correction, e.g. get_preset(**correction_preset("Seq-MIS")); an
    override of a correction option (rollout_is_threshold=3.0) changes it in rollout_correction."""
    if name not in CORRECTION_PRESETS:
        raise ConfigError(f"correction preset {name!r} is unknown; choose one of {list(CORRECTION_PRESETS)}")
    base, extra = CORRECTION_PRESETS[name]["config"], _nested(dict(overrides))
    rc = {**base.get("rollout_correction", {}), **extra.pop("rollout_correction", {})}
    return {**base, **extra, **({"rollout_correction": rc} if rc else {})}
