"""Every symbol of every page is listed in book/notation.md with one meaning for that page (issue 29,
item 16; issue 54, item 3: scoped meanings, pseudocode included, further down).

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
\begin \end \cos \angle \iff \notin \ni \xrightarrow \longrightarrow \preceq \succeq \parallel \widehat
\widetilde \binom \tag \label \color
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
    f = re.sub(r"(?:(?<![A-Za-z\\])[Oo]|\\Theta|\\Omega)\s*(?=\(|\\big|\\Big)", " ", f)        # O, o, Θ, Ω
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
    return ([f.strip()[:120] for f in maths(_prose(text)) if _R_OTHER.search(_without_names(f))]
            + [line.strip() for block in _pseudocode(text) for line in block.splitlines()
               if re.search(r"(?<![A-Za-z_])r(?:\[[^\]]*\])?\s*=\s*log|\(r\[", line)])


def two_epsilon_glyphs(text: str) -> list[str]:
    """\\epsilon and \\varepsilon on one page: one glyph per page (the clip is \\varepsilon)."""
    used = set().union(set(), *(symbols(f) for f in maths(_prose(text))))
    return [r"both \epsilon and \varepsilon"] if {r"\epsilon", r"\varepsilon"} <= used else []


_GUARD = re.compile(r"(?<![=1\s])\s*\+\s*(?:\\epsilon|\\varepsilon|ε|ϵ|eps\b)\s*(?=[)}]|\\big|\\Big|\\right|$)")


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
    return ([s.strip()[:120] for s in _sentences(text)
             if re.search(r"\bgroups?\b|\bmembers?\b", s, re.I) and not re.search(r"expert", s, re.I)
             and any("N" in symbols(f) for f in maths(s))]
            + [line.strip() for block in _pseudocode(text) for line in block.splitlines()
               if re.search(r"\bgroups? of N\b|\bN completions\b", line)])


_G_RETURN = re.compile(r"(?<![A-Za-z\\])G(?:_\{?[a-z]+\}?|\[[^\]]*\])?\s*=\s*(?:reverse\s+)?(?:\\?sum|cumsum)"
                       r"|\\sum_i\s*G_\{?i")


def G_as_a_return(text: str) -> list[str]:
    """G is the group size; a return (a sum of rewards) is Ret (chapters 9 and 10)."""
    return [f.strip()[:120] for f in maths(_prose(text)) + _pseudocode(text) if _G_RETURN.search(f)]


_GEO_C = re.compile(r"\^\{1/T\}\s*\\in\s*\[1/C|1/C\s*(?:\\le|<=)\s*(?:\\rho\(y\)\^\{1/T\}|exp\([^)]*/\s*T)")


def geometric_band_written_C(text: str) -> list[str]:
    """The geometric gate's band is [1/g, g]; C is a threshold on a ratio (chapter 4's g)."""
    return [f.strip()[:120] for f in maths(_prose(text)) + _pseudocode(text) if _GEO_C.search(f)]


DETECTORS = [geometric_band_written_C, reward_written_r, r_not_a_ratio, two_epsilon_glyphs, epsilon_as_guard, c_as_a_constant,
             k_beside_the_kl_statistics, L_not_the_smoothness, hybrid_written_H, N_as_group_size,
             G_as_a_return]


@pytest.mark.parametrize("detector", DETECTORS, ids=[d.__name__ for d in DETECTORS])
@pytest.mark.parametrize("page", PAGES, ids=[f"{p.parent.name}/{p.stem}" for p in PAGES])
def test_the_body_text_keeps_one_meaning_per_symbol(page, detector):
    found = detector(page.read_text(encoding="utf-8"))
    assert not found, f"{page.relative_to(ROOT)}: {detector.__doc__}\n" + "\n".join(map(repr, found))


# (detector, a page that clashes, a page that does not)
EXAMPLES = [
    (geometric_band_written_C, "the mask $\\rho^{1/T}\\in[1/C,C]$", "the mask $\\rho^{1/T}\\in[1/g,g]$, a ratio in $[1/C,C]$"),
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
    (G_as_a_return, "```text\n    G[i, t] = reverse cumsum_t (R[i, t])\n```", "```text\n    Ret[i, t] = reverse cumsum_t (R[i, t])\n```"),
    (G_as_a_return, "$B_t=\\sum_iG_{it}W_t/\\sum_iW_t$", "$B_t=\\sum_i\\mathrm{Ret}_{it}W_t/\\sum_iW_t$"),
    (N_as_group_size, "```text\nfor each group of N completions of one prompt:\n```", "```text\nfor each group of G completions:\n```"),
    (epsilon_as_guard, "```text\nB = x / (W + eps)\n```", "```text\nB = x / (W + ν)\n```"),
    (r_not_a_ratio, "```text\n    r = logp_pi - logp_mu\n```", "```text\n    log_rho = logp_pi - logp_mu\n```"),
]


@pytest.mark.parametrize("detector,bad,good", EXAMPLES, ids=[d.__name__ for d, _, _ in EXAMPLES])
def test_each_detector_flags_a_clash_and_passes_the_book_s_meaning(detector, bad, good):
    assert detector(bad), f"{detector.__name__} missed {bad!r}"
    assert not detector(good), f"{detector.__name__} flagged {good!r}: {detector(good)}"


# --- Every symbol of every page, listed with a meaning that holds on that page (issue 54, item 3) ---
# book/notation.md has two kinds of tables.  A table whose last column is "Introduced" gives a symbol
# its book-wide meaning.  A table whose last column is "Scope" gives a symbol a meaning on the pages
# it names only (a chapter's lab shares the chapter's scope, its name after "labNN_"/"lab_"); a scope
# may name a section in parentheses ("{doc}`ch10_information_bandwidth` (LoRA section)"), and a page
# may give one letter two local meanings only in distinct named sections.  Every base symbol of a
# page's maths (prose and the ```text pseudocode blocks) must have a book-wide meaning or a local one
# scoped to that page, and every local row must be used on a page of its scope.

_GREEK = {"α": "alpha", "β": "beta", "γ": "gamma", "δ": "delta", "ε": "varepsilon", "ϵ": "epsilon",
          "ζ": "zeta", "η": "eta", "θ": "theta", "κ": "kappa", "λ": "lambda", "μ": "mu", "ν": "nu",
          "ξ": "xi", "π": "pi", "ρ": "rho", "σ": "sigma", "τ": "tau", "φ": "phi", "χ": "chi",
          "ψ": "psi", "ω": "omega", "Γ": "Gamma", "Δ": "Delta", "Θ": "Theta", "Λ": "Lambda",
          "Σ": "Sigma", "Φ": "Phi", "Ψ": "Psi", "Ω": "Omega"}
_WORDS = {"alpha", "beta", "gamma", "delta", "eps", "epsilon", "zeta", "eta", "theta", "kappa",
          "lambda", "mu", "nu", "xi", "pi", "rho", "sigma", "tau", "phi", "chi", "psi", "omega"}


def pseudocode_symbols(block: str) -> set[str]:
    """The base symbols of a ```text block: Greek letters (as glyphs or spelled), and single letters
    standing alone (x, N, X_t; not k3 or logp_mu).  Comments (# ...) are left out."""
    found = set()
    for line in block.splitlines():
        line = re.sub(r"#.*", "", line)
        line = re.sub(r"\"[^\"]*\"|'[^']*'|`[^`]*`", " ", line)
        for ch in line:
            if ch in _GREEK:
                found.add("\\" + _GREEK[ch])
        for w in re.findall(r"(?<![A-Za-z0-9_])([A-Za-z]+)(?![A-Za-z0-9]|_[A-Za-z]{2})", line):
            if w in _WORDS:
                found.add("\\" + {"eps": "varepsilon", "epsilon": "varepsilon"}.get(w, w))
            elif len(w) == 1:
                found.add(w)
    return found


_SCOPE_ROW = re.compile(r"^\|(.+)\|(.+)\|(.+)\|\s*$")


def _tables(text: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(kind, rows) per table of notation.md; kind is the header's last column."""
    out, rows, kind = [], None, None
    for line in text.splitlines() + [""]:
        m = _SCOPE_ROW.match(line)
        if m and rows is None and m.group(1).strip() == "Symbol":
            kind, rows = m.group(3).strip(), []
        elif m and rows is not None:
            if not set(m.group(1).strip()) <= set("-: "):
                rows.append(tuple(g.strip() for g in m.groups()))
        elif rows is not None:
            out.append((kind, rows))
            rows = None
    return out


def _docs(cell: str) -> list[tuple[str, str]]:
    """(page, section) for each {doc} of a Scope cell; section is the parenthesis after it, or ''."""
    return [(d, sec) for d, sec in re.findall(r"\{doc\}`([^`]+)`\s*(\([^)]*\))?", cell)]


TABLES = _tables(NOTATION.read_text(encoding="utf-8"))
GLOBAL = set().union(*(symbols(f) for kind, rows in TABLES if kind == "Introduced"
                       for sym, _, _ in rows for f in maths(sym)))
def head(formula: str) -> set[str]:
    """The symbol a notation item names: its first base symbol, sub- and superscripts and the
    arguments after it left out ($\\mathcal K(h)$ names \\mathcal K, $h_{(K)}$ names h)."""
    f = re.sub(r"\\(?:text|mathrm|operatorname)\s*\{[^{}]*\}", " ", formula)
    for m in re.finditer(r"\\mathcal\s*\{?\s*([A-Za-z])|\\([A-Za-z]+)|(?<![A-Za-z])([A-Za-z])(?![A-Za-z])", f):
        if m.group(1):
            return {f"\\mathcal{{{m.group(1)}}}"}
        if m.group(2) and f"\\{m.group(2)}" not in OPERATORS:
            return {f"\\{m.group(2)}"}
        if m.group(3):
            return {m.group(3)}
    return set()


_BARE = re.compile(r"\\?[A-Za-z]+|\\mathcal\s*\{?\s*[A-Za-z]\s*\}?")
LOCAL = [(sym, meaning, page, sec, set().union(*(head(f) for f in maths(sym))),
          set().union(*(head(f) for f in maths(sym) if _BARE.fullmatch(f.strip()))))
         for kind, rows in TABLES if kind == "Scope" for sym, meaning, cell in rows
         for page, sec in _docs(cell)]


def _scope_of(page: Path) -> str:
    """The notation scope of a page: a chapter is itself, a lab its chapter (by the name's tail)."""
    if page.parent.name != "labs":
        return page.stem
    tail = re.sub(r"^lab(?:\d+)?_", "", page.stem)
    chapters = [c.stem for c in CHAPTERS if re.sub(r"^ch(?:\d+)?_", "", c.stem) == tail]
    return chapters[0] if chapters else page.stem


def page_symbols(text: str) -> set[str]:
    return set().union(set(), *(symbols(f) for f in maths(_prose(text))),
                       *(pseudocode_symbols(b) for b in _pseudocode(text)))


def unlisted_or_clashing(page: Path) -> list[str]:
    scope = _scope_of(page)
    problems = []
    for sym in sorted(page_symbols(page.read_text(encoding="utf-8"))):
        local = [(s, sec) for s, _, p, sec, base, _ in LOCAL if p == scope and sym in base]
        bare = [(s, sec) for s, _, p, sec, _, b in LOCAL if p == scope and sym in b]
        if len(bare) > 1 and (not all(sec for _, sec in bare) or len({sec for _, sec in bare}) < len(bare)):
            problems.append(f"{sym}: {len(bare)} local meanings on {scope} ({[s for s, _ in bare]})")
        if not local and sym not in GLOBAL:
            problems.append(f"{sym}: no book-wide meaning and no row scoped to {scope}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[f"{p.parent.name}/{p.stem}" for p in PAGES])
def test_every_symbol_of_a_page_has_one_meaning_listed_for_it(page):
    found = unlisted_or_clashing(page)
    assert not found, f"{page.relative_to(ROOT)} (scope {_scope_of(page)}):\n" + "\n".join(found)


def test_every_local_row_names_real_pages_and_is_used_there():
    stems = {p.stem for p in PAGES}
    by_scope: dict[str, set[str]] = {}
    for p in PAGES:
        by_scope.setdefault(_scope_of(p), set()).update(page_symbols(p.read_text(encoding="utf-8")))
    assert LOCAL and GLOBAL
    for sym, _, page, _, base, _ in LOCAL:
        assert page in stems, f"notation.md scopes {sym} to {page}, which is not a page"
        assert base & by_scope.get(page, set()), f"notation.md scopes {sym} to {page}, which never uses it"


def test_the_scoped_reading_flags_what_it_should():
    assert pseudocode_symbols("r = logp_pi - logp_mu   # (B, T)\nG[i, t] = x~_t + eps") == {
        "r", "G", "i", "t", "x", r"\varepsilon"}
    assert pseudocode_symbols("ρ̄_t = min(π_old / μ, C)  # k3") == {r"\rho", r"\pi", r"\mu", "C"}
    assert pseudocode_symbols("for W in (q_proj, o_proj): C_low <= w") == {"W", "w"}
    assert _scope_of(ROOT / "labs" / "lab08_topk_routing.md") == "ch08_topk_routing"
    assert _scope_of(ROOT / "labs" / "lab_when_speed_kills.md") == "ch_when_speed_kills"
    assert head(r"\mathcal K(h)") == {r"\mathcal{K}"} and head(r"h_{(K)}") == {"h"}
    assert head(r"\hat\varepsilon_s") == {r"\varepsilon"} and head(r"\mathrm{Ret}_{it}") == set()
    assert symbols(r"O(T^2)+o(\sigma)+\Theta(d\log T)") == {"T", r"\sigma", "d"}
    assert _docs("{doc}`ch10_information_bandwidth` (LoRA section), {doc}`ch11_ensembles`") == [
        ("ch10_information_bandwidth", "(LoRA section)"), ("ch11_ensembles", "")]


# --- No control character inside maths (issue 54, item 4) ------------------------------------------
# A "\t" written in Python without an r-prefix becomes a TAB: "$5\times$" rendered as "5 imes".

ALL_PAGES = sorted((ROOT / "book").glob("*.md")) + sorted((ROOT / "labs").glob("*.md"))


def control_characters_in_maths(text: str) -> list[str]:
    """Maths ($...$, $$...$$, {math} roles and blocks) holding a control character other than a newline."""
    formulas = maths(text) + re.findall(r"\{math\}`([^`]*)`", text)
    formulas += re.findall(r"```\{math\}\n(.*?)```", text, flags=re.S)
    return [repr(f.strip()[:80]) for f in formulas if re.search(r"[\x00-\x09\x0b-\x1f\x7f]", f)]


@pytest.mark.parametrize("page", ALL_PAGES, ids=[f"{p.parent.name}/{p.stem}" for p in ALL_PAGES])
def test_no_control_character_inside_maths(page):
    found = control_characters_in_maths(page.read_text(encoding="utf-8"))
    assert not found, f"{page.relative_to(ROOT)}: a control character (a TAB from '\\t'?) in " + ", ".join(found)


def test_the_control_character_check_flags_a_tab():
    assert control_characters_in_maths("$5\times0.004$ and {math}`a\x07b`")
    assert not control_characters_in_maths("$5\\times0.004$ and\n$$x\n=y$$")
