"""The one table of metric names (rl_lab.tools.metric_names): what `rl-lab diagnose` reads and the
glossary page renders (issue 50)."""
from pathlib import Path

from rl_lab.tools.diagnose_readers import _rename
from rl_lab.tools.metric_names import BY_NAME, METRIC_NAMES, QUANTITIES, glossary_markdown, k3_from_logp_abs

ROOT = Path(__file__).resolve().parents[2]


def test_every_name_is_read_as_one_of_the_books_quantities():
    assert {r.column for r in METRIC_NAMES if r.column} <= set(QUANTITIES)
    for library in ("TRL", "verl", "slime", "prime-rl", "SkyRL", "NeMo-RL", "open-instruct"):
        assert any(r.library == library and r.column for r in METRIC_NAMES), library


def test_trl_names_with_and_without_wandbs_prefixes():
    cols = ["train/reward", "my-run - train/sampling/sampling_logp_difference/mean", "learning_rate",
            "train/grad_norm", "train/gen_kl_error"]
    assert _rename(cols) == {"train/reward": "reward",
                             "my-run - train/sampling/sampling_logp_difference/mean": "mismatch/logp_abs_diff",
                             "learning_rate": "learning_rate", "train/grad_norm": "grad_norm",
                             "train/gen_kl_error": "mismatch/kl"}
    assert _rename(["train/x"], {"reward": "train/x"}) == {"train/x": "reward"}


def test_the_traps_are_said():
    by = {r.name: r.meaning for r in METRIC_NAMES}
    assert "PROBABILITY space" in by["training/rollout_probs_diff_mean"] and "at most 1" in by[
        "training/rollout_probs_diff_mean"]
    assert "AFTER truncation" in by["sampling/importance_sampling_ratio/mean"]
    assert "kl" not in BY_NAME
    assert abs(k3_from_logp_abs(0.1) - 0.25 * 3.14159265 * 0.01) < 1e-6


def test_the_glossary_page_renders_the_table_and_is_in_the_toc():
    page = (ROOT / "book" / "glossary_metrics.md").read_text()
    assert "glossary_markdown()" in page and "| sampling/" not in page     # rendered, not typed
    assert "- file: book/glossary_metrics" in (ROOT / "_toc.yml").read_text()
    table = glossary_markdown().splitlines()
    assert len(table) == len(METRIC_NAMES) + 2 and all(line.count(" | ") == 4 for line in table[2:])
