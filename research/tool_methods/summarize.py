"""The tool-task method comparison: each method against plain GRPO, with the verdicts of NOTES.md.

    .venv/bin/python research/tool_methods/summarize.py --collect   # after run.sh: copy results in
    .venv/bin/python research/tool_methods/summarize.py [--md]      # print the tables

`--collect` copies runs/tool_methods/<method>/results.csv to results/<method>.csv and every run's
per-step reward, gradient norm, void-turn share and tool calls to results/steps.csv (the spike rule needs the
whole series; the runs' folders are not shipped).  Chapter 12 and lab 12 call `table()` and
`spike_table()`.

Verdict per (method, output style) against plain GRPO of the same style (NOTES.md, fixed before
the runs): Welch's t over seeds, two-sided p from Student's t with Welch's degrees of freedom,
Holm-adjusted over the family of comparisons of one outcome; "gain"/"loss" when the adjusted
p < 0.05, else "null".  A spike: a step whose gradient norm exceeds SPIKE_FACTOR x the median of
the run's nonzero norms.
"""
from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
RUNS = ROOT / "runs/tool_methods"
METHODS = ("grpo", "mask_void", "empg", "trloo", "hybrid_il")
"""Spec names in priority order; grpo is the control."""
CONTROL = "grpo"
FOLLOWUP = {"hybrid_il": "less", "empg": "more"}
"""The follow-up's hypotheses (NOTES.md): each method collapses less / more often than GRPO on OOD
outputs, on fresh seeds (results/followup_<method>.csv)."""
OUTCOMES = ("eval_reward", "reward_last")
"""Primary (greedy held-out success, 512 prompts) and secondary (sampled reward, last fifth)."""
ALPHA = 0.05
SPIKE_FACTOR = 5.0
STEP_COLUMNS = {"reward": "reward", "grad_norm": "grad_norm", "void_fraction": "turns/void_fraction",
                "tool_calls": "tools/calls"}


# ----------------------------------------------------------------------------- statistics
def student_t_sf2(t: float, df: float) -> float:
    """Two-sided p-value P(|T| >= |t|) of Student's t with df >= 1 degrees of freedom.

    With t = sqrt(df) tan(u) the tail integral becomes C sqrt(df) * int_u0^{pi/2} cos(u)^(df-1) du,
    a smooth integrand for df >= 1, integrated by Simpson's rule (error < 1e-9 at df >= 1)."""
    if not df >= 1:
        raise ValueError(f"student_t_sf2: needs df >= 1 (the integrand is singular below), got {df}")
    if math.isinf(t):
        return 0.0
    if math.isnan(t):
        return float("nan")
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    u0 = math.atan(abs(t) / math.sqrt(df))
    u = np.linspace(u0, math.pi / 2, 20001)
    f = np.cos(u) ** (df - 1) if df != 1 else np.ones_like(u)
    h = (u[-1] - u[0]) / (len(u) - 1)
    integral = h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    return float(min(1.0, 2 * math.exp(log_c) * math.sqrt(df) * integral))


def student_t_quantile(p_two_sided: float, df: float) -> float:
    """The t > 0 with P(|T| >= t) = p_two_sided (bisection on student_t_sf2)."""
    lo, hi = 0.0, 1e3
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if student_t_sf2(mid, df) > p_two_sided else (lo, mid)
    return (lo + hi) / 2


def welch(a, b) -> dict:
    """mean(a) - mean(b), Welch's t, its degrees of freedom, the two-sided p and a 95% interval."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"welch needs at least 2 runs a side, got {len(a)} and {len(b)}")
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff, se = a.mean() - b.mean(), math.sqrt(va + vb)
    if se == 0:
        p = 1.0 if diff == 0 else 0.0
        return dict(diff=diff, t=0.0 if diff == 0 else math.copysign(math.inf, diff), df=float("nan"), p=p,
                    ci_lo=diff, ci_hi=diff)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    t = diff / se
    half = student_t_quantile(1 - 0.95, df) * se
    return dict(diff=diff, t=t, df=df, p=student_t_sf2(t, df), ci_lo=diff - half, ci_hi=diff + half)


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjustment of a family of p-values (same order as given)."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p)
    adjusted = np.empty_like(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def fisher_one_sided(hits_a: int, n_a: int, hits_b: int, n_b: int, direction: str) -> float:
    """Fisher's exact test of a 2x2 table (hits_a of n_a against hits_b of n_b): the probability,
    given the total number of hits, that group a has at most ("less") or at least ("more") hits_a
    (the hypergeometric distribution)."""
    if direction not in ("less", "more"):
        raise ValueError(f"fisher_one_sided: direction is 'less' or 'more', got {direction!r}")
    total, n = hits_a + hits_b, n_a + n_b
    lo, hi = max(0, total - n_b), min(total, n_a)
    pmf = {k: math.comb(n_a, k) * math.comb(n_b, total - k) / math.comb(n, total) for k in range(lo, hi + 1)}
    tail = [k for k in pmf if (k <= hits_a if direction == "less" else k >= hits_a)]
    return float(min(1.0, sum(pmf[k] for k in tail)))


def verdict(diff: float, p_adjusted: float) -> str:
    """NOTES.md's rule: gain / loss at Holm-adjusted p < ALPHA, otherwise null."""
    if p_adjusted < ALPHA:
        return "gain" if diff > 0 else "loss"
    return "null"


def spikes(grad_norms, factor: float = SPIKE_FACTOR) -> tuple[int, float]:
    """(number of steps above factor x the median nonzero norm, largest norm / that median)."""
    g = np.asarray(grad_norms, dtype=float)
    finite = g[np.isfinite(g) & (g > 0)]
    if len(finite) == 0:
        return 0, float("nan")
    median = float(np.median(finite))
    above = ~np.isfinite(g) | (g > factor * median)
    return int(above.sum()), float(finite.max() / median)


# ----------------------------------------------------------------------------- data
def style_of(task_kwargs: str) -> str:
    return json.loads(task_kwargs).get("tool_output_style", "plain")


def load_runs(folder: Path = RESULTS) -> pd.DataFrame:
    """One row per run: method, style, seed and the summary columns of results/<method>.csv."""
    frames = []
    for method in METHODS:
        path = folder / f"{method}.csv"
        if path.exists():
            d = pd.read_csv(path)
            frames.append(d.assign(method=method, style=d["task_kwargs"].map(style_of)))
    if not frames:
        raise FileNotFoundError(f"no results in {folder}: run research/tool_methods/run.sh, then "
                                f"summarize.py --collect")
    return pd.concat(frames, ignore_index=True)


def table(folder: Path = RESULTS) -> pd.DataFrame:
    """Per (style, method): seeds, collapsed runs (the sweep's rl_lab.toolkits.collapse
    criterion), mean of each outcome, and against plain GRPO of that style the
    difference, its 95% interval, the raw and Holm-adjusted p and the verdict (per outcome)."""
    runs = load_runs(folder)
    rows = []
    for style in ("plain", "ood"):
        control = runs[(runs["style"] == style) & (runs["method"] == CONTROL)]
        for method in METHODS:
            cell = runs[(runs["style"] == style) & (runs["method"] == method)]
            if cell.empty:
                continue
            row = {"style": style, "method": method, "seeds": len(cell),
                   "collapsed": f"{int(cell['collapsed'].astype(bool).sum())}/{len(cell)}"}
            for outcome in OUTCOMES:
                row[outcome] = cell[outcome].mean()
                if method != CONTROL and len(control) >= 2 and len(cell) >= 2:
                    w = welch(cell[outcome], control[outcome])
                    row.update({f"{outcome}_diff": w["diff"], f"{outcome}_ci_lo": w["ci_lo"],
                                f"{outcome}_ci_hi": w["ci_hi"], f"{outcome}_p": w["p"]})
            rows.append(row)
    out = pd.DataFrame(rows)
    compared = out["method"] != CONTROL
    for outcome in OUTCOMES:
        out.loc[compared, f"{outcome}_p_holm"] = holm(out.loc[compared, f"{outcome}_p"])
        out[f"{outcome}_verdict"] = [
            verdict(d, p) if c else "control"
            for c, d, p in zip(compared, out[f"{outcome}_diff"], out[f"{outcome}_p_holm"])]
    return out


def spike_table(folder: Path = RESULTS) -> pd.DataFrame:
    """Per (style, method): spikes per seed, runs with a spike, the largest norm / median ratio,
    blow-ups, and the mean share of void turns."""
    runs = load_runs(folder)
    steps = pd.read_csv(folder / "steps.csv")
    rows = []
    for (style, method), cell in runs.groupby(["style", "method"], sort=False):
        counts, ratios = [], []
        for run_id in cell["run_id"]:
            n, ratio = spikes(steps.loc[steps["run_id"] == run_id, "grad_norm"])
            counts.append(n)
            ratios.append(ratio)
        rows.append({"style": style, "method": method, "spikes_per_seed": " ".join(map(str, counts)),
                     "runs_with_spikes": sum(c > 0 for c in counts), "spikes": sum(counts),
                     "max_ratio": max(ratios), "blowups": int(cell["grad_blowup"].astype(bool).sum()),
                     "void_fraction": cell["void_fraction_mean"].mean()})
    return pd.DataFrame(rows)


def simpletir_claim(spike_rows: pd.DataFrame) -> str:
    """NOTES.md's rule: reproduced if plain GRPO on OOD outputs spikes in >= 2 seeds with at least
    twice the filter's spikes there; else not reproduced."""
    ood = spike_rows[spike_rows["style"] == "ood"].set_index("method")
    if CONTROL not in ood.index or "mask_void" not in ood.index:
        return "not evaluated (a cell is missing)"
    plain, filtered = ood.loc[CONTROL], ood.loc["mask_void"]
    if plain["runs_with_spikes"] >= 2 and plain["spikes"] >= 2 * filtered["spikes"]:
        return "reproduced"
    return "not reproduced"


def followup_table(folder: Path = RESULTS) -> pd.DataFrame:
    """The follow-up (NOTES.md): per hypothesis, collapsed runs on fresh seeds against GRPO's,
    Fisher's one-sided p, Holm over the hypotheses, the verdict; beside it the held-out success
    difference (Welch, two-sided) and the collapse counts pooled with seeds 0-3 (descriptive)."""
    def load(name):
        d = pd.read_csv(folder / f"followup_{name}.csv")
        return d.assign(collapsed=d["collapsed"].astype(bool))
    control = load(CONTROL)
    main = load_runs(folder)
    main_ood = main[main["style"] == "ood"].assign(collapsed=lambda d: d["collapsed"].astype(bool))
    rows = []
    for method, direction in FOLLOWUP.items():
        cell = load(method)
        w = welch(cell["eval_reward"], control["eval_reward"])
        pooled = {m: pd.concat([main_ood[main_ood["method"] == m]["collapsed"], d["collapsed"]])
                  for m, d in ((method, cell), (CONTROL, control))}
        rows.append({"method": method, "hypothesis": f"collapses {direction} often than {CONTROL}",
                     "collapsed": f"{int(cell['collapsed'].sum())}/{len(cell)}",
                     "control_collapsed": f"{int(control['collapsed'].sum())}/{len(control)}",
                     "p": fisher_one_sided(int(cell["collapsed"].sum()), len(cell),
                                           int(control["collapsed"].sum()), len(control), direction),
                     "eval_reward": cell["eval_reward"].mean(), "control_eval_reward": control["eval_reward"].mean(),
                     "eval_p": w["p"],
                     "pooled_0_11": f"{int(pooled[method].sum())}/{len(pooled[method])} vs "
                                    f"{int(pooled[CONTROL].sum())}/{len(pooled[CONTROL])}"})
    out = pd.DataFrame(rows)
    out["p_holm"] = holm(out["p"])
    out["verdict"] = np.where(out["p_holm"] < ALPHA, "supported", "not supported")
    return out


def collect(runs: Path = RUNS, folder: Path = RESULTS) -> None:
    """Copy each sweep's results.csv (the main comparison's and the follow-up's) and every run's
    per-step series into `folder`."""
    folder.mkdir(exist_ok=True)
    series = []
    names = [*METHODS, *(f"followup_{m}" for m in (CONTROL, *FOLLOWUP))]
    for method in names:
        src = runs / method / "results.csv"
        if not src.exists():
            print(f"[collect] {method}: no {src} (not run)")
            continue
        shutil.copyfile(src, folder / f"{method}.csv")
        for run_id in pd.read_csv(src)["run_id"]:
            with open(runs / method / run_id / "metrics.jsonl") as f:
                for line in f:
                    m = json.loads(line)
                    if "grad_norm" in m:
                        series.append({"run_id": run_id, "step": m["step"],
                                       **{k: m.get(v, float("nan")) for k, v in STEP_COLUMNS.items()}})
    pd.DataFrame(series).to_csv(folder / "steps.csv", index=False, float_format="%.6g")
    print(f"[collect] {len(series)} steps into {folder / 'steps.csv'}")


def main(argv: list[str]) -> None:
    if "--collect" in argv:
        collect()
        return
    pd.set_option("display.width", 200)
    t = table()
    show = t[["style", "method", "seeds", "collapsed", "eval_reward", "eval_reward_diff", "eval_reward_ci_lo",
              "eval_reward_ci_hi", "eval_reward_p", "eval_reward_p_holm", "eval_reward_verdict",
              "reward_last", "reward_last_diff", "reward_last_p_holm", "reward_last_verdict"]]
    s = spike_table()
    fmt = (lambda d: d.to_markdown(index=False, floatfmt=".3f")) if "--md" in argv else \
        (lambda d: d.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(fmt(show))
    print()
    print(fmt(s))
    print(f"\nSimpleTIR's spike claim (NOTES.md rule): {simpletir_claim(s)}")
    if (RESULTS / f"followup_{CONTROL}.csv").exists():
        print("\nFollow-up on fresh seeds 4-11, OOD outputs (NOTES.md):")
        print(fmt(followup_table()))


if __name__ == "__main__":
    main(sys.argv[1:])
