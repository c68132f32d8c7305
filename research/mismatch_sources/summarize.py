"""The tables of the source-by-source study (NOTES.md, pre-registered), computed from the shipped
result files; the chapter "Where the mismatch comes from" and its lab import this file.

    .venv/bin/python research/mismatch_sources/summarize.py          # print every table as Markdown

Tables: `control_check()` (the exact-zero check), `size_table(stage)` (k3, chi^2, max |Δ log p|,
share of tokens affected), `source_table(stage)` (each source against the control: the primary
Welch test with Holm, the permutation and Fisher tests beside it) and `fix_table()` (each fix
against its source).  Stage 4 (routing on the tiny MoE): `routing_check()`, `routing_size_table()`,
`routing_table()`.  A family without nine seeds in every arm has no verdict ("incomplete").
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parents[1]))
from rl_lab.tools.stats import fisher_one_sided, holm, permutation_test, welch  # noqa: E402

SOURCES = {"bf16": "bf16 sampler", "fp16": "fp16 sampler", "bf16_head32": "bf16 sampler, fp32 LM head",
           "batch_variant": "batch-variant split-K", "tp4": "tensor parallel 4 vs 1", "top_p": "top-p 0.9 (sampler only)",
           "stale2": "stale by 2 steps", "sync_skip": "layer 0 unsynced, steps 100-150",
           "sync_bf16": "weights synced through bf16"}
"""Source arm suffix -> its name in the chapter (NOTES.md's table, in its order)."""
FIXES = {"fp16_both": ("fp16 on both sides", "fp16"), "bf16_both": ("bf16 on both sides", "bf16"),
         "batch_invariant": ("batch-invariant split", "batch_variant"),
         "tp4_fixed": ("same shard order", "tp4"), "top_p_keep_mask": ("Keep Sampling Mask", "top_p"),
         "stale2_bypass": ("bypass PPO-clip", "stale2"), "sync_skip_verify": ("sync check", "sync_skip"),
         "sync_bf16_verify": ("sync check", "sync_bf16")}
"""Fix arm suffix -> (its name, the source arm it is tested against)."""
ROUTING = {"routing_noise": "router noise 0.02 (float32 router)", "routing_bf16": "bf16 router"}
"""Stage 4's source arms (suffix -> name); its control is s4_moe_control, its fix s4_routing_noise_replay."""
ROUTING_FIX = ("routing_noise_replay", "routing replay (R3)", "routing_noise")
SEEDS = 9
ALPHA = 0.05
SIZE_COLUMNS = {"k3_kl_mean": "k3", "chi2_token_mean": "chi^2 per token", "logp_diff_max_mean": "max |Δ log p|",
                "tokens_differ_mean": "tokens affected"}


def load(path: Path = Path(__file__)):
    """This module, loaded by file path (research/ is not a package): `summary = load()`."""
    spec = importlib.util.spec_from_file_location("mismatch_sources_summary", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def arm(name: str) -> pd.DataFrame | None:
    """results/<name>/results.csv, or None when the arm has not been run."""
    f = RESULTS / name / "results.csv"
    return pd.read_csv(f) if f.exists() else None


def complete(*frames) -> bool:
    return all(f is not None and len(f) == SEEDS for f in frames)


def control_check(stage: str = "s1") -> dict:
    """The check NOTES.md puts before anything is read: the control's k3 and share of differing
    tokens are exactly 0 in every run."""
    c = arm(f"{stage}_control")
    if c is None:
        return dict(runs=0, exact=False)
    exact = bool((c["k3_kl_mean"] == 0).all() and (c["tokens_differ_mean"] == 0).all()
                 and (c["k3_kl_last"] == 0).all())
    return dict(runs=len(c), exact=exact)


def _range(values, fmt: str) -> str:
    v = np.asarray(values, dtype=float)
    med, lo, hi = np.median(v), v.min(), v.max()
    return fmt.format(med) if lo == hi else f"{fmt.format(med)} [{fmt.format(lo)}, {fmt.format(hi)}]"


def size_table(stage: str = "s1") -> pd.DataFrame:
    """Each arm's mismatch: median [min, max] over seeds of the per-run means."""
    rows = []
    for suffix, label in {"control": "control (exact zero)", **SOURCES}.items():
        df = arm(f"{stage}_{suffix}")
        if df is None:
            continue
        row = {"arm": label, "runs": len(df)}
        for col, name in SIZE_COLUMNS.items():
            row[name] = _range(df[col], "{:.0%}" if col == "tokens_differ_mean" else "{:.2g}")
        rows.append(row)
    return pd.DataFrame(rows)


def compare(treated: pd.DataFrame, base: pd.DataFrame) -> dict:
    """Last-fifth reward and collapses of one arm against another: the primary and secondary tests."""
    w = welch(treated["reward_last"], base["reward_last"])
    k_t, k_b = int(treated["collapsed"].sum()), int(base["collapsed"].sum())
    return dict(collapses=f"{k_t}/{len(treated)}", reward=treated["reward_last"].mean(), diff=w["diff"],
                ci=f"[{w['ci_lo']:+.2f}, {w['ci_hi']:+.2f}]", t=w["t"], p=w["p"],
                p_perm=permutation_test(treated["reward_last"], base["reward_last"]),
                p_fisher=fisher_one_sided(k_t, len(treated), k_b, len(base), "more"))


def _verdicts(table: pd.DataFrame, up: str, down: str) -> pd.DataFrame:
    table["Holm p"] = holm(table["p"])
    table["Holm p (perm.)"] = holm(table["p_perm"])
    table["Holm p (Fisher)"] = holm(table["p_fisher"])
    table["verdict"] = [up if (h < ALPHA and d > 0) else down if (h < ALPHA and d < 0) else "not resolved at this scale"
                        for h, d in zip(table["Holm p"], table["diff"])]
    return table


def source_table(stage: str = "s1") -> pd.DataFrame:
    """Each source against the control (one family); "incomplete" until every arm has nine seeds."""
    control = arm(f"{stage}_control")
    frames = {s: arm(f"{stage}_{s}") for s in SOURCES}
    if not complete(control, *frames.values()):
        done = [s for s, f in frames.items() if complete(f)]
        return pd.DataFrame([dict(status="incomplete", control_runs=0 if control is None else len(control),
                                  complete_arms=", ".join(done))])
    rows = [dict(source=SOURCES[s], **compare(f, control)) for s, f in frames.items()]
    return _verdicts(pd.DataFrame(rows), "raises reward", "lowers reward")


def fix_table() -> pd.DataFrame:
    """Each fix against its source at lr 5e-4 (one family), with its mismatch and its distance to the control."""
    control = arm("s1_control")
    pairs = {f: (arm(f"s2_{f}"), arm(f"s1_{src}")) for f, (_, src) in FIXES.items()}
    if not complete(control, *[x for p in pairs.values() for x in p]):
        done = [f for f, (fx, _) in pairs.items() if complete(fx)]
        return pd.DataFrame([dict(status="incomplete", complete_fixes=", ".join(done))])
    rows = []
    for f, (fx, src) in pairs.items():
        vs_control = welch(fx["reward_last"], control["reward_last"])
        rows.append(dict(fix=FIXES[f][0], source=SOURCES[FIXES[f][1]], k3=fx["k3_kl_mean"].max(),
                         tokens_affected=fx["tokens_differ_mean"].max(), **compare(fx, src),
                         vs_control=f"{vs_control['diff']:+.2f} [{vs_control['ci_lo']:+.2f}, {vs_control['ci_hi']:+.2f}]"))
    return _verdicts(pd.DataFrame(rows), "keeps reward", "loses reward")


def routing_check(stage: str = "s4") -> dict:
    """Stage 4's (or 5's) check before any verdict: k3 and the share of differing tokens are exactly 0
    in every run of the MoE control and of the replay arm."""
    out = {}
    for name in (f"{stage}_moe_control", f"{stage}_{ROUTING_FIX[0]}"):
        df = arm(name)
        out[name] = dict(runs=0 if df is None else len(df), exact=df is not None and bool(
            (df["k3_kl_mean"] == 0).all() and (df["tokens_differ_mean"] == 0).all() and (df["k3_kl_last"] == 0).all()))
    return out


def routing_size_table(stage: str = "s4") -> pd.DataFrame:
    """Stage 4's (or 5's) arms: median [min, max] over seeds of the per-run means, routing flips included."""
    rows = []
    labels = {"moe_control": "MoE control (exact zero)", **ROUTING, ROUTING_FIX[0]: ROUTING_FIX[1]}
    for suffix, label in labels.items():
        df = arm(f"{stage}_{suffix}")
        if df is None:
            continue
        row = {"arm": label, "runs": len(df)}
        for col, name in {**SIZE_COLUMNS, "routing_flips_mean": "routing flips"}.items():
            v = df[col].fillna(0) if col == "routing_flips_mean" else df[col]   # no routing dial: no flips
            row[name] = _range(v, "{:.1%}" if col in ("tokens_differ_mean", "routing_flips_mean") else "{:.2g}")
        rows.append(row)
    return pd.DataFrame(rows)


def routing_table(stage: str = "s4") -> pd.DataFrame:
    """Each routing source against the MoE control (Holm over the two), then replay against the
    noise arm (one test): NOTES.md, stages 4 (lr 5e-4) and 5 (2e-4)."""
    control, fix, base = (arm(f"{stage}_moe_control"), arm(f"{stage}_{ROUTING_FIX[0]}"),
                          arm(f"{stage}_{ROUTING_FIX[2]}"))
    frames = {s: arm(f"{stage}_{s}") for s in ROUTING}
    if not complete(control, fix, *frames.values()):
        return pd.DataFrame([dict(status="incomplete")])
    sources = _verdicts(pd.DataFrame([dict(comparison=f"{ROUTING[s]} vs control", **compare(f, control))
                                      for s, f in frames.items()]), "raises reward", "lowers reward")
    replay = _verdicts(pd.DataFrame([dict(comparison=f"{ROUTING_FIX[1]} vs {ROUTING[ROUTING_FIX[2]]}",
                                          **compare(fix, base))]), "keeps reward", "loses reward")
    return pd.concat([sources, replay], ignore_index=True)


def main() -> None:
    pd.set_option("display.width", 200)
    for stage in ("s1", "s3"):
        print(f"## {stage}: control check {control_check(stage)}\n")
        print(size_table(stage).to_markdown(index=False), "\n")
        print(source_table(stage).to_markdown(index=False, floatfmt=".3g"), "\n")
    print("## s2: fixes\n")
    print(fix_table().to_markdown(index=False, floatfmt=".3g"))
    for stage in ("s4", "s5"):
        print(f"\n## {stage}: routing on the tiny MoE, check {routing_check(stage)}\n")
        print(routing_size_table(stage).to_markdown(index=False), "\n")
        print(routing_table(stage).to_markdown(index=False, floatfmt=".3g"))


if __name__ == "__main__":
    main()
