"""The labs' Jupyter kernel: ipykernel, started after `import rl_lab` has set the thread policy.

    python -m rl_lab.tools.kernel install [--prefix DIR]   # register it as this environment's "python3"
    python -m rl_lab.tools.kernel -f CONNECTION_FILE       # what the registered kernel spec runs

A lab imports torch before rl_lab, too late for OpenMP to see rl_lab's OMP_WAIT_POLICY default
(rl_lab/__init__.py); running `python -m rl_lab.tools.kernel` imports rl_lab before any cell does.
`make setup` and `tools/setup_lean.py` register it; the kernel is otherwise plain ipykernel.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def install(prefix: str | None = None) -> Path:
    """Install ipykernel's `python3` spec into `prefix` (default: this environment) and point its
    argv at this module; returns the spec's folder."""
    from ipykernel.kernelspec import install as install_ipykernel

    folder = Path(install_ipykernel(kernel_name="python3", display_name="Python 3",
                                    prefix=prefix or sys.prefix))
    spec_file = folder / "kernel.json"
    spec = json.loads(spec_file.read_text())
    spec["argv"] = [sys.executable, "-m", "rl_lab.tools.kernel", "-f", "{connection_file}"]
    spec_file.write_text(json.dumps(spec, indent=1) + "\n")
    return folder


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["install"]:
        prefix = argv[argv.index("--prefix") + 1] if "--prefix" in argv else None
        print(f"installed the python3 kernel (rl_lab.tools.kernel) in {install(prefix)}")
        return
    from ipykernel import kernelapp

    sys.argv = [sys.argv[0], *argv]
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
