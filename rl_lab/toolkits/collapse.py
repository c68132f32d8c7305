"""When has a run collapsed?  The criteria, fixed before any result is looked at.

A sweep (rl_lab.tools.sweep) flags every run with these functions, so the criterion is decided once,
here, and not tuned to the runs it judges.  All are pure functions of per-step series (one
value per optimizer step, in step order); `steps=` maps positions to step labels (e.g. the
trainer's 1-based `step` column), else positions 0, 1, 2, ... are returned.

Reward collapse (`detect_collapse`)
    Smooth the reward with a trailing moving average over WINDOW steps; `ma[t]` is defined only
    once a full window exists (t >= WINDOW - 1).  Track its running peak P(t) = max ma[:t+1].
    A *fall* starts at the first step t where ma[t] < DROP x P(t).  If, at some later step,
    ma climbs back to >= RECOVER x P(t) (the peak at the fall), the fall was a *dip*: it is
    counted, and the search continues after the recovery.  A run has *collapsed* when a fall
    never recovers before the run ends.  The reported fall step is the first step below the
    drop line in that non-recovering episode, i.e. the step at which a causal monitor of the
    moving average would first see it.  Rewards are assumed to be "more is better, 0 is
    nothing" (accuracies in [0, 1]); a run whose peak moving average is <= 0 never learned
    anything and cannot collapse.  A run shorter than WINDOW is not judged (`evaluated` False).

    Non-finite rewards: the trainer logs a NaN reward for a step where no completion could be
    scored (every reward function failed, or every sample was masked for NaN log-probs).  Such
    a step earned nothing, so it counts as NAN_REWARD = 0.0.  A run that degenerates into NaN
    therefore collapses instead of being silently skipped (NaN-ignoring means would hide it).

Gradient blow-up (`detect_grad_blowup`)
    The baseline is the median of the finite, positive gradient norms in the early steps
    GRAD_EARLY = [0, 50) (positions; zero norms are steps whose groups all had equal rewards,
    which say nothing about the gradient's scale).  A blow-up is GRAD_PATIENCE consecutive
    steps with a norm > GRAD_FACTOR x baseline; a non-finite norm (NaN/inf: the trainer skips
    that step) counts as above the line.  The reported step is the first of the streak.  The
    trainer logs the norm before clipping, so clipping does not hide it.

Early warning (`first_crossing`, `lead_time`, `warning_threshold`, `early_warning`)
    The first step at which a monitor (e.g. rollout_corr/k3_kl) crosses a threshold; NaN never
    crosses.  The lead time is fall step - crossing step: positive when the monitor warned
    before the reward fell.  A monitor is smoothed like the reward (WINDOW-step trailing moving
    average); its alarm line is the WARN_PERCENTILE-th percentile of the smoothed values over
    every step of runs known to be healthy, fitted on runs *other* than those it is tested on.
    Tested on held-out runs: the fraction of collapses it warned of before the fall, the lead
    times, and the fraction of healthy runs on which it crossed anyway (false alarms).

Chapter "When speed kills stability" (book/ch_when_speed_kills.md) applies these criteria.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

WINDOW = 20
"""Steps in the trailing moving average of the reward."""
DROP = 0.5
"""A fall: the moving average is below DROP x its running peak."""
RECOVER = 0.8
"""A recovery: after a fall, the moving average is back to >= RECOVER x the peak at the fall."""
NAN_REWARD = 0.0
"""The reward a step with a non-finite (NaN/inf) reward counts as."""
GRAD_EARLY = (0, 50)
"""Positions [start, stop) whose median gradient norm is the baseline."""
GRAD_FACTOR = 10.0
"""A blow-up: the gradient norm exceeds GRAD_FACTOR x the early median ..."""
GRAD_PATIENCE = 5
"""... for GRAD_PATIENCE consecutive steps."""

WARN_PERCENTILE = 99.0
"""A monitor's alarm line: this percentile of its smoothed values on healthy runs."""

CRITERION = (f"collapse: the {WINDOW}-step trailing moving average of the reward falls below "
             f"{DROP} x its running peak and never climbs back to {RECOVER} x that peak "
             f"(a NaN reward counts as {NAN_REWARD}); gradient blow-up: the gradient norm stays "
             f"above {GRAD_FACTOR:g} x its median over steps [{GRAD_EARLY[0]}, {GRAD_EARLY[1]}) "
             f"for {GRAD_PATIENCE} consecutive steps")
"""The criteria in one sentence, with the constants in force (for a chapter to print)."""


def _series(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim != 1:
        raise ValueError(f"{name} must be a 1-d sequence (one value per step), got shape {a.shape}")
    return a


def _labels(steps, n: int):
    if steps is None:
        return lambda i: None if i is None else int(i)
    s = list(steps)
    if len(s) != n:
        raise ValueError(f"steps has {len(s)} labels for {n} values")
    return lambda i: None if i is None else (int(s[i]) if isinstance(s[i], (int, np.integer)) else s[i])


def moving_average(x: Sequence[float], window: int) -> np.ndarray:
    """Trailing mean over full windows: out[i] = mean(x[i : i + window]), length len(x) - window + 1
    (empty if the series is shorter than the window).  out[i] belongs to step i + window - 1."""
    if window < 1:
        raise ValueError(f"window={window}: average over at least one step")
    a = _series(x, "x")
    if len(a) < window:
        return np.empty(0)
    # each window summed on its own (not a cumulative-sum difference), so equal windows give
    # equal averages and the first step of a plateau is its peak step
    return np.lib.stride_tricks.sliding_window_view(a, window).mean(axis=1)


def detect_collapse(rewards: Sequence[float], window: int = WINDOW, drop: float = DROP,
                    recover: float = RECOVER, steps: Sequence | None = None,
                    nan_reward: float = NAN_REWARD) -> dict:
    """Judge a reward series by the collapse criterion (module docstring).

    -> dict with
      collapsed    True if a fall never recovered
      fall_step    the first step below drop x peak in that non-recovering episode (else None)
      peak         the running peak of the moving average at the fall; if no collapse, the
                   peak of the whole run (None if the run is shorter than `window`)
      peak_step    the step where that peak was reached (end of its window)
      dips         falls that recovered (each counted once)
      final        the last moving-average value (None if too short)
      evaluated    False when the run is shorter than `window` (then collapsed is False)
    """
    if not 0 < drop < 1:
        raise ValueError(f"drop={drop}: a fall is below a fraction in (0, 1) of the peak")
    if not drop <= recover:
        raise ValueError(f"recover={recover} must be >= drop={drop} (recovering means climbing back up)")
    r = _series(rewards, "rewards")
    label = _labels(steps, len(r))
    r = np.where(np.isfinite(r), r, nan_reward)
    ma = moving_average(r, window)                                  # ma[j] belongs to position j + window - 1
    out = dict(collapsed=False, fall_step=None, peak=None, peak_step=None, dips=0, final=None,
               evaluated=len(ma) > 0)
    if not len(ma):
        return out
    peak_idx = np.zeros(len(ma), dtype=int)                         # where the running peak was reached
    for j in range(1, len(ma)):
        peak_idx[j] = j if ma[j] > ma[peak_idx[j - 1]] else peak_idx[j - 1]
    running = ma[peak_idx]                                          # the running peak P
    out["final"] = float(ma[-1])
    j, dips = 0, 0
    while j < len(ma):
        peak = running[j]
        if peak > 0 and ma[j] < drop * peak:
            back = np.nonzero(ma[j + 1:] >= recover * peak)[0]
            if not len(back):
                out.update(collapsed=True, fall_step=label(j + window - 1), peak=float(peak),
                           peak_step=label(int(peak_idx[j]) + window - 1), dips=dips)
                return out
            dips += 1
            j = j + 1 + int(back[0])                                # resume at the recovery
            continue
        j += 1
    best = int(np.argmax(ma))
    out.update(peak=float(ma[best]), peak_step=label(best + window - 1), dips=dips)
    return out


def detect_grad_blowup(grad_norms: Sequence[float], early: tuple[int, int] = GRAD_EARLY,
                       factor: float = GRAD_FACTOR, patience: int = GRAD_PATIENCE,
                       steps: Sequence | None = None) -> dict:
    """Judge a gradient-norm series by the blow-up criterion (module docstring).

    -> dict with blowup (bool), step (first step of the first streak of `patience` steps above
    factor x baseline, else None), baseline (median of the finite positive norms in
    positions [early[0], early[1]), None if there are none), evaluated (baseline found).
    """
    if patience < 1:
        raise ValueError(f"patience={patience}: need at least one step above the line")
    if factor <= 0:
        raise ValueError(f"factor={factor} must be positive")
    g = _series(grad_norms, "grad_norms")
    label = _labels(steps, len(g))
    head = g[early[0]:early[1]]
    head = head[np.isfinite(head) & (head > 0)]
    out = dict(blowup=False, step=None, baseline=None, evaluated=bool(len(head)))
    if not len(head):
        return out
    baseline = float(np.median(head))
    out["baseline"] = baseline
    above = ~np.isfinite(g) | (g > factor * baseline)
    run = 0
    for i, a in enumerate(above):
        run = run + 1 if a else 0
        if run == patience:
            out.update(blowup=True, step=label(i - patience + 1))
            break
    return out


def first_crossing(series: Sequence[float], threshold: float, above: bool = True, start: int = 0,
                   steps: Sequence | None = None):
    """The first step (position >= `start`) where series >= threshold (or <= threshold with
    above=False); None if it never crosses.  NaN values never cross."""
    s = _series(series, "series")
    label = _labels(steps, len(s))
    with np.errstate(invalid="ignore"):
        hit = (s >= threshold) if above else (s <= threshold)
    hit[:start] = False
    idx = np.nonzero(hit & ~np.isnan(s))[0]
    return label(int(idx[0])) if len(idx) else None


def lead_time(series: Sequence[float], threshold: float, fall_step, above: bool = True,
              steps: Sequence | None = None):
    """fall_step - first_crossing(series, threshold): how many steps before the fall the monitor
    first crossed (negative: after it).  None when there is no fall or no crossing.  Step
    labels must be numbers (positions by default)."""
    if fall_step is None or (isinstance(fall_step, float) and math.isnan(fall_step)):
        return None
    cross = first_crossing(series, threshold, above=above, steps=steps)
    return None if cross is None else fall_step - cross


def warning_threshold(healthy: Sequence[Sequence[float]], percentile: float = WARN_PERCENTILE,
                      window: int = WINDOW) -> float:
    """The alarm line of a monitor: the `percentile`-th percentile of its `window`-step trailing
    moving average over every step of the given healthy runs (NaNs ignored)."""
    smoothed = [moving_average(_series(h, "healthy run"), window) for h in healthy]
    values = np.concatenate(smoothed) if smoothed else np.array([])
    if not np.isfinite(values).any():
        raise ValueError("warning_threshold needs at least one healthy run with a full window of finite values")
    return float(np.nanpercentile(values, percentile))


def early_warning(threshold: float, collapsed, healthy, window: int = WINDOW) -> dict:
    """How a monitor with alarm line `threshold` does on held-out runs.

    collapsed: (series, steps, fall_step) per collapsed run (steps label the series' positions,
        fall_step is detect_collapse's step in the same labels); healthy: series per healthy run.
    -> dict with `warned` (collapses whose smoothed monitor crossed strictly before the fall),
    `collapses`, `leads` (fall - crossing per collapse, NaN when it never crossed), `median_lead`
    (over the warned ones; NaN if none), `false_alarms` (healthy runs that crossed) and `healthy`."""
    leads = []
    for series, steps, fall in collapsed:
        s = _series(series, "collapsed run")
        smoothed_steps = None if steps is None else list(steps)[window - 1:]
        lead = lead_time(moving_average(s, window), threshold, fall, steps=smoothed_steps)
        leads.append(np.nan if lead is None else float(lead))
    leads = np.asarray(leads, dtype=float)
    warned = leads > 0
    alarms = [first_crossing(moving_average(_series(h, "healthy run"), window), threshold) is not None
              for h in healthy]
    return {"threshold": float(threshold), "warned": int(warned.sum()), "collapses": len(leads), "leads": leads,
            "median_lead": float(np.median(leads[warned])) if warned.any() else float("nan"),
            "false_alarms": int(sum(alarms)), "healthy": len(alarms)}


def early_warning_table(series, monitors, fit, collapsed, healthy, fall_steps, window: int = WINDOW,
                        percentile: float = WARN_PERCENTILE):
    """One row per monitor: its alarm line fitted on the `fit` runs, tested on held-out runs.

    series: long DataFrame with `run_id`, `step` and one column per monitor; fit / collapsed /
    healthy: run ids (fit: healthy runs for the threshold, disjoint from the other two);
    fall_steps: {run_id: detect_collapse's fall step} for the collapsed ones."""
    import pandas as pd

    overlap = set(fit) & (set(collapsed) | set(healthy))
    if overlap:
        raise ValueError(f"fit runs must be held out from the test runs; {len(overlap)} are in both")
    runs = {rid: df.sort_values("step") for rid, df in series.groupby("run_id")}
    missing = [r for r in [*fit, *collapsed, *healthy] if r not in runs]
    if missing:
        raise ValueError(f"no series for runs {missing[:3]}{' ...' if len(missing) > 3 else ''}")
    rows = []
    for m in monitors:
        thr = warning_threshold([runs[r][m].to_numpy(float) for r in fit], percentile, window)
        out = early_warning(thr, [(runs[r][m].to_numpy(float), runs[r]["step"].to_numpy(), fall_steps[r])
                                  for r in collapsed],
                            [runs[r][m].to_numpy(float) for r in healthy], window)
        rows.append({"monitor": m, **{k: v for k, v in out.items() if k != "leads"}})
    return pd.DataFrame(rows).set_index("monitor")
