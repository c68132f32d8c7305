"""tools/wheelhouse.py and `setup_lean.py --wheels` (issue 56): the offline install of a workshop room.

The real download and the install with no index run in CI (.ci/run, phase "lean install": this
platform's wheels into a folder, then the labs-only install from it with the index off).  Here: the
walk through the dependencies with each target's markers (pip download --platform would use this
machine's), on fake wheels, and the platform tags, pins and pip arguments.
"""
from __future__ import annotations

import importlib.util
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"_tools_{name}", ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[f"_tools_{name}"] = mod      # a dataclass looks its module up
    spec.loader.exec_module(mod)
    return mod


wh = load("wheelhouse")
setup_lean = load("setup_lean")
from packaging.requirements import Requirement  # noqa: E402
from packaging.utils import parse_wheel_filename  # noqa: E402


def test_the_roots_are_what_setup_lean_installs():
    roots = {Requirement(r).name for r in wh.lean_requirements()}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for r in project["project"]["dependencies"] + project["project"]["optional-dependencies"]["lab"]:
        assert Requirement(r).name in roots
    assert {"torch", "jupyterlab", "setuptools"} <= roots, "setuptools: pip builds the package with it"
    assert "vllm" not in roots and "jupyter-book" not in roots


@pytest.mark.parametrize("target, expect", [
    ("windows-amd64", {"colorama", "pywinpty"}), ("macos-arm64", {"appnope"}),
    ("linux-x86_64", {"nvidia-cublas"}), ("linux-aarch64", set()),
])
def test_markers_are_the_targets_not_this_machines(target, expect):
    requires = ['colorama; sys_platform == "win32"', "pywinpty>=2.0.1; os_name == 'nt'",
                'appnope; platform_system == "Darwin"',
                'nvidia-cublas==13.1; platform_system == "Linux" and platform_machine == "x86_64"',
                'pytest; extra == "test"', 'numpy>=1.26', 'tomli; python_version < "3.11"']
    env = wh.TARGETS[target].markers("3.11.99")
    got = {r.name for r in wh.wanted(requires, env, {""})}
    assert got == expect | {"numpy"}, target
    assert {r.name for r in wh.wanted(requires, env, {"test"})} == {"pytest"}, "an extra's own entries only"


def test_pins_follow_the_lock_and_torch_takes_the_cpu_build_on_linux_x86(tmp_path):
    locked = {"torch": "2.13.0", "numpy": "2.3.5"}
    linux = wh.Walk(tmp_path, wh.TARGETS["linux-x86_64"], "3.11.99", locked, [])
    mac = wh.Walk(tmp_path, wh.TARGETS["macos-arm64"], "3.11.99", locked, [])
    assert linux.pin(Requirement("torch>=2.4")) == "torch==2.13.0+cpu"
    assert mac.pin(Requirement("torch>=2.4")) == "torch==2.13.0"
    assert mac.pin(Requirement("NumPy>=1.26")) == "numpy==2.3.5"
    assert mac.pin(Requirement("appnope>=0.1")) == "appnope>=0.1"
    assert mac.pin(Requirement("appnope<1")) in ("appnope<1,>=0.1", "appnope>=0.1,<1"), "dependents' ranges meet"


@pytest.mark.parametrize("wheel, fits", [
    ("tokenizers-0.23.3-cp310-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", {"linux-x86_64"}),
    ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", {"linux-x86_64"}),
    ("torch-2.13.0-cp311-none-macosx_11_0_arm64.whl", {"macos-arm64"}),
    ("fonttools-4.68.0-cp311-cp311-macosx_10_9_universal2.whl", {"macos-arm64"}),
    ("numpy-2.3.5-cp311-cp311-win_amd64.whl", {"windows-amd64"}),
    ("numpy-2.3.5-cp312-cp312-win_amd64.whl", set()),               # another Python
    ("six-1.17.0-py2.py3-none-any.whl", set(wh.TARGETS)),
])
def test_which_wheel_fits_which_target(wheel, fits, tmp_path):
    tags = parse_wheel_filename(wheel)[3]
    got = {name for name, t in wh.TARGETS.items() if wh.Walk(tmp_path, t, "3.11.7", {}, [])._fits(tags)}
    assert got == fits


def test_manylinux_tags_reach_back_to_glibc_2_17():
    tags = wh.TARGETS["linux-x86_64"].tags
    assert "manylinux_2_28_x86_64" in tags and "manylinux_2_17_x86_64" in tags and "manylinux2014_x86_64" in tags
    assert wh.full_version("3.12") == "3.12.99" and wh.full_version("3.11.4") == "3.11.4"
    with pytest.raises(SystemExit):
        wh.full_version("3")


def fake_wheel(folder: Path, name: str, version: str, requires: list[str], tag: str = "py3-none-any") -> Path:
    path = folder / f"{name}-{version}-{tag}.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}-{version}.dist-info/METADATA", meta)
    return path


def test_the_walk_downloads_each_targets_closure_once(tmp_path, monkeypatch):
    """A fake index: `download` writes the wheels pip would have; the walk follows Requires-Dist
    with the target's markers and extras, asks for each package once, and stops."""
    index = {
        "app": ["lib[fast]>=1", 'winonly; sys_platform == "win32"', 'maconly; sys_platform == "darwin"'],
        "lib": ["base", 'speedup; extra == "fast"'],
        "base": [], "speedup": ["base"], "winonly": ["base"], "maconly": [],
    }
    asked: list[str] = []

    def download(self, pins):
        for pin in pins:
            req = Requirement(pin)
            asked.append(req.name)
            version = str(next(iter(req.specifier)).version) if req.specifier and "==" in str(req.specifier) else "1.0"
            fake_wheel(self.dest, req.name, version, index[req.name])

    monkeypatch.setattr(wh.Walk, "download", download)
    got = wh.Walk(tmp_path / "w", wh.TARGETS["windows-amd64"], "3.11.99", {"base": "2.0"}, []).run(["app"])
    names = sorted(parse_wheel_filename(p.name)[0] for p in got)
    assert names == ["app", "base", "lib", "speedup", "winonly"]
    assert sorted(asked) == names, "each package downloaded once"
    assert any(p.name == "base-2.0-py3-none-any.whl" for p in got), "the lock's version"
    asked.clear()
    got = wh.Walk(tmp_path / "w", wh.TARGETS["macos-arm64"], "3.11.99", {"base": "2.0"}, []).run(["app"])
    assert sorted(parse_wheel_filename(p.name)[0] for p in got) == ["app", "base", "lib", "maconly", "speedup"]
    assert asked == ["maconly"], "the wheels already in the folder are not downloaded again"


def test_setup_lean_from_a_folder_asks_no_index():
    attempts, _ = setup_lean.torch_pip_args("Linux", "x86_64", False, "2.13.0")
    off = setup_lean.offline(attempts, "/w")
    assert off == [["torch==2.13.0+cpu", "--no-index", "--find-links", "/w"]], "no fallback to the CPU index"
    attempts, _ = setup_lean.torch_pip_args("Darwin", "arm64", False, "2.13.0", override="--index-url https://x")
    assert setup_lean.offline(attempts, "/w") == [["torch==2.13.0", "--no-index", "--find-links", "/w"]]
    text = (ROOT / "tools" / "setup_lean.py").read_text()
    assert '"--no-index", "--find-links", wheels' in text and "*no_index, *with_lock" in text


def test_an_empty_folder_is_refused(tmp_path):
    assert setup_lean.main(["--venv", str(tmp_path / "v"), "--wheels", str(tmp_path)]) == 1
    assert not (tmp_path / "v").exists(), "refused before it makes a venv"
