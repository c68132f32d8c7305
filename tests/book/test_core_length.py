"""Each chapter's core, the text a student reads in one sitting, stays within its budget (issue 36).

The core is the page without its code cells, dropdowns (folded caveats, solutions), other fenced
blocks, display maths, exercises and references.  BUDGET is the goal; chapters not there yet are
listed in OVER with the count they had when they were listed: the test fails when one of them
grows past that count (by more than 2%), and when one comes under BUDGET (then remove it from
OVER).  `python tests/book/test_core_length.py` prints the table of words and reading times (tools/core_words.py,
which the book's contributor page renders)."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("core_words", ROOT / "tools" / "core_words.py")
_cw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cw)
PAGES, BUDGET, WORDS_PER_MINUTE, core_words = _cw.PAGES, _cw.BUDGET, _cw.WORDS_PER_MINUTE, _cw.core_words
OVER: dict[str, int] = {}


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_the_core_stays_within_its_budget(page):
    words = core_words(page.read_text(encoding="utf-8"))
    if page.stem in OVER:
        assert words <= 1.02 * OVER[page.stem], \
            f"{page.stem}: the core grew to {words} words (listed at {OVER[page.stem]}); fold results and caveats into dropdowns"
        assert words > BUDGET, f"{page.stem}: {words} words, within the budget now: remove it from OVER"
    else:
        assert words <= BUDGET, f"{page.stem}: {words} core words, over the budget of {BUDGET}"


def test_the_count_ignores_what_it_should():
    page = ("---\nx: 1\n---\n# T\n\none two three\n\n```{code-cell} ipython3\nfour five\n```\n\n"
            "```{admonition} Solution\n:class: dropdown\nsix seven\n```\n\n$$\neight\n$$\n\n## Exercises\n\nnine\n")
    assert core_words(page) == 4          # T, one, two, three
    nested = ("# T\n\n````{admonition} Folded\n:class: dropdown\nsix\n\n```{literalinclude} x.py\n```\n\nseven\n````\n\n"
              "````{dropdown} Also folded\neight\n```{glue:md} k\n```\nnine\n````\n\nten\n")
    assert core_words(nested) == 2        # T, ten


if __name__ == "__main__":
    print(_cw.table().to_string(index=False))
