"""Sphinx extension: the book's version is the package's, from its one place.

The version lives in `rl_lab/__init__.py` (`__version__`); pyproject.toml reads it from there
(`[tool.setuptools.dynamic] version = { attr = "rl_lab.__version__" }`), CITATION.cff and the top
entry of CHANGELOG.md repeat it (tests/repo/test_citation.py checks they agree), and this extension
gives it to the book: Sphinx's `version` and `release`, and the MyST substitution
`{{ rl_lab_version }}` (book/intro.md shows it).  The file is read as setuptools reads it (the
assignment, without importing rl_lab), so a build never shows a version an old install recorded.

Loaded by _config.yml (`sphinx: extra_extensions: [rl_lab.book_ext.version]`).  Only Sphinx
imports this module; nothing in rl_lab does.
"""
from __future__ import annotations

import ast
from pathlib import Path

INIT = Path(__file__).resolve().parents[1] / "__init__.py"
SUBSTITUTION = "rl_lab_version"


def package_version(init: Path = INIT) -> str:
    """`__version__` as assigned in rl_lab/__init__.py."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    raise RuntimeError(f"no `__version__ = \"...\"` in {init}")


def _on_config_inited(app, config) -> None:
    v = package_version()
    config.version = config.release = v
    subs = dict(config.myst_substitutions or {}) if hasattr(config, "myst_substitutions") else {}
    subs.setdefault(SUBSTITUTION, v)
    config.myst_substitutions = subs


def setup(app):
    app.connect("config-inited", _on_config_inited)   # before MyST reads its config (builder-inited)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
