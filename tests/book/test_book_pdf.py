"""`make pdf` (issue 56): tools/book_pdf.py prints the built HTML as one PDF in headless Chromium,
tools/check_pdf.py checks it.  The whole book's PDF is built and checked by CI's phase "make pdf"
(.ci/run); here a two-page book made of the same parts (the theme's <article>, the vendored MathJax,
links between pages, a part caption) goes through both tools in seconds, and check_pdf is shown
refusing a PDF printed before MathJax ran and one that lost a chapter.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import book_pdf  # noqa: E402
import check_pdf  # noqa: E402

MATHJAX = REPO / "_vendor" / "mathjax"
HEAD = """<!DOCTYPE html><html><head><meta charset="utf-8">
<link rel="stylesheet" type="text/css" href="../_static/pygments.css" />
<script>window.MathJax = {"options": {"processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"}}</script>
<script defer="defer" src="../_static/mathjax/tex-mml-chtml.js"></script>
</head><body><nav>the theme's sidebar</nav><main><article class="bd-article">"""
PAGES = {
    "book/ch_a": ("Chapter A: an estimator's bias", """
<section class="tex2jax_ignore mathjax_ignore" id="chapter-a"><h1>Chapter A: an estimator's bias<a class="headerlink" href="#chapter-a">#</a></h1>
<p>The ratio <span class="math notranslate nohighlight">\\(\\frac{\\pi(y)}{\\mu(y)}\\)</span> weighs each sample,
and its mean is one:</p>
<div class="math notranslate nohighlight">\\[\\sum_y \\mu(y)\\,\\frac{\\pi(y)}{\\mu(y)} = 1.\\]</div>
<p>The lab computes it: <a class="reference internal" href="../labs/lab_a.html#the-check">the check</a>.</p>
<img alt="a figure" src="../_images/fig.png" /></section>"""),
    "labs/lab_a": ("Lab A: the estimator, computed", """
<section id="lab-a"><h1>Lab A: the estimator, computed</h1>
<section id="the-check"><h2>The check</h2><p>Back to <a href="../book/ch_a.html">the chapter</a>;
the variance is <span class="math notranslate nohighlight">\\(\\chi^2(\\pi\\,\\|\\,\\mu)\\)</span>.</p>
<script type="application/vnd.jupyter.widget-view+json">{"model_id": "x"}</script>
<div class="highlight"><pre>ax.set_ylabel(r"share of $\\sum|\\log\\pi-\\log\\mu|$")</pre></div></section></section>"""),
}
TOC = "format: jb-book\nroot: book/ch_a\nparts:\n  - caption: Part one\n    chapters:\n      - file: labs/lab_a\n"
# The code line the lab shows: TeX in code is the code's own text, not maths left untypeset.
SOURCES = {"book/ch_a": "# Chapter A: an estimator's bias\n",
           "labs/lab_a": '# Lab A: the estimator, computed\n\n```{code-cell}\nax.set_ylabel(r"share of $\\sum|\\log\\pi-\\log\\mu|$")\n```\n'}
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201a5f5b1ad0000000049454e44ae426082")


@pytest.fixture
def tools_ready(chromium, monkeypatch):
    if not (MATHJAX / "tex-mml-chtml.js").is_file() or not shutil.which("pdftotext"):
        reason = "needs _vendor/mathjax (make setup) and pdftotext (poppler-utils)"
        if os.environ.get("RL_LAB_REQUIRE_BOOK") == "1":
            pytest.fail(reason + " (RL_LAB_REQUIRE_BOOK=1)")
        pytest.skip(reason)
    monkeypatch.setenv("CHROMIUM", chromium)
    return chromium


@pytest.fixture
def small_book(tmp_path):
    html = tmp_path / "_build" / "html"
    (html / "_static").mkdir(parents=True)
    (html / "_images").mkdir()
    (html / "_images" / "fig.png").write_bytes(PNG)
    (html / "_static" / "pygments.css").write_text("pre { color: #333; }")
    (html / "_static" / "mathjax").symlink_to(MATHJAX, target_is_directory=True)
    for page, (_, body) in PAGES.items():
        (html / page).parent.mkdir(parents=True, exist_ok=True)
        (html / f"{page}.html").write_text(HEAD + body + "</article></main></body></html>")
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{page}.md").write_text(SOURCES[page])
    (tmp_path / "_toc.yml").write_text(TOC)
    return tmp_path


def test_the_pdf_has_typeset_maths_contents_with_page_numbers_and_every_page(tools_ready, small_book):
    out = small_book / "_build" / "pdf" / "book.pdf"
    assert book_pdf.main(["--html", str(small_book / "_build" / "html"), "--out", str(out),
                          "--toc", str(small_book / "_toc.yml")]) == 0
    assert check_pdf.check(out, min_pages=4, toc_file=small_book / "_toc.yml") == []
    doc = out.with_suffix(".html").read_text()
    assert 'href="#labs-lab-a--the-check"' in doc and 'id="labs-lab-a--the-check"' in doc, \
        "a link to another page points inside the document"
    assert 'href="#page-book-ch-a"' in doc
    assert 'src="../html/_images/fig.png"' in doc, "figures are the built HTML's files"
    assert "the theme's sidebar" not in doc and "widget-view" not in doc
    contents = subprocess.run(["pdftotext", "-layout", "-f", "2", "-l", "2", str(out), "-"],
                              capture_output=True, text=True, check=True).stdout
    assert "Part one" in contents
    line = next(ln for ln in contents.splitlines() if "Lab A" in ln)
    assert line.split()[-1].isdigit(), f"the contents give the page: {line!r}"


def test_check_pdf_refuses_raw_tex_and_a_lost_chapter(tools_ready, small_book, tmp_path):
    """A PDF printed without MathJax: its TeX is still there.  And a _toc.yml page the PDF lacks."""
    page = small_book / "_build" / "raw.html"
    bodies = "".join(f'<section style="break-before: page">{body}</section>' for _, body in PAGES.values())
    page.write_text("<!DOCTYPE html><html><body><h2>Contents</h2>" + bodies + "</body></html>")
    srv, base = book_pdf.serve(small_book / "_build")
    try:
        book_pdf.print_pdf(tools_ready, f"{base}/raw.html", tmp_path / "raw.pdf", 120)
    finally:
        srv.shutdown()
    problems = check_pdf.check(tmp_path / "raw.pdf", min_pages=1, toc_file=small_book / "_toc.yml")
    assert any("raw TeX" in p and "\\frac" in p for p in problems), problems
    assert not any("\\log\\pi" in p for p in problems), "the code's TeX is not counted"
    (small_book / "book" / "ch_b.md").write_text("# Chapter B: not printed\n")
    (small_book / "_toc.yml").write_text(TOC + "      - file: book/ch_b\n")
    problems = check_pdf.check(tmp_path / "raw.pdf", min_pages=50, toc_file=small_book / "_toc.yml")
    assert any("book/ch_b" in p for p in problems) and any("fewer than the floor of 50" in p for p in problems)


def test_a_page_without_mathjax_is_refused(small_book):
    html = small_book / "_build" / "html"
    for page in PAGES:
        f = html / f"{page}.html"
        f.write_text(f.read_text().replace("mathjax/tex-mml-chtml.js", "other.js"))
    with pytest.raises(SystemExit, match="loads no MathJax"):
        book_pdf.Book(html, small_book / "_toc.yml", small_book / "_build" / "pdf").head()


def test_make_pdf_builds_then_checks():
    make = (REPO / "Makefile").read_text()
    recipe = make[make.index("\npdf:"):].split("\n\n")[0]
    assert "$(SETUP_STAMP)" in recipe.splitlines()[1] and "tools/book_pdf.py" in recipe and "tools/check_pdf.py" in recipe
    ci = (REPO / ".ci" / "run").read_text()
    assert ci.index('phase_start "make book"') < ci.index('phase_start "make pdf"') < ci.index('phase_start "make test"')
    assert "poppler-utils" in ci
