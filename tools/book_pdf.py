"""The whole book as one PDF, from the built HTML (`make pdf`; run `make book` first).

    .venv/bin/python tools/book_pdf.py                       # _build/html -> _build/pdf/book.pdf
    .venv/bin/python tools/book_pdf.py --html DIR --out FILE

1. The pages of _toc.yml, in its order, are cut out of the built HTML (each page's article, without
   the theme's navigation) and put one after another into one document, _build/pdf/book.html: a
   title page with the version (rl_lab/__init__.py), a table of contents with the parts, then one
   chapter per page-break.  Links between pages become links inside the document; figures, the
   book's CSS and the vendored MathJax are the built HTML's own files.
2. Headless Chromium prints it (`--print-to-pdf`), offline (only 127.0.0.1 resolves; a local HTTP
   server serves _build/), with page numbers from a CSS @page rule and the headings as the PDF's
   outline.  The document stays invisible until MathJax has typeset every formula, and Chromium's
   virtual time (`--virtual-time-budget`) runs the page's scripts to the end before printing: a PDF
   printed too early is blank, which tools/check_pdf.py refuses, as it refuses raw TeX.
3. Chromium runs twice: the first PDF tells on which page each chapter starts (its text, read
   with pdftotext), the second prints those numbers in the table of contents.

What the HTML shows the PDF shows: the solutions (built with RL_LAB_SOLUTIONS=0, the book leaves
them out, and so does the PDF), the hidden cells (opened), the figures.  Widgets are interactive
only: the PDF says so where one was.  Needs Chromium ($CHROMIUM, else chromium, chromium-browser,
google-chrome on PATH), beautifulsoup4 (installed with Jupyter Book), pdftotext (poppler-utils)
for step 3 (without it the contents have no page numbers).
"""
from __future__ import annotations

import argparse
import functools
import html
import http.server
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]
import check_pdf  # noqa: E402

from rl_lab.book_ext.version import package_version  # noqa: E402

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
VIRTUAL_TIME_MS = 600_000

PRINT_CSS = """
@page { size: A4; margin: 16mm 15mm 18mm 15mm;
        @bottom-center { content: counter(page); font: 9pt sans-serif; color: #555; } }
@page :first { @bottom-center { content: none; } }
html { font-size: 10.5pt; }
body { margin: 0; background: white; }
html.pdf-waiting body { visibility: hidden; }
.pdf-cover { break-after: page; text-align: center; padding-top: 30vh; }
.pdf-cover h1 { font-size: 2.4rem; margin-bottom: 1rem; border: none; }
.pdf-cover p { font-size: 1.1rem; color: #333; margin: .3rem 0; }
.pdf-toc { break-after: page; }
.pdf-toc h2 { margin-top: 0; }
.pdf-toc ol { list-style: none; padding-left: 0; }
.pdf-toc li { display: flex; gap: .5rem; margin: .15rem 0; }
.pdf-toc li a { color: inherit; text-decoration: none; }
.pdf-toc li .pdf-dots { flex: 1; border-bottom: 1px dotted #999; margin-bottom: .35em; }
.pdf-toc li.pdf-part { font-weight: bold; margin-top: .8rem; }
.pdf-part-title { break-before: page; padding-top: 35vh; text-align: center; font-size: 2rem; }
.pdf-chapter { break-before: page; }
.pdf-part-title + .pdf-chapter { break-before: page; }
a.headerlink, .toggle-button, button, .copybtn, .sd-tab-set > input { display: none !important; }
pre, div.highlight pre { white-space: pre-wrap; word-break: break-word; font-size: 8.5pt; }
div.cell_output pre { max-height: none; overflow: visible; }
img, svg, canvas { max-width: 100%; height: auto; break-inside: avoid; }
table { break-inside: auto; font-size: 9pt; }
.pst-scrollable-table-container, .table-wrapper, div.output, div.cell_output { overflow: visible !important; }
tr, figure, .admonition-title { break-inside: avoid; }
h1, h2, h3, h4 { break-after: avoid; }
mjx-container[display="true"] { overflow: visible !important; }
.pdf-widget-note { font-style: italic; color: #666; }
"""

# Shown until MathJax has typeset the document: the page is printed blank if it never does.
READY_JS = """
document.documentElement.classList.add('pdf-waiting');
window.MathJax = Object.assign(window.MathJax || {}, {startup: {pageReady() {
  return MathJax.startup.defaultPageReady().then(() => {
    document.documentElement.classList.remove('pdf-waiting');
    document.documentElement.dataset.mathjax = 'done';
  });
}}});
"""


def find_chromium() -> str | None:
    names = [os.environ["CHROMIUM"]] if os.environ.get("CHROMIUM") else []
    for exe in (shutil.which(n) for n in [*names, *BROWSERS]):
        if exe:
            return exe
    return None


def toc_entries(toc_file: Path) -> list[tuple[str | None, str]]:
    """[(part caption or None, page file without extension)] in the book's order."""
    toc = yaml.safe_load(toc_file.read_text(encoding="utf-8"))
    out: list[tuple[str | None, str]] = [(None, toc["root"])]

    def walk(items, caption):
        for item in items or []:
            if "file" in item:
                out.append((caption, item["file"]))
            walk(item.get("sections"), caption)
            walk(item.get("chapters"), caption)

    for part in toc.get("parts", []):
        walk(part.get("chapters"), part.get("caption"))
    walk(toc.get("chapters"), None)
    return out


def slug(page: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", page).strip("-")


class Book:
    """The pages cut out of the built HTML and joined into one document."""

    def __init__(self, html_dir: Path, toc_file: Path, out_dir: Path):
        self.html_dir, self.out_dir = html_dir.resolve(), out_dir.resolve()
        self.entries = toc_entries(toc_file)
        self.pages = {page: slug(page) for _, page in self.entries}
        # URL of the built HTML as seen from the printed document (both under one served folder)
        self.prefix = posixpath.relpath(self.html_dir.as_posix(), self.out_dir.as_posix()) + "/"
        self.titles: dict[str, str] = {}

    def _target(self, page: str, url: str) -> str | None:
        """A link's new href: inside the document for a book page, the built file otherwise."""
        parts = urlsplit(url)
        if parts.scheme or parts.netloc or url.startswith(("mailto:", "data:", "javascript:")):
            return url
        if not parts.path:       # "#frag" within the page
            return f"#{self.pages[page]}--{parts.fragment}" if parts.fragment else None
        here = posixpath.dirname(page)
        path = posixpath.normpath(posixpath.join(here, parts.path))
        stem = path[:-5] if path.endswith(".html") else None
        if stem in self.pages:
            return f"#{self.pages[stem]}--{parts.fragment}" if parts.fragment else f"#page-{self.pages[stem]}"
        if path.startswith("..") or not (self.html_dir / path).exists():
            return None
        return self.prefix + path + (f"#{parts.fragment}" if parts.fragment else "")

    def article(self, page: str) -> str:
        src = self.html_dir / f"{page}.html"
        if not src.is_file():
            raise SystemExit(f"book_pdf: {src} is missing: run `make book` first")
        soup = BeautifulSoup(src.read_text(encoding="utf-8"), "html.parser")
        art = soup.find("article", class_="bd-article") or soup.find("main")
        if art is None:
            raise SystemExit(f"book_pdf: no <article class='bd-article'> in {src}")
        h1 = art.find("h1")
        self.titles[page] = h1.get_text(" ", strip=True).rstrip("#").strip() if h1 else page
        for s in art.find_all("script"):
            if "widget-view" in (s.get("type") or ""):
                note = soup.new_tag("p", attrs={"class": "pdf-widget-note"})
                note.string = "(An interactive widget here: open the page in the HTML book or the lab.)"
                s.replace_with(note)
            else:
                s.decompose()
        for tag in art.find_all(True):
            if tag.has_attr("id"):
                tag["id"] = f"{self.pages[page]}--{tag['id']}"
            if tag.name == "details":
                tag["open"] = ""
            for attr in ("href", "src"):
                if tag.has_attr(attr):
                    new = self._target(page, tag[attr])
                    if new is None:
                        del tag[attr]
                    else:
                        tag[attr] = new
            if tag.has_attr("srcset"):
                del tag["srcset"]
        return art.decode_contents()

    def head(self) -> str:
        """The first page's stylesheets and MathJax, pointed at the built HTML."""
        page = self.entries[0][1]
        soup = BeautifulSoup((self.html_dir / f"{page}.html").read_text(encoding="utf-8"), "html.parser")
        out = []
        for link in soup.head.find_all("link", rel="stylesheet"):
            out.append(f'<link rel="stylesheet" href="{html.escape(self._target(page, link["href"]) or "")}">')
        for s in soup.head.find_all("script"):
            text = s.string or ""
            if text.strip().startswith("window.MathJax"):
                out.append(f"<script>{text}</script>")
            elif "mathjax" in (s.get("src") or "").lower():
                out.append(f'<script defer src="{html.escape(self._target(page, s["src"]) or "")}"></script>')
        if not any("mathjax" in line.lower() and "src=" in line for line in out):
            raise SystemExit(f"book_pdf: {page}.html loads no MathJax: is this a build of this book?")
        out.append(f"<script>{READY_JS}</script>")
        out.append(f"<style>{PRINT_CSS}</style>")
        return "\n".join(out)

    def document(self, title: str, version: str, page_numbers: dict[str, int] | None = None) -> str:
        bodies, toc, last_part = [], [], None
        for part, page in self.entries:
            body = self.article(page)
            if part != last_part and part:
                bodies.append(f'<div class="pdf-part-title" id="part-{slug(part)}">{html.escape(part)}</div>')
                toc.append(f'<li class="pdf-part"><a href="#part-{slug(part)}">{html.escape(part)}</a></li>')
            last_part = part
            bodies.append(f'<section class="pdf-chapter" id="page-{self.pages[page]}">{body}</section>')
            n = (page_numbers or {}).get(page)
            toc.append(f'<li><a href="#page-{self.pages[page]}">{html.escape(self.titles[page])}</a>'
                       f'<span class="pdf-dots"></span><span>{n if n else ""}</span></li>')
        date = time.strftime("%Y-%m-%d")
        return (f'<!DOCTYPE html>\n<html lang="en" data-theme="light"><head><meta charset="utf-8">'
                f"<title>{html.escape(title)}</title>\n{self.head()}\n</head>\n<body>\n"
                f'<div class="pdf-cover"><h1>{html.escape(title)}</h1>'
                f"<p>Version {html.escape(version)}</p><p>The rl_lab authors</p>"
                f"<p>Printed from the HTML book on {date}</p></div>\n"
                f'<nav class="pdf-toc"><h2>Contents</h2><ol>{"".join(toc)}</ol></nav>\n'
                f'<main class="bd-article">{"".join(bodies)}</main>\n</body></html>\n')


class _Quiet(http.server.SimpleHTTPRequestHandler):
    missing: list[str] = []

    def log_message(self, format, *args):  # noqa: A002
        pass

    def send_error(self, code, message=None, explain=None):
        _Quiet.missing.append(f"{code} {self.path}")
        super().send_error(code, message, explain)


def serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_Quiet, directory=str(root))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def print_pdf(chromium: str, url: str, out: Path, timeout_s: int) -> None:
    with tempfile.TemporaryDirectory(prefix="rl_lab_pdf_") as profile:
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--disable-extensions", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run", "--no-default-browser-check", "--mute-audio",
               f"--user-data-dir={profile}",
               "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",   # offline
               f"--virtual-time-budget={VIRTUAL_TIME_MS}", "--run-all-compositor-stages-before-draw",
               "--no-pdf-header-footer", "--print-to-pdf-no-header", "--generate-pdf-document-outline",
               f"--print-to-pdf={out}", url]
        out.unlink(missing_ok=True)
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        print(f"book_pdf: Chromium printed {out.name} in {time.time() - t0:.0f} s", flush=True)
    if r.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
        raise SystemExit(f"book_pdf: Chromium did not print {url} (rc={r.returncode}):\n{r.stderr[-3000:]}")


def chapter_pages(pdf: Path, titles: dict[str, str]) -> dict[str, int]:
    """The PDF page on which each chapter begins, after the title page and the contents."""
    if not shutil.which("pdftotext"):
        return {}
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout
    return check_pdf.chapter_pages(text.split("\f"), titles, first=2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--html", type=Path, default=ROOT / "_build" / "html", help="the built book")
    ap.add_argument("--out", type=Path, default=ROOT / "_build" / "pdf" / "book.pdf")
    ap.add_argument("--toc", type=Path, default=ROOT / "_toc.yml")
    ap.add_argument("--timeout", type=int, default=900, help="seconds for each Chromium run")
    ap.add_argument("--one-pass", action="store_true", help="no page numbers in the contents (one Chromium run)")
    args = ap.parse_args(argv)
    t0 = time.time()
    chromium = find_chromium()
    if not chromium:
        print("book_pdf: no Chromium/Chrome found (apt-get install chromium, or set $CHROMIUM)", file=sys.stderr)
        return 1
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    html_dir = args.html.resolve()
    common = Path(os.path.commonpath([html_dir, out.parent]))
    book = Book(html_dir, args.toc, out.parent)
    title = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8")).get("title", "The book")
    version = package_version()
    doc = out.with_suffix(".html")
    doc.write_text(book.document(title, version), encoding="utf-8")
    srv, base = serve(common)
    try:
        url = f"{base}/{doc.relative_to(common).as_posix()}"
        print(f"book_pdf: {len(book.entries)} pages of {html_dir} -> {doc}; printing with {chromium}", flush=True)
        print_pdf(chromium, url, out, args.timeout)
        numbers = {} if args.one_pass else chapter_pages(out, book.titles)
        if numbers:
            doc.write_text(book.document(title, version, numbers), encoding="utf-8")
            print_pdf(chromium, url, out, args.timeout)
            again = chapter_pages(out, book.titles)
            moved = {p: (n, again.get(p)) for p, n in numbers.items() if again.get(p) != n}
            if moved:
                print(f"book_pdf: WARNING: chapters moved between the two prints: {moved}", file=sys.stderr)
        elif not args.one_pass:
            print("book_pdf: no pdftotext (poppler-utils): the contents have no page numbers", file=sys.stderr)
    finally:
        srv.shutdown()
    missing = sorted(m for m in set(_Quiet.missing) if not m.endswith("/favicon.ico"))
    if missing:
        print(f"book_pdf: WARNING: {len(missing)} files the document asked for are missing: {missing[:10]}",
              file=sys.stderr)
    print(f"book_pdf: {out} ({out.stat().st_size / 2**20:.1f} MiB) in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
