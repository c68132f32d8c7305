"""The post's setting in miniature against the criteria of NOTES.md (fixed before the runs).

    .venv/bin/python research/post_miniature/summarize.py --collect   # after run.sh: copy results in
    .venv/bin/python research/post_miniature/summarize.py             # print the tables

`--collect` copies runs/post_miniature/<spec>/results.csv to results/<spec>.csv and writes
results/per_run.csv (per run: the mean per-step log ratio of |log pi - log mu| right after a tool
output to elsewhere, over steps 1-100 and over the whole run; k3 over the first and the last fifth)
and results/series.csv (per run, 20-step means of reward, k3 and the two mismatch measures, for the
chapter's figure; the run folders are not shipped).
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
from rl_lab.tools.stats import holm, one_sample_t, welch  # noqa: E402
from rl_lab.utils import read_jsonl  # noqa: E402

RUNS, RESULTS = ROOT / "runs/post_miniature", HERE / "results"
SPECS = {"control": "fp32 (control)", "noise": "logit noise 0.5", "bf16_first100": "bf16"}
# NOTES.md "Follow-up" (fixed before its runs): 2000-step bf16 samplers, their own Holm families
FOLLOW_UP = {"bf16": "bf16 (2000 steps)", "vllm_bf16": "vLLM bf16"}
AFTER, ELSE = "tir/abs_logp_diff/after_tool", "tir/abs_logp_diff/elsewhere"
WINDOW = 100          # question (a)'s primary window: steps 1-100
BIN = 20              # series.csv: means over bins of this many steps
ALPHA = 0.05


def _log_ratio(df: pd.DataFrame) -> pd.Series:
    """Per step: log(after / elsewhere), NaN where either is missing or zero."""
    a, e = df[AFTER].astype(float), df[ELSE].astype(float)
    ok = (a > 0) & (e > 0)
    return np.log(a.where(ok) / e.where(ok))


def collect(runs: Path = RUNS, results: Path = RESULTS) -> None:
    results.mkdir(parents=True, exist_ok=True)
    per_run, series = [], []
    for spec in [*SPECS, *(s for s in FOLLOW_UP if (runs / s / "results.csv").exists())]:
        shutil.copy(HERE / f"{spec}.yaml", results / f"{spec}.yaml")
        res = pd.read_csv(runs / spec / "results.csv")
        res.to_csv(results / f"{spec}.csv", index=False)
        for run_id in res["run_id"]:
            df = pd.DataFrame(read_jsonl(runs / spec / run_id / "metrics.jsonl"))
            lr = _log_ratio(df)
            n = len(df) // 5
            per_run.append({"spec": spec, "run_id": run_id, "steps": len(df),
                            "log_ratio_first100": lr[:WINDOW].mean(), "log_ratio_all": lr.mean(),
                            "after_first100": df[AFTER][:WINDOW].mean(), "elsewhere_first100": df[ELSE][:WINDOW].mean(),
                            "k3_first": df["rollout_corr/k3_kl"][:n].mean(),
                            "k3_last": df["rollout_corr/k3_kl"][-n:].mean()})
            binned = df.assign(bin=(df["step"] - 1) // BIN).groupby("bin")
            s = binned[["step", "reward", "rollout_corr/k3_kl", AFTER, ELSE, "grad_norm"]].mean()
            s["step"] = binned["step"].max()
            series.append(s.assign(spec=spec, run_id=run_id))
    pd.DataFrame(per_run).to_csv(results / "per_run.csv", index=False)
    out = pd.concat(series).rename(columns={"rollout_corr/k3_kl": "k3", AFTER: "after_tool", ELSE: "elsewhere"})
    out.to_csv(results / "series.csv", index=False, float_format="%.6g")


def runs(results: Path = RESULTS) -> pd.DataFrame:
    """One row per run: the sweep's columns, the sampler, the output style and per_run.csv's."""
    frames = []
    for spec, sampler in {**SPECS, **FOLLOW_UP}.items():
        if spec in FOLLOW_UP and not (results / f"{spec}.csv").exists():
            continue
        df = pd.read_csv(results / f"{spec}.csv")
        frames.append(df.assign(spec=spec, sampler=sampler))
    df = pd.concat(frames, ignore_index=True)
    df["style"] = df["task_kwargs"].map(lambda s: "ood" if "ood" in s else "plain")
    return df.merge(pd.read_csv(results / "per_run.csv").drop(columns=["spec", "steps"]), on="run_id")


def _verdict(d: float, p: float, up: str, down: str) -> str:
    return (up if d > 0 else down) if p < ALPHA else "null"


def question_a(df: pd.DataFrame, specs=tuple(SPECS)) -> pd.DataFrame:
    """Per sampler and style: the per-run log ratio (steps 1-100 and whole run), its one-sample t;
    per mismatched sampler, OOD against plain (Welch, Holm over the samplers of `specs`)."""
    df = df[df["spec"].isin(specs)]
    rows = []
    for sampler, g in df.groupby("sampler", sort=False):
        for style, h in g.groupby("style"):
            x = h["log_ratio_first100"]
            t = one_sample_t(x) if sampler != SPECS["control"] and len(x) > 1 else np.nan
            rows.append({"sampler": sampler, "style": style, "runs": len(h), "log_ratio_first100": x.mean(),
                         "ratio_first100": float(np.exp(x.mean())), "log_ratio_all": h["log_ratio_all"].mean(),
                         "t_vs_0": t, "after_vs_elsewhere": ("–" if np.isnan(t) else "larger right after tool outputs"
                                                             if t > 3 else "smaller right after tool outputs"
                                                             if t < -3 else "not resolved")})
    out = pd.DataFrame(rows)
    tests = []
    for sampler, g in df.groupby("sampler", sort=False):
        if sampler == SPECS["control"]:
            continue
        w = welch(g.loc[g["style"] == "ood", "log_ratio_first100"], g.loc[g["style"] == "plain", "log_ratio_first100"])
        tests.append({"sampler": sampler, "diff_ood_minus_plain": w["diff"], "t": w["t"], "p": w["p"]})
    tests = pd.DataFrame(tests)
    tests["p_holm"] = holm(tests["p"])
    tests["verdict"] = [_verdict(d, p, "larger after OOD outputs", "smaller after OOD outputs")
                        for d, p in zip(tests["diff_ood_minus_plain"], tests["p_holm"])]
    return out, tests


def question_b(df: pd.DataFrame, specs=("control", "noise")) -> pd.DataFrame:
    """Per style and sampler (2000-step runs of `specs`): collapses, blow-ups, rewards, and against
    the control the eval_reward test (Welch, Holm over the tested rows) and the collapse rule;
    k3's growth."""
    long = df[(df["steps"] >= 2000) & df["spec"].isin(specs)]
    names = {**SPECS, **FOLLOW_UP}
    rows = []
    for style, cell in long.groupby("style"):
        control = cell[cell["spec"] == "control"]
        for spec, g in cell.groupby("spec", sort=False):
            growth = np.log(g["k3_last"] / g["k3_first"])
            row = {"style": style, "sampler": names[spec], "runs": len(g), "collapses": int(g["collapsed"].sum()),
                   "grad_blowups": int(g["grad_blowup"].sum()), "eval_reward": g["eval_reward"].mean(),
                   "reward_last": g["reward_last"].mean(), "k3_first": g["k3_first"].mean(),
                   "k3_last": g["k3_last"].mean(), "control_collapses": int(control["collapsed"].sum())}
            if spec != "control":
                w = welch(g["eval_reward"], control["eval_reward"])
                row.update(diff=w["diff"], t=w["t"], p=w["p"], k3_growth_t=one_sample_t(growth))
            rows.append(row)
    out = pd.DataFrame(rows)
    tested = out["sampler"] != SPECS["control"]
    out.loc[tested, "p_holm"] = holm(out.loc[tested, "p"])
    out["reward_verdict"] = [_verdict(d, p, "gains reward", "costs reward") if t else "control"
                             for t, d, p in zip(tested, out.get("diff", np.nan), out["p_holm"])]
    out["collapse_verdict"] = [
        "control" if not t else "learning-rate cell" if f > 0 else
        "collapses runs" if c >= 2 else "no collapse from the mismatch"
        for t, f, c in zip(tested, out["control_collapses"], out["collapses"])]
    out["k3_growth"] = ["–" if not t or np.isnan(g) else "grew" if g > 3 else "shrank" if g < -3
                        else "not resolved" for t, g in zip(tested, out.get("k3_growth_t", np.nan))]
    return out


if __name__ == "__main__":
    if "--collect" in sys.argv:
        collect()
    pd.set_option("display.width", 220)
    fmt = {"float_format": lambda x: f"{x:.3g}", "index": False}
    df = runs()
    a, a_tests = question_a(df)
    print("Question (a): log(|log pi - log mu| right after a tool output / elsewhere), steps 1-100\n")
    print(a.to_string(**fmt), "\n")
    print(a_tests.to_string(**fmt), "\n")
    print("Question (b) and growth: 2000-step runs, against the fp32 control\n")
    print(question_b(df).to_string(**fmt))
    done = [s for s in FOLLOW_UP if s in set(df["spec"])]
    if done:
        print("\nFollow-up (NOTES.md): question (b) for the 2000-step bf16 samplers, one Holm family\n")
        print(question_b(df, ("control", *done)).to_string(**fmt))
        a, a_tests = question_a(df, tuple(s for s in done if s == "vllm_bf16"))
        if len(a_tests):
            print("\nFollow-up: question (a) for vLLM bf16, steps 1-100\n")
            print(a.to_string(**fmt), "\n")
            print(a_tests.to_string(**fmt))
        first = df[df["spec"].isin(["bf16_first100", "bf16"])].groupby(["spec", "style"])["log_ratio_first100"]
        print("\nbf16, steps 1-100 of the 100-step and the 2000-step runs (should agree)\n")
        print(first.mean().to_string())
