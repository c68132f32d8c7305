"""Per-turn baselines on the flaky calculator: grpo_per_turn, trloo and trajectory-level grpo, with
the verdicts of NOTES.md.

    .venv/bin/python research/trloo_turns/summarize.py --collect   # after run.sh: copy results in
    .venv/bin/python research/trloo_turns/summarize.py --warm-start  # the untrained reference
    .venv/bin/python research/trloo_turns/summarize.py [--md]      # print the tables

`--collect` copies runs/trloo_turns/<arm>/results.csv to results/<arm>.csv and every run's per-step
reward, gradient norm, tool calls and errors and the two per-turn group metrics to results/steps.csv
(the runs' folders are not shipped).  `--warm-start` writes results/warm_start.csv: the warm start's
own greedy held-out success per seed, with the same prompts and failures (added after the runs, in no
verdict).  Chapter 12 and lab 12 call `table()`, `arms_table()` and `mechanism_table()`.

Verdict per comparison (NOTES.md, fixed before the runs): Welch's t over seeds, two-sided p from
Student's t with Welch's degrees of freedom, Holm-adjusted over the three comparisons of one
outcome; "gain"/"loss" when the adjusted p < 0.05, else "null".  Dr. Kernel's claim is
"supported at this scale" only if trloo vs grpo_per_turn is a gain, and the setting tests it only
if every run's mean share of groups with varying turn counts is at least VARYING_MIN.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
RUNS = ROOT / "runs/trloo_turns"
ARMS = ("grpo", "grpo_per_turn", "trloo")
"""Spec names: trajectory-level GRPO, GRPO per (prompt, turn), TRLOO."""
COMPARISONS = (("grpo_per_turn", "grpo"), ("trloo", "grpo"), ("trloo", "grpo_per_turn"))
"""(arm, against): the family of NOTES.md; the last one is the claim."""
CLAIM = ("trloo", "grpo_per_turn")
OUTCOMES = ("eval_reward", "reward_last")
"""Primary (greedy held-out success, 512 prompts) and secondary (sampled reward, last fifth)."""
ALPHA = 0.05
VARYING_MIN = 0.8
"""The manipulation check: every run's mean turns/varying_groups must reach this."""
STEP_COLUMNS = {"reward": "reward", "grad_norm": "grad_norm", "tool_calls": "tools/calls",
                "tool_errors": "tools/errors", "varying_groups": "turns/varying_groups",
                "shrink_spread": "turns/shrink_spread"}

from rl_lab.tools.stats import holm, one_sample_t, student_t_sf2, welch  # noqa: E402  (Welch's test and Holm, as research/tool_methods)


def verdict(diff: float, p_adjusted: float) -> str:
    """NOTES.md's rule: gain / loss at Holm-adjusted p < ALPHA, otherwise null."""
    if p_adjusted < ALPHA:
        return "gain" if diff > 0 else "loss"
    return "null"


def load_runs(folder: Path = RESULTS) -> pd.DataFrame:
    """One row per run: arm, seed and the summary columns of results/<arm>.csv."""
    frames = [pd.read_csv(folder / f"{arm}.csv").assign(arm=arm) for arm in ARMS if (folder / f"{arm}.csv").exists()]
    if not frames:
        raise FileNotFoundError(f"no results in {folder}: run research/trloo_turns/run.sh, then "
                                "summarize.py --collect")
    return pd.concat(frames, ignore_index=True)


def arms_table(folder: Path = RESULTS) -> pd.DataFrame:
    """Per arm: seeds, the mean of each outcome and of the mechanism metrics over runs."""
    runs = load_runs(folder)
    rows = []
    for arm in ARMS:
        cell = runs[runs["arm"] == arm]
        if cell.empty:
            continue
        rows.append({"arm": arm, "seeds": len(cell), **{o: cell[o].mean() for o in OUTCOMES},
                     "eval_reward_sd": cell["eval_reward"].std(ddof=1),
                     "varying_groups": cell["varying_groups_mean"].mean(),
                     "varying_groups_min": cell["varying_groups_mean"].min(),
                     "shrink_spread": cell["shrink_spread_mean"].mean(),
                     "tool_calls": cell["tool_calls_mean"].mean(), "collapsed": int(cell["collapsed"].astype(bool).sum())})
    return pd.DataFrame(rows)


def table(folder: Path = RESULTS) -> pd.DataFrame:
    """Per comparison of NOTES.md: the two arms' means, the difference, its 95% Welch interval,
    the raw and Holm-adjusted p and the verdict, for each outcome."""
    runs = load_runs(folder)
    rows = []
    for arm, against in COMPARISONS:
        a, b = runs[runs["arm"] == arm], runs[runs["arm"] == against]
        if len(a) < 2 or len(b) < 2:
            continue
        row = {"comparison": f"{arm} vs {against}", "arm": arm, "against": against, "seeds": min(len(a), len(b))}
        for outcome in OUTCOMES:
            w = welch(a[outcome], b[outcome])
            row.update({outcome: a[outcome].mean(), f"{outcome}_against": b[outcome].mean(),
                        f"{outcome}_diff": w["diff"], f"{outcome}_ci_lo": w["ci_lo"], f"{outcome}_ci_hi": w["ci_hi"],
                        f"{outcome}_p": w["p"]})
        rows.append(row)
    out = pd.DataFrame(rows)
    for outcome in OUTCOMES:
        out[f"{outcome}_p_holm"] = holm(out[f"{outcome}_p"])
        out[f"{outcome}_verdict"] = [verdict(d, p) for d, p in zip(out[f"{outcome}_diff"], out[f"{outcome}_p_holm"])]
    return out


def paired_table(folder: Path = RESULTS) -> pd.DataFrame:
    """Secondary, added after the runs (issue 53), not part of any verdict: the design is paired
    (each seed shares its held-out prompts and its tool failures across arms), so per comparison
    the paired t test on the per-seed differences of the primary outcome (two-sided, seeds present
    in both arms), Holm over the three comparisons."""
    runs = load_runs(folder)
    rows = []
    for arm, against in COMPARISONS:
        a = runs[runs["arm"] == arm].set_index("seed")["eval_reward"]
        b = runs[runs["arm"] == against].set_index("seed")["eval_reward"]
        d = (a - b).dropna()
        if len(d) < 2:
            continue
        t = one_sample_t(d.to_numpy())
        rows.append({"comparison": f"{arm} vs {against}", "seeds": len(d), "mean_diff": d.mean(),
                     "sd_diff": d.std(ddof=1), "t": t, "p_paired": student_t_sf2(t, len(d) - 1)})
    out = pd.DataFrame(rows)
    out["p_paired_holm"] = holm(out["p_paired"])
    return out


def setting_tests_the_claim(folder: Path = RESULTS) -> bool:
    """The manipulation check: every run's mean share of groups with varying turn counts >= VARYING_MIN."""
    return bool((load_runs(folder)["varying_groups_mean"] >= VARYING_MIN).all())


def claim(folder: Path = RESULTS) -> str:
    """NOTES.md's rule for Dr. Kernel's claim at this scale."""
    if not setting_tests_the_claim(folder):
        return "not tested (the turn counts did not vary enough)"
    t = table(folder).set_index("comparison")
    row = t.loc[f"{CLAIM[0]} vs {CLAIM[1]}"]
    return "supported at this scale" if row["eval_reward_verdict"] == "gain" else "not supported at this scale (null)"


def mechanism_table(folder: Path = RESULTS) -> pd.DataFrame:
    """Per arm and block of ten steps: the mean share of groups with varying turn counts, the
    shrink spread, and the sampled reward (results/steps.csv)."""
    runs = load_runs(folder)[["run_id", "arm"]]
    steps = pd.read_csv(folder / "steps.csv").merge(runs, on="run_id")
    steps["steps"] = ((steps["step"] - 1) // 10 * 10 + 1).astype(str) + "-" + ((steps["step"] - 1) // 10 * 10 + 10).astype(str)
    return (steps.groupby(["arm", "steps"], sort=False)[["varying_groups", "shrink_spread", "reward"]]
            .mean().reset_index())


def warm_start_eval(folder: Path = RESULTS) -> pd.DataFrame:
    """The shipped warm start's greedy held-out success on each seed's 512 prompts with the flaky
    calculator, no training: what the arms' 50 steps improve on.  Writes results/warm_start.csv."""
    import torch

    from rl_lab import Trainer
    from rl_lab.tools.sweep import plan_sweep
    torch.set_num_threads(1)
    runs = plan_sweep(HERE / "grpo.yaml").runs            # the comparison's configs, one per seed
    out = pd.DataFrame([{"seed": r.seed, "eval_reward": Trainer(r.config).evaluate()["eval/reward"]} for r in runs])
    out.to_csv(folder / "warm_start.csv", index=False, float_format="%.6g")
    return out


def warm_start_reward(folder: Path = RESULTS) -> float:
    """The mean over seeds of results/warm_start.csv (`warm_start_eval`)."""
    return float(pd.read_csv(folder / "warm_start.csv")["eval_reward"].mean())


def collect(runs: Path = RUNS, folder: Path = RESULTS) -> None:
    """Copy each arm's results.csv and every run's per-step series into `folder`."""
    folder.mkdir(exist_ok=True)
    series = []
    for arm in ARMS:
        src = runs / arm / "results.csv"
        if not src.exists():
            print(f"[collect] {arm}: no {src} (not run)")
            continue
        shutil.copyfile(src, folder / f"{arm}.csv")
        for run_id in pd.read_csv(src)["run_id"]:
            with open(runs / arm / run_id / "metrics.jsonl") as f:
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
    if "--warm-start" in argv:
        print(warm_start_eval())
        return
    pd.set_option("display.width", 200)
    fmt = (lambda d: d.to_markdown(index=False, floatfmt=".3f")) if "--md" in argv else \
        (lambda d: d.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(fmt(arms_table()))
    print()
    t = table()
    print(fmt(t[["comparison", "seeds", "eval_reward", "eval_reward_against", "eval_reward_diff", "eval_reward_ci_lo",
                 "eval_reward_ci_hi", "eval_reward_p", "eval_reward_p_holm", "eval_reward_verdict",
                 "reward_last_diff", "reward_last_p_holm", "reward_last_verdict"]]))
    print(f"\nManipulation check (every run's mean varying share >= {VARYING_MIN}): {setting_tests_the_claim()}")
    print(f"Dr. Kernel's claim (NOTES.md rule): {claim()}")
    if (RESULTS / "warm_start.csv").exists():
        print(f"The warm start's own held-out success (no training; in no verdict): {warm_start_reward():.3f}")
    print()
    print(fmt(mechanism_table()))


if __name__ == "__main__":
    main(sys.argv[1:])
