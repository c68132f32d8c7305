"""The labs-only install: a venv with torch, the package and JupyterLab, without vLLM, verl or npm.

    python3 tools/setup_lean.py              # creates .venv (Linux, macOS, WSL2; Windows: py tools\\setup_lean.py)
    python3 tools/setup_lean.py --venv DIR   # another folder
    make setup-lean                          # the same, on systems with make
    python3 tools/setup_lean.py --wheels DIR # no network: every wheel from DIR (tools/wheelhouse.py)

Every lab runs in it except "Measure your mismatch", which needs vLLM (`bash tools/install_vllm.sh`
adds it on Linux) and says so in its first cell.  It is what a workshop laptop needs; `make setup`
installs the rest (vLLM, verl, the book's and the tests' tools).

Only the standard library is used, so any Python >= 3.11 can run it.  torch comes from:
  Linux x86-64 without an NVIDIA GPU -> torch==V+cpu from PyTorch's CPU index (not the CUDA build)
  Linux x86-64 with one              -> torch==V from PyPI (its CUDA build)
  macOS, Windows, Linux on ARM       -> torch==V from PyPI (CPU builds there; macOS also has MPS,
                                        which rl_lab does not use)
where V is the pin in rl_lab/constraints.txt.  TORCH_PIP_ARGS (e.g. "--index-url <an index>")
replaces the choice, as in `make setup`.  The other packages are installed at the versions of
rl_lab/constraints.txt (CONSTRAINTS= turns that off).

With --wheels DIR (or RL_LAB_WHEELS=DIR) pip reads every wheel from DIR and asks no index
(`--no-index --find-links DIR`): a workshop room without Wi-Fi, with the folder that
tools/wheelhouse.py filled on a machine with a network (README.md, "Installing without a network").
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "rl_lab" / "constraints.txt"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def locked_version(name: str, lock: Path = LOCK) -> str:
    """The pin of `name` in the lock, without a local label (+cpu)."""
    for line in lock.read_text(encoding="utf-8").splitlines():
        m = re.match(rf"{re.escape(name)}==([^+\s;]+)", line.strip(), flags=re.I)
        if m:
            return m.group(1)
    raise SystemExit(f"setup_lean: {name} is not pinned in {lock}; run tools/lock.sh or pass --torch-version")


def torch_pip_args(system: str, machine: str, has_gpu: bool, version: str,
                   override: str = "") -> tuple[list[list[str]], str]:
    """pip arguments that install torch on this kind of machine, tried in order until one works,
    and why (see the module docstring)."""
    if override:
        return [[f"torch=={version}", *shlex.split(override)]], "TORCH_PIP_ARGS"
    linux_x86 = system == "Linux" and machine.lower() in ("x86_64", "amd64")
    if linux_x86 and not has_gpu:   # a local wheel if pip's find-links has one, else the CPU index
        cpu = f"torch=={version}+cpu"
        return [[cpu], [cpu, "--index-url", CPU_INDEX]], "Linux x86-64, no NVIDIA GPU: the CPU build"
    if linux_x86:
        return [[f"torch=={version}"]], "an NVIDIA GPU (nvidia-smi -L): PyPI's CUDA build"
    return [[f"torch=={version}"]], f"{system} {machine}: PyPI's build (CPU)"


def offline(attempts: list[list[str]], wheels: str) -> list[list[str]]:
    """The torch attempts for an install from a folder: no index, so no index fallback."""
    kept = [a for a in attempts if not any(x.startswith(("--index-url", "--extra-index-url")) for x in a)]
    return [[*a, "--no-index", "--find-links", wheels] for a in kept or [attempts[0][:1]]]


def has_nvidia_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def run(cmd: list[str]) -> None:
    print("setup_lean:", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", default=".venv", help="the venv folder (created if missing; default .venv)")
    ap.add_argument("--torch-version", default=None, help="default: the pin in rl_lab/constraints.txt")
    ap.add_argument("--wheels", default=os.environ.get("RL_LAB_WHEELS") or None,
                    help="install with no index, every wheel from this folder (tools/wheelhouse.py)")
    args = ap.parse_args(argv)
    if sys.version_info < (3, 11):
        print(f"setup_lean: needs Python >= 3.11; this is {platform.python_version()}", file=sys.stderr)
        return 1
    t0 = time.time()
    venv = Path(args.venv).resolve()
    py = venv_python(venv)
    wheels = str(Path(args.wheels).resolve()) if args.wheels else ""
    if wheels:
        if not any(Path(wheels).glob("*.whl")):
            print(f"setup_lean: {wheels} holds no wheels (python3 tools/wheelhouse.py --dest {wheels})",
                  file=sys.stderr)
            return 1
        print(f"setup_lean: no index: every wheel from {wheels}")
    no_index = ["--no-index", "--find-links", wheels] if wheels else []
    if not py.exists():
        run([sys.executable, "-m", "venv", venv])
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    constraints = os.environ.get("CONSTRAINTS", str(LOCK))
    with_lock = ["-c", constraints] if constraints else []
    if not wheels:   # offline, the venv's own pip installs from the folder as well
        run([*pip, "-U", "pip"])
    torch_args, why = torch_pip_args(platform.system(), platform.machine(), has_nvidia_gpu(),
                                     args.torch_version or locked_version("torch"),
                                     os.environ.get("TORCH_PIP_ARGS", ""))
    if wheels:
        torch_args = offline(torch_args, wheels)
    print(f"setup_lean: torch for {why}")
    for i, attempt in enumerate(torch_args):
        try:
            run([*pip, *attempt])
            break
        except subprocess.CalledProcessError:
            if i == len(torch_args) - 1:
                raise
    run([*pip, *no_index, *with_lock, "-e", f"{ROOT}[lab]"])
    run([py, "-m", "rl_lab.tools.kernel", "install"])   # ipykernel, after rl_lab's thread policy
    # `make lab` takes this venv as set up while the stamp is newer than pyproject.toml and the lock
    # (the Makefile's LEAN_STAMP); a `make setup` over it writes .setup-stamp instead.
    (venv / ".setup-lean-stamp").touch()
    size = folder_bytes(venv) / 2**30
    print(f"setup_lean: done in {time.time() - t0:.0f} s; {venv} holds {size:.1f} GiB "
          f"(no vLLM, verl or npm: `make setup` adds them)")
    activate = venv / ("Scripts\\activate" if os.name == "nt" else "bin/activate")
    print(f"setup_lean: activate with  {'' if os.name == 'nt' else '. '}{activate}   then  rl-lab doctor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
