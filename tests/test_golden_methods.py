"""Every method computes what it computed before the plug-in refactor (issue 31).

tests/golden/methods.json was recorded by tests/golden_methods.py on the trainer before its
methods became plug-ins.  On the machine signature it records (torch version, CPU capability, one
thread) every metric of every step and the final weights must be bit-identical.  On another
signature the CPU rounds differently, samples other tokens and takes another path, so there the
test checks only that every case runs and logs the same metric names.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden_methods  # noqa: E402

GOLDEN = json.loads(golden_methods.GOLDEN.read_text())


@pytest.fixture(scope="module")
def fresh():
    """Every case, run now in one fresh one-thread process, in the order they were recorded."""
    return golden_methods.run_all_fresh()


def test_every_case_is_recorded():
    assert set(GOLDEN["cases"]) == set(golden_methods.CASES)


@pytest.mark.parametrize("name", sorted(golden_methods.CASES))
def test_method_matches_its_golden_run(name, fresh):
    got, want = fresh["cases"][name], GOLDEN["cases"][name]
    assert [sorted(s) for s in got["steps"]] == [sorted(s) for s in want["steps"]], "the metric names changed"
    if fresh["signature"] != GOLDEN["signature"]:
        pytest.skip(f"recorded on {GOLDEN['signature']}, this machine is {fresh['signature']}: "
                    "names checked, values not comparable")
    for i, (g, w) in enumerate(zip(got["steps"], want["steps"])):
        diff = {k: (g[k], w[k]) for k in w if g[k] != w[k]}
        assert not diff, f"step {i + 1}: {diff}"
    assert got["weights_sha256"] == want["weights_sha256"]
