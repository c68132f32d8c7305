"""House style the rendered book depends on: code-cell lines short enough to fit the page, and
one title style for chapters and labs."""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LABS = sorted((REPO / "labs").glob("*.md"))
# book/css/rl_lab.css sizes code cells so that this many characters fit the page's text column
MAX_CODE_LINE = 100


def code_cell_lines(text: str):
    """(line number, line) of every line inside a ```{code-cell} block."""
    inside = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```{code-cell}"):
            inside = True
        elif inside and line.startswith("```"):
            inside = False
        elif inside:
            yield n, line


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_code_lines_fit_the_page(path):
    long = [f"{path.name}:{n} ({len(line)} chars)" for n, line in code_cell_lines(path.read_text(encoding="utf-8"))
            if len(line) > MAX_CODE_LINE]
    assert not long, (f"code-cell lines over {MAX_CODE_LINE} characters scroll on the page; wrap them "
                      f"(split the call or the string, move a comment above): {long}")
