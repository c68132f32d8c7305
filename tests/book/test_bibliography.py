"""One bibliography (issue 29, item 19): every {cite}`key` in book/ and labs/ is an entry of
references.bib, the book is configured to read it, and the References page lists it.

A Jupyter Book build with -W fails on an unknown key too (sphinxcontrib-bibtex warns "could not
find bibtex key"); this test finds it in a second, without a build."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIB = ROOT / "references.bib"
PAGES = sorted((ROOT / "book").glob("*.md")) + sorted((ROOT / "labs").glob("*.md"))
CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")


def bib_keys() -> list[str]:
    return re.findall(r"^@\w+\{([^,\s]+),", BIB.read_text(encoding="utf-8"), re.M)


def cited() -> dict[str, set[str]]:
    out = {}
    for page in PAGES:
        for group in CITE.findall(page.read_text(encoding="utf-8")):
            for key in group.split(","):
                out.setdefault(key.strip(), set()).add(page.relative_to(ROOT).as_posix())
    return out


def test_every_cited_key_is_in_references_bib():
    keys = set(bib_keys())
    unknown = {k: sorted(v) for k, v in cited().items() if k not in keys}
    assert not unknown, f"cited but not in references.bib: {unknown}"


def test_the_bibliography_is_well_formed_and_used():
    keys = bib_keys()
    assert len(keys) == len(set(keys)), "a key is defined twice in references.bib"
    text = BIB.read_text(encoding="utf-8")
    for key, body in re.findall(r"^@\w+\{([^,\s]+),\n(.*?)\n\}", text, re.M | re.S):
        for field in ("author", "title", "year"):
            assert re.search(rf"^\s*{field} = ", body, re.M), f"{key} has no {field}"
    uncited = sorted(set(keys) - set(cited()))
    assert not uncited, f"in references.bib but cited nowhere: {uncited}"
    assert len(cited()) > 50, "the chapters cite their sources with {cite}"


def test_the_book_reads_it_and_lists_it():
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert config["bibtex_bibfiles"] == ["references.bib"]
    assert "file: book/references" in (ROOT / "_toc.yml").read_text(encoding="utf-8")
    page = (ROOT / "book" / "references.md").read_text(encoding="utf-8")
    assert re.search(r"```\{bibliography\}\n:all:\n```", page)


def test_the_extraction_reads_what_it_should():
    text = "see {cite}`a2020x` and {cite:t}`b2021y,c2022z` but not `{cite}` alone"
    assert CITE.findall(text) == ["a2020x", "b2021y,c2022z"]
