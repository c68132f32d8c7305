"""Two commands from a fresh clone (issue 56): `make book` and `make test` each run `make setup` first
when the venv is missing or older than pyproject.toml or the lock, through a stamp the setup writes
($(VENV)/.setup-stamp); `make lab` is content with the labs-only install (its own stamp, written by
tools/setup_lean.py).  Checked with `make -n` (nothing is installed or built) on a throwaway VENV.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SETUP_LINE = "install_torch.sh"     # a line only the setup's recipe has
LEAN_LINE = "tools/setup_lean.py"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")


def plan(target: str, venv: Path) -> str:
    """What `make -n TARGET` would run with VENV=venv (a dry run: the recursive make inherits -n)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    r = subprocess.run(["make", "-n", "--no-print-directory", target, f"VENV={venv}"], cwd=REPO,
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"make -n {target} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def stamp(venv: Path, name: str = ".setup-stamp", *, age_s: float = 0.0) -> Path:
    venv.mkdir(parents=True, exist_ok=True)
    path = venv / name
    path.touch()
    newest = max((REPO / f).stat().st_mtime for f in ("pyproject.toml", "rl_lab/constraints.txt"))
    t = newest - age_s if age_s else max(newest + 60, path.stat().st_mtime)
    os.utime(path, (t, t))
    return path


@pytest.mark.parametrize("target", ["book", "test", "lint"])
def test_a_missing_venv_is_set_up_first(target, tmp_path):
    out = plan(target, tmp_path / "venv")
    assert "running make setup first" in out and SETUP_LINE in out, out
    assert f"touch {tmp_path / 'venv' / '.setup-stamp'}" in out, "the setup must write its stamp"


@pytest.mark.parametrize("target", ["book", "test"])
def test_a_fresh_venv_is_not_set_up_again(target, tmp_path):
    stamp(tmp_path / "venv")
    out = plan(target, tmp_path / "venv")
    assert SETUP_LINE not in out and "running make setup" not in out, out
    assert ("build_book.sh" if target == "book" else "pytest") in out


def test_a_venv_older_than_the_lock_is_set_up_again(tmp_path):
    stamp(tmp_path / "venv", age_s=3600)
    out = plan("book", tmp_path / "venv")
    assert "running make setup first" in out and SETUP_LINE in out, out


def test_make_setup_alone_still_runs_and_writes_the_stamp(tmp_path):
    stamp(tmp_path / "venv")
    out = plan("setup", tmp_path / "venv")   # explicit: runs whatever the stamp says
    assert SETUP_LINE in out and ".setup-stamp" in out


def test_make_lab_keeps_to_a_lean_venv(tmp_path):
    venv = tmp_path / "venv"
    stamp(venv, ".setup-lean-stamp")
    out = plan("lab", venv)
    assert SETUP_LINE not in out and LEAN_LINE not in out and "jupyter lab" in out, out
    stamp(venv, ".setup-lean-stamp", age_s=3600)   # the lock changed: the lean install again, not the full one
    out = plan("lab", venv)
    assert LEAN_LINE in out and SETUP_LINE not in out, out
    assert "running make setup first" in plan("lab", tmp_path / "none"), "no venv at all: the full setup"


def test_setup_lean_writes_its_stamp():
    assert '".setup-lean-stamp"' in (REPO / "tools" / "setup_lean.py").read_text()
    assert "$(VENV)/.setup-lean-stamp" in (REPO / "Makefile").read_text()
