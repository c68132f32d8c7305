"""A folder of wheels for the labs-only install on machines with no network (a workshop room).

One machine with a network downloads, for each platform the participants bring, every wheel the
labs-only install needs (torch, the package's dependencies, the [lab] extra, setuptools to build
the package) at the versions of rl_lab/constraints.txt; a USB stick or a local share carries the
folder (and a copy of this repository) to the room; each laptop installs from it with no index:

    python3 tools/wheelhouse.py --dest wheels                      # this machine's platform and Python
    python3 tools/wheelhouse.py --dest wheels --target linux-x86_64 macos-arm64 windows-amd64 \\
        --python 3.11 3.12                                         # what a room brings
    python3 tools/setup_lean.py --wheels wheels                    # on each laptop: no network used
    make wheelhouse WHEELHOUSE=wheels TARGETS="linux-x86_64 macos-arm64"

Targets (pip's platform tags): linux-x86_64 (torch's CPU build, the +cpu wheel) and linux-aarch64
(manylinux wheels for glibc 2.17 to 2.31), macos-arm64 (macOS 14 or older tags), windows-amd64.  Intel Macs have no torch wheel at the
locked version.  One folder holds every target: pip on each laptop picks the wheels that fit it.

pip download --platform evaluates environment markers (`; sys_platform == "win32"`) for the machine
it runs on, not for the target (pip issue 6117), so it would fetch Linux's dependencies for a
Windows laptop.  This script walks the dependencies itself: it downloads each wheel with --no-deps,
reads its Requires-Dist and evaluates the markers for the target.  A package in the lock is taken
at its locked version; one the lock has not (a Windows- or macOS-only dependency) at the newest
version that satisfies its dependents.  Standard library and pip only (pip's vendored `packaging`
when `packaging` is not installed); needs Python >= 3.11 (tomllib).
"""
from __future__ import annotations

import argparse
import email.parser
import os
import platform
import re
import subprocess
import sys
import time
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name, parse_wheel_filename
except ImportError:   # pip's own copy: any Python with pip has it
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "rl_lab" / "constraints.txt"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class Target:
    name: str
    tags: tuple[str, ...]          # pip download --platform (pip adds the older manylinux/macOS tags)
    sys_platform: str
    platform_system: str
    os_name: str
    platform_machine: str
    torch_local: str = ""          # "+cpu": PyTorch's CPU build (what tools/setup_lean.py asks for there)

    def markers(self, python: str) -> dict[str, str]:
        """PEP 508's environment on the target; python is X.Y.Z."""
        return {"sys_platform": self.sys_platform, "platform_system": self.platform_system,
                "os_name": self.os_name, "platform_machine": self.platform_machine,
                "python_version": minor(python), "python_full_version": python,
                "implementation_name": "cpython", "platform_python_implementation": "CPython",
                "implementation_version": python, "platform_release": "", "platform_version": "",
                "extra": ""}


def minor(python: str) -> str:
    return ".".join(python.split(".")[:2])


def full_version(python: str) -> str:
    """X.Y -> X.Y.99 (a laptop's newest patch release, for Requires-Python: soupsieve 4.1 needs
    3.11.5); X.Y.Z stays."""
    parts = python.split(".")
    if len(parts) not in (2, 3) or not all(x.isdigit() for x in parts):
        raise SystemExit(f"wheelhouse: --python takes X.Y or X.Y.Z, not {python!r}")
    return python if len(parts) == 3 else f"{python}.99"


def manylinux(arch: str, glibc: int = 31) -> tuple[str, ...]:
    """pip expands no manylinux_2_X tag to the older ones: glibc 2.31 (Ubuntu 20.04) down to 2.17."""
    return (*(f"manylinux_2_{v}_{arch}" for v in range(glibc, 16, -1)), f"manylinux2014_{arch}")


TARGETS = {t.name: t for t in (
    Target("linux-x86_64", manylinux("x86_64"), "linux", "Linux", "posix", "x86_64", "+cpu"),
    Target("linux-aarch64", manylinux("aarch64"), "linux", "Linux", "posix", "aarch64"),
    Target("macos-arm64", ("macosx_14_0_arm64",), "darwin", "Darwin", "posix", "arm64"),
    Target("windows-amd64", ("win_amd64",), "win32", "Windows", "nt", "AMD64"),
)}


def this_target() -> str:
    system, machine = platform.system(), platform.machine().lower()
    name = {("Linux", "x86_64"): "linux-x86_64", ("Linux", "amd64"): "linux-x86_64",
            ("Linux", "aarch64"): "linux-aarch64", ("Linux", "arm64"): "linux-aarch64",
            ("Darwin", "arm64"): "macos-arm64", ("Windows", "amd64"): "windows-amd64",
            ("Windows", "x86_64"): "windows-amd64"}.get((system, machine))
    if name is None:
        raise SystemExit(f"wheelhouse: no target for {system} {machine}; name one with --target")
    return name


def locked_versions(lock: Path | None) -> dict[str, str]:
    if lock is None:
        return {}
    out = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        m = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line.strip())
        if m:
            out[canonicalize_name(m.group(1))] = m.group(2)
    return out


def lean_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """What tools/setup_lean.py installs: torch, the package's dependencies and its [lab] extra, and
    setuptools (the package's build backend, which pip fetches to build it)."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    build = project["build-system"]["requires"]
    deps = project["project"]["dependencies"] + project["project"]["optional-dependencies"]["lab"]
    return [*build, *deps]


def wheel_metadata(wheel: Path) -> tuple[str, str, list[str]]:
    """(name, version, Requires-Dist) of a wheel file."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        msg = email.parser.BytesParser().parsebytes(z.read(meta))
    return msg["Name"], msg["Version"], msg.get_all("Requires-Dist") or []


def wanted(requires: list[str], env: dict[str, str], extras: set[str]) -> list[Requirement]:
    """The Requires-Dist entries that apply on the target for `extras` ("" is the base install)."""
    out = []
    for line in requires:
        req = Requirement(line)
        if req.marker is None:
            if "" in extras:
                out.append(req)
        elif "extra" not in str(req.marker):      # a base dependency on some platforms only
            if "" in extras and req.marker.evaluate(env):
                out.append(req)
        elif any(req.marker.evaluate({**env, "extra": e}) for e in extras if e):
            out.append(req)
    return out


class Walk:
    """Download the lean install's closure of wheels for one target and one Python."""

    def __init__(self, dest: Path, target: Target, python: str, locked: dict[str, str], pip: list[str]):
        self.dest, self.target, self.python, self.locked, self.pip = dest, target, python, locked, pip
        self.env = target.markers(python)
        dest.mkdir(parents=True, exist_ok=True)
        self.have: dict[str, Path] = {}          # canonical name -> its wheel for this target
        self.extras_done: dict[str, set[str]] = {}
        self.specs: dict[str, SpecifierSet] = {}

    def pin(self, req: Requirement) -> str:
        name = canonicalize_name(req.name)
        if name in self.locked:
            version = self.locked[name]
            if name == "torch" and self.target.torch_local and "+" not in version:
                version += self.target.torch_local
            return f"{name}=={version}"
        spec = self.specs.get(name, SpecifierSet()) & req.specifier
        self.specs[name] = spec
        return f"{name}{spec}"

    def download(self, pins: list[str]) -> None:
        abi = "cp" + minor(self.python).replace(".", "")
        cmd = [*self.pip, "download", "--no-deps", "--only-binary=:all:", "--dest", str(self.dest),
               "--python-version", self.python, "--implementation", "cp", "--abi", abi,
               *[a for tag in self.target.tags for a in ("--platform", tag)], *pins]
        print(f"wheelhouse [{self.target.name} py{self.python}]: {len(pins)} wheel(s): "
              f"{' '.join(pins[:6])}{' ...' if len(pins) > 6 else ''}", flush=True)
        r = subprocess.run(cmd)
        if r.returncode != 0 and any(p.startswith("torch==") and "+" in p for p in pins):
            # PyTorch's CPU build is on its own index (a local --find-links may hold it too)
            r = subprocess.run([*cmd, "--extra-index-url", CPU_INDEX])
        if r.returncode != 0:
            raise SystemExit(f"wheelhouse: pip download failed for {self.target.name}, Python {self.python} "
                             f"(a pin with no wheel there? --no-lock lets pip pick versions, then install "
                             f"with CONSTRAINTS= python3 tools/setup_lean.py --wheels ...)")

    def find(self, name: str) -> Path | None:
        """The wheel of `name` in dest that fits this target (pip download may have kept an older one)."""
        best = None
        for whl in self.dest.glob("*.whl"):
            wname, version, _, tags = parse_wheel_filename(whl.name)
            if canonicalize_name(wname) != name or not self._fits(tags):
                continue
            want = self.locked.get(name)
            if want and str(version).split("+")[0] != want.split("+")[0]:
                continue
            if want and name == "torch" and self.target.torch_local and not str(version).endswith(self.target.torch_local):
                continue
            if best is None or version > best[0]:
                best = (version, whl)
        return best[1] if best else None

    def _fits(self, tags) -> bool:
        abi = "cp" + minor(self.python).replace(".", "")
        arch = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "arm64", "AMD64": "amd64"}[self.target.platform_machine]
        for t in tags:
            fat = self.target.sys_platform == "darwin" and t.platform.endswith("_universal2")   # x86_64 + arm64
            plat_ok = t.platform == "any" or ((arch in t.platform or fat) and (
                (self.target.sys_platform == "linux" and "linux" in t.platform)
                or (self.target.sys_platform == "darwin" and t.platform.startswith("macosx"))
                or (self.target.sys_platform == "win32" and t.platform.startswith("win"))))
            py_ok = t.interpreter in (abi, "py3", f"py{abi[2:]}") or (
                t.abi == "abi3" and t.interpreter.startswith("cp3") and int(t.interpreter[3:]) <= int(abi[3:]))
            if plat_ok and py_ok and t.abi in (abi, "abi3", "none"):
                return True
        return False

    def run(self, roots: list[str]) -> list[Path]:
        todo = [Requirement(r) for r in roots]
        while todo:
            batch: dict[str, Requirement] = {}
            for req in todo:
                name = canonicalize_name(req.name)
                if {""} | set(req.extras) <= self.extras_done.get(name, set()):
                    continue
                if name in batch:
                    batch[name].extras |= req.extras
                    batch[name].specifier &= req.specifier
                else:
                    batch[name] = Requirement(str(req))
            if not batch:
                break
            missing = [self.pin(r) for n, r in batch.items() if n not in self.have and self.find(n) is None]
            for group in ([p for p in missing if p.startswith("torch==")],    # alone: it may need the
                          [p for p in missing if not p.startswith("torch==")]):  # CPU index (download())
                if group:
                    self.download(group)
            todo = []
            for name, req in batch.items():
                whl = self.have.get(name) or self.find(name)
                if whl is None:
                    raise SystemExit(f"wheelhouse: pip downloaded no wheel of {name} for {self.target.name}")
                self.have[name] = whl
                done = self.extras_done.setdefault(name, set())
                new = ({""} | set(req.extras)) - done
                todo += wanted(wheel_metadata(whl)[2], self.env, new)
                done |= new
        return sorted(self.have.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--dest", type=Path, default=ROOT / "wheels", help="the folder (default: wheels/)")
    ap.add_argument("--target", nargs="+", choices=sorted(TARGETS), default=None,
                    help="platforms (default: this machine's)")
    ap.add_argument("--python", nargs="+", default=None,
                    help="the laptops' Pythons, X.Y (its newest patch release) or X.Y.Z (default: this interpreter's)")
    ap.add_argument("--no-lock", action="store_true",
                    help="let pip pick the versions instead of rl_lab/constraints.txt's")
    args = ap.parse_args(argv)
    t0 = time.time()
    targets = [TARGETS[t] for t in (args.target or [this_target()])]
    pythons = [full_version(p) for p in args.python] if args.python else [platform.python_version()]
    locked = locked_versions(None if args.no_lock else LOCK)
    args.dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    roots = [*lean_requirements(), "torch"]
    if args.no_lock:
        torch_pin = locked_versions(LOCK).get("torch")
        roots.append(f"torch=={torch_pin}")
    for target in targets:
        for py in pythons:
            got = Walk(args.dest.resolve(), target, py, locked, pip).run(roots)
            size = sum(w.stat().st_size for w in got) / 2**20
            print(f"wheelhouse: {target.name}, Python {py}: {len(got)} wheels, {size:.0f} MiB")
    total = sum(f.stat().st_size for f in args.dest.glob("*.whl")) / 2**20
    print(f"wheelhouse: {args.dest} holds {len(list(args.dest.glob('*.whl')))} wheels, {total:.0f} MiB "
          f"({time.time() - t0:.0f} s).  On each laptop: python3 tools/setup_lean.py --wheels {args.dest}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PIP_PROGRESS_BAR", "off")
    sys.exit(main())
