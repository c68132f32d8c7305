"""Where the mismatch comes from: `rl-lab diagnose`'s source signatures (issue 49).

Written on seeds 0-3 of the source-by-source study's stage 1 (research/mismatch_sources: an
exact-zero control and one source per arm, 0.3M model, float32 trainer) and evaluated on its seeds
4-8, which the rules were not written on (NOTES.md, "Diagnose signatures (pre-registered)").  Each
rule reads the per-step mismatch monitors and names a probable source, its fix as an option in
rl_lab, verl 0.9.1 and TRL 1.16 (where one exists) and how sure it is.  The rules, in this order:

* **weight-sync fault** (an excursion): a stretch where k3's SMOOTH-record trailing median reaches
  max(JUMP x its running level, K3_WARN) (the running level: the median of the BASE records before
  that window), and later falls back below max(FALL x that level, K3_WARN / 10) within the run.
  A layer left unsynced for some steps drifts like a stale sampler while it is skipped, and the
  mismatch vanishes at the next clean sync; a source that is always on does not come and go.
* **truncated sampling** (a kept-mass deficit): the median over steps of k1 - k3 is at least
  TRUNC_GAP and k3's median is below it.  Per step, k1 - k3 = 1 - mean(rho) exactly (k3 = mean(rho
  - 1 - log rho), k1 = mean(-log rho) on the same tokens): with full support E[rho] = 1, so the gap
  is noise around 0 whatever the mismatch's size; a sampler that drops mass the trainer scores
  (top-p, top-k, min-p) makes rho = pi / mu = S < 1 on every token (S: the kept mass), so the gap
  is the kept-mass deficit 1 - S, and k3 reads low (~(1 - S)^2 / 2) beside it.  Without k1 (TRL) the gap is
  1 - median(rho's logged mean).  Confidence is high when the log-ratio is also one-signed
  (rho's max <= 1, or no sequence with the sampler below the trainer, at ONE_SIDED of the steps).
* **staleness** (a first step that is on-policy): k3 at the first logged step is at most
  STALE_FIRST x its early level (the median over diagnose.EARLY), and that level is at least
  STALE_LEVEL: before the first update the sampler holds the trainer's weights; afterwards it lags.
* **precision** (the residual, steady level): none of the above, and k3's median over the run is
  in [K3_FP32, K3_WARN): rounding of 16-bit products (bf16, fp16) on the sampler.  A weight sync
  through a lower precision (a bf16 LoRA merge) gives the same signature here: the finding names it
  as the alternative, and the evaluation does not count it as told apart.
* **reduction order** (the residual, float32 rounding): none of the above, and k3's median is above
  0 and below K3_FP32: the engines compute the same products in float32 and sum them in another
  order (batch-variant split-K kernels, or another tensor-parallel shard count).  The two are not
  told apart: one signature, two fixes.

Not covered: routing (mismatch.routing, a dial on the tiny MoE, is not in the runs these levels come
from); a sync fault present from the first step (the "suspect a bug" rule of rl_lab.tools.diagnose:
k3 >= K3_BUG before any update).  How far this transfers: the levels are a 0.3M float32 model's;
at 1.5B-7B a bf16 engine's k3 is 1e-3 to 1e-2, so the reduction-order band (float32 rounding)
only exists where both engines compute in float32.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from rl_lab.mismatch_specs import source_spec
from rl_lab.tools.diagnose_findings import EARLY, K3_WARN, Finding
from rl_lab.tools.diagnose_readers import finite
from rl_lab.tools.metric_names import K3

K3_FP32 = 1e-9
"""k3 below this (and above 0) is float32 rounding: k3 ~ E[d^2] / 2 puts the log-prob errors under
~5e-5, far below a 16-bit product's rounding (bf16's epsilon 7.8e-3, fp16's 9.8e-4)."""
TRUNC_GAP = 0.01
"""The median of k1 - k3 (= 1 - mean rho) from which a sampler drops at least 1% of the mass."""
ONE_SIDED = 0.9
"""Share of steps with rho <= 1 on every token (or sequence) that makes a truncation finding high."""
STALE_FIRST = 0.1
"""k3 at the first logged step at most this fraction of the early level: the first step was on-policy."""
STALE_LEVEL = 1e-3
"""The early level a staleness finding needs: well above the rounding of a 16-bit sampler here."""
SMOOTH, BASE = 5, 20
"""Records in the excursion's trailing median, and in the running level before that window."""
JUMP = 100.0
"""An excursion: the trailing median reaches JUMP x the running level (two orders of magnitude)."""
FALL = 10.0
"""It has fallen back when the trailing median is below FALL x the running level (or K3_WARN / 10)."""

RL_LAB_FIX = {
    "weight_sync": "mismatch.weight_sync.verify=true (compare and resync after every sync); the lr = 0 "
                   "check: rl_lab.toolkits.mismatch_sources.sync_check",
    "truncation": "mismatch.truncation.keep_mask=true (Keep Sampling Mask); on the fast sampler: top_p=1.0, "
                  "top_k=0, min_p=0.0",
    "staleness": "rollout_correction.bypass_mode=true with policy_loss=ppo_clip; or sampler_staleness=0",
    "precision": "mismatch.precision.fix=same_dtype (the sampler's dtype on both sides); on the fast "
                 "sampler: sampler_dtype=float32",
    "reduction_order": "mismatch.batch_variant.batch_invariant=true; mismatch.tensor_parallel.fix=true",
}
WORKAROUND = {
    "truncation": {"verl": "no sampling-mask replay in 0.9.1; sample untruncated: "
                           "actor_rollout_ref.rollout.top_p=1.0 actor_rollout_ref.rollout.top_k=-1",
                   "trl": "no sampling-mask replay in 1.16 (TRL #6789); sample untruncated: top_p=1.0, top_k=0, "
                          "min_p=None"},
    "weight_sync": {"verl": "none in 0.9.1: one step at actor_rollout_ref.actor.optim.lr=0 whose k3 must stay "
                            "at its rounding level", "trl": "none in 1.16: one step at learning_rate=0 whose "
                                                            "sampling_logp_difference must stay at rounding level"},
    "staleness": {"trl": "none in 1.16 (no bypass mode)"},
    "reduction_order": {"trl": "none in 1.16"},
}
NAMES = {"weight_sync": "a weight-sync fault", "truncation": "truncated sampling (top-p / top-k / min-p)",
         "staleness": "a stale sampler", "precision": "precision (a 16-bit sampler)",
         "reduction_order": "reduction order (batch-variant kernels, or another tensor-parallel order)"}
"""Every source a signature can name (the evaluation's labels)."""


@dataclass
class Signature:
    """What a source rule found: the source's id (NAMES), the finding and the fix per framework."""
    source: str
    finding: Finding
    fix: dict


def fix_for(source: str) -> dict:
    """The fix as an option: rl_lab, verl 0.9.1 and TRL 1.16 ("none" where that library has no key)."""
    verl = trl = ""
    if source == "reduction_order":
        verl = source_spec("batch_variant").verl + " (batch-invariant kernels; no tensor-parallel order key)"
    elif source in ("precision", "truncation", "weight_sync", "staleness"):
        spec = source_spec(source)
        verl, trl = spec.verl, spec.trl
        if source == "staleness":
            verl += " (algorithm.rollout_correction.loss_type=ppo_clip)"
    extra = WORKAROUND.get(source, {})
    return {"rl_lab": RL_LAB_FIX[source], "verl": verl or extra.get("verl", "none in 0.9.1"),
            "trl": trl or extra.get("trl", "none in 1.16")}


def _fix_text(fix: dict) -> str:
    return f"rl_lab: {fix['rl_lab']} | verl 0.9.1: {fix['verl']} | TRL 1.16: {fix['trl']}"


def excursion(k3: np.ndarray, steps: np.ndarray) -> dict | None:
    """The first excursion (module docstring): the steps at which the trailing median jumped and fell
    back, the first and last step of the stretch above the fall-back line, its peak and the running
    level before it; None when there is none, or when k3 rose and never fell back."""
    x = pd.Series(np.where(np.isfinite(k3), k3, np.nan))
    raw = x.to_numpy()
    smooth = x.rolling(SMOOTH, min_periods=SMOOTH).median().to_numpy()
    level = x.shift(SMOOTH).rolling(BASE, min_periods=BASE).median().to_numpy()
    for t in range(len(x)):
        if not (np.isfinite(smooth[t]) and np.isfinite(level[t])):
            continue
        if smooth[t] >= max(JUMP * level[t], K3_WARN):
            back = max(FALL * level[t], K3_WARN / 10)
            later = np.nonzero(smooth[t + 1:] < back)[0]
            if not len(later):
                return None              # it rose and stayed: the rise rules, not a fault that passed
            u = t + 1 + later[0]
            first = t
            while first > 0 and raw[first - 1] >= back:
                first -= 1
            last = u
            while last > t and not raw[last] >= back:
                last -= 1
            return {"jump": int(steps[t]), "back": int(steps[u]), "first": int(steps[first]),
                    "last": int(steps[last]), "peak": float(np.nanmax(raw[t:u + 1])), "level": float(level[t]),
                    "line": back}
    return None


def _median(values) -> float:
    values = values[np.isfinite(values)]
    return float(np.median(values)) if len(values) else float("nan")


def _gap(df, k3_logged: bool):
    """(median of 1 - mean rho, how it was read), or (nan, None)."""
    k1 = finite(df, "rollout_corr/kl")
    k3 = finite(df, K3)
    if k3_logged and k1 is not None and k3 is not None:
        return _median(k1 - k3), "k1 - k3 (rollout_corr/kl - rollout_corr/k3_kl), = 1 - mean(rho) per step"
    rho = finite(df, "is_ratio/mean")
    if rho is not None:
        return 1 - _median(rho), "1 - the logged mean importance ratio (TRL's is after its masking)"
    return float("nan"), None


def _one_sided(df) -> tuple[float, str] | tuple[None, None]:
    """Share of steps where no token's (or sequence's) rho exceeds 1, and what it was read from."""
    rho_max = finite(df, "sampling/importance_sampling_ratio/max")
    if rho_max is not None:
        ok = np.isfinite(rho_max)
        return float(np.mean(rho_max[ok] <= 1.0)), "rho's max over tokens <= 1"
    lmin = finite(df, "rollout_corr/log_ppl_diff_min")
    if lmin is not None:
        ok = np.isfinite(lmin)
        return float(np.mean(lmin[ok] >= 0.0)), "no sequence's mean log-ratio favours the trainer"
    return None, None


def signatures(df, found, steps: np.ndarray) -> list[Signature]:
    """The source rules of the module docstring on a run's metrics (`found`: diagnose_findings.
    mismatch_series(df)); an empty list when no source's signature is seen."""
    if found is None:
        return []
    k3, how = found
    k3_logged = how.startswith("k3 logged")
    out: list[Signature] = []
    level = _median(k3)
    differ = finite(df, "rollout_corr/tokens_differ")
    differ_text = (f"; tokens whose log-probs differ: {_median(differ):.2g} of all (median step)"
                   if differ is not None else "")

    def add(source, observed, evidence, confidence):
        fix = fix_for(source)
        out.append(Signature(source, Finding(f"source: {NAMES[source]}", observed + f" [{how}]", evidence,
                                             confidence, _fix_text(fix)), fix))

    exc = excursion(k3, steps)
    if exc is not None:
        add("weight_sync",
            f"k3 rose above {exc['line']:.3g} at step {exc['first']} (its {SMOOTH}-step median passed "
            f"{JUMP:g}x the running level {exc['level']:.3g} at step {exc['jump']}), peaked at {exc['peak']:.3g} "
            f"and was back below {exc['line']:.3g} after step {exc['last']}",
            "a layer left unsynced drifts like a stale sampler until the next clean sync (open-instruct #1473, "
            "NeMo-RL #4243); the study's unsynced-layer arm (research/mismatch_sources)",
            "medium: a fault that comes and goes; an engine restart or a changed sampler setting for those steps "
            "looks the same: checksum the sampler's weights to confirm")

    gap, gap_how = _gap(df, k3_logged)
    if gap_how is not None and np.isfinite(gap) and gap >= TRUNC_GAP and level < gap:
        share, side_how = _one_sided(df)
        sure = share is not None and share >= ONE_SIDED
        add("truncation",
            f"rho's mean sat {gap:.3g} below 1 (median step; {gap_how}) while k3 read {level:.3g}"
            + (f"; {side_how} at {share:.0%} of the steps" if share is not None else ""),
            "a sampler that drops mass the trainer scores makes rho equal the kept mass, below 1, on every token (TRL #6789, "
            "prime-rl #3235); with full support E[rho] = 1 whatever the mismatch, so the gap is not noise",
            ("high: the log-ratio is one-signed too" if sure else
             "medium: the log-ratio is not one-signed (or not logged): another mismatch adds to the truncation"))

    early = EARLY[0] <= (steps - steps[0])
    early &= (steps - steps[0]) < EARLY[1]
    early_level = _median(k3[early])
    first = k3[np.isfinite(k3)][0] if np.isfinite(k3).any() else float("nan")
    if (exc is None and np.isfinite(early_level) and early_level >= STALE_LEVEL
            and first <= STALE_FIRST * early_level):
        add("staleness",
            f"k3 was {first:.3g} at the first logged step and {early_level:.3g} over the next steps "
            f"({EARLY[0]}-{EARLY[1] - 1} after it)",
            "before the first update a lagging sampler holds the trainer's weights; afterwards it is k updates "
            "behind (the book's stability map, research/stability_map)",
            "medium: a sync that never happens after the first step looks the same; with TRL's logging_steps "
            "the first record already averages stale steps")

    if not out and np.isfinite(level) and 0 < level < K3_WARN:
        if level >= K3_FP32:
            add("precision",
                f"k3 held a steady level of {level:.3g} (median step): no excursion, no kept-mass deficit, no "
                f"on-policy first step"
                + differ_text,
                "16-bit products round the log-probs by ~1e-3 to 1e-2 (bf16 more than fp16: Qi et al. 2025, "
                "arXiv 2510.26788); the study's bf16, fp16 and fp32-head arms",
                "medium: the level tells a 16-bit rounding, not where it happens; weights synced through bf16 "
                "(a LoRA merge) give the same signature: checksum the sampler's weights, or sample in float32 "
                "and see whether k3 stays")
        else:
            add("reduction_order",
                f"k3's median step was {level:.3g}, float32 rounding (below {K3_FP32:g})" + differ_text,
                "the same products summed in another order (split-K that depends on the batch: Thinking Machines "
                "2025; another tensor-parallel size: TBIK); the study's batch-variant and TP arms",
                "medium: which of the two is not told apart; only where both engines compute in float32")
    return out
