"""Helpers shared by the sandbox tests (tests/unit/test_agent_tools.py, tests/integration/test_sandbox_attacks.py)."""
import os
import tempfile
import uuid
from pathlib import Path


def processes_with(marker: str) -> list[int]:
    """Pids of live processes (zombies excepted) whose command line contains `marker`: every
    process a call starts carries the code, and so the marker, in its arguments."""
    found, needle = [], marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            if stat[stat.rindex(")") + 2] != "Z" and needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def marked(code: str) -> tuple[str, str]:
    marker = f"rl-lab-test-{uuid.uuid4().hex}"
    return f"# {marker}\n{code}", marker


SANDBOX_TMP = Path("/tmp")      # namespaces mode mounts the code's own tmpfs here: a decoy below it is unseen


def _usable_base(base: Path) -> bool:
    """A folder for decoys: not under SANDBOX_TMP (so the code sees it) and one this process can
    make a folder in that the sandbox user can pass through."""
    resolved = base.resolve()
    if resolved == SANDBOX_TMP or SANDBOX_TMP in resolved.parents:
        return False
    try:
        base.mkdir(parents=True, exist_ok=True)
        if base.stat().st_uid == os.geteuid():
            base.chmod(0o1777)
        probe = Path(tempfile.mkdtemp(dir=base))
        probe.rmdir()
    except OSError:
        return False
    return all(p.stat().st_mode & 0o001 for p in [resolved, *resolved.parents])


def decoy_folder() -> Path:
    """A fresh folder the sandboxed code can see (outside SANDBOX_TMP, which namespaces mode replaces
    with the code's own tmpfs), writable by everyone, so that only the sandbox stands between the
    code and it: under the repository's _build/, or, when the repository itself is under the
    temporary folder (a CI clone), under /var/tmp or /dev/shm."""
    repo = Path(__file__).resolve().parent.parent
    for base in (repo / "_build" / "sandbox-decoys", Path("/var", "tmp", "rl_lab-sandbox-decoys"),
                 Path("/dev", "shm", "rl_lab-sandbox-decoys")):
        if _usable_base(base):
            folder = Path(tempfile.mkdtemp(prefix="decoy_", dir=base))
            folder.chmod(0o777)
            return folder
    raise RuntimeError("no folder for a decoy outside the sandbox's /tmp that the sandbox user can reach")


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None, p.stat().st_mode)
            for p in sorted(folder.rglob("*"))}
