"""The test scheduler (tests/conftest.py): the minutes-long scopes start first, and a grouped file's
test that does not share the group's fixture is balanced on its own."""
from collections import OrderedDict

from conftest import XDIST_FIRST, long_scopes_first, xdist_scope


def test_the_learning_group_and_the_long_tests_are_handed_out_first():
    scopes = ["tests/test_a.py::test_x", "golden_methods", *reversed(XDIST_FIRST), "labs/lab01.ipynb"]
    queue = OrderedDict((s, {}) for s in scopes)
    long_scopes_first(queue)
    assert list(queue)[:len(XDIST_FIRST)] == list(XDIST_FIRST)
    assert list(queue)[len(XDIST_FIRST):] == ["tests/test_a.py::test_x", "golden_methods", "labs/lab01.ipynb"]


def test_scopes():
    assert xdist_scope("tests/integration/test_learning.py::test_smoke_run_beats_a_frozen_control") == "rebuilt_warm_start"
    assert xdist_scope("tests/integration/test_warmstart.py::test_shipped_checkpoints_rebuild_within_tolerance") == \
        "rebuilt_warm_start"
    kernels = "tests/integration/test_warmstart.py::test_recipe_outcome_does_not_depend_on_the_cpu_kernels"
    assert xdist_scope(kernels) == kernels
    assert xdist_scope("_build/nbtest/lab01.ipynb::Cell 3") == "_build/nbtest/lab01.ipynb"
    assert xdist_scope("tests/integration/test_cli.py::test_x") == "tests/integration/test_cli.py::test_x"


def test_the_named_scopes_exist():
    """A renamed or moved test must not silently fall out of XDIST_FIRST, XDIST_UNGROUPED or its group."""
    from pathlib import Path

    from conftest import XDIST_GROUPS, XDIST_UNGROUPED
    root = Path(__file__).resolve().parents[2]
    for scope in (*XDIST_FIRST, *XDIST_UNGROUPED):
        if "::" not in scope:
            assert scope in XDIST_GROUPS.values(), scope
            continue
        path, name = scope.split("::")
        assert f"def {name}(" in (root / path).read_text(), scope
    for stem in XDIST_GROUPS:       # keyed by a file's name, in whichever tier it is
        assert len(list((root / "tests").glob(f"*/{stem}.py"))) == 1, stem

