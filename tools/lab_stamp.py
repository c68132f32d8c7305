"""Which labs `make test` still has to run under nbval after `make book`.

`make book` executes every lab listed in _toc.yml and fails on any cell error (an `assert`
included), which is what `pytest --nbval-lax` checks too.  So a lab that the book build has just
executed, from the very same files and in the same environment, would only pass nbval a second
time: in CI, where `make test` follows `make book`, that was about seven minutes spent twice.

After a successful build, tools/build_book.sh calls `--record`: it writes the labs the build
executed and one fingerprint of everything they could depend on to _build/labs_executed.json.
`make test` calls `--stale`, which prints the labs nbval must still run: all of them unless the
record exists and its fingerprint is today's.  The fingerprint covers

  * the content of every file git tracks or would track (the labs, rl_lab, its checkpoints, the
    research tables the labs read, the config): any edit, anywhere, runs every lab again;
  * the Python version and every installed distribution's name and version;
  * the environment variables that change what a lab does (RL_LAB_PRESET, RL_LAB_SOLUTIONS,
    OMP_NUM_THREADS).

Outside a git checkout there is no fingerprint and every lab runs.  `RL_LAB_NBVAL_ALL=1 make test`
runs every lab regardless.

    python tools/lab_stamp.py --record     # after a successful book build
    python tools/lab_stamp.py --stale      # one lab path per line
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = Path("_build") / "labs_executed.json"
ENV_VARS = {"RL_LAB_PRESET": "smoke", "RL_LAB_SOLUTIONS": "1", "OMP_NUM_THREADS": ""}


def repository_files(root: Path) -> list[str] | None:
    """Files git tracks or would track (not ignored), sorted; None outside a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=root, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return sorted(set(p for p in out.stdout.decode().split("\0") if p))


def fingerprint(root: Path = ROOT, env: dict | None = None) -> str | None:
    """sha256 over the repository's files, the interpreter, the installed distributions and
    ENV_VARS; None when the files cannot be listed."""
    files = repository_files(root)
    if files is None:
        return None
    env = os.environ if env is None else env
    h = hashlib.sha256()
    for rel in files:
        path = root / rel
        if path.is_file():   # a file deleted but still in the index is skipped
            h.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    h.update(sys.version.encode())
    dists = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions())
    h.update("\n".join(dists).encode())
    for name, default in ENV_VARS.items():
        h.update(f"{name}={env.get(name, default)}".encode())
    return h.hexdigest()


def toc_labs(root: Path = ROOT) -> list[str]:
    """The labs the book executes: the `labs/...` entries of _toc.yml, as paths to .md files."""
    import yaml
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    found = []

    def walk(node):
        if isinstance(node, dict):
            if str(node.get("file", "")).startswith("labs/"):
                found.append(node["file"] + ".md")
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(toc)
    return found


def record(root: Path = ROOT) -> dict:
    """Write the record of a successful book build (call it only then)."""
    data = {"fingerprint": fingerprint(root), "labs": toc_labs(root)}
    (root / RECORD).parent.mkdir(parents=True, exist_ok=True)
    (root / RECORD).write_text(json.dumps(data, indent=1) + "\n")
    return data


def stale_labs(root: Path = ROOT, env: dict | None = None) -> list[str]:
    """The labs (paths relative to root) that nbval must still run."""
    env = os.environ if env is None else env
    every = sorted(str(p.relative_to(root)) for p in (root / "labs").glob("*.md"))
    if env.get("RL_LAB_NBVAL_ALL", "0") not in ("", "0"):
        return every
    try:
        data = json.loads((root / RECORD).read_text())
    except (OSError, ValueError):
        return every
    current = fingerprint(root, env)
    if current is None or data.get("fingerprint") != current:
        return every
    executed = set(data.get("labs", []))
    return [lab for lab in every if lab not in executed]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--record", action="store_true", help="record a successful book build's labs")
    group.add_argument("--stale", action="store_true", help="print the labs nbval must still run")
    a = ap.parse_args(argv)
    if a.record:
        data = record()
        print(f"lab_stamp: recorded {len(data['labs'])} labs executed by the book build", file=sys.stderr)
        return
    stale = stale_labs()
    every = len(list((ROOT / "labs").glob("*.md")))
    if len(stale) < every:
        print(f"lab_stamp: {every - len(stale)} of {every} labs were executed by `make book` from these "
              f"exact files and environment; nbval runs the other {len(stale)} "
              f"(RL_LAB_NBVAL_ALL=1 runs all)", file=sys.stderr)
    print("\n".join(stale))


if __name__ == "__main__":
    main()
