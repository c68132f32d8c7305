"""Each chapter's core, what a student reads in one sitting, stays within its budget (issues 36 and 52).

The core is the page up to its Exercises without what is folded or hidden (dropdowns, removed or
hidden code cells); it is measured in reading words: prose words, plus WORDS_PER_CODE_LINE for
every code line shown (code cells, literalincludes, fenced code) and WORDS_PER_EQUATION for every
row of a display equation (tools/core_words.py says why these rates).  BUDGET is the goal; pages
not there yet are listed in tools/core_words.py's OVER with the count they had when they were
listed: the test fails when one of them grows past that count (by more than 2%), and when one
comes under BUDGET (then remove it from OVER).  `python tests/book/test_core_length.py` prints the
table of reading words and minutes (the book's contributor page renders the same table)."""
import importlib.util
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("core_words", ROOT / "tools" / "core_words.py")
_cw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cw)
PAGES, BUDGET, OVER, core_words, breakdown = _cw.PAGES, _cw.BUDGET, _cw.OVER, _cw.core_words, _cw.breakdown
LINE, EQ = _cw.WORDS_PER_CODE_LINE, _cw.WORDS_PER_EQUATION


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_the_core_stays_within_its_budget(page):
    words = core_words(page.read_text(encoding="utf-8"), page.parent)
    if page.stem in OVER:
        assert words <= 1.02 * OVER[page.stem], \
            f"{page.stem}: the core grew to {words} reading words (listed at {OVER[page.stem]}); cut, do not fold"
        assert words > BUDGET, f"{page.stem}: {words} reading words, within the budget now: remove it from OVER"
    else:
        assert words <= BUDGET, f"{page.stem}: {words} reading words, over the budget of {BUDGET}"


def test_over_lists_only_pages_that_exist():
    assert set(OVER) <= {p.stem for p in PAGES}


def test_folded_and_hidden_text_is_not_counted():
    page = textwrap.dedent("""\
        ---
        x: 1
        ---
        # T

        one two three

        ```{code-cell} ipython3
        :tags: [remove-cell]
        four five
        ```

        ```{admonition} Solution
        :class: dropdown
        six seven
        ```

        ````{dropdown} Also folded
        ```{literalinclude} missing.py
        ```
        eight
        ````

        ## Exercises

        nine
        """)
    assert breakdown(page) == {"prose words": 4, "code lines": 0, "equations": 0}   # T, one, two, three


def test_what_is_shown_is_counted():
    page = textwrap.dedent("""\
        # T

        ```{admonition} Key idea
        :class: tip
        one two
        ```

        ```{code-cell} ipython3
        x = 1

        y = 2
        ```

        ```text
        for step in 1..N
        ```

        $$
        a = b \\\\
        c = d
        $$

        ```{math}
        e = f
        ```
        """)
    counts = breakdown(page)
    assert counts == {"prose words": 5, "code lines": 3, "equations": 3}       # T, Key, idea, one, two
    assert core_words(page) == 5 + 3 * LINE + 3 * EQ


def test_a_literalinclude_counts_the_lines_it_selects(tmp_path):
    (tmp_path / "m.py").write_text(textwrap.dedent("""\
        import os


        def f(x):
            # a comment
            y = x + 1

            return y


        class C:
            def g(self):
                return 1
        """))
    def shown(options):
        return breakdown(f"```{{literalinclude}} m.py\n{options}```\n", tmp_path)["code lines"]
    assert shown("") == 8
    assert shown(":pyobject: f\n") == 4
    assert shown(":pyobject: C.g\n") == 2
    assert shown(":pyobject: f\n:lines: 1-2\n") == 2
    assert shown(':start-after: "# a comment"\n:end-before: return y\n') == 1


if __name__ == "__main__":
    import pandas as pd

    pd.set_option("display.width", 200)
    print(_cw.table().to_string(index=False))
