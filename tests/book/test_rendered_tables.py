"""The collapse chapter's measured tables are rendered from result files, never typed (issue 27).

A Markdown pipe table in these pages is allowed only if its header is listed below with the
reason it holds no measurement of this book (a definition, or numbers quoted from a source).  Any
other typed table fails: render it from `research/*/results` in a code cell (the chapter glues
the frames of research/stability_map/tables.py) so that it cannot drift from the data.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["book/ch_when_speed_kills.md", "labs/lab_when_speed_kills.md", "book/ch_mismatch_sources.md",
         "labs/lab_break_it_fix_it.md", "book/research_log.md"]

# (page, the table's header row without spaces) -> why it is typed
TYPED_OK = {
    ("book/ch_when_speed_kills.md", "||thepost(quoted)|thisbook(measured,below)|"):
        "the two settings side by side: the post's column is quoted, the book's column names setups",
    ("book/ch_when_speed_kills.md", "|metric|meaning|whattoexpect|"):
        "definitions of the logged metrics (its only numbers are quoted from the post)",
    ("book/ch_when_speed_kills.md", "|question|answeronthetinymodels|strengthofevidence|"):
        "the plain answers (issue 52): words, each pointing to the rendered tables below it",
    ("book/ch_when_speed_kills.md", "|claimofthepost|wherethisbooktestsit|scale|verdict|"):
        "the claims table: verdicts in words, each pointing to the rendered evidence",
}


def typed_tables(text: str) -> list[tuple[int, str]]:
    """(line number, header without spaces) of every pipe table outside code blocks."""
    out, fence, lines = [], None, text.splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        m = re.match(r"^(`{3,}|~{3,})", stripped)
        if m:
            if fence is None:
                fence = m.group(1)
            elif stripped.startswith(fence) and stripped.strip("`~") == "":
                fence = None
            continue
        if fence is not None and not fence.startswith("````"):
            continue
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if stripped.startswith("|") and re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", nxt):
            out.append((i + 1, stripped.replace(" ", "")))
    return out


@pytest.mark.parametrize("page", PAGES)
def test_no_typed_measurement_tables(page):
    found = typed_tables((ROOT / page).read_text(encoding="utf-8"))
    bad = [f"{page}:{n}: {h}" for n, h in found if (page, h) not in TYPED_OK]
    assert not bad, ("typed tables (render measured tables from research/*/results in a code cell, or "
                     "list a definition/quotation table in TYPED_OK with its reason):\n  " + "\n  ".join(bad))


def test_the_check_finds_a_typed_table():
    text = "Intro\n\n| correction | collapses |\n|---|---|\n| none | 3/3 |\n\n```python\n| a | b |\n|---|---|\n```\n"
    assert typed_tables(text) == [(3, "|correction|collapses|")]
    assert typed_tables("````{dropdown} x\n| a | b |\n|---|---|\n````\n") == [(2, "|a|b|")]


def test_the_chapter_renders_its_tables():
    """The chapter keeps the map and the nine-seed comparison; the research log (issue 52) renders
    every table of the evidence behind them, the OOD peaks of the miniature included."""
    text = (ROOT / PAGES[0]).read_text(encoding="utf-8")
    for name in ("tab-staleness", "tab-nine"):
        assert f"{{glue:md}} {name}" in text, name
    log = (ROOT / "book/research_log.md").read_text(encoding="utf-8")
    for name in ("tab-staleness", "tab-stationary", "tab-long", "tab-size", "tab-nine", "tab-pilot-corrections",
                 "tab-warning", "tab-long-horizon", "tab-mini-a", "tab-mini-b", "tab-mini-follow", "tab-ood-peaks",
                 "tab-panel2"):
        assert f"{{glue:md}} {name}" in log, name
