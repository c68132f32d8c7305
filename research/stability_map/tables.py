"""Every table of measurements in the chapter "When speed kills stability", computed from the
shipped result files (issue 27: the chapter renders them, it never types them).

    .venv/bin/python research/stability_map/tables.py        # print every table as Markdown

The chapter and its lab import this file (`load()` below) and call one function per table; the
lab asserts the claims on the same frames.  Sources: research/stability_map/results (the map and
its corrections), research/collapse_pilot/results (stationary mismatches, the six corrections at
stale 4), research/long_completions/results (scratchpad, T ~ 42) and research/model_size/results
(3M).  Cells read "collapses/runs (mean reward over the last fifth)".
"""
from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
RESEARCH = HERE.parent
sys.path.insert(0, str(RESEARCH.parent))
from rl_lab.tools.stats import fisher_one_sided, holm, welch, welch_t  # noqa: E402
from rl_lab.tools.sweep import load_results  # noqa: E402

METHODS = {"none": "none", "token_tis": "token TIS", "seq_tis": "Seq-TIS", "seq_mis": "Seq-MIS (verl preset)",
           "seq_mis_one_sided": "Seq-MIS (one-sided, the post's)", "geo_rs": "Geo-RS (calibrated)",
           "trm": "TRM (calibrated)", "trm_published": "TRM (published)", "bypass_ppo_clip": "bypass PPO-clip"}
"""Spec suffix -> the name the chapter uses."""
CORR9 = ("token_tis", "seq_tis", "seq_mis", "seq_mis_one_sided", "bypass_ppo_clip")
"""The five corrections of the nine-seed comparison (NOTES.md, "Nine against nine")."""
ALPHA = 0.05


def load(path: Path = Path(__file__)):
    """This module, loaded by file path (research/ is not a package): `tables = load()`."""
    spec = importlib.util.spec_from_file_location("stability_tables", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lr_label(lr: float) -> str:
    """5e-4 -> "lr 5e-4" (not "lr 0.0005")."""
    mantissa, exponent = f"{lr:.0e}".split("e")
    return f"lr {mantissa}e{int(exponent)}"


def cell(collapses: int, runs: int, reward: float) -> str:
    return f"{int(collapses)}/{int(runs)} ({reward:.2f})"


def span(values, fmt: str = "{:.2f}") -> str:
    """"lo–hi" of a set of values (one value: itself)."""
    v = np.asarray(values, dtype=float)
    lo, hi = fmt.format(v.min()), fmt.format(v.max())
    return lo if lo == hi else f"{lo}–{hi}"


def per_cell(df: pd.DataFrame, keys) -> pd.DataFrame:
    return df.groupby(keys).agg(runs=("seed", "size"), collapses=("collapsed", "sum"),
                                reward_first=("reward_first", "mean"), reward_last=("reward_last", "mean"),
                                eval=("eval_reward", "mean"), k3=("k3_kl_mean", "mean"),
                                blowups=("grad_blowup", "sum"), first_fall=("collapse_step", "min"),
                                last_fall=("collapse_step", "max"))


def to_markdown(df: pd.DataFrame, index: bool = True) -> str:
    """A Markdown table that keeps every cell as written ("0.60" stays "0.60") and escapes the
    pipes inside cells (the monitor "|log-ppl gap|")."""
    escape = lambda v: v.replace("|", "\\|") if isinstance(v, str) else v  # noqa: E731
    df = df.map(escape).rename(index=escape, columns=escape)
    if df.index.name:
        df.index.name = escape(df.index.name)
    return df.to_markdown(index=index, disable_numparse=True)


# ----------------------------------------------------------------------------- the map
def stability_map() -> pd.DataFrame:
    """Every run under research/stability_map/results, one row each, with a `spec` column."""
    return load_results(HERE / "results")


def staleness_runs() -> pd.DataFrame:
    """Panel 1: staleness x learning rate, no correction (seeds 0-2 everywhere, 3-8 at 2e-4, 5e-4)."""
    smap = stability_map()
    return smap[smap["spec"].isin(["staleness_lr", "staleness_lr_seeds3to8"])].copy()


def staleness_panel() -> pd.DataFrame:
    return per_cell(staleness_runs(), ["sampler_staleness", "learning_rate"])


def staleness_table() -> pd.DataFrame:
    """The chapter's first table: rows staleness, columns learning rate, and the mean k3 at 5e-4."""
    panel = staleness_panel()
    names = {0: "0 (fresh, fp32)", 1: "1 step", 2: "2 steps", 4: "4 steps"}
    out = pd.DataFrame({lr_label(lr): [cell(*panel.loc[(s, lr), ["collapses", "runs", "reward_last"]])
                                       for s in names]
                        for lr in sorted(panel.index.get_level_values(1).unique())},
                       index=[names[s] for s in names])
    out["mean k3 at lr 5e-4"] = [f"{panel.loc[(s, 5e-4), 'k3']:.2g}" for s in names]
    out.index.name = "staleness"
    return out


def staleness_facts() -> dict:
    """The numbers the text quotes about panel 1."""
    runs, panel = staleness_runs(), staleness_panel()
    at = lambda s, lr: runs[(runs["sampler_staleness"] == s) & (runs["learning_rate"] == lr)]  # noqa: E731
    stale2 = at(2, 5e-4)
    survivors = stale2[~stale2["collapsed"].astype(bool)]["reward_last"]
    return {
        "stale2_survivors": span(survivors),
        "stale2_collapses": int(stale2["collapsed"].sum()),
        "stale2_first3_collapses": int(stale2[stale2["seed"] <= 2]["collapsed"].sum()),
        "fresh_reward": panel.loc[(0, 5e-4), "reward_last"],
        "t_fresh_vs_stale2": welch_t(at(0, 5e-4)["reward_last"], stale2["reward_last"]),
        "stale4_loss": 1 - panel.loc[(4, 2e-4), "reward_last"] / panel.loc[(0, 2e-4), "reward_last"],
        "t_stale4_low": welch_t(at(0, 2e-4)["reward_last"], at(4, 2e-4)["reward_last"]),
        "stale2_falls": span(stale2["collapse_step"].dropna(), "{:.0f}"),
        "blowups": int(runs["grad_blowup"].sum()),
    }


# ----------------------------------------------------------------------------- the pilot
def pilot_runs() -> pd.DataFrame:
    """Stages A (lr 5e-5, 2e-4) and A2 (lr 5e-4): five mismatch sources and the fp32 control."""
    pilot = pd.concat([load_results(RESEARCH / "collapse_pilot/results/stage_a"),
                       load_results(RESEARCH / "collapse_pilot/results/stage_a2")], ignore_index=True)
    names = {"none": "fp32 (no mismatch)", "noise": "logit noise", "temp": "hidden temperature 1.5",
             "minp": "min_p 0.1 (sampler only)", "int8": "int8 weights", "stale": "stale sampler (4 steps)"}
    noise = pilot.get("sampler_logit_noise")
    pilot["sampler"] = pilot["spec"].map(names) + noise.map(lambda v: f" σ={v:g}" if pd.notna(v) else "")
    return pilot


def stationary_table() -> pd.DataFrame:
    """Collapses and k3 of every pilot source at every learning rate."""
    cells = per_cell(pilot_runs(), ["sampler", "learning_rate"])
    samplers = list(cells.index.get_level_values(0).unique())
    out = pd.DataFrame({lr_label(lr): [cell(*cells.loc[(s, lr), ["collapses", "runs", "reward_last"]])
                                       if (s, lr) in cells.index else "–" for s in samplers]
                        for lr in sorted(cells.index.get_level_values(1).unique())},
                       index=pd.Index(samplers))
    out["mean k3 per token"] = [span(cells.xs(s)["k3"], "{:.2g}") for s in out.index]
    out.index.name = "sampler"
    return out


def pilot_corrections() -> pd.DataFrame:
    """Stage B: six corrections on stale 4, lr 5e-4, seeds 0-2, beside no correction."""
    pilot = pilot_runs()
    stage_b = load_results(RESEARCH / "collapse_pilot/results/stage_b")
    stage_b = pd.concat([pilot.query("spec == 'stale' and learning_rate == 5e-4").assign(spec="none"), stage_b],
                        ignore_index=True)
    stage_b["method"] = stage_b["spec"].map(METHODS)
    return stage_b


def pilot_corrections_table() -> pd.DataFrame:
    cells = per_cell(pilot_corrections(), ["method"])
    order = ["none", "token TIS", "Seq-TIS", "Seq-MIS (verl preset)", "Geo-RS (calibrated)", "TRM (calibrated)",
             "TRM (published)", "bypass PPO-clip"]
    return pd.DataFrame({
        "collapses": [f"{int(cells.loc[m, 'collapses'])}/{int(cells.loc[m, 'runs'])}" for m in order],
        "reward, first → last fifth": [f"{cells.loc[m, 'reward_first']:.2f} → {cells.loc[m, 'reward_last']:.2f}"
                                       for m in order],
        "held-out greedy at the end": [f"{cells.loc[m, 'eval']:.2f}" for m in order],
    }, index=pd.Index(order, name="correction (stale 4, lr 5e-4)"))


# ----------------------------------------------------------------------------- corrections on the map
def stale4_bypass_nine() -> dict:
    """The nine-seed stale-4 bypass arm (NOTES.md, "Bypass at four stale steps on nine seeds";
    results/corr9s4_bypass_ppo_clip) against the nine uncorrected seeds of the same cell: Fisher
    one-sided on collapses and Welch on the last-fifth reward, Holm over the two, the verdict as
    pre-registered, and the clip fractions (clipfrac.csv).  None while the arm has not run."""
    folder = HERE / "results" / "corr9s4_bypass_ppo_clip"
    if not (folder / "results.csv").exists():
        return None
    arm = pd.read_csv(folder / "results.csv").drop_duplicates("run_id")
    control = staleness_runs().query("sampler_staleness == 4 and learning_rate == 5e-4")
    w = welch(arm["reward_last"], control["reward_last"])
    k, n, kc, nc = int(arm["collapsed"].sum()), len(arm), int(control["collapsed"].sum()), len(control)
    fisher = fisher_one_sided(k, n, kc, nc, "less")
    p_fisher, p_welch = holm([fisher, w["p"]])
    held = p_fisher < ALPHA and p_welch < ALPHA and w["diff"] > 0 and k <= 1
    clip = pd.read_csv(folder / "clipfrac.csv")
    panel = map_corrections().query("method == 'bypass_ppo_clip' and sampler_staleness == 4 and learning_rate == 5e-4")
    first3 = arm[arm["seed"] <= 2].set_index("seed")["collapsed"].astype(bool)
    return {"collapses": k, "seeds": n, "control_collapses": kc, "control_seeds": nc,
            "reward_last": arm["reward_last"].mean(), "control_reward_last": control["reward_last"].mean(),
            "t": w["t"], "p_fisher_holm": p_fisher, "p_welch_holm": p_welch,
            "verdict": "held at four stale steps on nine seeds" if held else "not resolved",
            "clipfrac_mean": clip["clipfrac_mean"].mean(), "clipfrac_span": span(clip["clipfrac_mean"], "{:.3f}"),
            "clipfrac_first": clip["clipfrac_first"].mean(), "clipfrac_last": clip["clipfrac_last"].mean(),
            "seeds_0_2_reproduce": bool((panel.set_index("seed")["collapsed"].astype(bool).reindex(first3.index)
                                         == first3).all())}


def decision_checks() -> dict:
    """book/data/decisions.yaml's `check` -> a function that asserts that row's verdict on the result
    files (tests/book/test_one_verdict.py runs them).  Each raises AssertionError if the files say
    otherwise."""
    def stale_severe():
        cells = per_cell(pilot_corrections(), ["method"])
        assert cells.loc["bypass PPO-clip", "collapses"] == 0
        others = cells.drop(index=["bypass PPO-clip", "none"])
        assert (others["runs"] == 3).all(), "the pilot's other corrections are no longer three seeds each"
        assert (others["collapses"] >= 2).all(), "a correction other than bypass prevented the stale-4 collapse"
        nine = stale4_bypass_nine()
        assert nine is not None and nine["verdict"] == "held at four stale steps on nine seeds", nine

    def stale_mild():
        nine = nine_seed_table(2)
        assert set(nine.index[nine["verdict"] == "keeps reward"]) == {"token_tis", "seq_tis", "seq_mis", "bypass_ppo_clip"}
        assert nine.loc["seq_mis_one_sided", "verdict"] == "null" and nine["diff"].idxmax() == "bypass_ppo_clip"
        # verl's Seq-MIS: a guard, not a fix (book/my_run_collapsed.md): more collapses than the other three
        kept = nine.loc[["token_tis", "seq_tis", "bypass_ppo_clip"], "collapses"]
        assert nine.loc["seq_mis", "collapses"] > kept.max(), nine["collapses"]
        assert (nine["fisher_p_holm"] > ALPHA).all(), "a collapse count passed the test: it is no longer only described"
        corr = map_corrections().query("sampler_staleness == 2 and learning_rate == 5e-4")
        tok, seq = (corr[corr["method"] == m]["reward_last"] for m in ("token_tis", "seq_tis"))
        assert welch(seq, tok)["p"] >= ALPHA, "token and sequence TIS are distinguished at this scale"
        # replicated in the source study's stage 2 (pre-registered, against its own nine stale seeds)
        fix = _fix_table_s2().loc["stale2_bypass"]
        assert fix["verdict"] == "keeps reward" and fix["collapses"] == "0/9", fix

    def post_pattern():
        warn = early_warning()[0]
        assert not warn["works"].any(), "a monitor met the early-warning criterion"

    def precision():
        precision_map()
        precision_sources()
        _fix_exact("fp16_both", "bf16_both")
        _not_resolved("bf16", "fp16", "bf16_head32", stage="s3")

    def precision_map():
        stationary = per_cell(pilot_runs(), ["sampler", "learning_rate"])
        moving = [s for s in stationary.index.get_level_values(0).unique() if not s.startswith(("stale", "fp32"))]
        assert stationary.loc[moving, "collapses"].sum() == 0
        lh = long_horizon()
        assert lh.loc[lh["source"] == "bf16", "collapses"].sum() == 0

    def step_one():
        stationary = per_cell(pilot_runs(), ["sampler", "learning_rate"])
        hidden = [s for s in stationary.index.get_level_values(0).unique() if s.startswith(("hidden", "min_p"))]
        assert len(hidden) == 2 and stationary.loc[hidden, "collapses"].sum() == 0

    def precision_sources():
        _not_resolved("bf16", "fp16", "bf16_head32")
        sources = sources_study()
        for arm in ("bf16", "fp16", "bf16_head32"):
            runs = sources.arm(f"s1_{arm}")
            assert (runs["k3_kl_mean"] > 0).all() and (runs["k3_kl_mean"] < 1e-2).all(), arm       # small
            assert (runs["tokens_differ_mean"] > 0.9).all(), f"{arm}: not nearly every token differs"
            _named(arm, "precision")

    def truncation():
        _not_resolved("top_p")
        runs = sources_study().arm("s1_top_p")
        # chi^2 per token = mean(rho^2) - 1 < 0 means mean(rho) < 1 (Jensen): rho's mean below one
        assert (runs["chi2_token_mean"] < 0).all(), "rho's mean was not below one in every top-p run"
        _named("top_p", "truncation")
        _fix_exact("top_p_keep_mask")
        # at 2e-4 the training reward (the sampler's own, truncated, completions) reads higher; the
        # greedy held-out reward, which no sampler setting touches, is not resolved
        _not_resolved("top_p", stage="s3", verdict="raises reward")
        top, control = sources_study().arm("s3_top_p"), sources_study().arm("s3_control")
        assert welch(top["eval_reward"], control["eval_reward"])["p"] >= ALPHA, "top-p's held-out reward resolved"

    def reduction_order(arm):
        def check():
            _not_resolved(arm)
            sources = sources_study()
            runs = sources.arm(f"s1_{arm}").set_index("seed").sort_index()
            control = sources.arm("s1_control").set_index("seed").sort_index()
            assert list(runs.index) == list(control.index)
            for col in ("reward_last", "eval_reward", "reward_peak"):
                assert (runs[col] == control[col]).all(), f"{arm}: {col} differs from the control's"
            assert ((runs["k3_kl_mean"] > 0) & (runs["k3_kl_mean"] < 1e-9)).all(), f"{arm}: not float32 rounding"
            _named(arm, "reduction_order")
            _fix_exact("batch_invariant" if arm == "batch_variant" else "tp4_fixed")
            _not_resolved(arm, stage="s3")
        check.__name__ = "batch_variant" if arm == "batch_variant" else "tensor_parallel"
        return check

    def weight_sync():
        _not_resolved("sync_skip", "sync_bf16")
        _named("sync_skip", "weight_sync")
        _named("sync_bf16", "precision")
        _fix_exact("sync_skip_verify", "sync_bf16_verify")
        _not_resolved("sync_skip", "sync_bf16", stage="s3")

    def routing():
        sources = sources_study()
        for stage in ("s4", "s5"):              # lr 5e-4 and the map's best rate, 2e-4
            check = sources.routing_check(stage)
            assert all(c["runs"] == 9 and c["exact"] for c in check.values()), (stage, check)   # control, replay
            table = sources.routing_table(stage)
            assert "verdict" in table, f"{stage} is incomplete"
            assert (table["verdict"] == "not resolved at this scale").all(), table[["comparison", "verdict"]]
            assert (table["Holm p (Fisher)"] >= ALPHA).all(), f"{stage}: a routing arm's collapse count was resolved"
            flips = sources.arm(f"{stage}_routing_noise")["routing_flips_mean"]
            assert (flips > 0).all() and (flips < 0.01).all(), "router noise no longer flips a fraction of a percent"
        control = sources.arm("s4_moe_control")
        assert control["collapsed"].sum() >= 1 and control["reward_last"].mean() < control["reward_first"].mean(), \
            "the MoE control now learns at 5e-4: reword the row"
        at_best = [sources.arm(f"s5_{a}") for a in ("moe_control", *sources.ROUTING, sources.ROUTING_FIX[0])]
        assert sum(int(df["collapsed"].sum()) for df in at_best) == 0, "a run collapsed at 2e-4: reword the row"

    return {f.__name__: f for f in (stale_severe, stale_mild, post_pattern, precision, step_one, truncation,
                                    reduction_order("batch_variant"), reduction_order("tp4"), weight_sync, routing)}


@functools.lru_cache(maxsize=1)
def sources_study():
    """research/mismatch_sources/summarize.py (the source-by-source study, issue 49), loaded by path."""
    spec = importlib.util.spec_from_file_location("mismatch_sources_summary", RESEARCH / "mismatch_sources/summarize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _not_resolved(*arms: str, stage: str = "s1", verdict: str = "not resolved at this scale") -> None:
    """The stage's pre-registered verdict for each source arm is `verdict`, and the arm collapsed no
    run; the control is exactly zero (the check before any verdict).  Stage 1 is lr 5e-4, stage 3
    the map's best rate, 2e-4."""
    sources = sources_study()
    assert sources.control_check(stage)["exact"], f"{stage}: the exact-zero control is not exactly zero"
    table = _source_table(stage)
    assert "verdict" in table, f"{stage} is incomplete"
    verdicts = table.set_index("source")["verdict"]
    for arm in arms:
        assert verdicts[sources.SOURCES[arm]] == verdict, (stage, arm, verdicts[sources.SOURCES[arm]])
        assert sources.arm(f"{stage}_{arm}")["collapsed"].sum() == 0, f"{stage}: {arm} collapsed a run"


@functools.lru_cache(maxsize=2)
def _source_table(stage: str) -> pd.DataFrame:
    """A stage's table of verdicts, computed once (its permutation tests take seconds)."""
    return sources_study().source_table(stage)


@functools.lru_cache(maxsize=1)
def _fix_table_s2() -> pd.DataFrame:
    """Stage 2's table (each fix against its source), indexed by the fix arm's suffix."""
    sources = sources_study()
    table = sources.fix_table()
    assert "verdict" in table, "stage 2 is incomplete"
    return table.set_index(pd.Index(list(sources.FIXES), name="arm"))


def _fix_exact(*fixes: str) -> None:
    """Stage 2's verdict for an exact fix: the mismatch is exactly 0 in all nine runs (k3 and the share
    of differing tokens), no run collapsed, and its reward against the source is not resolved."""
    table = _fix_table_s2()
    for fix in fixes:
        row = table.loc[fix]
        assert row["k3"] == 0 and row["tokens_affected"] == 0, f"{fix}: the fix's mismatch is not exactly 0"
        assert row["collapses"] == "0/9", (fix, row["collapses"])
        assert row["verdict"] == "not resolved at this scale", (fix, row["verdict"])


def _named(arm: str, source: str) -> None:
    """rl-lab diagnose named `source` on every run of the arm, dev and held-out seeds
    (research/mismatch_sources/results/diagnose_eval.csv)."""
    ev = pd.read_csv(RESEARCH / "mismatch_sources/results/diagnose_eval.csv")
    runs = ev[ev["arm"] == f"s1_{arm}"]
    assert len(runs) == 9 and runs["named"].str.split(";").apply(lambda n: source in n).all(), (arm, source)


def map_corrections() -> pd.DataFrame:
    """Panel 2 (seeds 0-2 at stale 2/4 x lr 2e-4/5e-4) and the nine-seed runs (seeds 3-8, and the
    one-sided Seq-MIS on 0-8), with a `method` column; no correction is the panel-1 runs."""
    smap = stability_map()
    corr = smap[smap["spec"].str.match(r"corr9?_")].copy()
    corr["method"] = corr["spec"].str.replace(r"^corr9?_", "", regex=True)
    none = staleness_runs().query("sampler_staleness in [2, 4] and learning_rate in [2e-4, 5e-4]")
    corr = pd.concat([corr[corr["method"] != "none"], none.assign(method="none")], ignore_index=True)
    return corr


def panel2_table() -> pd.DataFrame:
    """Seeds 0-2 of every correction in the map's four cells (the first, three-seed panel)."""
    corr = map_corrections().query("seed <= 2")
    cells = per_cell(corr, ["method", "sampler_staleness", "learning_rate"])
    cols = [(2, 5e-4), (4, 5e-4), (4, 2e-4)]
    methods = [m for m in METHODS if m in cells.index.levels[0]]
    return pd.DataFrame({f"stale {s}, {lr_label(lr)}": [cell(*cells.loc[(m, s, lr), ["collapses", "runs", "reward_last"]])
                                                   if (m, s, lr) in cells.index else "–" for m in methods]
                         for s, lr in cols}, index=pd.Index([METHODS[m] for m in methods], name="correction"))


def nine_seed_table(staleness: int = 2) -> pd.DataFrame:
    """The pre-registered comparison (NOTES.md): each correction's nine seeds against the nine
    uncorrected ones at lr 5e-4.  Reward: Welch, two-sided p, Holm over the corrections compared
    at this staleness (five at stale 2; at stale 4 only the one-sided Seq-MIS has nine seeds, a
    family of one); collapses: Fisher one-sided (fewer with the correction), raw and Holm."""
    corr = map_corrections().query("sampler_staleness == @staleness and learning_rate == 5e-4")
    control = corr[corr["method"] == "none"]
    rows = []
    for m in (CORR9 if staleness == 2 else ("seq_mis_one_sided",)):
        runs = corr[corr["method"] == m]
        if runs.empty:
            continue
        w = welch(runs["reward_last"], control["reward_last"])
        rows.append({"method": m, "correction": METHODS[m], "seeds": len(runs),
                     "collapses": int(runs["collapsed"].sum()), "control_collapses": int(control["collapsed"].sum()),
                     "control_seeds": len(control), "reward_last": runs["reward_last"].mean(),
                     "control_reward_last": control["reward_last"].mean(), "diff": w["diff"], "t": w["t"],
                     "p": w["p"], "ci_lo": w["ci_lo"], "ci_hi": w["ci_hi"],
                     "fisher_p": fisher_one_sided(int(runs["collapsed"].sum()), len(runs),
                                                  int(control["collapsed"].sum()), len(control), "less")})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["p_holm"], out["fisher_p_holm"] = holm(out["p"]), holm(out["fisher_p"])
    out["verdict"] = [("keeps reward" if d > 0 else "loses reward") if p < ALPHA else "null"
                      for d, p in zip(out["diff"], out["p_holm"])]
    return out.set_index("method")


def nine_seed_markdown(table: pd.DataFrame) -> pd.DataFrame:
    """The nine-seed table as the chapter shows it (the Fisher p-values stay in `table`)."""
    rows = list(table.itertuples())
    return pd.DataFrame({
        "collapses": [f"{r.collapses}/{r.seeds}" for r in rows],
        "reward": [f"{r.reward_last:.2f}" for r in rows],
        "minus none [95% CI]": [f"{r.diff:+.2f} [{r.ci_lo:+.2f}, {r.ci_hi:+.2f}]" for r in rows],
        "t": [f"{r.t:.1f}" for r in rows],
        "Holm p": [f"{r.p_holm:.2g}" for r in rows],
        "verdict": list(table["verdict"]),
    }, index=pd.Index(table["correction"], name="correction (9 seeds)"))


# ----------------------------------------------------------------------------- long completions, 3M
def long_runs() -> pd.DataFrame:
    longT = load_results(RESEARCH / "long_completions/results")
    longT["source"] = longT["spec"].str.split("_lr").str[0]
    longT["task"] = np.where(longT["source"] == "addition_bf16", "addition", "scratchpad")
    longT["source"] = longT["source"].replace({"addition_bf16": "bf16", "none": "none (fp32)", "noise": "logit noise σ = 1.5",
                                               "stale2": "stale by 2"})
    longT["k3_per_completion"] = longT["k3_kl_mean"] * longT["mean_length_mean"]
    return longT


def long_table() -> pd.DataFrame:
    sp = long_runs().query("task == 'scratchpad' and learning_rate in [2e-4, 5e-4]")
    cells = per_cell(sp, ["source", "learning_rate"])
    order = ["none (fp32)", "bf16", "logit noise σ = 1.5", "stale by 2"]

    def text(s, lr):
        c = cells.loc[(s, lr)]
        extra = f", by step {c['last_fall']:.0f}" if c["collapses"] == c["runs"] else ""
        return cell(c["collapses"], c["runs"], c["reward_last"]) + extra
    return pd.DataFrame({**{lr_label(lr): [text(s, lr) for s in order] for lr in (2e-4, 5e-4)},
                         "k3 per completion": [span(sp[sp["source"] == s]["k3_per_completion"], "{:.1g}")
                                               for s in order]},
                        index=pd.Index(order, name="source (scratchpad, T ≈ 42)"))


def size_runs() -> pd.DataFrame:
    def source_of(row):
        if row.get("sampler_dtype") == "bfloat16":
            return "bf16"
        stale = row.get("sampler_staleness")
        return f"stale by {int(stale)}" if stale == stale and stale else "fresh (fp32)"
    big = load_results(RESEARCH / "model_size/results").assign(size="3M")
    small = pd.concat([staleness_runs().query("seed <= 2"), long_runs().query("task == 'addition'")])
    both = pd.concat([small.assign(size="0.3M"), big], ignore_index=True)
    both["source"] = both.apply(source_of, axis=1)
    return both


def size_table() -> pd.DataFrame:
    both = size_runs()
    cells = per_cell(both, ["source", "size", "learning_rate"])
    order = ["fresh (fp32)", "stale by 2", "stale by 4", "bf16"]
    cols = [("0.3M", 2e-4), ("0.3M", 5e-4), ("3M", 1e-4), ("3M", 2e-4), ("3M", 5e-4)]

    def text(s, size, lr):
        if (s, size, lr) not in cells.index:
            return "–"
        c = cells.loc[(s, size, lr)]
        extra = f", by step {c['last_fall']:.0f}" if size == "3M" and c["collapses"] == c["runs"] else ""
        return cell(c["collapses"], c["runs"], c["reward_last"]) + extra
    return pd.DataFrame({f"{size}, {lr_label(lr)}": [text(s, size, lr) for s in order] for size, lr in cols},
                        index=pd.Index(order, name="source"))


# ----------------------------------------------------------------------------- bf16's k3
def bf16_k3_runs() -> pd.DataFrame:
    """Every shipped run with a bf16 sampler (and an fp32 trainer): the checkpoint it started
    from, its task, learning rate, steps and k3 per token (the run's mean of rollout_corr/k3_kl)."""
    sources = [("long_completions/results", "0.3M"), ("long_horizon/results", "0.3M"),
               ("model_size/results", "3M")]
    frames = []
    for folder, size in sources:
        df = load_results(RESEARCH / folder)
        if "sampler_dtype" not in df:
            continue
        df = df[df["sampler_dtype"] == "bfloat16"].copy()
        scratchpad = folder.startswith("long_completions") & (df["spec"] == "bf16")  # map_bf16.yaml
        df["task"] = np.where(scratchpad, "scratchpad", "addition")
        df["checkpoint"] = [f"{size} {task} warm start" for task in df["task"]]
        df["source"] = folder.split("/")[0] + "/" + df["spec"]
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def bf16_k3_table() -> pd.DataFrame:
    """Per (checkpoint, learning rate, steps): runs and the range of k3 per token over seeds."""
    runs = bf16_k3_runs()
    rows = []
    for (ckpt, lr, steps), g in runs.groupby(["checkpoint", "learning_rate", "steps"], sort=True):
        rows.append({"checkpoint": ckpt, "learning rate": lr_label(lr), "steps": int(steps),
                     "runs": len(g), "k3 per token": span(g["k3_kl_mean"], "{:.1e}"),
                     "shipped in": ", ".join(sorted(set(g["source"])))})
    return pd.DataFrame(rows).set_index("checkpoint")


# ----------------------------------------------------------------------------- long horizon
def long_horizon() -> pd.DataFrame:
    """research/long_horizon/summarize.py's table (3000 steps at lr 5e-5 and 1e-4)."""
    return load(RESEARCH / "long_horizon/summarize.py").table()


def long_horizon_table(table: pd.DataFrame) -> pd.DataFrame:
    order = {"fresh": 0, "stale 2": 1, "stale 4": 2, "bf16": 3}
    t = table.assign(o=table["source"].map(order)).sort_values(["learning_rate", "o"])
    controls = [r.source == "fresh" for r in t.itertuples()]
    return pd.DataFrame(against_control(t, "reward_last", "reward, last fifth", "minus fresh (Holm p)", controls),
                        index=pd.Index([f"{r.source}, {lr_label(r.learning_rate)}" for r in t.itertuples()],
                                       name="sampler, 3000 steps"))


def against_control(t: pd.DataFrame, reward: str, reward_name: str, diff_name: str, controls: list) -> dict:
    """The columns a long-run table shares: collapses, a reward and its difference from the control
    (Holm p; "–" on the control's rows), k3 over the first and last fifth, and k3's growth verdict."""
    return {
        "collapses": [f"{r.collapses}/{r.runs}" for r in t.itertuples()],
        reward_name: [f"{x:.2f}" for x in t[reward]],
        diff_name: ["–" if c else f"{r.diff:+.2f} ({r.p_holm:.2g})" for c, r in zip(controls, t.itertuples())],
        "k3, first → last fifth": [f"{r.k3_first:.2g} → {r.k3_last:.2g}" for r in t.itertuples()],
        "k3 growth": list(t["k3_growth"]),
    }


# ----------------------------------------------------------------------------- the post's setting in miniature
def post_miniature():
    """research/post_miniature/summarize.py's frames: (runs, question (a) per cell, its OOD-vs-plain
    tests, question (b) and growth per style and sampler)."""
    mod = load(RESEARCH / "post_miniature/summarize.py")
    runs = mod.runs()
    a, a_tests = mod.question_a(runs)
    return runs, a, a_tests, mod.question_b(runs)


def post_miniature_follow_up():
    """The follow-up of research/post_miniature/NOTES.md ("Follow-up", fixed before its runs):
    (question (b) and growth for the 2000-step bf16 samplers against the control, their own Holm
    family; question (a) per cell for vLLM bf16; its OOD-vs-plain test), or None before its runs."""
    mod = load(RESEARCH / "post_miniature/summarize.py")
    runs = mod.runs()
    done = [spec for spec in mod.FOLLOW_UP if spec in set(runs["spec"])]
    if not done:
        return None
    a, a_tests = mod.question_a(runs, tuple(spec for spec in done if spec == "vllm_bf16"))
    return mod.question_b(runs, ("control", *done)), a, a_tests


def miniature_a_table(a: pd.DataFrame, tests: pd.DataFrame) -> pd.DataFrame:
    """Question (a): |log pi - log mu| right after a tool output over elsewhere, steps 1-100."""
    test = tests.set_index("sampler")

    def ood_vs_plain(r) -> str:
        if r.sampler not in test.index or r.style != "ood":
            return "–"
        return f"{test.loc[r.sampler, 'verdict']} ({test.loc[r.sampler, 'p_holm']:.2g})"
    return pd.DataFrame({
        "runs": list(a["runs"]),
        "after / elsewhere (steps 1-100)": [f"{x:.2f}" for x in a["ratio_first100"]],
        "one-sample t": ["–" if np.isnan(x) else f"{x:.1f}" for x in a["t_vs_0"]],
        "right after tool outputs": list(a["after_vs_elsewhere"]),
        "OOD vs plain (Holm p)": [ood_vs_plain(r) for r in a.itertuples()],
    }, index=pd.Index([f"{r.sampler}, {r.style} outputs" for r in a.itertuples()], name="sampler, tool outputs"))


def miniature_b_table(b: pd.DataFrame) -> pd.DataFrame:
    """Question (b) and the growth of k3: 2000-step runs against the fp32 control."""
    controls = list(b["reward_verdict"] == "control")
    columns = against_control(b, "eval_reward", "held-out success (greedy)", "minus fp32 (Holm p)", controls)
    columns["verdict"] = [r.collapse_verdict if c else f"{r.collapse_verdict}; reward: {r.reward_verdict}"
                          for c, r in zip(controls, b.itertuples())]
    return pd.DataFrame(columns, index=pd.Index([f"{r.sampler}, {r.style} outputs" for r in b.itertuples()],
                                                name="sampler, 2000 steps"))


# ----------------------------------------------------------------------------- early warning
MONITORS = {"rollout_corr/k3_kl": "k3", "rollout_corr/log_ppl_abs_diff": "|log-ppl gap|",
            "rollout_corr/training_ppl": "trainer perplexity", "grad_norm": "gradient norm", "entropy": "entropy"}
WARNING_SPECS = ("staleness_lr", "staleness_lr_seeds3to8", "corr_none", "corr_token_tis", "corr_seq_tis",
                 "corr_seq_mis", "corr_bypass_ppo_clip")
"""The runs the early-warning test was fixed on (NOTES.md): the map as it was, without the later
nine-seed correction runs (their per-step series are not in monitor_series.csv.gz)."""


def early_warning():
    """(table, runs, crossings of k3, split) of the held-out early-warning test (NOTES.md)."""
    from rl_lab.toolkits import collapse
    from rl_lab.tools.stats import wilson_interval

    smap = stability_map()
    runs = smap[smap["spec"].isin(WARNING_SPECS)].drop_duplicates("run_id").set_index("run_id")
    series = pd.read_csv(HERE / "results/monitor_series.csv.gz")
    fit = runs.index[(runs["seed"] <= 1) & ~runs["collapsed"]]
    held = runs[runs["seed"] >= 2]
    fallen = held.index[held["collapsed"] & (held["learning_rate"] <= 5e-4)]
    healthy = held.index[~held["collapsed"]]
    warn = collapse.early_warning_table(series, list(MONITORS), fit, fallen, healthy,
                                        runs["collapse_step"].to_dict())
    warn["works"] = ((warn["warned"] > warn["collapses"] / 2) & (warn["median_lead"] >= 10)
                     & (warn["false_alarms"] <= 0.10 * warn["healthy"]))
    for col, k, n in [("warned 95% CI", "warned", "collapses"), ("false-alarm 95% CI", "false_alarms", "healthy")]:
        warn[col] = [f"[{lo:.2f}, {hi:.2f}]" for lo, hi in (wilson_interval(a, b) for a, b in zip(warn[k], warn[n]))]
    thr = warn.loc["rollout_corr/k3_kl", "threshold"]
    cross = {r: collapse.first_crossing(collapse.moving_average(d["rollout_corr/k3_kl"].to_numpy(float), collapse.WINDOW),
                                        thr, steps=d["step"].to_numpy()[collapse.WINDOW - 1:])
             for r, d in series.groupby("run_id") if r in set(fallen) | set(healthy)}
    return warn, runs, cross, {"fit": fit, "fallen": fallen, "healthy": healthy}


def early_warning_table(warn: pd.DataFrame) -> pd.DataFrame:
    n_fallen, n_healthy = int(warn["collapses"].iloc[0]), int(warn["healthy"].iloc[0])
    return pd.DataFrame({
        f"collapses warned of (of {n_fallen})": [f"{int(w)} (95% CI {ci[1:-1].replace(', ', '–')})"
                                                  for w, ci in zip(warn["warned"], warn["warned 95% CI"])],
        "median lead (steps)": ["–" if pd.isna(v) else f"{v:.0f}" for v in warn["median_lead"]],
        f"false alarms (of {n_healthy} healthy)": [f"{int(a)} ({a / n_healthy:.0%})" for a in warn["false_alarms"]],
        "meets the criterion": ["yes" if w else "no" for w in warn["works"]],
    }, index=pd.Index([MONITORS[m] for m in warn.index], name="monitor"))


def early_warning_facts(warn, runs, cross, split) -> dict:
    fallen, healthy = split["fallen"], split["healthy"]
    warned = [r for r in fallen if cross[r] is not None and cross[r] < runs.loc[r, "collapse_step"]]
    alarmed = [r for r in healthy if cross[r] is not None]
    quiet = [r for r in healthy if cross[r] is None]
    return {"warned_steps": sorted(int(cross[r]) for r in warned),
            "late": [(cross[r], int(runs.loc[r, "collapse_step"])) for r in fallen if r not in warned],
            "alarmed_reward": runs.loc[alarmed, "reward_last"].mean(), "quiet_reward": runs.loc[quiet, "reward_last"].mean(),
            "n_alarmed": len(alarmed), "n_quiet": len(quiet),
            "t_alarm": welch_t(runs.loc[quiet, "reward_last"], runs.loc[alarmed, "reward_last"]),
            "alarmed_min_staleness": int(runs.loc[alarmed, "sampler_staleness"].min())}


CURVES = {"fresh sampler": (("staleness_lr",), 0), "sampler 2 steps stale": (("staleness_lr", "corr_none"), 2),
          "sampler 4 steps stale": (("staleness_lr", "corr_none"), 4),
          "4 steps stale + bypass PPO-clip": (("corr_bypass_ppo_clip",), 4)}
"""The four cells of the chapter's first figure: (specs, staleness); corr_none repeats map cells.
Two steps stale is the cell whose runs first learn, then fall (issue 52, reader obstacle 7)."""


def reward_curves(ax=None):
    """The chapter's first figure: the reward of the shipped runs (lr 5e-4, seeds 0-2) with a fresh
    sampler, a 2- and a 4-step-stale one and the 4-step-stale one with bypass PPO-clip.  Returns the figure."""
    import matplotlib.pyplot as plt

    from rl_lab.toolkits import collapse

    series = pd.read_csv(HERE / "results" / "monitor_series.csv.gz")
    smap = stability_map().drop_duplicates("run_id").set_index("run_id")
    fig, ax = plt.subplots(figsize=(7.5, 4.2)) if ax is None else (ax.figure, ax)
    for i, (label, (spec, stale)) in enumerate(CURVES.items()):
        ids = smap.index[smap["spec"].isin(spec) & (smap["sampler_staleness"] == stale)
                         & (smap["learning_rate"] == 5e-4) & (smap["seed"] <= 2)]
        assert len(ids) == 3, (label, len(ids))
        for j, rid in enumerate(ids):
            d = series[series["run_id"] == rid].sort_values("step")
            r = collapse.moving_average(d["reward"].to_numpy(float), collapse.WINDOW)
            ax.plot(d["step"].to_numpy()[collapse.WINDOW - 1:], r, color=f"C{i}", lw=1.2, ls="--" if stale == 2 else "-",
                    label=f"{label} ({len(ids)} seeds)" if j == 0 else None)
    ax.set(xlabel="GRPO step", ylabel="reward (20-step moving average)", ylim=(0, 0.7),
           title="0.3M model, addition, learning rate 5e-4")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def main() -> None:
    for name, table in [("staleness x lr", staleness_table()), ("stationary mismatches", stationary_table()),
                        ("long completions", long_table()), ("3M", size_table()),
                        ("pilot corrections", pilot_corrections_table()), ("panel 2", panel2_table())]:
        print(f"\n## {name}\n\n{to_markdown(table)}")
    for s in (2, 4):
        t = nine_seed_table(s)
        if not t.empty:
            print(f"\n## nine seeds, stale {s}\n\n{to_markdown(nine_seed_markdown(t))}")
    warn = early_warning()
    print(f"\n## early warning\n\n{to_markdown(early_warning_table(warn[0]))}")
    print(staleness_facts(), early_warning_facts(*warn))


if __name__ == "__main__":
    main()
