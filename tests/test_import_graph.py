"""The package's import graph (every `import` of rl_lab modules, lazy ones inside functions
included): no two-module circle, and the layout's layers hold (the core never reaches into the
chapter toolkits or the exact toolkit)."""
import ast
from pathlib import Path

import rl_lab

ROOT = Path(rl_lab.__file__).parent
TOOLKITS = ("rl_lab.toolkits", "rl_lab.exact")
TOOLS = ("rl_lab.cli", "rl_lab.sweep", "rl_lab.warmstart", "rl_lab.diagnose")   # entry points: may use anything


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
    assert not circles, f"import circles: {sorted(circles)}"


def in_layer(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_core_never_imports_a_toolkit():
    graph = import_graph()
    core = [m for m in graph if m != "rl_lab" and not in_layer(m, TOOLKITS + TOOLS)]
    assert {"rl_lab.trainer", "rl_lab.config", "rl_lab.engines.rollout", "rl_lab.algos.grpo"} <= set(core)
    leaks = {m: sorted(d for d in graph[m] if in_layer(d, TOOLKITS)) for m in core}
    assert not {m: d for m, d in leaks.items() if d}, f"core modules importing toolkits: {leaks}"


def test_the_package_root_loads_only_the_core():
    graph = import_graph()
    assert not [d for d in graph["rl_lab"] if in_layer(d, TOOLKITS)]
