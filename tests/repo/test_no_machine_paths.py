"""No tracked text file names a folder that exists only on one machine (issue 34).

Twenty research specs once loaded their model from a scratch folder left behind by the run that
made them: CI passed on that machine and failed on every other.  A shipped file may name what the
repository ships or builds (by name, or by a path relative to the repository), never an absolute
path into a machine's temporary folder, a home folder, or the folder this clone sits in.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Absolute paths into scratch and home folders: /tmp/..., /var/tmp/..., /root/..., /home/...
# An absolute path starts the text or follows a character that cannot end a path component
# (so "ws/tmp/x", a relative path, is not one).
SCRATCH = re.compile(r"(?:^|(?<=[\s\"'`(=:,\[{<>]))/(?:var/)?(?:tmp|root|home)/", re.M)

# Deliberate mentions, each with the reason.  Key: (repository-relative path, the start of the
# matched text; "" allows every match in that file).  The sandbox tests build their paths with
# tempfile.gettempdir(), not a literal, so they need no entry.
ALLOWED: dict[tuple[str, str], str] = {
    ("tests/repo/test_no_machine_paths.py", ""): "this file's own examples of what the check catches",
}


def machine_folders() -> list[str]:
    """This machine's folders that no other machine shares: the system's temporary folder
    (when it is not one of the patterns above), the clone's own folder, and the folder it sits
    in (unless that is a system folder such as / or /usr)."""
    folders = {str(Path(tempfile.gettempdir()).resolve()), str(ROOT)}
    parent = ROOT.parent
    if len(parent.parts) > 1 and parent.parts[1] not in {"usr", "opt", "srv", "mnt", "var", "etc"}:
        folders.add(str(parent))
    return sorted(f for f in folders if f not in ("/", "/tmp", "/var/tmp"))


def offending_lines(text: str, folders: list[str]) -> list[tuple[int, str]]:
    """(line number, matched text) of each absolute scratch/home/clone path in `text`."""
    hits = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in SCRATCH.finditer(line):
            hits.append((n, line[m.start():].split()[0].rstrip("\"'`),;:]}>")))
        for folder in folders:
            for m in re.finditer(re.escape(folder) + r"(?=/|\b)", line):
                hits.append((n, folder))
    return hits


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, check=False)
    if out.returncode != 0:
        pytest.skip("not a git checkout: the tracked files are unknown")
    files = []
    for name in out.stdout.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue
        data = path.read_bytes()[:2_000_000]
        if b"\0" in data:              # binary (checkpoints, images)
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        files.append(path)
    return files


def test_no_tracked_file_names_a_machine_folder():
    folders = machine_folders()
    bad = []
    for path in tracked_text_files():
        rel = str(path.relative_to(ROOT))
        for n, hit in offending_lines(path.read_text(encoding="utf-8"), folders):
            if not any(rel == a and hit.startswith(h) for a, h in ALLOWED):
                bad.append(f"{rel}:{n}: {hit}")
    assert not bad, ("absolute paths into one machine's folders (name what the repository ships, or a "
                     "repository-relative path; a deliberate mention goes into ALLOWED with a reason):\n  "
                     + "\n  ".join(bad))


def test_the_check_catches_the_old_specs():
    """The line that broke CI in issue 34, and its relatives, are caught; relative paths are not."""
    old = "base: {task: addition, preset: smoke, model: /tmp/ws/seed0/addition-0.3M, max_steps: 300,"
    assert offending_lines(old, []) == [(1, "/tmp/ws/seed0/addition-0.3M")]
    for text in ("model=/root/models/x", "see /home/alice/run.log", "out: '/var/tmp/runs'", "/tmp/x.csv"):
        assert offending_lines(text, []), text
    for text in ("model: warm-start", "out: runs/collapse_pilot/stage_a", "ws/tmp/x", "a/home/b",
                 "http://example.org/home/page", "PATH=/usr/bin:/bin"):
        assert offending_lines(text, []) == [], text
    # a clone folder outside the scratch patterns (a clone under /tmp is caught twice: as scratch too)
    assert offending_lines("log -> /srv/clone/research/x.csv", ["/srv/clone"]) == [(1, "/srv/clone")]


def test_the_clone_folder_is_checked():
    assert str(ROOT) in machine_folders()
