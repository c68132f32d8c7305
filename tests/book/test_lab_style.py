"""House style the rendered book depends on: code-cell lines short enough to fit the page, and
one title style for chapters and labs."""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
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


def toc_pages() -> list[str]:
    """Every page in _toc.yml (root, then parts' chapters), as paths without extension."""
    import yaml
    toc = yaml.safe_load((REPO / "_toc.yml").read_text(encoding="utf-8"))
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [c["file"] for c in part.get("chapters", [])]
    return pages


def expected_title_prefix(page: str) -> str | None:
    """'Chapter N: ' for book/chNN_*, 'Lab N: ' for labs/labNN_*, 'Lab: ' for an unnumbered lab,
    and None (no prefix) for every other page (intro, notation, an unnumbered chapter)."""
    name = page.rsplit("/", 1)[-1]
    if m := re.fullmatch(r"ch(\d+)_.*", name):
        return f"Chapter {int(m.group(1))}: "
    if m := re.fullmatch(r"lab(\d+)_.*", name):
        return f"Lab {int(m.group(1))}: "
    if name.startswith("lab_"):
        return "Lab: "
    return None


@pytest.mark.parametrize("page", toc_pages())
def test_one_title_style(page):
    text = (REPO / f"{page}.md").read_text(encoding="utf-8")
    m = re.search(r"^# (.+)$", text, re.M)
    assert m, f"{page}.md has no H1 title"
    title, prefix = m.group(1), expected_title_prefix(page)
    if prefix:
        assert title.startswith(prefix), f"{page}.md: title {title!r} should start with {prefix!r}"
        rest = title[len(prefix):]
    else:
        assert not re.match(r"(Chapter|Lab)\b", title), \
            f"{page}.md: an unnumbered page's title has no 'Chapter'/'Lab N' prefix: {title!r}"
        rest = title
    assert rest[:1].isupper() or not rest[:1].isalpha(), \
        f"{page}.md: the title after the prefix starts with a capital (sentence case): {title!r}"
