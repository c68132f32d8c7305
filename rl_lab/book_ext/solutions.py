"""Sphinx extension: the exercises' solutions, shown as closed dropdowns or left out.

Solutions in the chapters and labs are admonitions titled "Solution" or "Solutions" with
`:class: dropdown` (closed until the reader clicks them).  A code cell can be a solution too:
tag it `solution` (MyST-NB gives its node the class `tag_solution`).

    make book                          # solutions in the HTML, closed
    RL_LAB_SOLUTIONS=0 make book       # a course handout: every solution left out

Loaded by _config.yml (`sphinx: extra_extensions: [rl_lab.book_ext.solutions]`): it lives in the
package, not in tools/, so that any build that can import rl_lab finds it (a `local_extensions`
path would be resolved against the folder of whichever config file the build is given).  The
setting is a Sphinx config value with rebuild="env", so switching it re-reads every page.
Only Sphinx imports this module; nothing in rl_lab does.
"""
from __future__ import annotations

import os
import re

from docutils import nodes

SOLUTION_TITLE = re.compile(r"^\s*Solutions?\b")
SOLUTION_CLASSES = {"solution", "tag_solution"}
ENV_VAR = "RL_LAB_SOLUTIONS"


def solutions_wanted(value: str | None) -> bool:
    """$RL_LAB_SOLUTIONS: unset or "1" keeps the solutions, "0" leaves them out."""
    if value is None or value.strip() in ("", "1"):
        return True
    if value.strip() == "0":
        return False
    raise ValueError(f"{ENV_VAR}={value!r}: use 1 (solutions in the book, closed) or 0 (left out)")


def is_solution(node: nodes.Node) -> bool:
    """An admonition titled Solution(s), or any element with the class solution / tag_solution."""
    if not isinstance(node, nodes.Element):
        return False
    if SOLUTION_CLASSES & set(node.get("classes", [])):
        return True
    if isinstance(node, nodes.admonition) and node.children and isinstance(node[0], nodes.title):
        return bool(SOLUTION_TITLE.match(node[0].astext()))
    return False


def remove_solutions(doctree: nodes.Node) -> int:
    """Remove every solution node from `doctree`; returns how many were removed."""
    outermost = [n for n in doctree.findall(is_solution) if not _inside_solution(n)]
    for node in outermost:
        node.parent.remove(node)
    return len(outermost)


def _inside_solution(node: nodes.Node) -> bool:
    parent = node.parent
    while parent is not None:
        if is_solution(parent):
            return True
        parent = parent.parent
    return False


def _on_config_inited(app, config) -> None:
    config.rl_lab_solutions = solutions_wanted(os.environ.get(ENV_VAR))


def _on_doctree_read(app, doctree) -> None:
    if not app.config.rl_lab_solutions:
        remove_solutions(doctree)


def setup(app):
    app.add_config_value("rl_lab_solutions", True, "env", types=[bool])
    app.connect("config-inited", _on_config_inited)
    app.connect("doctree-read", _on_doctree_read)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
