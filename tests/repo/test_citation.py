"""One version for the book and the package (issue 56), and the file that says how to cite them.

The one place is `__version__` in rl_lab/__init__.py: pyproject.toml reads it (setuptools' `attr:`),
the book shows it (rl_lab.book_ext.version, `{{ rl_lab_version }}` on the intro page), and
CITATION.cff and the top entry of CHANGELOG.md must repeat it.  CITATION.cff is checked against the
rules of the Citation File Format 1.2.0 that a reader's tool needs (required keys, the known keys,
their types and formats); cffconvert, the format's own validator, pins an old jsonschema that the
lock cannot hold, so it is not run here (it was run once by hand on this file: valid).
"""
from __future__ import annotations

import datetime as dt
import re
import tomllib
from pathlib import Path

import yaml

import rl_lab
from rl_lab.book_ext.version import SUBSTITUTION, package_version

REPO = Path(__file__).resolve().parents[2]
CFF = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
# The top-level keys of CFF 1.2.0 (its schema's `properties`).
CFF_KEYS = {"abstract", "authors", "cff-version", "commit", "contact", "date-released", "doi",
            "identifiers", "keywords", "license", "license-url", "message", "preferred-citation",
            "references", "repository", "repository-artifact", "repository-code", "title", "type",
            "url", "version"}
PERSON_KEYS = {"family-names", "given-names", "name-particle", "name-suffix", "affiliation", "address",
               "city", "country", "email", "fax", "orcid", "post-code", "region", "tel", "website",
               "alias", "name", "date-end", "date-start", "location"}


def changelog_entries() -> list[tuple[str, str]]:
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    return re.findall(r"^## (\d+\.\d+\.\d+\S*) \((\d{4}-\d{2}-\d{2})\)$", text, re.M)


def test_the_version_has_one_place():
    assert rl_lab.__version__ == package_version(), "book_ext.version reads rl_lab/__init__.py as setuptools does"
    py = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in py["project"] and "version" in py["project"]["dynamic"]
    assert py["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "rl_lab.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", rl_lab.__version__), "MAJOR.MINOR.PATCH"


def test_citation_cff_is_valid_cff_1_2_0():
    assert CFF["cff-version"] == "1.2.0"
    for key in ("cff-version", "message", "title", "authors"):   # required by the format
        assert CFF.get(key), f"CITATION.cff needs {key}"
    assert set(CFF) <= CFF_KEYS, f"unknown keys: {set(CFF) - CFF_KEYS}"
    assert isinstance(CFF["message"], str) and isinstance(CFF["title"], str)
    assert CFF.get("type", "software") in ("software", "dataset")
    assert isinstance(CFF["authors"], list) and CFF["authors"]
    for a in CFF["authors"]:
        assert isinstance(a, dict) and set(a) <= PERSON_KEYS, a
        assert a.get("family-names") or a.get("name"), "a person needs family-names, an entity a name"
    assert isinstance(CFF["version"], str), "a string: YAML would read 1.10 as the number 1.1"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(CFF["date-released"]))
    dt.date.fromisoformat(str(CFF["date-released"]))
    assert all(isinstance(k, str) for k in CFF.get("keywords", []))
    assert CFF["license"] == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"]["text"]


def test_citation_changelog_and_package_agree():
    assert CFF["version"] == rl_lab.__version__, "bump CITATION.cff's version with rl_lab.__version__"
    entries = changelog_entries()
    assert entries, "CHANGELOG.md has no `## X.Y.Z (YYYY-MM-DD)` entry"
    assert entries[0] == (rl_lab.__version__, str(CFF["date-released"])), (
        "CHANGELOG.md's newest entry must be this version, released on CITATION.cff's date")
    assert len({v for v, _ in entries}) == len(entries), "one entry per release"


def test_the_book_shows_the_version():
    import yaml as _yaml
    cfg = _yaml.safe_load((REPO / "_config.yml").read_text())
    assert "rl_lab.book_ext.version" in cfg["sphinx"]["extra_extensions"]
    assert "{{ " + SUBSTITUTION + " }}" in (REPO / "book" / "intro.md").read_text(encoding="utf-8")
    assert "myst_substitutions" not in cfg["sphinx"]["config"], "the extension sets it; a copy here would drift"
    assert "substitution" in cfg["parse"]["myst_enable_extensions"]
