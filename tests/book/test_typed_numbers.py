"""No typed measured number in the reviewed chapters (issue 54, "Done when").

A number in a chapter's prose is either glued from a cell or a result file ({glue:text}, {glue:md}),
part of a definition or a derivation (inside maths, $...$), a quotation (a "..." span or a > block),
a name (chapter 4, Exercise 2, Top-2, bf16, k3, v0.9.1, 2025) or an entry of the explicit allow-list
tests/book/typed_numbers_allowed.txt, where each entry is one reviewed number on one line of a page.
Anything else fails: a number typed into the prose that no cell computes.  Editing a line that holds
an allowed number invalidates its entry (the line is part of the key), so a changed number is
reviewed again: add it to the list only if it is a setting, a count that defines the experiment, or
arithmetic on the page, never a measurement (glue those, or quote the range the lab asserts).
`python tests/book/test_typed_numbers.py --write` rewrites the list from the pages as they are.
"""
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["ch01_rl_on_one_page", "ch02_sga_lens", "ch03_token_vs_sequence", "ch04_masking_trust_regions",
         "ch06_dynamic_vocabulary_pruning", "ch07_lr_scheduling", "ch08_topk_routing",
         "ch09_optimal_token_baseline", "ch10_information_bandwidth", "ch11_ensembles",
         "ch_when_speed_kills", "ch_mismatch_sources", "primer", "stats_primer", "workshop", "intro",
         "book_in_45_minutes", "research_log"]
ALLOWED = Path(__file__).with_name("typed_numbers_allowed.txt")
_ADMONITION = re.compile(r"\{(?:admonition|note|tip|warning|important|caution|dropdown|hint|seealso|topic)\}")


def prose(text: str) -> str:
    """The page's prose: front matter, code and maths blocks, maths, code spans, roles, links, URLs,
    directive options, quotations left out; admonitions (dropdowns) are prose and stay."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    out, fence, admonitions = [], None, []
    for line in text.splitlines():
        m = re.match(r"^\s*(`{3,}|:{3,})(.*)$", line)
        if fence is None and m:
            if admonitions and line.strip() == admonitions[-1]:
                admonitions.pop()                     # the closing fence of an admonition
                out.append("")
                continue
            if _ADMONITION.search(m.group(2)):
                admonitions.append(m.group(1))
                out.append("")
                continue                              # an admonition's body is prose
            fence = m.group(1)
            continue
        if fence is not None:
            if line.strip() == fence:
                fence = None
            continue
        out.append(line)
    t = "\n".join(out)
    t = re.sub(r"\$\$.*?\$\$", " ", t, flags=re.S)
    t = re.sub(r"\$[^$\n]+\$", " ", t)
    t = re.sub(r"`[^`\n]*`", " ", t)
    t = re.sub(r"\{[a-z:]+\}", " ", t)
    t = re.sub(r"\]\([^)]*\)", "]", t)
    t = re.sub(r"https?://\S+", " ", t)
    t = re.sub(r"^\s*:[a-z-]+:.*$", "", t, flags=re.M)
    t = re.sub(r"^\s*\(.*\)=\s*$", "", t, flags=re.M)
    t = re.sub(r"^\s*>.*$", "", t, flags=re.M)
    return re.sub(r"\"[^\"\n]*\"|“[^”\n]*”", " ", t)


_NAMES = re.compile(r"""(?ix)
  \b(?:chapters?|sections?|exercises?|labs?|parts?|figures?|tables?|theorems?|lemmas?|eqs?|appendix
     |propositions?|corollary|definition|items?|issues?|PR\s*\#|\#)\s*\d+(?:\.\d+)*(?:\s*(?:,|and|or|to|–|-)\s*\d+)*
  |\b(?:1[89]|20)\d\d[a-z]?\b                                  # years
  |\b[A-Za-z]+[-_]?\d+[A-Za-z0-9.]*\b|\b\d+[A-Za-z]+\w*\b       # Top-2, bf16, k3, L20, 8B, 3rd
  |\b\d+[-–][A-Za-z]\w*                                          # 2-layer, 4-bit
  |\bv?\d+\.\d+\.\d+\b                                           # versions
""")


def numbers(page: str) -> list[tuple[str, str]]:
    """(number, the prose line it sits on) for every typed number of a page."""
    found = []
    for line in prose((ROOT / "book" / f"{page}.md").read_text(encoding="utf-8")).splitlines():
        for m in re.finditer(r"(?<![\w.])\d+(?:[.,]\d+)*(?:\s*%)?", _NAMES.sub(" ", line)):
            found.append((m.group(0), " ".join(line.split())[:160]))
    return found


def _key(page: str, number: str, line: str) -> str:
    return f"{page}\t{number}\t{line}"


def allowed() -> set[str]:
    return {ln for ln in ALLOWED.read_text(encoding="utf-8").splitlines() if ln and not ln.startswith("#")}


@pytest.mark.parametrize("page", PAGES)
def test_no_typed_number_outside_glue_maths_quotations_and_the_allow_list(page):
    ok = allowed()
    typed = [f"{n!r} in: {line}" for n, line in numbers(page) if _key(page, n, line) not in ok]
    assert not typed, (f"book/{page}.md types numbers that no cell computes (glue them, quote an "
                       f"asserted range, or review and allow them in {ALLOWED.name}):\n" + "\n".join(typed))


def test_the_reader_keeps_what_it_should():
    text = ('Lab 8 measures 0.076 and {glue:text}`x` at $\\epsilon=10^{-6}$ with `k=2`, "a 0.9 quote",\n'
            "```{code-cell} ipython3\nx = 3\n```\n```{admonition} Numbers\n:class: dropdown\n"
            "a dropdown says 152\n```\nTop-2 in bf16, chapter 4, v0.9.1, 2025, and 7 after it.\n"
            "````{note}\n```python\ny = 5\n```\nthen 6\n````\nand 8.\n")
    t = _NAMES.sub(" ", prose(text))
    assert re.findall(r"(?<![\w.])\d+(?:[.,]\d+)*", t) == ["0.076", "152", "7", "6", "8"]


if __name__ == "__main__" and "--write" in sys.argv:
    header = [ln for ln in ALLOWED.read_text(encoding="utf-8").splitlines() if ln.startswith("#")] \
        if ALLOWED.exists() else []
    keys = sorted({_key(p, n, line) for p in PAGES for n, line in numbers(p)})
    ALLOWED.write_text("\n".join(header + keys) + "\n", encoding="utf-8")
    print(f"{len(keys)} entries written to {ALLOWED}")
