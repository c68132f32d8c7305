"""The package's import graph (every `import` of rl_lab modules, lazy ones inside functions
included): every module belongs to exactly one layer, each layer imports only the layers LAYERS
says it may (and every cross-layer permission is one the code uses), and no two modules import
each other.

A new top-level module must be named in CORE (or go into a subpackage): the test says so."""
import ast
import importlib.util
from pathlib import Path

import rl_lab

ROOT = Path(rl_lab.__file__).parent

# The core: the trainer and what it is built from (config, models, tasks, run folders, the
# correction hook, ...).  `rl_lab` itself (the package's __init__) re-exports core names.
CORE = ("rl_lab", "rl_lab.config", "rl_lab.errors", "rl_lab.models", "rl_lab.tokenizer", "rl_lab.tasks",
        "rl_lab.demonstrations", "rl_lab.trainer", "rl_lab.runs", "rl_lab.corrections", "rl_lab.monitors",
        "rl_lab.schedules", "rl_lab.utils", "rl_lab.reference_step", "rl_lab.correction_options",
        "rl_lab.method_specs", "rl_lab.mismatch_specs", "rl_lab.config_checks", "rl_lab.presets",
        "rl_lab._lazy")

# layer -> (its modules: names, each with its submodules, or CORE's exact names), the layers it may import
LAYERS = {
    # the trainer runs an engine and the algos' losses and methods; tasks build agents' environments
    "core": (CORE, {"core", "engines", "agents", "algos"}),
    # samplers: SamplingConfig (config), models, utils; the scripted engine runs agents' tools
    "engines": (("rl_lab.engines",), {"engines", "core", "agents"}),
    # tools and episodes: the bottom layer, nothing of rl_lab outside it
    "agents": (("rl_lab.agents",), {"agents"}),
    # losses, advantages, methods; losses' log-probs use the shared-prefix forward and DVP's safe
    # vocabulary (engines)
    "algos": (("rl_lab.algos",), {"algos", "core", "engines"}),
    # enumerable ground truth; checks the trainer's advantage estimators and TRLOO (algos)
    "exact": (("rl_lab.exact",), {"exact", "core", "algos"}),
    # one chapter's tools each; pruning reads exact/'s policies and the samplers' safe vocabulary (engines)
    "toolkits": (("rl_lab.toolkits",), {"toolkits", "core", "engines", "algos", "exact"}),
    # verl: configs and tasks out, metrics in
    "integrations": (("rl_lab.integrations",), {"integrations", "core"}),
    # what a person runs; rl_lab.kernel only calls rl_lab.tools.kernel (installed kernel specs name it)
    "tools": (("rl_lab.tools", "rl_lab.kernel"), {"tools", "core", "engines", "agents", "toolkits", "integrations"}),
    # the exercises' checks (`check(name, answer)` in the labs): expected values computed from the
    # trainer's pieces (core, algos), the exact enumerations, the chapters' toolkits and a sandbox run
    "exercises": (("rl_lab.exercises",), {"exercises", "core", "algos", "exact", "toolkits", "agents"}),
    # Sphinx extensions: import Sphinx (not a runtime dependency), nothing of rl_lab
    "book_ext": (("rl_lab.book_ext",), {"book_ext"}),
}


def module_names() -> dict[str, Path]:
    mods = {}
    for f in ROOT.rglob("*.py"):
        parts = f.relative_to(ROOT.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return mods


def import_graph() -> dict[str, set[str]]:
    """{module: the rl_lab modules it imports}; `from rl_lab.x import y` counts rl_lab.x.y when
    that is a module."""
    mods = module_names()
    graph = {m: set() for m in mods}
    for m, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rl_lab"):
                subs = {f"{node.module}.{a.name}" for a in node.names} & mods.keys()
                graph[m] |= subs if subs else {node.module}
            elif isinstance(node, ast.Import):
                graph[m] |= {a.name for a in node.names if a.name.startswith("rl_lab")}
    return graph


def layers_of(module: str) -> list[str]:
    return [name for name, (members, _) in LAYERS.items()
            if module in members or any(module.startswith(p + ".") for p in members if p != "rl_lab")]


def layer(module: str) -> str:
    (name,) = layers_of(module)
    return name


def test_every_module_belongs_to_exactly_one_layer():
    wrong = {m: layers_of(m) for m in import_graph() if len(layers_of(m)) != 1}
    assert not wrong, f"modules in no layer or in several (name a new top-level module in CORE): {wrong}"
    assert set(CORE) <= set(import_graph()), f"CORE names modules that do not exist: {set(CORE) - set(import_graph())}"


def test_each_layer_imports_only_what_it_may():
    graph = import_graph()
    leaks = sorted(f"{m} ({layer(m)}) -> {d} ({layer(d)})" for m in graph for d in graph[m]
                   if layer(d) not in LAYERS[layer(m)][1])
    assert not leaks, "imports across layers that LAYERS does not allow:\n" + "\n".join(leaks)


def test_every_declared_permission_is_used():
    """The table says what the graph is, not more: a permission nothing uses is removed from it."""
    graph = import_graph()
    used = {(layer(m), layer(d)) for m in graph for d in graph[m]}
    unused = sorted((a, b) for a, (_, allowed) in LAYERS.items() for b in allowed if a != b and (a, b) not in used)
    assert not unused, f"LAYERS allows imports nothing makes (remove them): {unused}"


def test_the_rules_the_layout_promises():
    for name, (_, allowed) in LAYERS.items():
        assert name == "tools" or "tools" not in allowed, f"only tools import tools ({name} may)"
        assert name == "book_ext" or "book_ext" not in allowed, f"the package never imports book_ext ({name} may)"
    assert not LAYERS["core"][1] & {"tools", "toolkits", "exact", "integrations", "book_ext"}
    assert LAYERS["book_ext"][1] == {"book_ext"}
    assert LAYERS["agents"][1] == {"agents"}, "agents (tools, episodes) is the bottom layer"


def test_the_package_root_loads_only_the_core():
    assert {layer(d) for d in import_graph()["rl_lab"]} <= {"core", "engines"}


def test_no_two_module_import_circles():
    graph = import_graph()
    circles = {tuple(sorted((a, b))) for a in graph for b in graph[a]
               if a != b and "rl_lab" not in (a, b) and a in graph.get(b, set())}
    assert not circles, f"import circles: {sorted(circles)}"


def test_the_old_kernel_module_only_calls_the_new_one():
    """The one shim: kernel specs installed before the move name `python -m rl_lab.kernel`."""
    assert import_graph()["rl_lab.kernel"] == {"rl_lab.tools.kernel"}
    assert importlib.util.find_spec("rl_lab.kernel") is not None
