""""The book in 45 minutes" (book/book_in_45_minutes.md, issue 52): its path reads pages of the table
of contents, each step names a chapter that deepens it, and the whole path stays about 45 minutes as
the pages change (rl_lab.toolkits.first_look.PATH, reading at READING_WPM words a minute)."""
import re
from pathlib import Path

import yaml

from rl_lab.book_ext import decisions
from rl_lab.toolkits import first_look

ROOT = Path(__file__).resolve().parents[2]
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
TOC_PAGES = [TOC["root"]] + [c["file"] for part in TOC["parts"] for c in part["chapters"]]


def test_the_page_comes_right_after_the_intro():
    assert TOC_PAGES[:2] == ["book/intro", "book/book_in_45_minutes"]


def test_every_step_is_a_section_reads_a_page_of_the_book_and_names_a_chapter_that_deepens_it():
    page = (ROOT / f"{first_look.PAGE}.md").read_text(encoding="utf-8")
    sections = re.findall(r"(?m)^## (.+)$", page)
    assert sorted(s["step"] for s in first_look.PATH) + sorted(first_look.OWN_SECTIONS) == \
        sorted(set(sections) - set(first_look.OWN_SECTIONS)) + sorted(first_look.OWN_SECTIONS), sections
    for step in first_look.PATH:
        assert step["step"] in sections, step
        if step["page"] == "decision-table":
            decisions.select(decisions.load(), step["sections"])          # unknown rows raise
        elif step["page"] is not None:
            assert step["page"] in TOC_PAGES, step
        assert any(p.rsplit("/", 1)[-1] == step["deepens"] for p in TOC_PAGES), step
        assert f"{step['deepens']}" in page.split(f"## {step['step']}\n", 1)[1].split("\n## ", 1)[0], \
            f"the section {step['step']!r} does not link the chapter that deepens it"


TABLE = decisions.markdown_table(first_look.TABLE_ROWS, cols=first_look.TABLE_COLUMNS)


def test_the_path_takes_about_45_minutes_with_time_to_set_up_try_and_run():
    path = first_look.path_minutes(ROOT, TABLE).set_index("step")
    assert (path["minutes"] > 0).all(), path
    assert 40 <= path["minutes"].sum() <= 50, path.to_string()
    # what is not reading has its allowance: the setup, the primer's cell, Lab 1 and the live runs
    for step in ("Step 0: setup", "The primer", "Lab 1: your first RL run",
                 "A stale sampler, with and without bypass, live"):
        assert path.loc[step, "run"] > 0, step
    # the decision table is read at a slower rate than prose
    table = path.loc["Which correction when"]
    assert first_look.TABLE_WPM < first_look.READING_WPM
    assert table["reading"] > table["words"] / first_look.READING_WPM


def test_the_page_renders_the_table_rows_and_columns_the_path_counts():
    text = (ROOT / "book" / "book_in_45_minutes.md").read_text(encoding="utf-8")
    assert ":rows: " + ", ".join(first_look.TABLE_ROWS) in text
    assert ":columns: " + ", ".join(first_look.TABLE_COLUMNS) in text
    assert TABLE.splitlines()[0].count("|") == len(first_look.TABLE_COLUMNS) + 1


def test_the_intro_quotes_the_same_minutes():
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    assert "first_look.path_minutes(" in intro and "{glue:text}`intro_path_minutes:.0f`" in intro


def test_the_live_cell_holds_its_own_imports():
    page = (ROOT / f"{first_look.PAGE}.md").read_text(encoding="utf-8")
    live = page.split("## A stale sampler, with and without bypass, live\n", 1)[1]
    cell = re.search(r"```\{code-cell\} ipython3\n(?!:tags:)(.*?)```", live, re.S).group(1)
    imported = set()
    for line in re.findall(r"^(?:import|from [\w.]+ import) (.+)$", cell, re.M):
        imported |= {name.split(" as ")[-1].strip() for name in line.split(",")}
    for used in ("time", "plt", "np", "RLConfig", "Trainer", "collapse"):
        assert used in imported, f"the live cell uses {used} without importing it"
