"""Helpers shared by the sandbox tests (tests/test_agent_tools.py, tests/test_sandbox_attacks.py)."""
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


def decoy_folder() -> Path:
    """A fresh folder outside the system temporary folder (which namespaces mode replaces with the
    code's own tmpfs, so a decoy there would be out of the code's sight): under the repository's
    _build/, writable by everyone, so only the sandbox stands between the code and it."""
    base = Path(__file__).resolve().parent.parent / "_build" / "sandbox-decoys"
    base.mkdir(parents=True, exist_ok=True)
    if base.stat().st_uid == os.geteuid():
        base.chmod(0o1777)
    folder = Path(tempfile.mkdtemp(prefix="decoy_", dir=base))
    folder.chmod(0o777)
    return folder


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None, p.stat().st_mode)
            for p in sorted(folder.rglob("*"))}
