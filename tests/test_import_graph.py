"""The package's import graph (every `import` of rl_lab modules, lazy ones inside functions
included) has no two-module circle, apart from the one still listed here to be broken."""
import ast
from pathlib import Path

import rl_lab

ROOT = Path(rl_lab.__file__).parent
KNOWN = {("rl_lab.information", "rl_lab.lora")}   # chapter 10's toolkit and LoRA: to split (issue 14 §6)


def import_graph() -> dict[str, set[str]]:
    mods = {}
    for f in ROOT.rglob("*.py"):
        parts = f.relative_to(ROOT.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    graph = {m: set() for m in mods}
    for m, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rl_lab"):
                graph[m].add(node.module)
            elif isinstance(node, ast.Import):
                graph[m] |= {a.name for a in node.names if a.name.startswith("rl_lab")}
    return graph


def test_no_two_module_import_circles():
    graph = import_graph()
    circles = {tuple(sorted((a, b))) for a in graph for b in graph[a]
               if a != b and "rl_lab" not in (a, b) and a in graph.get(b, set())}
    assert circles <= KNOWN, f"import circles: {sorted(circles - KNOWN)}"
    assert ("rl_lab.config", "rl_lab.corrections") not in circles
