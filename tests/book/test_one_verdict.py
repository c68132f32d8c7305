"""One question, one verdict across the book (issues 36 and 52).

"Which correction when, and how sure we are" has one answer, in one file: book/data/decisions.yaml,
rendered by the `{decision-table}` directive (rl_lab/book_ext/decisions.py).  These tests check that

* the file is well formed: every row names a strength, a verdict and the result files that back it,
  and those files exist; the rows of the sources chapter "Where the mismatch comes from" (issue 49)
  carry stage 1's measured verdict, backed by the study's result files and checked, and their fix
  stage 2's (routing, not a dial of that study, carries no verdict);
* each verdict holds on the result files (`decision_checks()` in research/stability_map/tables.py:
  asserts that fail if a rerun changes the outcome);
* the pages the file names render the table, and the directive renders it (a one-page Sphinx build);
* no page states a verdict of its own on which correction to start from: a sentence that names a
  correction and recommends it, or says it held or failed, must be in a page that renders the table
  and point to it, or quote a named source (the post, verl's documentation); and the map's other
  verdicts (k3 is a level, not an early warning) are not contradicted.
"""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from rl_lab.book_ext import decisions  # noqa: E402

DATA = decisions.load()
ROWS = DATA["rows"]
TABLE_PAGES = [ROOT / f"{p}.md" for p in DATA["pages"]]
PAGES = sorted((ROOT / "book").glob("*.md")) + sorted((ROOT / "labs").glob("*.md"))
ISSUE49 = {"precision", "truncation", "batch_variant", "tensor_parallel", "weight_sync", "routing"}
ISSUE49_PENDING: set[str] = set()
STAGE1 = "research/mismatch_sources/results/s1_"
OWN_STAGE = {"routing": "research/mismatch_sources/results/s4_"}   # routing: on the MoE, stage 4 (source and fix)
NO_VERDICT = {"see chapter 'Where the mismatch comes from'", "not yet measured"}
DIRECTIVE = re.compile(r"^ *```\{decision-table\}", re.M)


def _tables():
    spec = importlib.util.spec_from_file_location("stability_tables", ROOT / "research/stability_map/tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- the file
def test_every_row_is_backed_by_files_that_exist():
    for row in ROWS:
        assert row["backed_by"], row["id"]
        for path in row["backed_by"]:
            assert (ROOT / path).exists(), f"{row['id']}: {path} does not exist"


def test_the_issue_49_sources_carry_stage_1s_verdict_and_name_their_fix():
    rows = {r["id"]: r for r in ROWS}
    assert ISSUE49 <= set(rows)
    for rid in ISSUE49_PENDING:
        assert rows[rid]["verdict"] in NO_VERDICT and rows[rid]["strength"] == "pending", rid
    for rid in ISSUE49 - ISSUE49_PENDING:
        row = rows[rid]
        assert row["verdict"] not in NO_VERDICT and row["strength"] == "measured" and row.get("check"), rid
        stage = OWN_STAGE.get(rid, STAGE1)
        assert any(p.startswith(stage) for p in row["backed_by"]), f"{rid}: not backed by {stage}* files"
        assert row.get("fix_strength") in decisions.STRENGTH, f"{rid}: the fix's strength is not said"
        assert "(rl_lab)" in row["start_from"] and "verl" in row["start_from"] and "TRL" in row["start_from"], rid


def test_the_fix_strength_is_shown_in_the_rendered_table():
    table = decisions.markdown_table(["truncation"])
    assert "keep_mask=true" in table and f"The fix: **{decisions.STRENGTH['measured']}**" in table
    assert "The fix:" not in decisions.markdown_table(["step_one"])         # a row without a fix_strength


def test_the_sources_fixes_are_backed_by_stage_2():
    rows = {r["id"]: r for r in ROWS}
    for rid in ISSUE49 - ISSUE49_PENDING:
        assert rows[rid]["fix_strength"] == "measured", rid
        stage = OWN_STAGE.get(rid, "research/mismatch_sources/results/s2_")
        assert any(p.startswith(stage) for p in rows[rid]["backed_by"]), rid


def test_columns_can_be_left_out_and_unknown_ones_raise():
    table = decisions.markdown_table(["stale_severe"], cols=["situation", "how sure"])
    header, rule, row = table.splitlines()
    assert header == "| situation | how sure |" and rule == "|---|---|" and row.count(" | ") == 1
    assert ROWS[0]["situation"] in row and "research/" not in row
    with pytest.raises(ValueError, match="unknown columns"):
        decisions.markdown_table(["stale_severe"], cols=["verdict"])


def test_the_file_types_no_numbers_in_its_verdicts():
    for row in ROWS:
        for field in ("verdict", "how_sure"):
            text = re.sub(r"`[^`]*`", "", row[field])
            assert not re.search(r"\b\d+(\.\d+)?\s*(/\s*\d+|%)|\b\d+\.\d+\b", text), (row["id"], field, text)


@pytest.mark.parametrize("row", [r for r in ROWS if r.get("check")], ids=lambda r: r["id"])
def test_each_verdict_holds_on_the_result_files(row):
    checks = _tables().decision_checks()
    assert row["check"] in checks, f"{row['id']}: no check {row['check']!r} in decision_checks()"
    checks[row["check"]]()


def test_every_measured_row_has_a_check():
    for row in ROWS:
        if row["strength"] in ("measured", "pilot", "nothing_to_correct"):
            assert row.get("check"), f"{row['id']}: a measured verdict needs a check against the files"


# ----------------------------------------------------------------------------- the pages
@pytest.mark.parametrize("page", TABLE_PAGES, ids=lambda p: p.stem)
def test_the_pages_render_the_decision_table(page):
    text = page.read_text(encoding="utf-8")
    assert DIRECTIVE.search(text), f"{page.relative_to(ROOT)} does not render the decision table"
    for rows in re.findall(r"^ *```\{decision-table\}\n *:rows:\s*(.*)$", text, flags=re.M):
        decisions.select(DATA, [r.strip() for r in rows.split(",")])      # unknown ids raise


def test_the_directive_renders_the_rows(tmp_path):
    (tmp_path / "conf.py").write_text('extensions = ["myst_parser", "rl_lab.book_ext.decisions"]\n'
                                      'suppress_warnings = ["toc.not_included"]\n')
    (tmp_path / "book").mkdir()
    for name in ("ch_when_speed_kills", "ch05_rollout_correction", "ch08_topk_routing", "ch_mismatch_sources"):
        (tmp_path / "book" / f"{name}.md").write_text(f"# {name}\n")
    (tmp_path / "index.md").write_text("# t\n\n```{decision-table}\n:rows: stale_severe, precision\n```\n")
    subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "html", str(tmp_path), str(tmp_path / "_build")],
                   check=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    html = (tmp_path / "_build" / "index.html").read_text(encoding="utf-8")
    rows = {r["id"]: r for r in ROWS}
    assert html.count("<tr") == 3                                      # a header and two rows
    assert rows["stale_severe"]["verdict"].split(";")[0] in html and "ch_when_speed_kills.html" in html
    assert rows["stale_mild"]["verdict"].split(";")[0] not in html


CORRECTION = r"(bypass|token[- ]TIS|Seq-TIS|Seq-MIS|Geo-RS|TRM|IcePop|importance weights?|masks?|sequence-level|token-level)"
VERDICT = re.compile(CORRECTION + r"[^.]{0,80}\b(start (from|with)|turn on|recommend\w*|prescrib\w*|the fix|the correction that|"
                     r"held|prevent\w*|kept the reward|keeps? the reward|did not prevent|best)\b"
                     r"|\b(start (from|with)|turn on|recommend\w*|prescrib\w*|use)\b[^.]{0,40}" + CORRECTION, re.I)
SOURCE = re.compile(r"\b(the post('s)?|the series|verl's (guide|documentation|advice)|verl documentation|the sources'?|"
                    r"Part [123]|Liu|Li et al|reported|third-party|the paper)\b", re.I)
GLUED = re.compile(r"\{glue:")
TABLE = re.compile(r"decision table", re.I)


def sentences(text: str) -> list[str]:
    text = re.sub(r"```\{(code-cell|glue:md|glue:figure|decision-table)\}.*?```", " ", text, flags=re.S)
    text = re.sub(r"^\|.*\|$", " ", text, flags=re.M)                   # table rows
    return re.split(r"(?<=[.!?])\s+", re.sub(r"\s+", " ", text))


def verdicts_of_its_own(page: Path) -> list[str]:
    """Sentences that say which correction to use, or that one held, neither quoting a named source
    nor, in a page that renders the table, pointing to it or quoting a result glued from the files."""
    text = page.read_text(encoding="utf-8")
    renders = bool(DIRECTIVE.search(text))
    return [s.strip()[:160] for s in sentences(text)
            if VERDICT.search(s) and not SOURCE.search(s) and not (renders and (TABLE.search(s) or GLUED.search(s)))]


@pytest.mark.parametrize("page", TABLE_PAGES, ids=lambda p: p.stem)
def test_the_pages_take_their_verdicts_from_the_table(page):
    found = verdicts_of_its_own(page)
    assert not found, f"{page.relative_to(ROOT)} states verdicts of its own:\n" + "\n".join(found)


# the map's other verdicts (issue 36): no page says a monitor warns early, unless it quotes the post
# or says it does not
EARLY = re.compile(r"\bearly warning\b|\brises? before (the )?(reward|collapse|fall)", re.I)
DENIED = re.compile(r"\b(no|not|never|nothing|neither)\b[^.]{0,60}(early warning|before)|"
                    r"(early warning|before)[^.]{0,30}\b(not|never)\b", re.I)


@pytest.mark.parametrize("page", PAGES, ids=[f"{p.parent.name}/{p.stem}" for p in PAGES])
def test_no_page_calls_k3_an_early_warning(page):
    found = [s.strip()[:160] for s in sentences(page.read_text(encoding="utf-8"))
             if EARLY.search(s) and not SOURCE.search(s) and not DENIED.search(s)
             and not re.search(r"\b(criterion|test|whether)\b", s, re.I)]
    assert not found, f"{page.relative_to(ROOT)}:\n" + "\n".join(found)


def test_the_rules_catch_a_verdict_of_its_own_and_let_quotes_and_pointers_pass(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("```{decision-table}\n```\n\nWith a stale sampler, start from bypass PPO-clip. "
                    "The post found that Seq-MIS held. The decision table says when bypass held.\n")
    assert verdicts_of_its_own(page) == ["With a stale sampler, start from bypass PPO-clip."]
    page.write_text("The decision table says when bypass held.\n")              # no table on this page
    assert verdicts_of_its_own(page) == ["The decision table says when bypass held."]
    assert EARLY.search("k3 is an early warning.") and DENIED.search("No monitor is an early warning here.")
