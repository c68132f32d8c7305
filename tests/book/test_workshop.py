"""book/workshop.md: its links resolve; its lab times are glued from book/data/lab_times.yaml, whose
entries are BENCHMARKS.md's, with their machines (none a laptop); every block participants run
works on the labs-only install (no vLLM, no verl), the vLLM lab being the instructor's demo; the
Binder and Colab lines take the repository URL from the build; and what it tells participants to
expect from `rl-lab doctor` is what the doctor prints."""
import ast
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "book" / "workshop.md").read_text(encoding="utf-8")


def test_links_resolve_and_the_page_is_in_the_toc():
    for target in re.findall(r"\{doc\}`([^`<]+)`", PAGE):
        assert (REPO / "book" / f"{target}.md").resolve().is_file(), f"workshop.md links to missing {target}"
    assert "file: book/workshop" in (REPO / "_toc.yml").read_text()


TIMES = yaml.safe_load((REPO / "book" / "data" / "lab_times.yaml").read_text(encoding="utf-8"))
TABLE_ROW = re.compile(r"^\|[^|\n]*\|[^|\n]*\| \{doc\}`\.\./labs/(\w+)` \|(.*)\|$", re.M)


def glue_key(entry: dict) -> str:
    """The glue key the page's hidden cell gives a timing entry (its code builds the same)."""
    return "-".join(["time", entry["lab"], entry["preset"]] + ([entry["load"]] if "load" in entry else []))


def table_labs() -> list[str]:
    """The labs the page's tables (the plan, the advanced block) give participants to run."""
    return [lab for lab, _ in TABLE_ROW.findall(PAGE)]


def test_every_time_in_the_timing_file_is_a_benchmark():
    """book/data/lab_times.yaml: each entry's phrase is in BENCHMARKS.md, section 4, with its
    seconds; its machine is one of the file's, and no machine is a laptop."""
    bench = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    section = " ".join(bench[bench.index("## 4."):bench.index("## 5.")].split())   # lines rewrap
    for machine, what in TIMES["machines"].items():
        assert "2" in what and "laptop" not in what.lower(), f"{machine}: {what}"
    for t in TIMES["times"]:
        assert t["machine"] in TIMES["machines"], t
        assert t["benchmarks"] in section, f"BENCHMARKS.md section 4 does not say {t['benchmarks']!r}"
        assert f"{t['seconds']} s" in t["benchmarks"], t
    keys = [glue_key(t) for t in TIMES["times"] if "cells" not in t]
    assert len(keys) == len(set(keys)), "two entries would glue under one key"


def test_the_page_glues_its_times_and_types_none():
    """Every time in the page's tables is glued from the timing file; none is typed."""
    cell = re.search(r"```\{code-cell\} ipython3\n(.*?)```", PAGE, re.S).group(1)
    assert "lab_times.yaml" in cell and "glue(" in cell
    keys = {glue_key(t) for t in TIMES["times"]}
    rows = TABLE_ROW.findall(PAGE)
    assert rows, "the page's tables name no lab"
    for lab, rest in rows:
        assert not re.search(r"\d+ s\b", rest), f"workshop.md types a time for {lab}: {rest}"
        glued = re.findall(r"\{glue:text\}`([^`]+)`", rest)
        assert glued and all(k.startswith(f"time-{lab}-") and k in keys for k in glued), (lab, glued)
    for key in re.findall(r"\{glue:text\}`(time-[^`]+)`", PAGE):
        assert key in keys, f"workshop.md glues {key}, which book/data/lab_times.yaml does not have"
    assert "None was measured on a laptop" in PAGE and "2-core" in PAGE


def test_no_lab_says_not_timed_where_the_timing_file_has_a_time():
    """The speed-kills lab once said its laptop preset was 'not timed' while this page gave a time."""
    for t in TIMES["times"]:
        text = (REPO / "labs" / f"{t['lab']}.md").read_text(encoding="utf-8")
        head = text[:text.index("```{code-cell}")]
        if t["preset"] in ("laptop", "smoke"):
            assert not re.search(rf"`{t['preset']}`[^.]*not timed", head), \
                f"{t['lab']} says its {t['preset']} preset is not timed; book/data/lab_times.yaml has a time"


def test_the_benchmark_script_times_the_plans_labs():
    """bench/bench_workshop_labs.py, which measures the plan's times, runs the plan's labs and the demo."""
    tree = ast.parse((REPO / "bench" / "bench_workshop_labs.py").read_text(encoding="utf-8"))
    plan = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", "") == "PLAN")
    first_table = PAGE[PAGE.index("| time | what | lab | smoke | laptop |"):PAGE.index("## Optional")]
    assert plan == [lab for lab, _ in TABLE_ROW.findall(first_table)] + ["lab_measure_your_mismatch"]


# ------------------------------------------------------------------ every block on the lean install

def lean_modules() -> set[str]:
    """Import names the labs-only install provides: the package's dependencies and its [lab] extra
    (tools/setup_lean.py installs `-e .[lab]`), and what those bring (IPython)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    dists = project["dependencies"] + project["optional-dependencies"]["lab"]
    names = {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() for d in dists}
    rename = {"pyyaml": "yaml"}
    return {rename.get(n, n.replace("-", "_")) for n in names} | {"IPython", "rl_lab"}


# packages the lean install leaves out (`make setup`'s vLLM and verl, the other extras)
NOT_LEAN = ("vllm", "verl", "trl", "scipy", "sphinx", "jupyter_book", "pytest", "hypothesis", "nbval")


def lab_code(lab: str) -> str:
    text = (REPO / "labs" / f"{lab}.md").read_text(encoding="utf-8")
    return "\n".join(re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```$", text, re.S | re.M))


def hard_requirements(code: str) -> list[str]:
    """Module-level statements that stop a lab without vLLM: an assert on vllm_available()'s
    result, or a VLLMEngine built, outside any `if`."""
    tree = ast.parse(code)
    found = []
    flagged = {n.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "vllm_available"
               for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}

    def visit(node, guarded):
        for child in ast.iter_child_nodes(node):
            g = guarded or isinstance(child, (ast.If, ast.IfExp, ast.FunctionDef, ast.Try))
            names = {n.id for n in ast.walk(child) if isinstance(n, ast.Name)}
            if not g and isinstance(child, ast.Assert) and (names & flagged or "vllm_available" in names):
                found.append(ast.unparse(child)[:80])
            if not g and isinstance(child, ast.Call) and getattr(child.func, "id", "") == "VLLMEngine":
                found.append(ast.unparse(child)[:80])
            visit(child, g)
    visit(tree, False)
    return found


def test_the_workshop_blocks_name_only_labs_that_run_on_the_lean_install():
    """The labs in the page's tables (what participants run) need neither vLLM nor verl nor any
    package outside the labs-only install; "Measure your mismatch" is the instructor's demo."""
    labs = table_labs()
    assert "lab_measure_your_mismatch" not in labs, "the vLLM lab is the instructor's demo, not a block"
    assert "instructor's demo" in PAGE and "{doc}`../labs/lab_measure_your_mismatch`" in PAGE
    assert hard_requirements(lab_code("lab_measure_your_mismatch")), \
        "the test no longer recognises the vLLM lab's requirement: fix hard_requirements()"
    lean, stdlib = lean_modules(), set(sys.stdlib_module_names)
    for lab in labs:
        code = lab_code(lab)
        assert not hard_requirements(code), f"{lab} stops without vLLM: {hard_requirements(code)}"
        tops = {(a.name if isinstance(node, ast.Import) else node.module).split(".")[0]
                for node in ast.walk(ast.parse(code)) if isinstance(node, (ast.Import, ast.ImportFrom))
                and (isinstance(node, ast.Import) or node.level == 0) for a in getattr(node, "names", [])}
        outside = sorted(tops - lean - stdlib)
        assert not outside, f"{lab} imports {outside}, which the labs-only install does not have"


def test_the_workshop_labs_imports_load_without_the_packages_the_lean_install_leaves_out():
    """Every import statement of those labs, and the research/ modules they load, run in a Python
    where vllm, verl, trl, scipy, ... cannot be imported (as on the labs-only install)."""
    statements, research = set(), set()
    for lab in dict.fromkeys(table_labs()):
        code = lab_code(lab)
        statements |= {ast.unparse(node) for node in ast.walk(ast.parse(code))
                       if isinstance(node, (ast.Import, ast.ImportFrom))}
        for path in re.findall(r"[\"']((?:research/)?[\w/]+\.py)[\"']", code):
            research.add(str(REPO / (path if path.startswith("research/") else f"research/{path}")))
    assert research and all(Path(p).is_file() for p in research), research
    script = textwrap.dedent(f"""
        import importlib.abc, importlib.util, sys
        class Missing(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {NOT_LEAN!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}} (not in the lean install)", name=name)
        sys.meta_path.insert(0, Missing())
        try:
            import vllm
        except ModuleNotFoundError:
            pass
        else:
            raise SystemExit("the stand-in for a missing package did not stop `import vllm`")
        """) + "\n".join(sorted(statements)) + textwrap.dedent(f"""
        for i, path in enumerate({sorted(research)!r}):
            spec = importlib.util.spec_from_file_location(f"research_{{i}}", path)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        print("loaded")
        """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         cwd=REPO / "labs", env={**os.environ, "OMP_NUM_THREADS": "1",     # this checkout's rl_lab
                                                 "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    assert out.returncode == 0 and out.stdout.strip().endswith("loaded"), out.stderr[-3000:]
    assert any("Trainer" in st for st in statements) and len(research) >= 3     # the labs' real imports


# ------------------------------------------------------------------ the page's Markdown

def test_the_no_install_routes_name_the_repository_only_through_the_build():
    """Binder and Colab take the repository URL from rl_lab.book_ext.repository (the launch buttons'
    source) through MyST substitutions; the page carries no placeholder."""
    from rl_lab.book_ext.repository import substitutions
    assert "<owner>" not in PAGE and "<repository>" not in PAGE
    assert "{{ colab_install }}" in PAGE and "{{ binder_route }}" in PAGE
    url = "https://github.com/example/stable-rl-lm"
    on, off = substitutions(url), substitutions(None)
    assert f'git+{url}"' in on["colab_install"] and "Binder" in on["binder_route"]
    assert set(on) == set(off) and not any("github.com" in v or "<" in v for v in off.values())


@pytest.mark.parametrize("github_repository", ["example/stable-rl-lm", None])
def test_a_real_build_fills_the_substitutions_from_the_repository_url(tiny_sphinx, github_repository):
    html_dir = tiny_sphinx(
        {"index.md": "# Workshop\n\nParticipants: {{ binder_route }} and a notebook.\n{{ colab_install }}\n"},
        extensions=["substitution"], github_repository=github_repository,
        theme_options="{'launch_buttons': {'binderhub_url': 'https://mybinder.org'}, "
                      "'repository_url': '', 'repository_branch': 'main'}")
    html = (html_dir / "index.html").read_text(encoding="utf-8")
    assert "{{" not in html and "&lt;owner&gt;" not in html
    if github_repository:
        assert "git+https://github.com/example/stable-rl-lm" in html and "on Binder" in html
    else:
        assert "does not know it" in html and "git+" not in html


def test_the_reconciling_paragraph_is_not_inside_the_chapter_5_bullet():
    """A paragraph that continues a list item's last line without a blank line renders inside it."""
    lines = PAGE.splitlines()
    i = next(n for n, line in enumerate(lines) if "The labs assert their chapters' conclusions" in line)
    assert lines[i].startswith("The labs assert") and lines[i - 1].strip() == "", lines[i - 2:i + 1]


def test_the_doctor_line_participants_are_told_to_expect():
    from rl_lab.tools import doctor
    assert "ready for the labs" in PAGE and "rl-lab doctor" in PAGE
    assert "ready for the labs" in Path(doctor.__file__).read_text()
