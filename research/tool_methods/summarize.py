"""The tool-task method comparison: each method against plain GRPO, with the verdicts of NOTES.md.

    .venv/bin/python research/tool_methods/summarize.py --collect   # after run.sh: copy results in
    .venv/bin/python research/tool_methods/summarize.py [--md]      # print the tables

`--collect` copies runs/tool_methods/<method>/results.csv to results/<method>.csv and every run's
per-step reward, gradient norm, void-turn share and tool calls to results/steps.csv (the spike rule needs the
whole series; the runs' folders are not shipped); block 3's the same way, to results/block3_<arm>.csv
and results/block3_steps.csv.  Chapter 12 and lab 12 call `table()`, `spike_table()`,
`followup_table()`, `block3_table()`, `block3_mechanisms()` and `block3b_table()` (block 3b, issue 53:
SimpleTIR as published, results/block3b_<arm>.csv and results/block3b_steps.csv).

Verdict per (method, output style) against plain GRPO of the same style (NOTES.md, fixed before
the runs): Welch's t over seeds, two-sided p from Student's t with Welch's degrees of freedom,
Holm-adjusted over the family of comparisons of one outcome; "gain"/"loss" when the adjusted
p < 0.05, else "null".  A spike: a step whose gradient norm exceeds SPIKE_FACTOR x the median of
the run's nonzero norms.
"""
from __future__ import annotations

import json
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
# Student's t, Welch's test and Fisher's exact test are scipy.stats' (the `research` extra, which
# `make setup` installs).  Holm's step-down adjustment is rl_lab.tools.stats.holm, a few lines by hand:
# scipy has no Holm (its false_discovery_control is Benjamini-Hochberg/-Yekutieli, a different
# procedure), and statsmodels' multipletests is not worth a dependency.
try:
    from scipy import stats as sps
except ImportError:     # the labs-only install and Binder (lab 12 reads these tables): see the end
    sps = None

from rl_lab.tools.stats import fisher_two_sided, holm, permutation_test  # noqa: E402,F401
from rl_lab.tools.stats import welch as _welch_no_spread  # noqa: E402  (both samples constant: no t distribution)


def student_t_sf2(t: float, df: float) -> float:
    """Two-sided p-value P(|T| >= |t|) of Student's t with df degrees of freedom."""
    return float(min(1.0, 2 * sps.t.sf(abs(t), df)))


def student_t_quantile(p_two_sided: float, df: float) -> float:
    """The t > 0 with P(|T| >= t) = p_two_sided."""
    return float(sps.t.isf(p_two_sided / 2, df))


def welch(a, b) -> dict:
    """mean(a) - mean(b), Welch's t, its degrees of freedom, the two-sided p and a 95% interval
    (scipy.stats.ttest_ind with equal_var=False).  Both samples constant: t = 0 and p = 1 if the
    means are equal, else t = +-inf and p = 0, as rl_lab.tools.stats.welch (scipy gives NaN there)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"welch needs at least 2 runs a side, got {len(a)} and {len(b)}")
    if a.var(ddof=1) == 0 and b.var(ddof=1) == 0:
        return _welch_no_spread(a, b)
    r = sps.ttest_ind(a, b, equal_var=False)
    ci = r.confidence_interval(0.95)
    return dict(diff=a.mean() - b.mean(), t=float(r.statistic), df=float(r.df), p=float(r.pvalue),
                ci_lo=float(ci.low), ci_hi=float(ci.high))


def fisher_one_sided(hits_a: int, n_a: int, hits_b: int, n_b: int, direction: str) -> float:
    """Fisher's exact test of hits_a of n_a against hits_b of n_b: the probability, given the
    total number of hits, that group a has at most ("less") or at least ("more") hits_a."""
    if direction not in ("less", "more"):
        raise ValueError(f"fisher_one_sided: direction is 'less' or 'more', got {direction!r}")
    table = [[hits_a, n_a - hits_a], [hits_b, n_b - hits_b]]
    return float(sps.fisher_exact(table, alternative="less" if direction == "less" else "greater").pvalue)


if sps is None:
    # Without scipy (the labs-only install and Binder, where lab 12 calls table()), the same
    # procedures come from rl_lab.tools.stats, which has no scipy; tests/unit/test_stats_scipy.py holds them
    # to scipy's, and tests/integration/test_tool_methods_summary.py these tables, computed both ways, together.
    from rl_lab.tools.stats import fisher_one_sided, student_t_quantile, student_t_sf2, welch  # noqa: E402,F401,F811


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


# ----------------------------------------------------------------------------- block 3
BLOCK3 = ("grpo", "skip_zero", "filter_groups", "empg_sum", "empg_scaled", "mask_void", "rl_sft", "teacher_kl")
"""Block 3's arms (NOTES.md), grpo the control; results/block3_<arm>.csv and results/block3_steps.csv."""
BLOCK3_LABELS = {"grpo": "GRPO (control)", "skip_zero": "skip zero-spread steps",
                 "filter_groups": "dynamic sampling (DAPO)", "empg_sum": "EMPG, whiten the sum",
                 "empg_scaled": "EMPG, whiten g A then add the bonus", "mask_void": "SimpleTIR's void filter",
                 "rl_sft": "RL + SFT on gold answers", "teacher_kl": "RL + KL to a teacher"}
BLOCK3_STEPS = {"reward": "reward", "grad_norm": "grad_norm", "void_fraction": "turns/void_fraction",
                "void_eos_fraction": "turns/void_eos_fraction", "tool_calls": "tools/calls",
                "frac_zero_std": "frac_reward_zero_std", "zero_spread_skipped": "filter/zero_spread_skipped",
                "groups_kept": "filter/groups_kept", "teacher_kl": "teacher_kl", "il_nll": "il/nll"}
ALIVE = 0.5
"""Beside the verdict: a run is alive when its held-out success ends above this (NOTES.md)."""
LAST = 5
"""The void share per run is its mean over the last LAST steps (NOTES.md)."""


def block3_runs(folder: Path = RESULTS) -> pd.DataFrame:
    """One row per block-3 run: arm, seed and the sweep's summary columns."""
    frames = [pd.read_csv(folder / f"block3_{arm}.csv").assign(arm=arm) for arm in BLOCK3
              if (folder / f"block3_{arm}.csv").exists()]
    if not frames:
        raise FileNotFoundError(f"no block-3 results in {folder}: run research/tool_methods/run_block3.sh, then "
                                f"summarize.py --collect")
    return pd.concat(frames, ignore_index=True)


def block3_mechanisms(folder: Path = RESULTS) -> pd.DataFrame:
    """Per run: the mechanism each arm is about (NOTES.md), from results/block3_steps.csv.
    zero_spread_steps: steps where no group had reward spread (frac_reward_zero_std = 1);
    grad_on_zero_spread: the mean gradient norm on those steps (NaN where skipped);
    skipped: steps without an optimizer step (skip_zero: zero_spread_skipped; filter_groups: no
    group kept); void_last / void_eos_last: the void share over the last LAST steps."""
    steps = pd.read_csv(folder / "block3_steps.csv")
    rows = []
    for run_id, d in steps.groupby("run_id", sort=False):
        d = d.sort_values("step")
        zero = d["frac_zero_std"] >= 1
        skipped = (d["zero_spread_skipped"].fillna(0) > 0) | (d["groups_kept"] == 0)
        rows.append({"run_id": run_id, "steps": len(d), "zero_spread_steps": int(zero.sum()),
                     "grad_on_zero_spread": d.loc[zero & ~skipped, "grad_norm"].mean(),
                     "skipped": int(skipped.sum()),
                     "void_last": d["void_fraction"].tail(LAST).mean(),
                     "void_eos_last": d["void_eos_fraction"].tail(LAST).mean(),
                     "tool_calls_last": d["tool_calls"].tail(LAST).mean(),
                     "teacher_kl_first": d["teacher_kl"].iloc[0], "teacher_kl_last": d["teacher_kl"].iloc[-1],
                     "il_nll_first": d["il_nll"].iloc[0], "il_nll_last": d["il_nll"].iloc[-1]})
    return block3_runs(folder)[["run_id", "arm", "seed", "eval_reward"]].merge(pd.DataFrame(rows), on="run_id")


def block3_table(folder: Path = RESULTS) -> pd.DataFrame:
    """Per arm: seeds, runs alive, mean held-out success, and against GRPO the difference, its 95%
    interval, the raw and Holm-adjusted p (Welch, two-sided; Holm over the arms) and the verdict;
    beside them the mean of the mechanism columns of `block3_mechanisms`."""
    runs, mech = block3_runs(folder), block3_mechanisms(folder)
    control = runs[runs["arm"] == CONTROL]
    rows = []
    for arm in BLOCK3:
        cell = runs[runs["arm"] == arm]
        if cell.empty:
            continue
        m = mech[mech["arm"] == arm]
        row = {"arm": arm, "label": BLOCK3_LABELS[arm], "seeds": len(cell),
               "alive": f"{int((cell['eval_reward'] > ALIVE).sum())}/{len(cell)}",
               "collapsed": f"{int(cell['collapsed'].astype(bool).sum())}/{len(cell)}",
               "eval_reward": cell["eval_reward"].mean(),
               "zero_spread_steps": m["zero_spread_steps"].mean(), "grad_on_zero_spread": m["grad_on_zero_spread"].mean(),
               "skipped": m["skipped"].mean(), "void_last": m["void_last"].mean(),
               "void_eos_last": m["void_eos_last"].mean()}
        if arm != CONTROL and len(control) >= 2 and len(cell) >= 2:
            w = welch(cell["eval_reward"], control["eval_reward"])
            row.update({"diff": w["diff"], "ci_lo": w["ci_lo"], "ci_hi": w["ci_hi"], "p": w["p"],
                        "p_perm": permutation_test(cell["eval_reward"], control["eval_reward"])})
        rows.append(row)
    out = pd.DataFrame(rows)
    compared = out["arm"] != CONTROL
    out.loc[compared, "p_holm"] = holm(out.loc[compared, "p"])
    out["verdict"] = [verdict(d, p) if c else "control" for c, d, p in zip(compared, out.get("diff"), out["p_holm"])]
    # beside the verdict (issue 53, added after the runs): the exact permutation test and its Holm adjustment,
    # which Welch's t with df ~ 7 on bimodal outcomes only approximates (conservatively here)
    out.loc[compared, "p_perm_holm"] = holm(out.loc[compared, "p_perm"])
    return out


# ----------------------------------------------------------------------------- block 3b (issue 53)
BLOCK3B = ("simpletir", "mask_void_loss")
"""Block 3b's arms (NOTES.md): SimpleTIR as published (the verdict) and the loss-only mask alone
(descriptive), against block 3's grpo; results/block3b_<arm>.csv and results/block3b_steps.csv."""
BLOCK3B_LABELS = {"simpletir": "SimpleTIR as published (loss-only void mask + group filter)",
                  "mask_void_loss": "loss-only void mask alone"}
BLOCK3B_STEPS = {**BLOCK3_STEPS, "void_trajectories": "filter/void_trajectories",
                 "groups_drawn": "filter/groups_drawn"}


def block3b_runs(folder: Path = RESULTS) -> pd.DataFrame:
    frames = [pd.read_csv(folder / f"block3b_{arm}.csv").assign(arm=arm) for arm in BLOCK3B
              if (folder / f"block3b_{arm}.csv").exists()]
    if not frames:
        raise FileNotFoundError(f"no block-3b results in {folder}: run research/tool_methods/run_block3b.sh, then "
                                f"summarize.py --collect")
    return pd.concat(frames, ignore_index=True)


def block3b_table(folder: Path = RESULTS) -> pd.DataFrame:
    """Per block-3b arm against block 3's grpo (NOTES.md, block 3b): runs alive, mean held-out
    success, the difference, the exact permutation p (the verdict's statistic, simpletir only),
    Welch's interval and p, Fisher's two-sided p on alive / not alive, and the mechanisms: void share
    over the last LAST steps, void episodes masked per step, steps skipped, episodes per step."""
    runs = block3b_runs(folder)
    control = block3_runs(folder)
    control = control[control["arm"] == CONTROL]
    steps = pd.read_csv(folder / "block3b_steps.csv")
    rows = []
    for arm in BLOCK3B:
        cell = runs[runs["arm"] == arm]
        if cell.empty:
            continue
        st = steps[steps["run_id"].isin(cell["run_id"])].sort_values(["run_id", "step"])
        per_run = st.groupby("run_id")
        alive, alive_c = int((cell["eval_reward"] > ALIVE).sum()), int((control["eval_reward"] > ALIVE).sum())
        w = welch(cell["eval_reward"], control["eval_reward"])
        p_perm = permutation_test(cell["eval_reward"], control["eval_reward"])
        drawn = st["groups_drawn"].fillna(8)
        rows.append({"arm": arm, "label": BLOCK3B_LABELS[arm], "seeds": len(cell), "alive": f"{alive}/{len(cell)}",
                     "control_alive": f"{alive_c}/{len(control)}",
                     "collapsed": f"{int(cell['collapsed'].astype(bool).sum())}/{len(cell)}",
                     "eval_reward": cell["eval_reward"].mean(), "control_eval_reward": control["eval_reward"].mean(),
                     "diff": w["diff"], "p_perm": p_perm, "ci_lo": w["ci_lo"], "ci_hi": w["ci_hi"], "p_welch": w["p"],
                     "p_fisher_alive": fisher_two_sided(alive, len(cell), alive_c, len(control)),
                     "verdict": verdict(w["diff"], p_perm) if arm == "simpletir" else "descriptive",
                     "void_last": per_run["void_fraction"].apply(lambda x: x.tail(LAST).mean()).mean(),
                     "void_masked_per_step": st["void_trajectories"].mean(),
                     "skipped": per_run["groups_kept"].apply(lambda x: int((x == 0).sum())).mean(),
                     "episodes_per_step": (drawn * 8).mean()})
    return pd.DataFrame(rows)


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
    if series:            # a machine without the first blocks' runs keeps the shipped series
        pd.DataFrame(series).to_csv(folder / "steps.csv", index=False, float_format="%.6g")
    print(f"[collect] {len(series)} steps into {folder / 'steps.csv'}")
    series = []
    for arm in BLOCK3:
        src = runs / f"block3_{arm}" / "results.csv"
        if not src.exists():
            print(f"[collect] block3_{arm}: no {src} (not run)")
            continue
        shutil.copyfile(src, folder / f"block3_{arm}.csv")
        for run_id in pd.read_csv(src)["run_id"]:
            with open(runs / f"block3_{arm}" / run_id / "metrics.jsonl") as f:
                for line in f:
                    m = json.loads(line)
                    if "grad_norm" in m:
                        series.append({"run_id": run_id, "step": m["step"],
                                       **{k: m.get(v, float("nan")) for k, v in BLOCK3_STEPS.items()}})
    if series:
        pd.DataFrame(series).to_csv(folder / "block3_steps.csv", index=False, float_format="%.6g")
    print(f"[collect] {len(series)} block-3 steps into {folder / 'block3_steps.csv'}")
    series = []
    for arm in BLOCK3B:
        src = runs / f"block3_{arm}" / "results.csv"
        if not src.exists():
            print(f"[collect] block3_{arm}: no {src} (not run)")
            continue
        shutil.copyfile(src, folder / f"block3b_{arm}.csv")
        for run_id in pd.read_csv(src)["run_id"]:
            with open(runs / f"block3_{arm}" / run_id / "metrics.jsonl") as f:
                for line in f:
                    m = json.loads(line)
                    if "grad_norm" in m:
                        series.append({"run_id": run_id, "step": m["step"],
                                       **{k: m.get(v, float("nan")) for k, v in BLOCK3B_STEPS.items()}})
    if series:
        pd.DataFrame(series).to_csv(folder / "block3b_steps.csv", index=False, float_format="%.6g")
    print(f"[collect] {len(series)} block-3b steps into {folder / 'block3b_steps.csv'}")


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
    if (RESULTS / f"block3_{CONTROL}.csv").exists():
        print("\nBlock 3, fresh seeds 12-19, OOD outputs (NOTES.md):")
        print(fmt(block3_table().drop(columns=["label"])))
        print(fmt(block3_mechanisms().drop(columns=["run_id", "il_nll_first", "il_nll_last"])))
    if (RESULTS / "block3b_simpletir.csv").exists():
        print("\nBlock 3b, SimpleTIR as published, against block 3's GRPO (NOTES.md):")
        print(fmt(block3b_table().drop(columns=["label"])))


if __name__ == "__main__":
    main(sys.argv[1:])
