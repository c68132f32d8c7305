"""research/trloo_turns/summarize.py: the verdict rules of its NOTES.md, on synthetic results where
each rule must fire, and on the shipped results that chapter 12 and lab 12 read."""
import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from rl_lab.tools.stats import holm, welch

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("trloo_turns", ROOT / "research/trloo_turns/summarize.py")
tt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tt)


def write(folder: Path, evals: dict, varying: float = 0.99) -> Path:
    for arm, values in evals.items():
        pd.DataFrame({"run_id": [f"{arm}{i}" for i in range(len(values))], "seed": range(len(values)),
                      "eval_reward": values, "reward_last": values, "varying_groups_mean": varying,
                      "shrink_spread_mean": 0.14, "tool_calls_mean": 63.0, "collapsed": False}
                     ).to_csv(folder / f"{arm}.csv", index=False)
    return folder


def test_the_claim_is_supported_only_by_a_gain_of_trloo_over_grpo_per_turn(tmp_path):
    base = [0.30, 0.31, 0.29, 0.30, 0.31, 0.30]
    folder = write(tmp_path, {"grpo": base, "grpo_per_turn": base, "trloo": [x + 0.2 for x in base]})
    t = tt.table(folder).set_index("comparison")
    assert t.loc["trloo vs grpo_per_turn", "eval_reward_verdict"] == "gain"
    assert t.loc["grpo_per_turn vs grpo", "eval_reward_verdict"] == "null"
    assert tt.claim(folder) == "supported at this scale"
    write(tmp_path, {"grpo": base, "grpo_per_turn": base, "trloo": [x + 0.2 for x in base]}, varying=0.5)
    assert tt.claim(folder).startswith("not tested")            # the manipulation check failed
    write(tmp_path, {"grpo": base, "grpo_per_turn": [x + 0.2 for x in base], "trloo": base})
    assert tt.table(folder).set_index("comparison").loc["trloo vs grpo_per_turn", "eval_reward_verdict"] == "loss"
    assert tt.claim(folder) == "not supported at this scale (null)"


def test_the_shipped_table_recomputes_from_the_runs():
    runs, t = tt.load_runs(), tt.table()
    assert (runs.groupby("arm").size() == 8).all() and set(runs["arm"]) == set(tt.ARMS)
    ps = []
    for row in t.itertuples():
        w = welch(runs[runs["arm"] == row.arm]["eval_reward"], runs[runs["arm"] == row.against]["eval_reward"])
        assert w["diff"] == pytest.approx(row.eval_reward_diff) and w["p"] == pytest.approx(row.eval_reward_p)
        ps.append(w["p"])
    assert list(t["eval_reward_p_holm"]) == pytest.approx(list(holm(ps)))
    mech = tt.mechanism_table()
    assert len(mech) == 3 * 5 and mech["varying_groups"].between(0, 1).all()
