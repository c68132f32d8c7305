"""A Python tool: runs model-written code in a separate, limited process.

What is enforced on Linux (checked by tests/test_agent_tools.py; `sandbox_guarantees()` reports
what holds on the machine at hand):

- a separate interpreter, `python -I -S -X utf8` (isolated mode: no PYTHON* variables, no user
  site-packages, no `site`), a minimal environment, the code passed as an argument;
- a fresh temporary working directory (also HOME and TMPDIR), deleted afterwards, with stdout and
  stderr going to a file beside it that the code cannot reach by name;
- resource limits set in the child before exec (`preexec_fn`): CPU seconds (RLIMIT_CPU), address
  space (RLIMIT_AS), the size of any file written, the captured output included (RLIMIT_FSIZE),
  open files (RLIMIT_NOFILE), no core dumps; and the number of processes (RLIMIT_NPROC, set by the
  bootstrap after the switch of user below);
- a wall-clock timeout, after which the whole process group (the tool runs in its own session) is
  killed with SIGKILL; the group is also killed when the tool exits, so no child it left behind
  survives (unless it escaped the group with setsid(), which the audit hook below forbids);
- when the parent runs as root: its own network namespace (no interface but a down loopback, so
  no socket can reach anything) and the switch to the unprivileged user `nobody` before the code
  runs, so file permissions protect every file not writable by everyone, and RLIMIT_NPROC (which
  Linux does not apply to root) bounds fork bombs.  Without root neither is available: the
  process runs as the calling user, and RLIMIT_NPROC is set to that user's current process count
  plus the limit (it counts all of the user's processes, so that bound is approximate);
- an audit hook (PEP 578, `sys.addaudithook`) installed before the code runs, which refuses:
  writing, creating, renaming, deleting or changing the mode of any path outside the working
  directory (and any such call relative to a directory file descriptor); fork, exec, spawn,
  `os.system`, `subprocess`, `os.kill`; every `socket` operation; `ctypes`; `gc`'s object
  walks; changing rlimits; and importing any module that was not loaded before the code started
  (the bootstrap preloads `PRELOADED`: math, fractions, itertools, re, json, ...).  The few `os`
  functions that change the system without an audit event (mkfifo, mknod, pidfd_open, chroot,
  setpriority, sched_setaffinity, signal.pidfd_send_signal) are replaced by a refusal.

What is NOT enforced: reading files (the code can read whatever the user `nobody`, or the calling
user, may read); CPU time shared with other processes; the audit hook is not a security boundary
on its own (PEP 578 says so: code that finds a way around the Python layer, through a bug in the
interpreter, is stopped only by the OS-level limits above, the network namespace and the user
switch, which are the real boundary when running as root).  On macOS and Windows this module
refuses to run (`resource` limits and process groups work differently there).

Cost and caveats: one call starts an interpreter and preloads the modules, about 0.1-0.2 s on a
CPU core; an episode's calls run one after the other.  The rlimits are set in `preexec_fn`, which
Python documents as unsafe when the parent has threads; it only calls `setrlimit` and
`unshare(2)` there (no imports, no locks taken), which glibc's fork handlers make safe in practice.
"""
from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rl_lab.agents.result import ToolResult

PRELOADED = ("math", "cmath", "random", "statistics", "fractions", "decimal", "itertools", "functools",
             "collections", "re", "json", "string", "heapq", "bisect", "operator", "datetime", "time", "textwrap",
             "unicodedata")
CLONE_NEWNET = 0x40000000


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one Python tool call.

    timeout_s         wall-clock seconds before the process group is killed
    memory_bytes      address space (RLIMIT_AS) of the interpreter
    file_bytes        largest file it may write (RLIMIT_FSIZE); its captured output is one of them
    max_processes     processes and threads of the sandbox user (RLIMIT_NPROC)
    open_files        file descriptors (RLIMIT_NOFILE)
    max_output_chars  characters of output shown to the model; the rest is cut
    max_code_chars    longest program accepted
    user              the unprivileged user to switch to when running as root (None: do not switch)
    isolate_network   own network namespace when running as root
    audit_hook        install the bootstrap's audit hook (turn off only to test the OS layers alone)
    temp_root         where the per-call folders are made (None: the system's temporary folder); the
                      sandbox user must be able to pass through it
    """
    timeout_s: float = 2.0
    memory_bytes: int = 256 * 2**20
    file_bytes: int = 2**20
    max_processes: int = 16
    open_files: int = 64
    max_output_chars: int = 2000
    max_code_chars: int = 20_000
    user: str | None = "nobody"
    isolate_network: bool = True
    audit_hook: bool = True
    temp_root: str | None = None


# The bootstrap runs in the child before the model's code: switch user, set RLIMIT_NPROC, install
# the audit hook, then run the code in a fresh namespace.  Every name it uses lives in a function
# scope that is gone by the time the code runs, so the code cannot reach the hook or its settings.
BOOTSTRAP = r'''
import os, posix, resource, signal, sys, traceback
def _setup(argv):
    code, uid, gid, nproc, hook = argv[1], int(argv[2]), int(argv[3]), int(argv[4]), argv[5] == "1"
    for name in argv[6].split(","):
        __import__(name)
    if uid >= 0 and os.getuid() == 0:
        try:
            os.setgroups([]); os.setgid(gid); os.setuid(uid)
        except OSError as exc:   # fail closed: never run the code as root by accident
            print(f"sandbox: cannot switch to uid {uid} ({exc}); give the container CAP_SETUID/CAP_SETGID "
                  f"or set SandboxLimits.user=None to run tools as root", file=sys.stderr)
            os._exit(1)
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    work = os.path.realpath(os.getcwd())
    if hook:
        _disable_unaudited()
        sys.addaudithook(_make_hook(work, frozenset(sys.modules)))
    return code
def _disable_unaudited():
    """Functions that change the system but raise no audit event are replaced by a refusal."""
    def refuse(name):
        def refused(*args, **kwargs):
            raise PermissionError(f"sandbox: {name} is not allowed")
        return refused
    for module, names in ((os, ("mkfifo", "mknod", "pidfd_open", "chroot", "setpriority", "sched_setaffinity")),
                          (posix, ("mkfifo", "mknod", "pidfd_open", "chroot", "setpriority", "sched_setaffinity")),
                          (signal, ("pidfd_send_signal",))):
        for name in names:
            if hasattr(module, name):
                setattr(module, name, refuse(f"{module.__name__}.{name}"))
def _make_hook(work, preloaded):
    import posixpath
    realpath, fsdecode, isabs = posixpath.realpath, os.fsdecode, posixpath.isabs
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    denied = {"os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.kill",
              "os.killpg", "os.setsid", "subprocess.Popen", "signal.pthread_kill", "resource.setrlimit",
              "resource.prlimit", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
              "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function", "pty.spawn"}
    # event: (positions of the paths it changes, positions of its dir_fd arguments)
    path_events = {"os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.mkdir": ((0,), (2,)),
                   "os.rename": ((0, 1), (2, 3)), "os.link": ((0, 1), (2, 3)), "os.symlink": ((1,), (2,)),
                   "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)), "os.truncate": ((0,), ()),
                   "os.utime": ((0,), (3,)), "os.chflags": ((0,), ()), "os.lchflags": ((0,), ()),
                   "os.setxattr": ((0,), ()), "os.removexattr": ((0,), ()), "shutil.rmtree": ((0,), (1,))}
    def inside(path):
        if not isinstance(path, (str, bytes)) and not hasattr(path, "__fspath__"):
            return False
        real = realpath(fsdecode(path))
        return real == work or real.startswith(work + "/")
    def hook(event, args):
        if event in denied or event.startswith("socket.") or event.startswith("ctypes."):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args[0] not in preloaded:
            raise PermissionError(f"sandbox: module {args[0]!r} is not available (preloaded: math, fractions, "
                                  f"itertools, re, json, ...)")
        if event == "open":
            path, mode, flags = args
            if isinstance(path, int) or not (flags & write_flags):
                return
            if mode is None and not isabs(fsdecode(path)):   # os.open: its dir_fd is not in the event
                raise PermissionError("sandbox: os.open for writing needs an absolute path")
            if not inside(path):
                raise PermissionError(f"sandbox: writing outside the working directory ({path!r})")
        elif event in path_events:
            paths, dir_fds = path_events[event]
            if any(i < len(args) and args[i] not in (None, -1) for i in dir_fds) or \
                    any(not inside(args[i]) for i in paths):
                raise PermissionError(f"sandbox: {event} outside the working directory")
    return hook
_code = _setup(sys.argv)
del _setup, _make_hook, _disable_unaudited
sys.argv[1:] = []
try:
    _compiled = compile(_code, "<tool>", "exec")
    exec(_compiled, {"__name__": "__main__", "__builtins__": __builtins__})
except SystemExit:
    raise
except BaseException as _exc:
    traceback.print_exception(type(_exc), _exc, _exc.__traceback__.tb_next)
    sys.stderr.flush()
    os._exit(1)
'''


def _is_root() -> bool:
    return os.geteuid() == 0


@functools.lru_cache(maxsize=1)
def _libc_unshare():
    """libc's unshare(2), looked up once in the parent (the child must not load libraries)."""
    import ctypes
    return ctypes.CDLL(None, use_errno=True).unshare


def _user_ids(name: str | None) -> tuple[int, int]:
    """(uid, gid) of the user to switch to, or (-1, -1) for no switch (not root, or no user)."""
    if name is None or not _is_root():
        return -1, -1
    import pwd
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise RuntimeError(f"SandboxLimits.user={name!r}: no such user on this machine; name an unprivileged "
                           f"user (e.g. 'nobody') or None to run the tool as root (not recommended)") from None
    return entry.pw_uid, entry.pw_gid


def _processes_of_user(uid: int) -> int:
    """How many processes (threads included, as RLIMIT_NPROC counts them) `uid` runs now."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                pass
    return count


def _preexec(limits: SandboxLimits, unshare_net: bool):
    """The function the child runs between fork and exec: own network namespace, rlimits."""
    import resource
    unshare = _libc_unshare() if unshare_net else None
    cpu = int(limits.timeout_s) + 1

    def run():
        if unshare is not None:
            unshare(CLONE_NEWNET)    # fails (EPERM) without CAP_SYS_ADMIN: sandbox_guarantees() says so
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return run


def _kill_group(pgid: int, wait_s: float = 1.0) -> None:
    """SIGKILL every process in group `pgid`, then wait (up to `wait_s`) until they are gone:
    a killed process lives on until the kernel has torn it down."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return                               # the usual case: nothing was left in the group
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:       # (a zombie nobody reaps keeps the group alive: give up then)
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.005)


def _remove_tree(path: Path) -> None:
    """Delete the sandbox folder, even where the code removed its own permissions."""
    def make_writable(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass
    shutil.rmtree(path, onerror=make_writable)


def _read_output(path: Path, limit_chars: int) -> tuple[str, bool]:
    """The first `limit_chars` characters of the captured output, and whether more was there."""
    with open(path, "rb") as f:
        head = f.read(4 * limit_chars + 4)
        more = bool(f.read(1))
    text = head.decode("utf-8", errors="replace")
    if len(text) > limit_chars or more:
        return text[:limit_chars], True
    return text, False


def run_python(code: str, limits: SandboxLimits = SandboxLimits()) -> ToolResult:
    """Run `code` in the sandbox; its stdout and stderr (merged, truncated) are the output.

    kind: "ok" (exit 0), "error" (refused input, an exception, a non-zero exit or a signal),
    "timeout" (wall-clock or CPU limit), "truncated" (exit 0 but output cut at the limit)."""
    start = time.perf_counter()
    if not sys.platform.startswith("linux"):
        raise RuntimeError("the Python tool's sandbox needs Linux (rlimits, process groups, namespaces)")
    if not isinstance(code, str):
        return ToolResult(f"error: expected program text, got {type(code).__name__}", "error", 0.0)
    if len(code) > limits.max_code_chars:
        return ToolResult(f"error: program too long ({len(code)} characters, at most {limits.max_code_chars})",
                          "error", time.perf_counter() - start)
    if "\x00" in code:
        return ToolResult("error: the program contains a NUL character", "error", time.perf_counter() - start)
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as exc:   # lone surrogates cannot be passed to a process
        return ToolResult(f"error: the program is not valid Unicode text ({exc.reason} at {exc.start})", "error",
                          time.perf_counter() - start)
    uid, gid = _user_ids(limits.user)
    nproc = limits.max_processes + (0 if uid >= 0 or _is_root() else _processes_of_user(os.getuid()))
    root = Path(tempfile.mkdtemp(prefix="rl_lab_tool_", dir=limits.temp_root))
    try:
        work = root / "work"
        work.mkdir()
        if uid >= 0:
            os.chmod(root, 0o711)          # the sandbox user may pass through, not list or write
            os.chown(work, uid, gid)
        out_path = root / "output"
        env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8"}
        argv = [sys.executable, "-I", "-S", "-X", "utf8", "-c", BOOTSTRAP, code, str(uid), str(gid), str(nproc),
                "1" if limits.audit_hook else "0", ",".join(PRELOADED)]
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=work, env=env, start_new_session=True, close_fds=True,
                                    preexec_fn=_preexec(limits, limits.isolate_network and _is_root()))
            try:
                returncode, timed_out = proc.wait(timeout=limits.timeout_s), False
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                returncode, timed_out = proc.wait(), True
            _kill_group(proc.pid)          # whatever it started and left behind
        text, cut = _read_output(out_path, limits.max_output_chars)
    finally:
        _remove_tree(root)
    seconds = time.perf_counter() - start
    if timed_out or returncode == -signal.SIGXCPU:     # the wall clock, or the CPU-seconds limit
        return ToolResult(_with_note(text, f"[timeout: killed after {limits.timeout_s:g} s]"), "timeout", seconds)
    if cut:
        return ToolResult(_with_note(text, f"[output truncated at {limits.max_output_chars} characters]"),
                          "truncated", seconds)
    if returncode != 0:
        note = f"[exit code {returncode}]" if returncode > 0 else f"[killed by signal {-returncode}]"
        return ToolResult(_with_note(text, note), "error", seconds)
    return ToolResult(text, "ok", seconds)


def _with_note(text: str, note: str) -> str:
    return f"{text.rstrip()}\n{note}" if text.strip() else note


@functools.lru_cache(maxsize=1)
def sandbox_guarantees() -> dict[str, bool]:
    """What the sandbox enforces on this machine (probed once by running a tiny program):
    runs_as_other_user, process_limit (RLIMIT_NPROC applies), network_isolated (own namespace)."""
    probe = ("import os\nprint(os.getuid(), os.readlink('/proc/self/ns/net'))")
    result = run_python(probe)
    parts = result.output.split()
    uid = int(parts[0]) if result.ok and parts and parts[0].isdigit() else os.getuid()
    other_user = uid != os.getuid()
    isolated = result.ok and len(parts) > 1 and parts[1] != os.readlink("/proc/self/ns/net")
    return {"runs_as_other_user": other_user, "process_limit": uid != 0, "network_isolated": isolated}
