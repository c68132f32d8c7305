"""Every symbol in a chapter's Quick-facts block is listed in book/notation.md (issue 29, item 16).

A symbol is read from the block's maths ($...$ and $$...$$, code spans left out) at the level of
its base: a Greek letter or other command (\\rho, \\Sigma, \\epsilon), a calligraphic letter
(\\mathcal K), or a single Latin letter (T, C, h).  Subscripts and decorations are not told apart
(\\bar\\rho_t counts as \\rho), words in \\text, \\mathrm and \\operatorname are names, not symbols, and
operators (\\sum, \\log, \\le, ...) and big-O are skipped.  The test fails when a chapter's Quick
facts use a base symbol that no formula of notation.md contains."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "book").glob("ch*.md"))
NOTATION = ROOT / "book" / "notation.md"

OPERATORS = set(r"""
\frac \tfrac \dfrac \sum \prod \int \log \ln \exp \min \max \sup \inf \lim \arg \sqrt \partial \nabla
\le \ge \leq \geq \lesssim \gtrsim \ll \gg \approx \neq \ne \equiv \sim \propto \in \mid \to \mapsto
\leftarrow \rightarrow \Rightarrow \gets \cdot \times \pm \infty \top \circ \star \prime \ldots \dots
\cdots \forall \exists \emptyset \cap \cup \setminus \subset \subseteq \land \lor \neg \not
\lVert \rVert \lvert \rvert \Vert \vert \langle \rangle \lfloor \rfloor \lceil \rceil \left \right
\big \Big \bigl \bigr \bigg \Bigg \quad \qquad \hat \bar \tilde \overline \underbrace \displaystyle
\mathbb \mathbf \boldsymbol \text \mathrm \operatorname \mathcal \textstyle
""".split())


def maths(text: str) -> list[str]:
    text = re.sub(r"`[^`\n]*`", " ", text)                                  # code spans
    display = re.findall(r"\$\$(.+?)\$\$", text, flags=re.S)
    text = re.sub(r"\$\$(.+?)\$\$", " ", text, flags=re.S)
    return display + re.findall(r"\$([^$]+)\$", text)


def symbols(formula: str) -> set[str]:
    """The base symbols of one formula (see the module docstring)."""
    found = set()
    f = re.sub(r"\\(?:text|mathrm|operatorname)\s*\{[^{}]*\}", " ", formula)    # names, not symbols
    found |= {f"\\mathcal{{{c}}}" for c in re.findall(r"\\mathcal\s*\{?\s*([A-Za-z])", f)}
    f = re.sub(r"\\(?:mathcal|mathbb)\s*\{?\s*[A-Za-z]\}?", " ", f)
    f = re.sub(r"\bO\(", " (", f)                                               # big-O
    found |= {c for c in re.findall(r"\\[A-Za-z]+", f) if c not in OPERATORS}
    f = re.sub(r"\\[A-Za-z]+", " ", f)
    found |= set(re.findall(r"(?<![A-Za-z])[A-Za-z](?![A-Za-z])", f))
    return found


def quick_facts(page: Path) -> str:
    m = re.search(r"\n## Quick facts\n(.*?)(?=\n## )", page.read_text(encoding="utf-8"), re.S)
    assert m, f"{page.stem} has no '## Quick facts' block"
    return m.group(1)


LISTED = set().union(*(symbols(f) for f in maths(NOTATION.read_text(encoding="utf-8"))))


@pytest.mark.parametrize("page", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_quick_facts_symbols_are_in_the_notation_page(page):
    used = set().union(set(), *(symbols(f) for f in maths(quick_facts(page))))
    missing = sorted(used - LISTED)
    assert not missing, f"{page.stem}: Quick facts use {missing}, which book/notation.md does not list"


def test_the_extraction_reads_what_it_should():
    assert symbols(r"\bar\rho_t=\min(\rho_t,C)") == {r"\rho", "t", "C"}
    assert symbols(r"\mathrm{KL}(\mu\Vert\pi)\le O(T^2)") == {r"\mu", r"\pi", "T"}
    assert symbols(r"\mathcal K(h)\in\mathbb R^N") == {r"\mathcal{K}", "h", "N"}
    assert maths("a `$x$` b $y_t$ c $$\\kappa$$") == [r"\kappa", "y_t"]
    assert "T" in LISTED and r"\rho" in LISTED and r"\Omega" not in LISTED
