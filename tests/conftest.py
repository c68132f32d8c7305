"""Shared by the four tiers: tests/unit (the maths and single components), tests/integration (the
trainer, the CLI, subprocesses, sandboxes, verl, vLLM), tests/book (the book and labs as documents)
and tests/repo (the repository's own rules).  Test ids are rootdir-relative
("tests/unit/test_grpo.py::..."): the xdist names below and the fast tier's record use them.

pytest's default "prepend" imports put this folder on sys.path (for sandbox_helpers and `from
conftest import ...`) and each test's own folder (tests/unit for helpers.py, tests/integration for
golden_methods.py), so a test file imports its helpers by name, also when run on its own."""
import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RL_LAB_PRESET", "smoke")

# Under pytest-xdist (`make test` and `make test-fast` run one test process per CPU), the processes
# share the CPUs: each torch gets one thread, and so does every process a test starts (two torch
# processes with two OpenMP threads each on two cores stall each other by an order of magnitude).
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
TEST_THREADS = 1 if XDIST_WORKER else 2

# Under xdist the tests of one group run in one process, so that what they share is built once:
# the warm start rebuilt from its recipe, a vLLM engine, the golden runs' fixtures; a lab under
# nbval is one group too (its cells share one kernel and run in order).  Other tests are balanced
# one by one.  (xdist's own `--dist loadgroup` did not group here, pytest 9.2 with xdist 3.8: the
# "@group" suffix it appends never reached the test ids, so conftest gives xdist a scheduler.)
XDIST_GROUPS = {
    "test_learning": "rebuilt_warm_start", "test_warmstart": "rebuilt_warm_start",
    "test_vllm_engine": "vllm", "test_vllm_episodes": "vllm",
    "test_golden_methods": "golden_methods", "test_compare": "compare", "test_lora": "lora",
    "test_sweep": "sweep", "test_verl_export": "verl_export", "test_environment": "environment",
    "test_trl_conformance": "trl_conformance",
}


# Tests of a grouped file that do not use what the group shares: balanced on their own.
XDIST_UNGROUPED = {"tests/integration/test_warmstart.py::test_recipe_outcome_does_not_depend_on_the_cpu_kernels"}

# Scopes that take minutes, handed out first.  xdist orders scopes by their number of tests, so the
# warm-start group (the rebuild, then the learning test: ~8 minutes in CI, 3 tests) used to start
# last and run alone at the end of `make test`.
XDIST_FIRST = ("rebuilt_warm_start", "tests/integration/test_jupyterlab.py::test_lab1_runs_in_jupyterlab",
               "tests/integration/test_warmstart.py::test_recipe_outcome_does_not_depend_on_the_cpu_kernels")


def long_scopes_first(workqueue) -> None:
    """Move XDIST_FIRST's scopes, in that order, to the front of xdist's queue (an OrderedDict)."""
    for scope in reversed(XDIST_FIRST):
        if scope in workqueue:
            workqueue.move_to_end(scope, last=False)


def xdist_scope(nodeid: str) -> str:
    """The unit xdist hands to one process: a group, a notebook, or the test itself."""
    path = nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):
        return path
    if nodeid in XDIST_UNGROUPED:
        return nodeid
    return XDIST_GROUPS.get(Path(path).stem, nodeid)


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:          # plain pytest: nothing to schedule
    pass
else:
    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            long_scopes_first(self.workqueue)
            super()._assign_work_unit(node)

    def pytest_xdist_make_scheduler(config, log):
        return GroupScheduling(config, log) if config.getvalue("dist") in ("load", "loadgroup") else None


@pytest.fixture(scope="session")
def tiny():
    """A random-init 0.3M model and its tokenizer (do not train it in place)."""
    from rl_lab.models import build_model
    return build_model("0.3M", seed=0)


@pytest.fixture
def fresh_tiny():
    from rl_lab.models import build_model
    return build_model("0.3M", seed=0)


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(TEST_THREADS)


@pytest.fixture(autouse=True)
def _cpu_unless_cuda_marked(request, monkeypatch):
    """Unit tests run on the CPU even on a GPU machine (their bitwise checks are CPU promises);
    tests marked `cuda` (tests/integration/test_cuda.py) run on the GPU, and skip where there is none."""
    if request.node.get_closest_marker("cuda") is None:
        monkeypatch.setenv("RL_LAB_DEVICE", "cpu")
    elif not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (the CUDA smoke suite runs wherever one is present)")


@pytest.fixture(scope="session")
def rebuilt_warm_start(tmp_path_factory):
    """The shipped warm starts that rebuild in about a minute (`rl_lab.tools.warmstart.CI_REBUILT`)
    rebuilt from their recipe on this machine (`--check`), once per session: {"dir": folder
    holding <name>/, "returncode", "log"}.  `make check-checkpoints` rebuilds all of them."""
    import subprocess
    import sys

    from rl_lab.tools.warmstart import CI_REBUILT
    out_dir = tmp_path_factory.mktemp("rebuilt_warm_start")
    out = subprocess.run([sys.executable, "-m", "rl_lab.tools.warmstart", *CI_REBUILT, "--check", "--out", str(out_dir)],
                         capture_output=True, text=True, timeout=900)
    return {"dir": out_dir, "returncode": out.returncode, "log": out.stdout + out.stderr[-3000:]}


# --------------------------------------------------------------------------- Chromium
# For the browser tests (tests/book/test_book_html.py, tests/integration/test_jupyterlab.py).
def _chromium_candidates() -> list[str]:
    env = os.environ.get("CHROMIUM")
    names = [env] if env else []
    names += ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"]
    return [p for p in (shutil.which(n) for n in names if n) if p]


@functools.lru_cache(maxsize=1)
def find_chromium() -> str | None:
    """The first candidate ($CHROMIUM, then the usual names on PATH) whose --version runs."""
    for exe in _chromium_candidates():
        try:  # Ubuntu's chromium-browser may be a snap stub that cannot run
            r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0 and re.search(r"\d+\.\d+", r.stdout):
            return exe
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    """The path of a working Chromium/Chrome. Without one the test skips, or fails with
    RL_LAB_REQUIRE_BOOK=1 (CI), where the browser checks must run."""
    exe = find_chromium()
    if exe is None:
        reason = "no Chromium/Chrome found (apt-get install chromium, or set $CHROMIUM)"
        if os.environ.get("RL_LAB_REQUIRE_BOOK", "") == "1":
            pytest.fail(f"{reason} (RL_LAB_REQUIRE_BOOK=1 makes this a failure)")
        pytest.skip(reason)
    return exe


# --------------------------------------------------------------------------- the fast tier
# `make test-fast` (lint + tests/unit and tests/repo, not marked slow) runs first in CI, so that a
# broken import, unit or repository rule fails in minutes.  With RL_LAB_FAST_TIER_RECORD=<file> it writes the ids of the tests it
# passed there; `make test` with RL_LAB_FAST_TIER_PASSED=<that file> then deselects exactly those
# (a test the fast tier skipped, e.g. one that needs the built book, still runs).  Without either
# variable nothing changes: `make test` alone runs everything.
def pytest_runtest_logreport(report):
    path = os.environ.get("RL_LAB_FAST_TIER_RECORD")
    if path and not XDIST_WORKER and report.when == "call" and report.passed:   # the controller writes
        with open(path, "a") as f:
            f.write(report.nodeid + "\n")


def pytest_collection_modifyitems(config, items):
    path = os.environ.get("RL_LAB_FAST_TIER_PASSED")
    if not path:
        return
    if not os.path.exists(path):
        raise pytest.UsageError(f"RL_LAB_FAST_TIER_PASSED={path}: no such file (run `make test-fast` "
                                "with RL_LAB_FAST_TIER_RECORD first, or unset it to run every test)")
    with open(path) as f:
        passed = set(f.read().split("\n")) - {""}
    keep = [item for item in items if item.nodeid not in passed]
    dropped = [item for item in items if item.nodeid in passed]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def tiny_sphinx(tmp_path, monkeypatch):
    """A one-off Sphinx HTML build of a few pages with rl_lab's repository extension and the book's
    theme, the repository URL taken from `github_repository` as GitHub Actions sets it (None: no URL).

        html_dir = tiny_sphinx({"index.md": "# Book\\n"}, extensions=["substitution"], github_repository=None)

    `files` maps a path under the source folder to its text; `extensions` are MyST extensions;
    `theme_options` is the html_theme_options literal.  Returns the HTML output folder."""
    pytest.importorskip("sphinx_book_theme")
    pytest.importorskip("myst_nb")

    def build(files: dict, extensions: list[str], github_repository: str | None, theme_options: str) -> object:
        from sphinx.application import Sphinx

        src = tmp_path / "src"
        for name, text in files.items():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_text(text)
        (src / "conf.py").write_text(
            "extensions = ['myst_nb', 'rl_lab.book_ext.repository']\n"
            "nb_execution_mode = 'off'\n"
            f"myst_enable_extensions = {extensions!r}\n"
            "html_theme = 'sphinx_book_theme'\n"
            f"html_theme_options = {theme_options}\n")
        monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
        if github_repository:
            monkeypatch.setenv("GITHUB_REPOSITORY", github_repository)
            monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
        Sphinx(str(src), str(src), str(tmp_path / "html"), str(tmp_path / "doctrees"), "html",
               status=None, warning=None, freshenv=True).build()
        return tmp_path / "html"

    return build
