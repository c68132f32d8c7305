"""Check the *built* book in a real browser (headless Chromium), offline.

Run after `make book`:   .venv/bin/python -m pytest -q tests/book/test_book_html.py

For every page listed in _toc.yml (so new chapters and labs are covered automatically) it loads
the page from a local HTTP server with every non-local host made unresolvable, lets the page's
JavaScript run (`--dump-dom --virtual-time-budget`), and checks that

* MathJax typeset every math element (an <mjx-container> in each, no raw `\\(` / `\\[` left,
  no MathJax error nodes);
* pages that embed Jupyter widgets draw them (one rendered view per placeholder; sliders show up
  as `widget-slider`), and only core widget modules are embedded (others would need a CDN);
* every <img> (notebook figures) resolves to an existing, non-empty file (or a non-empty data: URI);
* no <script src>, stylesheet or <img> points at an external host, and no local request 404s.

It also checks that the pruned, vendored MathJax in _vendor/ still typesets TeX that needs
on-demand pieces (autoloaded and \\require'd extensions, the accessibility explorer with speech,
the menu's SVG renderer).

Skips (with the reason) when _build/html or _vendor/ does not exist or no Chromium is found,
except with RL_LAB_REQUIRE_BOOK=1 (CI), where those conditions are failures.
Chromium: $CHROMIUM, else the first of chromium, chromium-browser, google-chrome(-stable) on PATH
(the `chromium` fixture in tests/conftest.py).
Optional: RL_LAB_BOOK_SCREENSHOTS=<dir> also saves a PNG of every page there.
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import re
import subprocess
import tempfile
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
HTML_DIR = REPO / "_build" / "html"
VENDOR_DIR = REPO / "_vendor"
REQUIRE = os.environ.get("RL_LAB_REQUIRE_BOOK", "") == "1"
VIRTUAL_TIME_MS = 15000

# Hosts a <script src> may point at. None today: MathJax, require.js and the widget manager are
# vendored (tools/vendor_assets.sh) and the themes bundle their own JS and fonts.
# External references that remain in the HTML and are known to be harmless (no <script src>):
#   * https://unpkg.com/thebe@0.8.2/lib/index.js - a string inside sphinx-thebe's inline config;
#     only fetched when a Thebe "live code" button is pressed, and launch_buttons.thebe is off.
#   * data-jupyter-widgets-cdn="https://cdn.jsdelivr.net/npm/" on the embed-amd.js tag - only used
#     to fetch *third-party* widget modules; test_page_renders fails if a page embeds one.
#   * the repository link (html.use_repository_button) - a plain <a href>.
ALLOWED_EXTERNAL_SCRIPT_HOSTS: frozenset[str] = frozenset()
CORE_WIDGET_MODULES = {"@jupyter-widgets/base", "@jupyter-widgets/controls", "@jupyter-widgets/output"}
IGNORED_404 = {"/favicon.ico"}


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"{reason} (RL_LAB_REQUIRE_BOOK=1 makes this a failure)")
    pytest.skip(reason)


# --------------------------------------------------------------------------- pages from _toc.yml
def toc_pages() -> list[str]:
    """Docnames (paths without extension, relative to the repo root) of every page in _toc.yml."""
    toc = yaml.safe_load((REPO / "_toc.yml").read_text(encoding="utf-8"))
    found: list[str] = []

    def add(name: str) -> None:
        name = re.sub(r"\.(md|ipynb|rst)$", "", str(name).strip().lstrip("./"))
        if name not in found:
            found.append(name)

    def walk(node) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            if "file" in node:
                add(node["file"])
            if "glob" in node:
                for p in sorted(REPO.glob(str(node["glob"]))):
                    if p.suffix in {".md", ".ipynb", ".rst"}:
                        add(p.relative_to(REPO).with_suffix("").as_posix())
            for key in ("parts", "chapters", "sections", "subtrees", "entries"):
                if key in node:
                    walk(node[key])

    add(toc["root"])
    walk(toc)
    return found


# --------------------------------------------------------------------------- browser + server
def _chromium_args(exe: str, profile: str) -> list[str]:
    return [
        exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-extensions", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--disable-default-apps", "--no-first-run", "--no-default-browser-check",
        "--mute-audio", f"--user-data-dir={profile}",
        # Offline, even on a CI runner with internet: nothing but 127.0.0.1 resolves.
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        f"--virtual-time-budget={VIRTUAL_TIME_MS}",
    ]


def run_chromium(exe: str, url: str, *, screenshot: Path | None = None) -> str:
    with tempfile.TemporaryDirectory(prefix="rl_lab_chromium_") as profile:
        args = _chromium_args(exe, profile)
        if screenshot is not None:
            args += [f"--screenshot={screenshot}", "--window-size=1280,2400", "--hide-scrollbars"]
        else:
            args += ["--dump-dom"]
        r = subprocess.run(args + [url], capture_output=True, text=True, timeout=240)
    if r.returncode != 0 or (screenshot is None and "<html" not in r.stdout):
        raise AssertionError(f"chromium failed on {url} (rc={r.returncode}):\n{r.stderr[-3000:]}")
    return r.stdout


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - keep pytest output clean
        pass

    def log_request(self, code="-", size="-"):
        self.server.requests.append((urlsplit(self.path).path, int(code) if str(code).isdigit() else 0))


class LocalServer:
    """Serve a folder on 127.0.0.1:<free port>, recording (path, status) of every request."""

    def __init__(self, root: Path):
        handler = functools.partial(_Handler, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.requests = []
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{path.lstrip('/')}"

    @property
    def requests(self) -> list[tuple[str, int]]:
        return self.httpd.requests

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# --------------------------------------------------------------------------- DOM summary
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
        "source", "track", "wbr"}


class PageSummary(HTMLParser):
    """What the checks need from a page, static or rendered, gathered in one pass."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.stack: list[dict] = []
        self.math: list[dict] = []          # one per element with class "math"
        self.mjx_containers = 0
        self.mjx_errors: list[str] = []
        self.script_srcs: list[str] = []
        self.stylesheets: list[str] = []
        self.imgs: list[str] = []
        self.iframes: list[str] = []
        self.widget_views = 0               # <script type=...widget-view+json> placeholders
        self.widget_states: list[str] = []  # raw JSON of <script type=...widget-state+json>
        self.widget_roots = 0               # outermost rendered .jupyter-widgets elements
        self.widget_classes: set[str] = set()
        self.widget_errors = 0
        self._script_type: str | None = None
        self._script_buf: list[str] = []
        self.feed(html)
        self.close()

    def _flags(self) -> dict:
        return self.stack[-1] if self.stack else {"math": None, "in_mjx": False, "in_widget": False}

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        classes = set(a.get("class", "").split())
        parent = self._flags()
        entry = {"tag": tag, "math": parent["math"], "in_mjx": parent["in_mjx"],
                 "in_widget": parent["in_widget"]}
        if "math" in classes and tag in {"span", "div"} and parent["math"] is None:
            entry["math"] = {"text": [], "has_mjx": False}
            self.math.append(entry["math"])
        if tag == "mjx-container":
            self.mjx_containers += 1
            entry["in_mjx"] = True
            if entry["math"] is not None:
                entry["math"]["has_mjx"] = True
        if tag == "mjx-merror" or "data-mjx-error" in a:
            self.mjx_errors.append(a.get("data-mjx-error", tag))
        if "jupyter-widgets" in classes:
            if not parent["in_widget"]:
                self.widget_roots += 1
            entry["in_widget"] = True
            self.widget_classes |= {c for c in classes if c.startswith("widget-")}
        if "jupyter-widgets-error-widget" in classes:
            self.widget_errors += 1
        if tag == "script":
            if a.get("src"):
                self.script_srcs.append(a["src"])
            self._script_type = a.get("type", "")
            self._script_buf = []
            if self._script_type == "application/vnd.jupyter.widget-view+json":
                self.widget_views += 1
        elif tag == "link" and set(a.get("rel", "").lower().split()) & {"stylesheet", "preload", "modulepreload"}:
            self.stylesheets.append(a.get("href", ""))
        elif tag == "img":
            self.imgs.append(a.get("src", ""))
        elif tag == "iframe" and a.get("src"):
            self.iframes.append(a["src"])
        if tag not in VOID:
            self.stack.append(entry)

    def handle_endtag(self, tag):
        if tag == "script" and self._script_type is not None:
            if self._script_type == "application/vnd.jupyter.widget-state+json":
                self.widget_states.append("".join(self._script_buf))
            self._script_type = None
        for i in range(len(self.stack) - 1, -1, -1):  # tolerate unbalanced markup
            if self.stack[i]["tag"] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        if self._script_type is not None:
            self._script_buf.append(data)
            return
        f = self._flags()
        if f["math"] is not None and not f["in_mjx"]:
            f["math"]["text"].append(data)

    # ---- derived
    def raw_math(self) -> list[str]:
        """Math elements whose TeX was not typeset."""
        bad = []
        for m in self.math:
            text = "".join(m["text"])
            if not m["has_mjx"] or re.search(r"\\\(|\\\[|\\begin\{", text):
                bad.append(text.strip()[:120] or "<empty math element without mjx-container>")
        return bad

    def widget_models(self) -> dict:
        models = {}
        for raw in self.widget_states:
            try:
                models.update(json.loads(raw).get("state", {}))
            except json.JSONDecodeError as exc:
                raise AssertionError(f"embedded widget state is not valid JSON: {exc}") from exc
        return models


def _is_external(url: str) -> bool:
    parts = urlsplit(url)
    if url.startswith("//"):
        return True
    return parts.scheme in {"http", "https"} and parts.hostname not in {"127.0.0.1", "localhost"}


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def book_server():
    if not (HTML_DIR / "index.html").is_file():
        _unavailable(f"{HTML_DIR.relative_to(REPO)} does not exist: run `make book` first")
    srv = LocalServer(HTML_DIR)
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def vendor_dir() -> Path:
    if not (VENDOR_DIR / "mathjax" / "tex-mml-chtml.js").is_file():
        _unavailable("_vendor/ is missing: run `make vendor` (bash tools/vendor_assets.sh)")
    return VENDOR_DIR


# --------------------------------------------------------------------------- tests
def test_toc_lists_pages():
    pages = toc_pages()
    assert pages, "_toc.yml lists no pages"
    for page in pages:
        assert any((REPO / page).with_suffix(s).is_file() for s in (".md", ".ipynb", ".rst")), \
            f"_toc.yml lists {page!r} but no such .md/.ipynb/.rst file exists"


def test_config_uses_vendored_assets(vendor_dir):
    cfg = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    sph = cfg["sphinx"]["config"]
    static = sph["html_static_path"]
    assert static[0] == "_vendor", "vendored assets must be served from _vendor/"
    for folder in static:   # local folders only; the book's own CSS (book/css) may sit beside _vendor
        assert not _is_external(folder) and (REPO / folder).is_dir(), f"html_static_path: {folder}"
    for css in sph.get("html_css_files", []):
        assert any((REPO / folder / css).is_file() for folder in static), f"html_css_files: {css} not found"
    assert not (REPO / "_static").exists(), "_static/ makes Jupyter Book inject every .js in it into every page"
    assert not _is_external(sph["mathjax_path"]) and (vendor_dir / sph["mathjax_path"]).is_file()
    for js in sph["nb_ipywidgets_js"]:
        assert not _is_external(js) and (vendor_dir / js).is_file(), f"nb_ipywidgets_js: {js} not vendored"
    assert not sph.get("intersphinx_mapping"), "intersphinx fetches inventories from the internet"
    assert cfg["execute"]["execute_notebooks"] == "force"
    assert sph.get("nb_execution_raise_on_error") is True


@pytest.mark.parametrize("page", toc_pages())
def test_page_renders(page, chromium, book_server):
    html_file = HTML_DIR / f"{page}.html"
    assert html_file.is_file(), f"{html_file.relative_to(REPO)} missing: the build is stale, run `make book`"
    static = PageSummary(html_file.read_text(encoding="utf-8"))

    book_server.requests.clear()
    url = book_server.url(f"{page}.html")
    dom = PageSummary(run_chromium(chromium, url))
    requests = list(book_server.requests)
    problems: list[str] = []

    # Math: everything Sphinx emitted as math must be typeset by the vendored MathJax.
    if static.math:
        if not any(p.startswith("/_static/mathjax/") for p, _ in requests):
            problems.append("page has math but did not load _static/mathjax/")
        if len(dom.math) < len(static.math):
            problems.append(f"{len(static.math)} math elements in the HTML, {len(dom.math)} after rendering")
        problems += [f"untypeset math: {t!r}" for t in dom.raw_math()]
    problems += [f"MathJax error: {e}" for e in dom.mjx_errors]

    # Widgets: one drawn view per embedded placeholder; only core widget modules.
    if static.widget_views:
        models = static.widget_models()
        if dom.widget_roots < static.widget_views:
            problems.append(f"{static.widget_views} widget views embedded, {dom.widget_roots} drawn")
        if dom.widget_errors:
            problems.append(f"{dom.widget_errors} widget(s) rendered as 'Error displaying widget'")
        views = {m.get("state", {}).get("_view_name", "") for m in models.values()}
        if any("Slider" in v for v in views) and "widget-slider" not in dom.widget_classes:
            problems.append("page embeds a slider but no .widget-slider was drawn")
        for mid, m in models.items():
            if m.get("model_module") not in CORE_WIDGET_MODULES:
                problems.append(f"widget model {mid} comes from {m.get('model_module')!r}, which is "
                                "not vendored (it would be fetched from the CDN)")

    # Figures and other images: local, existing, non-empty.
    for src in dom.imgs:
        if src.startswith("data:"):
            payload = src.split(",", 1)[-1]
            if not payload or (";base64" in src.split(",", 1)[0] and not base64.b64decode(payload + "==")):
                problems.append("empty data: image")
            continue
        if _is_external(src):
            problems.append(f"<img> from an external host: {src}")
            continue
        target = urlsplit(urljoin(url, src)).path
        f = HTML_DIR / unquote(target).lstrip("/")
        if not f.is_file() or f.stat().st_size == 0:
            problems.append(f"<img src={src!r}> -> {f} missing or empty")
        elif f.suffix.lower() == ".png" and not f.read_bytes().startswith(b"\x89PNG\r\n\x1a\n"):
            problems.append(f"<img src={src!r}> is not a PNG")

    # Nothing external that the page needs; no local 404s (missing vendored pieces show up here).
    for src in sorted(set(static.script_srcs + dom.script_srcs)):
        if _is_external(src) and urlsplit(src).hostname not in ALLOWED_EXTERNAL_SCRIPT_HOSTS:
            problems.append(f"<script src> on an external host: {src}")
    for href in sorted(set(static.stylesheets + dom.stylesheets + dom.iframes)):
        if _is_external(href):
            problems.append(f"external stylesheet/preload/iframe: {href}")
    missing = sorted({p for p, code in requests if code >= 400 and p not in IGNORED_404})
    problems += [f"HTTP 404/error for {p}" for p in missing]

    shots = os.environ.get("RL_LAB_BOOK_SCREENSHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        run_chromium(chromium, url, screenshot=Path(shots).resolve() / (page.replace("/", "__") + ".png"))

    assert not problems, f"{page}.html:\n  " + "\n  ".join(problems)


MATHJAX_SELFTEST = r"""<!doctype html><html><head><meta charset="utf-8">
<script>
window.MathJax = {
  options: {menuOptions: {settings: {explorer: %(explorer)s, speech: %(explorer)s}}},
  startup: {pageReady() {
    return MathJax.startup.defaultPageReady().then(() => {
      if (%(svg)s) { MathJax.startup.document.menu.menu.pool.lookup('renderer').setValue('SVG'); }
    });
  }}
};
</script>
<script defer src="mathjax/tex-mml-chtml.js"></script></head><body>
<p><span class="math">\(\cancel{x} + \boldsymbol{\theta} + \mathbb{E}[R]\)</span></p>
<p><span class="math">\(\require{mhchem}\ce{H2O}\)</span></p>
<div class="math">\[\begin{aligned} \nabla_\theta J &= \mathbb{E}\left[R \nabla_\theta \log \pi_\theta\right] \end{aligned}\]</div>
</body></html>
"""


@pytest.mark.parametrize("mode", ["chtml+explorer", "svg-renderer"])
def test_vendored_mathjax_is_complete(mode, chromium, vendor_dir, tmp_path):
    """The pruned MathJax copy can still load what tex-mml-chtml pulls in on demand."""
    (tmp_path / "mathjax").symlink_to(vendor_dir / "mathjax", target_is_directory=True)
    explorer, svg = mode == "chtml+explorer", mode == "svg-renderer"
    (tmp_path / "index.html").write_text(
        MATHJAX_SELFTEST % {"explorer": str(explorer).lower(), "svg": str(svg).lower()}, encoding="utf-8")
    srv = LocalServer(tmp_path)
    try:
        dom_html = run_chromium(chromium, srv.url("index.html"))
        requests = list(srv.requests)
    finally:
        srv.close()
    dom = PageSummary(dom_html)
    loaded = {p for p, code in requests if code == 200}
    missing = sorted({p for p, code in requests if code >= 400 and p not in IGNORED_404})
    assert not missing, f"vendored MathJax is missing files: {missing}"
    assert dom.mjx_containers == 3 and not dom.raw_math(), dom.raw_math()
    assert not dom.mjx_errors, dom.mjx_errors
    for ext in ("cancel", "boldsymbol", "mhchem"):
        assert f"/mathjax/input/tex/extensions/{ext}.js" in loaded
    if explorer:
        for f in ("/mathjax/a11y/explorer.js", "/mathjax/a11y/sre.js", "/mathjax/sre/mathmaps/en.json"):
            assert f in loaded, f"{f} not loaded"
        assert "data-semantic-" in dom_html, "semantic enrichment (a11y) did not run"
    if svg:
        assert "/mathjax/output/svg.js" in loaded
        assert 'jax="SVG"' in dom_html, "menu could not switch to the SVG renderer"
