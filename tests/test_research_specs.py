"""Every sweep spec shipped under research/ plans without error: its fields are RLConfig fields
with valid values, and its model exists (the GPU map's 30M warm start is built by its own script,
so only its spec is checked there).  A typo in a spec fails here, not hours into a run."""
from pathlib import Path

import pytest

import rl_lab.models
from rl_lab.sweep import run_sweep

ROOT = Path(__file__).resolve().parent.parent / "research"
SPECS = sorted(p for p in ROOT.glob("*/*.yaml") if p.parent.name != "results")


def test_there_are_specs():
    assert len(SPECS) >= 20 and any(p.name == "map_gpu.yaml" for p in SPECS)


@pytest.mark.parametrize("spec", SPECS, ids=[f"{p.parent.name}/{p.name}" for p in SPECS])
def test_spec_plans(spec, monkeypatch):
    if spec.name == "map_gpu.yaml":   # its warm start is built by run_map_gpu.sh on the GPU machine
        real = rl_lab.models.check_model_spec
        monkeypatch.setattr(rl_lab.models, "check_model_spec",
                            lambda m, t: None if m == "warm-start:30M" else real(m, t))
    table = run_sweep(str(spec), dry_run=True)
    assert len(table) > 0
