"""`rl-lab diagnose`'s report (one screen) and figure (`--plot`).

The figure: one panel per logged quantity (reward; the mismatch; gradient norm; learning rate;
entropy), every line in a legend placed outside the data, the reward's peak and fall marked, log
axes that leave out zeros and rounding-level values (said in the legend), and the verdict and the
mismatch evidence stated apart in the title."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from rl_lab.toolkits.collapse import WINDOW, moving_average
from rl_lab.tools.diagnose_advice import LANGUAGE
from rl_lab.tools.diagnose_findings import EARLY, K3_WARN, MONITORS, Diagnosis, mismatch_series, records_for, spacing
from rl_lab.tools.diagnose_readers import finite
from rl_lab.tools.metric_names import K3

ROUNDING = 1e-6
"""On a log axis, values below ROUNDING x the series' median are rounding level and left out."""


def report(d: Diagnosis) -> str:
    """One screen: verdict, evidence, timeline, findings with their evidence, advice."""
    lines = [f"rl-lab diagnose: {d.source} (up to step {d.steps}, {d.records} records)",
             f"verdict: {d.verdict.upper()}" + (f"  cause: {d.cause}" if d.cause else "")]
    if d.mismatch_evidence:
        lines.append(f"mismatch evidence: {d.mismatch_evidence}")
    if d.timeline:
        lines.append("timeline:")
        for event, step in sorted(d.timeline.items(), key=lambda kv: kv[1]):
            lines.append(f"  step {step:>6}  {event}")
    if d.levels:
        shown = ", ".join(f"{MONITORS.get(k, k).split(' (')[0]} {v:.3g}" for k, v in d.levels.items()
                          if math.isfinite(v))
        lines.append(f"early levels ({EARLY[0]}-{EARLY[1] - 1} steps after the first): {shown}")
    for f in d.findings:
        lines += [f"- {f.rule}: {f.observed}", f"    evidence: {f.evidence}", f"    confidence: {f.confidence}"]
        if f.fix:
            lines.append(f"    fix: {f.fix}")
    if d.overrides:
        known = d.framework in LANGUAGE
        lines.append(f"try ({LANGUAGE.get(d.framework, LANGUAGE['verl'])}), in this order:"
                     + ("" if known else "  [framework not recognised: verl's keys shown]"))
        for i, o in enumerate(d.overrides, 1):
            lines += [f"  {i}. {o.lines}", f"     why: {o.why}", f"     evidence: {o.evidence}"]
    for a in d.already_set:
        lines.append(f"already set, not proposed again: {a}")
    if d.setup:
        lines.append(f"settings read from {d.setup.get('source')}")
    elif d.verdict in ("collapsed", "warning"):
        lines.append("settings: unknown (pass --config to read them); the advice may repeat what is set")
    if d.missing:
        lines.append(f"not in the input: {', '.join(d.missing)} (their panels and rules are skipped)")
    for w in d.warnings:
        lines.append(f"note: {w}")
    return "\n".join(lines)


def plot(df, d: Diagnosis, path: str | Path) -> Path:
    """Write `figure(df, d)` to a PNG."""
    import matplotlib.pyplot as plt

    fig = figure(df, d)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return Path(path)


def _panels(df) -> list[tuple]:
    """(column, label, log axis) for what the run logged."""
    panels = [("reward", "reward", False)]
    if mismatch_series(df) is not None:
        panels.append(("__k3__", "mismatch k3 per token", True))
    panels += [(c, label, log) for c, label, log in (("grad_norm", "gradient norm", True),
                                                     ("learning_rate", "learning rate", False),
                                                     ("entropy", "entropy", False))
               if finite(df, c) is not None]
    return panels


def _series(df, name: str) -> np.ndarray:
    if name == "__k3__":
            return np.asarray(mismatch_series(df)[0], dtype=float)
    return df[name].to_numpy(dtype=float)


def _log_shown(values: np.ndarray) -> tuple[np.ndarray, int]:
    """The values a log axis can show (NaN elsewhere) and how many were left out: zeros,
    negatives and rounding-level values (below ROUNDING x the median of the positive ones)."""
    positive = values[np.isfinite(values) & (values > 0)]
    floor = ROUNDING * float(np.median(positive)) if len(positive) else np.inf
    keep = np.isfinite(values) & (values > 0) & (values >= floor)
    return np.where(keep, values, np.nan), int(np.sum(np.isfinite(values) & ~keep))


def figure(df, d: Diagnosis):
    """The panels of `_panels`, raw values and their WINDOW-step moving average, the fall and the
    peak marked, each line named in a legend beside its panel."""
    import matplotlib.pyplot as plt

    steps = df["step"].to_numpy()
    window = records_for(WINDOW, spacing(steps))
    panels = _panels(df)
    fig, axes = plt.subplots(len(panels), 1, figsize=(8.5, 1.9 * len(panels) + 0.6), sharex=True, squeeze=False)
    for ax, (name, label, log) in zip(axes[:, 0], panels):
        values = _series(df, name)
        dropped = 0
        if log:
            values, dropped = _log_shown(values)
            ax.set_yscale("log")
        ax.plot(steps, values, lw=0.8, alpha=0.65, color="C0", marker=".", ms=3,
                label="logged" + (f" ({dropped} zero or rounding-level values not shown)" if dropped else ""))
        if name != "learning_rate" and len(values) >= window > 1 and np.isfinite(values).all():
            ax.plot(steps[window - 1:], moving_average(values, window), lw=1.6, color="C1",
                    label=f"{WINDOW}-step moving average")
        if name == "__k3__":
            ax.axhline(K3_WARN, color="C3", ls=":", lw=0.9, label=f"warning level K3_WARN = {K3_WARN:g}")
        _mark_events(ax, d, name == "reward")
        ax.set_ylabel(label, fontsize=8)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
    title = f"verdict: {d.verdict.upper()}" + (f"; cause: {d.cause}" if d.cause else "")
    axes[0, 0].set_title(f"{title}\nmismatch evidence: {d.mismatch_evidence or '-'}\n{d.source}", fontsize=8,
                         loc="left")
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    return fig


def _mark_events(ax, d: Diagnosis, is_reward: bool) -> None:
    """The fall (dashed), a gradient blow-up and a k3 rise (dotted) on every panel, named once in
    each legend; the reward's peak as a marker on the reward panel."""
    styles = {"reward fall": ("k", "--", "reward fall"), "gradient blow-up": ("C3", ":", "gradient blow-up"),
              f"{K3} rises": ("C4", ":", "k3 rises")}
    for event, (color, ls, name) in styles.items():
        if event in d.timeline:
            ax.axvline(d.timeline[event], color=color, ls=ls, lw=0.9, label=f"{name} (step {d.timeline[event]})")
    if is_reward and "reward peak" in d.timeline:
        ax.axvline(d.timeline["reward peak"], color="C2", ls="-.", lw=0.9,
                   label=f"reward peak (step {d.timeline['reward peak']})")
