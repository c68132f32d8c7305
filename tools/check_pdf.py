"""Check the book's PDF (`make pdf` runs it after tools/book_pdf.py; CI's phase "make pdf").

    python3 tools/check_pdf.py [_build/pdf/book.pdf] [--min-pages N]

Fails (exit 1, saying what) when
  * the PDF has fewer pages than the floor (a print cut short, or a book that lost its chapters);
  * its text holds raw MathJax source ($$, \\( \\), \\[ \\], \\frac, \\begin{...}, ...): a formula that
    was printed before MathJax typeset it (a line of a fenced code block of the sources, such as a
    plot label r"$\\log\\pi$", is code and may hold TeX);
  * a page of _toc.yml is missing: for each, in _toc.yml's order, a PDF page must begin with its
    title (its first `# ` heading; book_pdf.py starts every one on a new page).
The text comes from pdftotext (poppler-utils), else from pypdf if it is installed.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
# 356 pages on 2026-12-05 (A4, smoke preset); a print that stops early or loses a part falls below.
MIN_PAGES = 250
# TeX that MathJax would have turned into maths: seen in the text, a formula was not typeset.
RAW_TEX = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\(?:frac|sum|mathbb|mathrm|mathcal|left|right|begin\{|end\{|"
                     r"operatorname|sqrt|hat|tilde|log|exp|text|cdot|le|ge|pi|theta|mu)(?![A-Za-z])")


def pdf_text(pdf: Path) -> tuple[str, int]:
    """(text, pages)."""
    if shutil.which("pdftotext") and shutil.which("pdfinfo"):
        info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
        pages = int(re.search(r"^Pages:\s+(\d+)", info, re.M).group(1))
        text = subprocess.run(["pdftotext", "-enc", "UTF-8", str(pdf), "-"], capture_output=True, text=True,
                              check=True).stdout
        return text, pages
    try:
        from pypdf import PdfReader
    except ImportError:
        sys.exit("check_pdf: needs pdftotext (apt-get install poppler-utils) or pypdf")
    reader = PdfReader(str(pdf))
    return "\f".join(p.extract_text() or "" for p in reader.pages), len(reader.pages)


def toc_titles(toc_file: Path = ROOT / "_toc.yml") -> dict[str, str]:
    """{page: the title of its source (first `# ` heading, or its front matter's title)}."""
    toc = yaml.safe_load(toc_file.read_text(encoding="utf-8"))
    pages = [toc["root"]]

    def walk(items):
        for item in items or []:
            if "file" in item:
                pages.append(item["file"])
            walk(item.get("sections"))
            walk(item.get("chapters"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    titles = {}
    for page in pages:
        src = next((toc_file.parent / f"{page}{ext}" for ext in (".md", ".ipynb") if (toc_file.parent / f"{page}{ext}").exists()),
                   None)
        if src is None:
            sys.exit(f"check_pdf: _toc.yml names {page}, which has no .md or .ipynb")
        text = src.read_text(encoding="utf-8")
        m = re.search(r"^# (.+)$", re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S), re.M)
        titles[page] = m.group(1).strip() if m else page
    return titles


def source_code(toc_file: Path = ROOT / "_toc.yml") -> str:
    """Every line inside a fenced block (code cells, code examples) of the pages, whitespace squeezed:
    TeX there is code the book prints as it is (a plot label r"$\\log\\pi$"), not maths."""
    lines = []
    for page in toc_titles(toc_file):
        src = toc_file.parent / f"{page}.md"
        if not src.exists():
            continue
        fence = None
        for line in src.read_text(encoding="utf-8").splitlines():
            m = re.match(r"^\s*(`{3,}|~{3,})", line)
            if fence is None and m:
                fence = m.group(1)
            elif fence is not None and line.strip().startswith(fence) and line.strip() == fence:
                fence = None
            elif fence is not None:
                lines.append(line)
    return re.sub(r"\s+", " ", " \n ".join(lines))


def key(s: str) -> str:
    """Text to compare a source's title with the PDF's: lower case, no Markdown marks or roles,
    the same quotes and dashes, and no whitespace at all (a title may break across lines, after a
    hyphen or not), and no hyphens.  Source maths ends it: typeset glyphs read back differently."""
    s = re.sub(r"\{[a-z:]+\}`([^`<]*)(?:<[^>]*>)?`", r"\1", s)   # {doc}`x` -> x
    s = s.split("$")[0]
    s = re.sub(r"[`*_]", "", s).replace("--", "-")
    s = s.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    s = s.replace("\u2013", "-").replace("\u2014", "-").replace("\u00ad", "")
    return re.sub(r"[\s\-]+", "", s).lower()      # hyphens too: pdftotext joins "multi-|turn" to "multiturn"


def chapter_pages(page_texts: list[str], titles: dict[str, str], first: int = 0) -> dict[str, int]:
    """{page of _toc.yml: the PDF page (1-based) that begins with its title}, searching in order
    from `first`: each chapter starts a page (book_pdf's CSS), so its title is that page's top."""
    found, start = {}, first
    for page, title in titles.items():
        k = key(title)[:40]
        for i in range(start, len(page_texts)):
            if k and key(page_texts[i][:400]).startswith(k):
                found[page] = i + 1
                start = i + 1
                break
    return found


def check(pdf: Path, min_pages: int = MIN_PAGES, toc_file: Path = ROOT / "_toc.yml") -> list[str]:
    text, pages = pdf_text(pdf)
    problems = []
    if pages < min_pages:
        problems.append(f"{pages} pages, fewer than the floor of {min_pages}")
    code = source_code(toc_file)
    raw = []
    for m in RAW_TEX.finditer(text):
        start, end = text.rfind("\n", 0, m.start()) + 1, text.find("\n", m.end())
        line = re.sub(r"\s+", " ", text[start:end if end >= 0 else None]).strip()
        if line not in code:            # TeX in a code block is the code's own text
            raw.append((m.start(), m.group(0)))
    if raw:
        shown = "; ".join(repr(text[max(0, i - 40):i + 40].replace("\n", " ")) for i, _ in raw[:5])
        problems.append(f"{len(raw)} pieces of raw TeX (MathJax had not typeset them): {shown}")
    titles = toc_titles(toc_file)
    page_texts = text.split("\f")
    contents = next((i for i, t in enumerate(page_texts) if key(t[:100]).startswith("contents")), None)
    if contents is None:
        problems.append("no page begins with 'Contents' (the table of contents)")
    starts = chapter_pages(page_texts, titles, first=(contents or 0) + 1)
    for page, title in titles.items():
        if page not in starts:
            problems.append(f"{page}: no page begins with its title {title!r} (in _toc.yml's order)")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pdf", nargs="?", type=Path, default=ROOT / "_build" / "pdf" / "book.pdf")
    ap.add_argument("--min-pages", type=int, default=MIN_PAGES)
    ap.add_argument("--toc", type=Path, default=ROOT / "_toc.yml")
    args = ap.parse_args(argv)
    if not args.pdf.is_file():
        print(f"check_pdf: {args.pdf} does not exist: run `make pdf`", file=sys.stderr)
        return 1
    problems = check(args.pdf, args.min_pages, args.toc)
    for p in problems:
        print(f"check_pdf: FAIL: {p}", file=sys.stderr)
    if problems:
        return 1
    _, pages = pdf_text(args.pdf)
    print(f"check_pdf: {args.pdf}: {pages} pages, every page of {args.toc.name} present, no raw TeX")
    return 0


if __name__ == "__main__":
    sys.exit(main())
