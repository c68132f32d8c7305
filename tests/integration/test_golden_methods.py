"""Every method computes what it computed before the plug-in refactor (issue 31).

tests/integration/golden/methods-<cpu>.json are recordings of tests/integration/golden_methods.py: methods-avx512.json
on the trainer before its methods became plug-ins, methods-avx2.json later on an AVX2 machine,
methods-avx512-genuineintel.json on an Intel AVX-512 machine before the nested method configs.
On a machine whose signature (torch version, CPU capability and vendor, one thread) is a
recording's, every metric of every step and the final weights must be bit-identical.  On another
signature the CPU rounds differently, samples other tokens and takes another path, so there the
test checks only that every case runs and logs the same metric names.

A case whose method changed on purpose after a recording is re-recorded where a machine of that
signature is at hand (the recording's "rerecorded" says from which commit and why), and marked
"stale" where none is (its names are checked, its values not): the seven tool cases changed with
SimpleTIR's void turn (939bec2), re-recorded on AMD AVX-512 at afa49dc, stale on AVX2.
"""
from __future__ import annotations

import golden_methods
import pytest

RECORDINGS = golden_methods.recordings()


def _names(step: dict, recorded: dict) -> list:
    """A step's metric names, less those added after `recorded` was made (golden_methods.ADDED)."""
    return sorted(k for k in step if k in recorded or k not in golden_methods.ADDED)


@pytest.fixture(scope="module")
def fresh():
    """Every case, run now in one fresh one-thread process, in the order they were recorded."""
    return golden_methods.run_all_fresh()


def test_recordings_cover_every_case_and_agree_on_names():
    assert "methods-avx512.json" in RECORDINGS, "the pre-refactor recording is gone"
    for name, rec in RECORDINGS.items():
        assert set(rec["cases"]) == set(golden_methods.CASES), name
        assert golden_methods.golden_path(rec["signature"]).name == name, f"{name}: filed under another CPU"
    first = RECORDINGS["methods-avx512.json"]
    for name, rec in RECORDINGS.items():
        for case, want in first["cases"].items():
            got = rec["cases"][case]
            assert [_names(g, w) for g, w in zip(got["steps"], want["steps"])] == \
                [sorted(w) for w in want["steps"]], f"{name}, {case}: other metric names"


@pytest.mark.parametrize("name", sorted(golden_methods.CASES))
def test_method_matches_its_golden_run(name, fresh):
    sig = fresh["signature"]
    rec = RECORDINGS.get(golden_methods.golden_path(sig).name)
    comparable = rec is not None and rec["signature"] == sig
    rec = rec or RECORDINGS["methods-avx512.json"]
    got, want = fresh["cases"][name], rec["cases"][name]
    assert [_names(g, w) for g, w in zip(got["steps"], want["steps"])] == [sorted(s) for s in want["steps"]], \
        "the metric names changed"
    assert len(got["steps"]) == len(want["steps"])
    if not comparable:
        pytest.skip(f"recorded on {rec['signature']}, this machine is {sig}: names checked, values not comparable")
    if name in rec.get("stale", {}):
        pytest.skip(f"{golden_methods.golden_path(sig).name}: {rec['stale'][name]}: names checked, values not")
    for i, (g, w) in enumerate(zip(got["steps"], want["steps"])):
        diff = {k: (g[k], w[k]) for k in w if g[k] != w[k]}
        assert not diff, f"step {i + 1}: {diff}"
    assert got["weights_sha256"] == want["weights_sha256"]
