"""tools/setup_lean.py, the labs-only install (issues 33 and 36): its platform branch, checked for
the systems a workshop brings (the install itself runs in CI's "lean install" phase, .ci/run)."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("setup_lean", ROOT / "tools" / "setup_lean.py")
setup_lean = importlib.util.module_from_spec(spec)
spec.loader.exec_module(setup_lean)


def test_the_torch_pin_is_read_from_the_lock():
    v = setup_lean.locked_version("torch")
    assert v and "+" not in v and v[0].isdigit()
    with pytest.raises(SystemExit, match="not pinned"):
        setup_lean.locked_version("no-such-package-here")


@pytest.mark.parametrize("system, machine", [("Darwin", "arm64"), ("Darwin", "x86_64"),
                                             ("Windows", "AMD64"), ("Linux", "aarch64")])
def test_macos_windows_and_arm_take_pypis_build(system, machine):
    attempts, why = setup_lean.torch_pip_args(system, machine, has_gpu=False, version="2.13.0")
    assert attempts == [["torch==2.13.0"]], (system, machine)
    assert "+cpu" not in str(attempts) and "index-url" not in str(attempts)
    assert system in why


def test_linux_x86_without_gpu_never_gets_the_cuda_build():
    attempts, why = setup_lean.torch_pip_args("Linux", "x86_64", has_gpu=False, version="2.13.0")
    assert all(a[0] == "torch==2.13.0+cpu" for a in attempts)
    assert attempts[-1][1:] == ["--index-url", setup_lean.CPU_INDEX]   # the fallback
    assert "CPU" in why


def test_a_gpu_and_an_override():
    assert setup_lean.torch_pip_args("Linux", "x86_64", True, "2.13.0")[0] == [["torch==2.13.0"]]
    attempts, why = setup_lean.torch_pip_args("Darwin", "arm64", False, "2.13.0",
                                              override="--index-url https://example.org/simple")
    assert attempts == [["torch==2.13.0", "--index-url", "https://example.org/simple"]]
    assert why == "TORCH_PIP_ARGS"


def test_the_venv_python_path_follows_the_os():
    p = setup_lean.venv_python(Path("v"))
    assert p.name in ("python", "python.exe")


def test_the_lean_extra_has_no_vllm_verl_or_book_tools():
    import tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    lab = " ".join(extras["lab"]).lower()
    assert "jupyterlab" in lab and "ipykernel" in lab
    for heavy in ("vllm", "verl", "jupyter-book", "trl", "scipy"):   # scipy: research/ only ([research])
        assert heavy not in lab, heavy
