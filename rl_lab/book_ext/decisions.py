"""Sphinx extension: the book's one decision table, "which correction when, and how sure we are".

The table lives in one data file, book/data/decisions.yaml; every page that says which correction
to start from renders it (or a subset of its rows) with

    ```{decision-table}
    :rows: stale_severe, stale_mild
    :columns: situation, start from, what the runs say, how sure
    ```

so the pages cannot disagree (issue 52); `:columns:` (optional, names from the file's `columns`)
leaves the others out, for a short path that does not need them.  tests/book/test_one_verdict.py checks that the pages the
file names render it and that each row's verdict holds on the result files.  `markdown_table()` is
the same table as MyST Markdown, for tests and notebooks.  Only Sphinx imports this module.
"""
from __future__ import annotations

from pathlib import Path

import yaml

DATA = Path(__file__).resolve().parents[2] / "book" / "data" / "decisions.yaml"
STRENGTH = {
    "measured": "measured here, pre-registered, nine seeds",
    "pilot": "measured here, three seeds (pilot)",
    "nothing_to_correct": "measured here: no collapse to correct at this scale",
    "derived": "derived, not run",
    "sources": "the post's or verl's advice, untested here",
    "pending": "not yet measured",
}
FIELDS = ("situation", "signal", "start_from", "verdict", "how_sure", "backed_by")


def load(path: Path = DATA) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for row in data["rows"]:
        missing = [f for f in ("id", "strength", "table", *FIELDS) if f not in row]
        if missing:
            raise ValueError(f"{path}: row {row.get('id')!r} lacks {missing}")
        if row["strength"] not in STRENGTH:
            raise ValueError(f"{path}: row {row['id']!r}: strength {row['strength']!r} not in {sorted(STRENGTH)}")
        if row.get("fix_strength", "pending") not in STRENGTH:
            raise ValueError(f"{path}: row {row['id']!r}: fix_strength {row['fix_strength']!r} not in {sorted(STRENGTH)}")
    return data


def select(data: dict, ids: list[str] | None = None) -> list[dict]:
    by_id = {row["id"]: row for row in data["rows"]}
    unknown = [i for i in ids or [] if i not in by_id]
    if unknown:
        raise ValueError(f"decision-table: unknown rows {unknown}; the rows are {list(by_id)}")
    return [by_id[i] for i in ids] if ids else list(data["rows"])


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def columns(data: dict, names: list[str] | None = None) -> list[int]:
    """The positions of the columns `names` (all of them when None), in the file's order."""
    unknown = [n for n in names or [] if n not in data["columns"]]
    if unknown:
        raise ValueError(f"decision-table: unknown columns {unknown}; the columns are {data['columns']}")
    return [i for i, c in enumerate(data["columns"]) if not names or c in names]


def markdown_table(ids: list[str] | None = None, data: dict | None = None,
                   cols: list[str] | None = None) -> str:
    data = data or load()
    keep = columns(data, cols)
    lines = ["| " + " | ".join(data["columns"][i] for i in keep) + " |", "|" + "---|" * len(keep)]
    for row in select(data, ids):
        backed = "; ".join(f"`{p}`" for p in row["backed_by"]) + "; " + row["table"]
        how_sure = f"**{STRENGTH[row['strength']]}**: {row['how_sure']}"
        if row.get("fix_strength"):
            how_sure += f". The fix: **{STRENGTH[row['fix_strength']]}**"
        cells = (row["situation"], row["signal"], row["start_from"], row["verdict"], how_sure, backed)
        lines.append("| " + " | ".join(_cell(cells[i]) for i in keep) + " |")
    return "\n".join(lines)


def _directive():
    from docutils import nodes
    from docutils.parsers.rst import directives
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective

    class DecisionTable(SphinxDirective):
        """```{decision-table}``` with optional `:rows:` (comma-separated ids) and `:columns:`
        (comma-separated column names) options."""
        has_content = False
        option_spec = {"rows": directives.unchanged, "columns": directives.unchanged}

        def run(self):
            self.env.note_dependency(str(DATA))
            ids = [i.strip() for i in self.options.get("rows", "").split(",") if i.strip()] or None
            cols = [c.strip() for c in self.options.get("columns", "").split(",") if c.strip()] or None
            text = markdown_table(ids, cols=cols)
            container = nodes.container(classes=["decision-table"])
            self.state.nested_parse(StringList(text.splitlines(), source=str(DATA)), self.content_offset, container)
            return [container]

    return DecisionTable


def setup(app):
    app.add_directive("decision-table", _directive())
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
