"""The core of a chapter: the text a student reads in one sitting (issue 36), and its word count.

The core is the page without its code cells, dropdowns (folded caveats, solutions), other fenced
blocks, display maths, exercises and references.  tests/book/test_core_length.py keeps every page of
PAGES within BUDGET; book/contributing.md renders `table()` at build time."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "book").glob("ch*.md")) + [ROOT / "book" / "primer.md", ROOT / "book" / "my_run_collapsed.md"]
BUDGET = 3500
WORDS_PER_MINUTE = 200


def core_words(text: str) -> int:
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)                        # front matter
    text = re.sub(r"```\{code-cell\}.*?```", "", text, flags=re.S)                   # code cells
    # dropdowns fenced with four backticks hold fenced blocks of their own (literalinclude, glue)
    text = re.sub(r"````\{(?:admonition\}[^\n]*\n:class: dropdown|dropdown\}[^\n]*)\n.*?\n````", "", text, flags=re.S)
    text = re.sub(r"```\{admonition\}[^\n]*\n:class: dropdown\n.*?\n```", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)                                # other fenced blocks
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)                             # display maths
    text = re.split(r"\n## (?:Exercises|References)\n", text)[0]
    return len(re.findall(r"[A-Za-z][A-Za-z'-]*", text))


def table():
    """One row per page: its core words, reading minutes at WORDS_PER_MINUTE, and the budget's use."""
    import pandas as pd

    rows = []
    for p in PAGES:
        w = core_words(p.read_text(encoding="utf-8"))
        rows.append({"page": p.stem, "core words": w, "reading minutes": round(w / WORDS_PER_MINUTE),
                     "of the budget": f"{w / BUDGET:.0%}"})
    return pd.DataFrame(rows)
