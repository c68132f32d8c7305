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


def test_the_path_takes_about_45_minutes():
    path = first_look.path_minutes(ROOT, decisions.markdown_table(first_look.TABLE_ROWS))
    assert (path["minutes"] > 0).all(), path
    assert 35 <= path["minutes"].sum() <= 55, path.to_string()


def test_the_page_renders_the_table_rows_the_path_counts():
    text = (ROOT / "book" / "book_in_45_minutes.md").read_text(encoding="utf-8")
    assert ":rows: " + ", ".join(first_look.TABLE_ROWS) in text
