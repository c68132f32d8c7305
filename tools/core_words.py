"""The core of a chapter: what a student reads in one sitting (issues 36 and 52), measured in reading words.

The core is the page up to its Exercises (or References), without what is folded or hidden: dropdowns
(folded caveats, solutions), code cells tagged remove-cell, remove-input, hide-input or hide-cell.
What stays is read, so all of it counts, converted to **reading words**:

* prose, tables, visible admonitions (the Key idea, "You should know" boxes), figure captions and
  included Markdown files: one word per word;
* every non-blank code line shown in the core (a visible code cell, a ``literalinclude`` with its
  ``:pyobject:``/``:lines:``/``:start-after:`` selection resolved against the file, a fenced
  ``python``/``text``/``bash`` block): WORDS_PER_CODE_LINE words;
* every row of a display equation (``$$ ... $$`` or ``{math}``; an aligned block with three rows
  is three equations): WORDS_PER_EQUATION words.

Why these rates.  A line of the package's code holds about ten tokens (names, operators,
arguments), and a reader checking it against the derivation takes about as long as for a short
sentence; a display equation is read symbol by symbol and matched against the text around it, about
as long as two such lines.  So a code line counts as 5 words and an equation row as 10.  Reading
time is taken at WORDS_PER_MINUTE = 120, the pace of careful technical study rather than the 200-250
of running prose: a core of BUDGET = 3,000 reading words is 25 minutes.

Not counted, because their length is known only at build time: glued tables and text (``{glue:md}``,
``{glue}``), the rendered decision table, and cell outputs.

tests/book/test_core_length.py keeps every page of PAGES within BUDGET, or, for a page listed in
OVER, at no more than its listed count; book/contributing.md renders `table()` at build time."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "book").glob("ch*.md")) + [ROOT / "book" / "primer.md", ROOT / "book" / "my_run_collapsed.md"]
BUDGET = 3000
WORDS_PER_MINUTE = 120
WORDS_PER_CODE_LINE = 5
WORDS_PER_EQUATION = 10

# Pages over BUDGET when the reading-word count was introduced (issue 52), with their count then.
# The test fails when one grows past its count (by more than 2%) and when one comes under BUDGET
# (then remove it here).  Cut these pages; do not fold their text into dropdowns to pass.
OVER: dict[str, int] = {}

_FENCE = re.compile(r"^(`{3,}|~{3,})\s*(.*)$")
_HIDDEN_TAGS = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
_ADMONITIONS = {"admonition", "note", "warning", "tip", "important", "hint", "attention", "caution",
                "danger", "error", "seealso"}
_CAPTIONED = {"glue:figure", "figure", "table", "list-table"}
_CODE = {"code", "code-block", "sourcecode"}
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")


def _blocks(lines):
    """Split lines into ('text', lines) and ('fence', info, body_lines) at the top level of nesting."""
    out, text, i = [], [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            text.append(lines[i])
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip()
        j = i + 1
        close = re.compile(rf"^{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        if text:
            out.append(("text", text))
            text = []
        out.append(("fence", info, lines[i + 1:j]))
        i = j + 1
    if text:
        out.append(("text", text))
    return out


def _options(body):
    """The directive's options (``:key: value`` lines, or a ``---`` YAML block) and the rest of its body."""
    opts, k = {}, 0
    if body and body[0].strip() == "---":
        k = 1
        while k < len(body) and body[k].strip() != "---":
            key, _, value = body[k].partition(":")
            opts[key.strip()] = value.strip()
            k += 1
        k += 1
    else:
        while k < len(body) and re.match(r"^:[\w-]+:", body[k]):
            key, value = re.match(r"^:([\w-]+):\s*(.*)$", body[k]).groups()
            opts[key] = value.strip().strip("'\"")                                  # MyST reads options as YAML
            k += 1
    return opts, body[k:]


def _nonblank(lines):
    return sum(1 for line in lines if line.strip())


def _pyobject(source: str, name: str) -> list[str]:
    lines = source.splitlines()
    nodes, node = ast.parse(source).body, None
    for part in name.split("."):
        node = next(n for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                    and n.name == part)
        nodes = node.body
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return lines[start - 1:node.end_lineno]


def _line_spec(spec: str, n: int) -> list[int]:
    picked = []
    for part in spec.split(","):
        a, dash, b = part.strip().partition("-")
        lo = int(a) if a else 1
        hi = (int(b) if b else n) if dash else lo
        picked.extend(range(lo, min(hi, n) + 1))
    return picked


def included_lines(path: Path, opts: dict) -> list[str]:
    """The lines a literalinclude shows, selected in Sphinx's order: pyobject, start, end, lines."""
    source = path.read_text(encoding="utf-8")
    lines = _pyobject(source, opts["pyobject"]) if "pyobject" in opts else source.splitlines()
    for key, after in (("start-after", True), ("start-at", False)):
        if key in opts:
            k = next(i for i, line in enumerate(lines) if opts[key] in line)
            lines = lines[k + 1:] if after else lines[k:]
    for key, before in (("end-before", True), ("end-at", False)):
        if key in opts:
            k = next(i for i, line in enumerate(lines) if opts[key] in line)
            lines = lines[:k] if before else lines[:k + 1]
    if "lines" in opts:
        lines = [lines[i - 1] for i in _line_spec(opts["lines"], len(lines))]
    return lines


def _equation_rows(tex: str) -> int:
    return tex.count("\\\\") + 1


def _count_text(lines) -> tuple[int, int]:
    """Words and equation rows of plain Markdown text."""
    text = "\n".join(lines)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"^\([\w:-]+\)=\s*$", " ", text, flags=re.M)                     # (label)= targets
    rows = sum(_equation_rows(m) for m in re.findall(r"\$\$(.*?)\$\$", text, flags=re.S))
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    return len(_WORD.findall(text)), rows


def breakdown(text: str, base: Path | None = None) -> dict:
    """Prose words, shown code lines and display-equation rows of a page's core.

    `base` is the folder that literalinclude and include paths are relative to (the page's folder)."""
    base = base or ROOT / "book"
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)                        # front matter
    text = re.split(r"\n## (?:Exercises|References)\s*\n", text)[0]
    counts = {"prose words": 0, "code lines": 0, "equations": 0}

    def walk(lines):
        for block in _blocks(lines):
            if block[0] == "text":
                words, rows = _count_text(block[1])
                counts["prose words"] += words
                counts["equations"] += rows
                continue
            _, info, body = block
            m = re.match(r"^\{([\w:-]+)\}\s*(.*)$", info)
            name, arg = (m.group(1), m.group(2)) if m else (None, info)
            opts, rest = _options(body) if name else ({}, body)
            if "dropdown" in opts.get("class", "") or name in {"dropdown", "toggle"}:
                continue                                                              # folded
            if name == "code-cell":
                tags = set(re.findall(r"[\w-]+", opts.get("tags", "")))
                if not tags & _HIDDEN_TAGS:
                    counts["code lines"] += _nonblank(rest)
            elif name == "literalinclude":
                counts["code lines"] += _nonblank(included_lines((base / arg).resolve(), opts))
            elif name == "include":
                walk((base / arg).read_text(encoding="utf-8").splitlines())
            elif name is None or name in _CODE:
                counts["code lines"] += _nonblank(rest)                              # ```python, ```text, ...
            elif name == "math":
                counts["equations"] += _equation_rows("\n".join(rest))
            elif name in _ADMONITIONS or name in _CAPTIONED:
                counts["prose words"] += len(_WORD.findall(arg)) if name in _ADMONITIONS else 0
                walk(rest)
            # anything else ({glue:md}, {glue}, {decision-table}, ...) renders text of unknown length

    walk(text.splitlines())
    return counts


def reading_words(counts: dict) -> int:
    return (counts["prose words"] + WORDS_PER_CODE_LINE * counts["code lines"]
            + WORDS_PER_EQUATION * counts["equations"])


def core_words(text: str, base: Path | None = None) -> int:
    """The core's reading words: prose, plus WORDS_PER_CODE_LINE a shown code line and
    WORDS_PER_EQUATION a display-equation row."""
    return reading_words(breakdown(text, base))


def table():
    """One row per page: what its core holds, its reading words and minutes, and the budget's use."""
    import pandas as pd

    rows = []
    for p in PAGES:
        c = breakdown(p.read_text(encoding="utf-8"), p.parent)
        w = reading_words(c)
        rows.append({"page": p.stem, **c, "reading words": w, "reading minutes": round(w / WORDS_PER_MINUTE),
                     "of the budget": f"{w / BUDGET:.0%}", "listed over at": OVER.get(p.stem, "")})
    return pd.DataFrame(rows)
