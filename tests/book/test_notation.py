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

ROOT = Path(__file__).resolve().parents[2]
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


# --- One symbol, one meaning in the body text (second reader study) -------------------------------
# Each detector reads a page's maths (prose only: code cells are left out) and returns what clashes
# with the meaning book/notation.md gives the symbol.  They target the clashes the reader study
# found and that were renamed away, so that they do not come back.

PAGES = [p for p in sorted((ROOT / "book").glob("*.md")) + sorted((ROOT / "labs").glob("*.md"))
         if p != NOTATION]


def _prose(text: str) -> str:
    return re.sub(r"```\{code-cell\}.*?```", " ", text, flags=re.S)


def _pseudocode(text: str) -> list[str]:
    return re.findall(r"```text\n(.*?)```", text, flags=re.S)


def _without_names(formula: str) -> str:
    f = re.sub(r"\\(?:text|mathrm|operatorname)\s*\{[^{}]*\}", " ", formula)
    return re.sub(r"\\(?:mathcal|mathbb)\s*\{?\s*[A-Za-z]\}?", " ", f)


def _sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.!?:;])\s+(?=[A-Z*(`$])|\n\n|\n\* |\n\|", _prose(text))


def reward_written_r(text: str) -> list[str]:
    """A sentence about rewards whose maths uses r: rewards are R (R_i, R_t), r is PPO's ratio."""
    return [s.strip()[:120] for s in _sentences(text)
            if re.search(r"\breward", s, re.I) and any("r" in symbols(f) for f in maths(s))]


_R_OTHER = re.compile(r"(?<![A-Za-z\\])r\s*=\s*\\log|(?<![A-Za-z\\])r_\{?\\min|\|r\||e\^r(?![A-Za-z])")


def r_not_a_ratio(text: str) -> list[str]:
    """r written for a log-ratio or a floor: a log-ratio is log ρ, the learning-rate floor η_min."""
    return [f.strip()[:120] for f in maths(_prose(text)) if _R_OTHER.search(_without_names(f))]


def two_epsilon_glyphs(text: str) -> list[str]:
    """\\epsilon and \\varepsilon on one page: one glyph per page (the clip is \\varepsilon)."""
    used = set().union(set(), *(symbols(f) for f in maths(_prose(text))))
    return [r"both \epsilon and \varepsilon"] if {r"\epsilon", r"\varepsilon"} <= used else []


_GUARD = re.compile(r"(?<![=1\s])\s*\+\s*(?:\\epsilon|\\varepsilon|ε|ϵ)\s*(?=[)}]|\\big|\\Big|\\right|$)")


def epsilon_as_guard(text: str) -> list[str]:
    """A small constant added to a denominator written as epsilon (it is nu; epsilon is the clip)."""
    return [f.strip()[:120] for f in maths(_prose(text)) + _pseudocode(text)
            for line in f.splitlines() or [f] if _GUARD.search(line)]


_C_SCALAR = re.compile(r"(?<![A-Za-z\\])c\s*(?:\\,)?\s*(?:A\b|\\cdot|/|=\s*[\d.])"
                       r"|-\s*c(?![A-Za-z_(])|[(,]\s*c\s*/|\bb\s*=\s*c\b")


def c_as_a_constant(text: str) -> list[str]:
    """c is a context (a prompt and prefix); a clip level or a scale written c clashes with it."""
    return [f.strip()[:120] for f in maths(_prose(text)) if _C_SCALAR.search(_without_names(f))]


_KSTAT = re.compile(r"k_\{?[123]\}?|(?<![A-Za-z])k[123]\b")


def k_beside_the_kl_statistics(text: str) -> list[str]:
    """On a page that writes k_1, k_2, k_3 (or k1, k2, k3 in maths), k means only those."""
    formulas = maths(_prose(text))
    if not any(_KSTAT.search(f) for f in formulas):
        return []
    found = []
    for f in formulas:
        g = re.sub(r"\\bar\s*\{?\s*k", " ", _without_names(f))        # \bar k, the average KL
        g = re.sub(r"\\[A-Za-z]+", " ", _KSTAT.sub(" ", g))
        if re.search(r"(?<![A-Za-z])k(?![A-Za-z])", g):
            found.append(f.strip()[:120])
    return found


_L_LOSS = re.compile(r"\\partial\s*L\b|\\nabla\s*L\b|\\sum\s*L\b|(?<![A-Za-z\\])L\s*\(\s*\\(?:theta|pi|tilde)"
                     r"|(?<![A-Za-z\\])L_\\pi|(?<![A-Za-z\\])L\s*=\s*[^\d\s]|(?<![A-Za-z\\])L\s*\\xi")


def L_not_the_smoothness(text: str) -> list[str]:
    """L is the smoothness constant only: a loss is ℓ, a surrogate \\mathcal L, a factor F."""
    found = [f.strip()[:120] for f in maths(_prose(text)) if _L_LOSS.search(_without_names(f))]
    return found + [line.strip() for block in _pseudocode(text) for line in block.splitlines()
                    if re.search(r"^\s*L\s*=|gradient of L\b", line)]


def hybrid_written_H(text: str) -> list[str]:
    """H is an entropy (H(μ,π) the cross-entropy); the hybrid argument's laws are P^{(j)}."""
    return [f.strip()[:120] for f in maths(_prose(text))
            if re.search(r"H_\{?k\b|H_\{k-1\}|H_0\s*=|H_T\s*=", f)]


def N_as_group_size(text: str) -> list[str]:
    """N is prompts per step; a group's size is G."""
    return [s.strip()[:120] for s in _sentences(text)
            if re.search(r"\bgroups?\b|\bmembers?\b", s, re.I) and not re.search(r"expert", s, re.I)
            and any("N" in symbols(f) for f in maths(s))]


_G_RETURN = re.compile(r"(?<![A-Za-z\\])G(?:_\{?[a-z]+\}?)?\s*=\s*\\?sum")


def G_as_a_return(text: str) -> list[str]:
    """G is the group size; a return (a sum of rewards) is Ret (chapters 9 and 10)."""
    return [f.strip()[:120] for f in maths(_prose(text)) + _pseudocode(text) if _G_RETURN.search(f)]


DETECTORS = [reward_written_r, r_not_a_ratio, two_epsilon_glyphs, epsilon_as_guard, c_as_a_constant,
             k_beside_the_kl_statistics, L_not_the_smoothness, hybrid_written_H, N_as_group_size,
             G_as_a_return]


@pytest.mark.parametrize("detector", DETECTORS, ids=[d.__name__ for d in DETECTORS])
@pytest.mark.parametrize("page", PAGES, ids=[f"{p.parent.name}/{p.stem}" for p in PAGES])
def test_the_body_text_keeps_one_meaning_per_symbol(page, detector):
    found = detector(page.read_text(encoding="utf-8"))
    assert not found, f"{page.relative_to(ROOT)}: {detector.__doc__}\n" + "\n".join(map(repr, found))


# (detector, a page that clashes, a page that does not)
EXAMPLES = [
    (reward_written_r, "The reward $r_i$ of completion $i$.", "The reward $R_i$ is 0 or 1. The ratio $r_t$ is clipped."),
    (r_not_a_ratio, "the gap $r=\\log\\pi(a)-\\log\\mu(a)$, $\\sum|r|$", "$r_t=\\pi_\\theta/\\pi_{\\text{old}}$, $\\sum|\\log\\rho|$"),
    (r_not_a_ratio, "$\\eta_0\\max(r_{\\min},0.5^k)$", "$\\max(\\eta_{\\min},\\eta_0 0.5^j)$"),
    (two_epsilon_glyphs, "Clip at $1+\\varepsilon$; divide by $s+\\epsilon$.", "Clip at $1+\\varepsilon$ and $1-\\varepsilon$."),
    (epsilon_as_guard, "$A=(R-\\bar R)/(s+\\epsilon)$", "$\\operatorname{clip}(r,1-\\varepsilon,1+\\varepsilon)$, $\\theta+\\epsilon v$"),
    (epsilon_as_guard, "```text\nA = R / (group std + ε)\n```", "```text\nclip(r, 1−ε, 1+ε_high)\n```"),
    (c_as_a_constant, "the loss is capped at $-c\\,A$", "$\\pi(a\\mid c)$ and $\\max_c\\mathrm{TV}(c)$"),
    (c_as_a_constant, "$\\hat g\\min(1,c/\\lVert\\hat g\\rVert)$ and $b=c\\nabla J$", "$c_t=(x,y_{<t})$"),
    (k_beside_the_kl_statistics, "$k_3=\\rho-1-\\log\\rho$ and $H_k$ for $k<T$", "$k_1$, $k_3$ and $\\bar k$; $j<T$"),
    (L_not_the_smoothness, "$\\partial L/\\partial\\log\\pi$ and $\\nabla L=\\nabla J$", "$L$-smooth, $L=1$, $\\nabla\\mathcal L$"),
    (L_not_the_smoothness, "```text\n    L = aggregate(ℓ)\n```", "```text\n    loss = aggregate(ℓ)\n```"),
    (hybrid_written_H, "Let $H_k$ draw the first $k$ tokens; $H_0=P^\\pi$.", "$H(\\mu,\\pi)$, $H_2(\\pi)$, $\\tilde H_t$"),
    (N_as_group_size, "A group of $N=4$ completions.", "A group of $G=4$ completions; $N$ prompts per step."),
    (G_as_a_return, "the return $G_t=\\sum_{k\\ge t}R_k$", "$G=8$ completions, $\\mathrm{Ret}_t=\\sum_{k\\ge t}R_k$"),
]


@pytest.mark.parametrize("detector,bad,good", EXAMPLES, ids=[d.__name__ for d, _, _ in EXAMPLES])
def test_each_detector_flags_a_clash_and_passes_the_book_s_meaning(detector, bad, good):
    assert detector(bad), f"{detector.__name__} missed {bad!r}"
    assert not detector(good), f"{detector.__name__} flagged {good!r}: {detector(good)}"
