"""rl_lab's thread policy (issue 33; BENCHMARKS.md, section 9): OMP_WAIT_POLICY=PASSIVE by default,
set before torch loads OpenMP, overridable; and the labs' kernel, which imports rl_lab first."""
import json
import os
import subprocess
import sys

import pytest

PROBE = "import os, rl_lab; print(os.environ.get('OMP_WAIT_POLICY'))"


def policy_seen(code: str, **env) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "RL_LAB_THREAD_POLICY")}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip().splitlines()[-1]


def test_passive_by_default_and_the_users_setting_wins():
    assert policy_seen(PROBE) == "PASSIVE"
    assert policy_seen(PROBE, OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"
    assert policy_seen(PROBE, RL_LAB_THREAD_POLICY="off") == "None"


def test_not_set_after_torch_is_loaded():
    """OpenMP has read its environment by then: setting it would only mislead."""
    assert policy_seen("import torch; " + PROBE) == "None"


def test_the_kernel_install_points_at_rl_lab_kernel(tmp_path):
    from rl_lab.tools.kernel import install
    folder = install(prefix=str(tmp_path))
    spec = json.loads((folder / "kernel.json").read_text())
    assert spec["argv"][:3] == [sys.executable, "-m", "rl_lab.tools.kernel"] and "{connection_file}" in spec["argv"]
    assert folder.is_relative_to(tmp_path)


def test_the_old_kernel_module_still_runs_the_kernel(tmp_path):
    """Kernel specs on users' machines name `python -m rl_lab.kernel`: it calls rl_lab.tools.kernel,
    whose install writes the new module path."""
    out = subprocess.run([sys.executable, "-m", "rl_lab.kernel", "install", "--prefix", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (spec_file,) = tmp_path.rglob("kernel.json")
    assert json.loads(spec_file.read_text())["argv"][:3] == [sys.executable, "-m", "rl_lab.tools.kernel"]


@pytest.mark.slow
def test_a_lab_that_imports_torch_first_gets_the_policy_in_the_kernel(tmp_path, monkeypatch):
    """The labs' order (torch, then rl_lab) under the registered kernel: OpenMP sees PASSIVE."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    from rl_lab.tools.kernel import install
    install(prefix=str(tmp_path))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, torch\nimport rl_lab\nprint(os.environ.get('OMP_WAIT_POLICY'))")])
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("RL_LAB_THREAD_POLICY", raising=False)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share" / "jupyter"))   # the kernel just installed
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    assert nb.cells[0].outputs[0]["text"].strip() == "PASSIVE"
