"""A Python tool: runs model-written code in a separate process that the kernel confines.

Two modes (`sandbox_mode()` says which this machine gets, and why; `rl-lab doctor` prints it):

**namespaces** (the default; needs Linux >= 5.12 on x86_64 and user namespaces, which root always
has and most distributions give every user).  The kernel is the boundary.  Each call:

- starts a fresh `python -I -S -X utf8` (no PYTHON* variables, no site-packages) with a minimal
  environment and only its own descriptors (stdin, the output, a status pipe): the parent passes
  no other, and the child closes whatever else it finds before anything else; as root it then
  becomes the unprivileged user `nobody`;
- gives it its own user, PID, mount, network, IPC, UTS and cgroup namespaces: inside, the code is
  PID 1 of a namespace whose processes all die with it, sees only its own processes in /proc, has
  no network interface but a down loopback, and every mount is read-only (no device nodes, no
  setuid) except its work folder /tmp, a tmpfs capped at `folder_bytes` and `folder_files`;
- drops every capability, sets no_new_privs and, where the kernel has it (5.13 and later, when
  enabled at boot), Landlock: opening a file for writing, creating, removing, renaming, linking
  and truncating are allowed beneath /tmp only (Landlock's first version, kernels 5.13-5.18, also
  refuses moving a file into another folder, /tmp's own folders too: EXDEV);
- sets a seccomp filter under which fork, clone (so also threads), exec, sockets,
  setsid/setpgid, mknod, ptrace, kill, mount and namespace calls fail with EPERM, and so do SysV
  IPC (shared memory, message queues, semaphores) and POSIX message queues, io_setup, fallocate,
  inotify/fanotify, flock, and fcntl's locks, leases and F_NOTIFY;
- sets rlimits: CPU seconds, address space, file size (the captured output is one file), open files;
- is killed, with everything in its process group, at the wall-clock timeout.

So nothing the code starts survives the call (it cannot start anything, and PID 1's death ends the
namespace); it reaches no network; its memory is the address-space limit plus what its folder,
open files and pipes may hold outside it (at most about `open_files` memfds of `file_bytes`, which
binds them too, or pipes of fs.pipe-max-size, 1 MiB by default; there is no memory cgroup); the
parent reads the output through a file descriptor it opened before the spawn (an unlinked file
the code cannot name or replace), and no folder is left on the host.

Where it writes: with Landlock, only in its tmpfs, which vanishes with it (and into the output,
within `file_bytes`).  Without Landlock the read-only mounts stop writing, creating and changing
files everywhere else, but not opening a FIFO for writing (the kernel skips the read-only check
for special files): the code can write into any FIFO outside /tmp that its user may open.
`sandbox_mode().reason` and `sandbox_guarantees()["landlock"]` say which, and a call without
Landlock warns once.

What the parent takes from the child it takes from channels the code cannot write: whether the
sandbox was built comes from the status pipe (closed before the code runs), the kind from the wait
status.  The output is the code's: shown with control characters as escapes (`\\x1b`, `\\x00`,
`\\r`; tab and newline pass) and invalid UTF-8 replaced, then the parent's note, if any, on the last
line.  The code can print text that looks like a note; it never changes the kind.  Code longer than
`ARGV_CODE_BYTES` goes through stdin (an argument holds 128 KiB at most); whatever stops the
process from starting comes back as an error result, not an exception.

**unsandboxed** (only with `SandboxLimits(allow_unsandboxed=True)`, which warns once): where the
kernel gives no user namespaces.  The same rlimits and descriptors, a process group killed at the
end, a per-call folder removed by `rm -rf`; as root also its own network namespace and the switch
to `nobody`.  With Landlock, no_new_privs and the same write rights beneath the call's folder only
(truncating by path only from Landlock's third version, kernel 6.2; the switch's and Landlock's
limits also bind whatever the code starts).  No seccomp filter: the
code may fork, exec, use sockets, and change the metadata (mode, times, xattrs) of the user's files
through chmod and friends, which Landlock does not cover; without Landlock the audit hook is the
only barrier to writing files the user may write.  Python code can get around the hook (issue 30's
attacks do), so this mode is for trusted code and teaching, not for a policy.

Both modes install an audit hook (PEP 578) before the code runs.  In namespaces mode it is a lint:
it turns what the kernel would refuse anyway into a readable "sandbox: ... is not allowed".

What is NOT enforced, in either mode: reading files (whatever `nobody`, or the calling user, may
read: the root file system is visible, read-only), reading FIFOs its user may read (taking data
meant for another reader) included; CPU time shared with other processes (no fairness: a call
takes up to its CPU seconds of a core); memory beyond the rlimits and files above (no memory
cgroup).  On macOS and Windows the tool refuses to run.

Cost: one call starts an interpreter, preloads `PRELOADED` and builds the namespaces; BENCHMARKS.md
section 8 gives calls per second in each mode.
"""
from __future__ import annotations

import functools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from rl_lab.agents.result import ToolResult

PRELOADED = ("math", "cmath", "random", "statistics", "fractions", "decimal", "itertools", "functools",
             "collections", "re", "json", "string", "heapq", "bisect", "operator", "datetime", "time", "textwrap",
             "unicodedata")
CHILD = Path(__file__).with_name("sandbox_child.py")
SETUP_FAILED = 121              # the child's exit code when it could not build the sandbox (sandbox_child.py);
                                # the parent goes by the status pipe, which the code cannot write, not by it
# Code up to this many bytes (UTF-8) is the child's last argument, where /proc/<pid>/cmdline shows
# what a call runs (the tests find a call's processes by it); longer code goes through stdin.  One
# argument may hold 128 KiB, all of them and the environment together a quarter of the stack limit.
ARGV_CODE_BYTES = 32 * 1024
# what the output shows as a Python escape instead of passing it on to logs and terminals: the
# control characters but tab and newline (ESC starts terminal sequences, NUL cuts C strings,
# carriage return overwrites a line), DEL, and the C1 controls (U+009B is a one-character ESC [)
_ESCAPED = {c: repr(chr(c))[1:-1] for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)}


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one Python tool call.

    timeout_s          wall-clock seconds before the call is killed (CPU seconds: this + 1)
    memory_bytes       address space (RLIMIT_AS) of the interpreter
    file_bytes         largest file it may write (RLIMIT_FSIZE); its captured output is one of them
    folder_bytes       total size of its work folder (a tmpfs; namespaces mode)
    folder_files       files and folders in its work folder (namespaces mode)
    max_processes      processes and threads of the sandbox user (RLIMIT_NPROC; unsandboxed mode:
                       in namespaces mode the code can start none)
    open_files         file descriptors (RLIMIT_NOFILE)
    max_output_chars   characters of output shown to the model; the rest is cut
    max_code_chars     longest program accepted
    user               the unprivileged user to become when running as root (None: stay root in
                       unsandboxed mode; namespaces mode maps root onto the caller either way)
    isolate_network    own network namespace as root in unsandboxed mode (namespaces mode: always)
    audit_hook         install the audit hook, a lint (turn off only to test the kernel's layers alone)
    allow_unsandboxed  run anyway where the kernel offers no isolation (warns once; see the docstring)
    temp_root          where unsandboxed mode makes its per-call folders (None: the system's temporary
                       folder); the sandbox user must be able to pass through it
    """
    timeout_s: float = 2.0
    memory_bytes: int = 256 * 2**20
    file_bytes: int = 2**20
    folder_bytes: int = 4 * 2**20
    folder_files: int = 256
    max_processes: int = 16
    open_files: int = 64
    max_output_chars: int = 2000
    max_code_chars: int = 20_000
    user: str | None = "nobody"
    isolate_network: bool = True
    audit_hook: bool = True
    allow_unsandboxed: bool = False
    temp_root: str | None = None


class SandboxUnavailable(RuntimeError):
    """This machine's kernel offers no isolation and the caller did not allow running without it."""


@dataclass(frozen=True)
class SandboxMode:
    name: str        # "namespaces" or "unsandboxed"
    reason: str      # why: what was probed, and what failed


def _is_root() -> bool:
    return os.geteuid() == 0


def _user_ids(name: str | None) -> tuple[int, int]:
    """(uid, gid) of the user to become, or (-1, -1) for no switch (not root, or no user)."""
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


@functools.lru_cache(maxsize=1)
def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (0: none: not built in, not enabled at boot, or
    refused by a seccomp filter around this process).  Where it is not 0 the child restricts
    itself with it, and a failure to do so is a set-up failure, not a quiet fallback."""
    if not sys.platform.startswith("linux"):
        return 0
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))   # LANDLOCK_CREATE_RULESET_VERSION
    return max(int(version), 0)


@functools.lru_cache(maxsize=1)
def _child_source() -> str:
    return CHILD.read_text()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass                                 # the usual case: nothing was left in the group


def _wait(pid: int, timeout_s: float) -> tuple[int, float, bool]:
    """Wait for the child up to `timeout_s`, kill its group at the deadline; (wait status, CPU
    seconds of it and the processes it waited for, whether the deadline killed it)."""
    timed_out = False
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    deadline = time.monotonic() + timeout_s
    if pidfd is not None:
        try:
            timed_out = not select.select([pidfd], [], [], timeout_s)[0]
        finally:
            os.close(pidfd)
    else:                                    # kernels before 5.3: poll
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(0.002)
    if timed_out:
        _kill_group(pid)
    _, status, usage = os.wait4(pid, 0)
    _kill_group(pid)                         # unsandboxed mode: whatever it left in its group
    _await_group_exit(pid)
    return status, usage.ru_utime + usage.ru_stime, timed_out


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` is still running (a zombie is not: it has exited and only
    waits to be reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False                         # the usual case: the group is empty
    except PermissionError:
        pass                                 # members this user may not signal: look at /proc
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        state, _ppid, group = stat[stat.rindex(b")") + 2:].split()[:3]
        if state != b"Z" and int(group) == pgid:
            return True
    return False


def _await_group_exit(pgid: int, limit_s: float = 10.0) -> None:
    """SIGKILL is delivered at once but a process takes a moment to exit (the namespace's PID 1
    first tears its namespace down, longer on a loaded machine): return only when nothing of the
    call is running, so that nothing it started outlives the call.  Bounded: after `limit_s` it
    gives up with a warning rather than hang the caller."""
    deadline = time.monotonic() + limit_s
    while _group_alive(pgid):
        if time.monotonic() >= deadline:
            warnings.warn(f"the Python tool's process group {pgid} was still running {limit_s:g} s after "
                          "SIGKILL", RuntimeWarning, stacklevel=4)
            return
        _kill_group(pgid)
        time.sleep(0.002)


def _remove_tree(path: Path) -> None:
    """Delete an unsandboxed call's folder however deep or hostile it is: `rm -rf` walks it without
    recursion; a folder the code made unreadable is made readable first.  Never raises."""
    for _ in range(2):
        try:
            subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        except (OSError, subprocess.SubprocessError):
            pass
        if not os.path.lexists(path):
            return
        try:
            subprocess.run(["chmod", "-R", "u+rwx", "--", str(path)], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        except (OSError, subprocess.SubprocessError):
            pass
    warnings.warn(f"the Python tool could not remove its folder {path}", RuntimeWarning, stacklevel=3)


def _shown(text: str) -> str:
    """`text` safe for a terminal or a log: control characters as escapes (see _ESCAPED)."""
    return text.translate(_ESCAPED)


def _read_output(out, limit_chars: int) -> tuple[str, bool]:
    """The first `limit_chars` characters of the captured output, as shown (invalid UTF-8
    replaced, control characters escaped), and whether more was there."""
    out.seek(0)
    head = out.read(4 * limit_chars + 4)
    more = bool(out.read(1))
    text = _shown(head.decode("utf-8", errors="replace"))
    if len(text) > limit_chars or more:
        return text[:limit_chars], True
    return text, False


def _refused(code) -> str | None:
    """Why `code` is not run at all (None: it is run)."""
    if not isinstance(code, str):
        return f"error: expected program text, got {type(code).__name__}"
    if "\x00" in code:
        return "error: the program contains a NUL character"
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as exc:   # lone surrogates cannot be passed to a process
        return f"error: the program is not valid Unicode text ({exc.reason} at {exc.start})"
    return None


_warned_unsandboxed = False
_warned_no_landlock = False
NO_LANDLOCK = ("this kernel offers no Landlock, so the code can write into the FIFOs outside its /tmp that its "
               "user may open (the read-only mounts do not stop that); rl_lab/agents/python_tool.py says what holds")


def run_python(code: str, limits: SandboxLimits = SandboxLimits()) -> ToolResult:
    """Run `code` in the sandbox; its stdout and stderr (merged, truncated) are the output.

    kind: "ok" (exit 0), "truncated" (exit 0 but output cut at the limit), "timeout" (killed at the
    wall-clock limit, or by the CPU-seconds limit after using them), "error" (refused input, an
    exception, a non-zero exit, any other signal, a sandbox that could not be built).  Raises
    SandboxUnavailable only for a machine that cannot isolate and a caller that did not allow it."""
    global _warned_unsandboxed, _warned_no_landlock
    start = time.perf_counter()
    if not sys.platform.startswith("linux"):
        raise RuntimeError("the Python tool's sandbox needs Linux (namespaces, seccomp, rlimits)")
    mode = sandbox_mode()
    if mode.name != "namespaces":
        if not limits.allow_unsandboxed:
            raise SandboxUnavailable(
                f"the Python tool will not run model-written code here: {mode.reason}. Allow user namespaces "
                f"(or run as root), or pass SandboxLimits(allow_unsandboxed=True) to run it behind the audit "
                f"hook only, which Python code can get around (rl_lab/agents/python_tool.py says what holds)")
        if not _warned_unsandboxed:
            _warned_unsandboxed = True
            barriers = ("the rlimits, the process group, Landlock (its writes stay in its folder) and an audit hook"
                        if landlock_abi() else "the rlimits, the process group and an audit hook (no Landlock here)")
            warnings.warn(f"UNSANDBOXED: the Python tool runs model-written code without kernel isolation "
                          f"({mode.reason}); only {barriers} that code can get around stand between it and this "
                          f"user's files", RuntimeWarning, stacklevel=2)
    elif not landlock_abi() and not _warned_no_landlock:
        _warned_no_landlock = True
        warnings.warn(f"the Python tool's sandbox runs without Landlock: {NO_LANDLOCK}", RuntimeWarning, stacklevel=2)
    return _run(code, limits, mode.name, start)


def _run(code: str, limits: SandboxLimits, mode: str, start: float) -> ToolResult:
    refusal = _refused(code)
    if refusal is None and len(code) > limits.max_code_chars:
        refusal = f"error: program too long ({len(code)} characters, at most {limits.max_code_chars})"
    if refusal is not None:
        return ToolResult(refusal, "error", time.perf_counter() - start)
    uid, gid = _user_ids(limits.user)
    cpu_s = int(limits.timeout_s) + 1
    settings = {"mode": mode, "uid": uid, "gid": gid, "preload": PRELOADED, "hook": limits.audit_hook,
                "cpu_s": cpu_s, "memory_bytes": limits.memory_bytes, "file_bytes": limits.file_bytes,
                "open_files": limits.open_files, "folder_bytes": limits.folder_bytes,
                "folder_files": limits.folder_files, "isolate_network": limits.isolate_network, "nproc": 0,
                "landlock_abi": landlock_abi()}
    folder = None
    if mode == "namespaces":
        work = "/tmp"                      # the tmpfs, inside the sandbox's own mount namespace
    else:
        folder = Path(tempfile.mkdtemp(prefix="rl_lab_tool_", dir=limits.temp_root))
        work = str(folder / "work")
        os.mkdir(work)
        if uid >= 0:
            os.chmod(folder, 0o711)          # the sandbox user may pass through, not list or write
            os.chown(work, uid, gid)
        settings["nproc"] = limits.max_processes + (0 if uid >= 0 or _is_root()
                                                    else _processes_of_user(os.getuid()))
    env = {"PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8"}
    try:
        with tempfile.TemporaryFile() as out:
            ran = _spawn_and_wait(code, settings, env, None if folder is None else work, out, limits.timeout_s)
            text, cut = _read_output(out, limits.max_output_chars)
    finally:
        if folder is not None:
            _remove_tree(folder)
    return _result(text, cut, ran, limits, cpu_s, time.perf_counter() - start)


@dataclass(frozen=True)
class _Ended:
    """How the child ended, as the parent saw it: its wait status, CPU seconds, whether the
    deadline killed it, what it said on the status pipe, or why it could not be started."""
    status: int = 0
    cpu_used: float = 0.0
    timed_out: bool = False
    said: str = ""
    start_error: str | None = None


def _spawn_and_wait(code: str, settings: dict, env: dict, cwd: str | None, out, timeout_s: float) -> _Ended:
    """Start the child with only its own descriptors (stdin, the output, the status pipe: close_fds
    closes every other one the caller holds, close-on-exec or not) and wait for it.  Never raises
    for a child that cannot be started (e.g. an argument list too long): it says so instead."""
    status_r = status_w = stdin = None
    try:
        try:
            status_r, status_w = os.pipe()
            argv = [sys.executable, "-I", "-S", "-X", "utf8", "-c", _child_source(),
                    json.dumps({**settings, "status_fd": status_w})]
            stdin = _code_input(code, argv)
            child = subprocess.Popen(argv, executable=sys.executable, stdin=stdin, stdout=out, stderr=out, env=env,
                                     cwd=cwd, close_fds=True, pass_fds=(status_w,), start_new_session=True)
        except (OSError, subprocess.SubprocessError) as exc:
            return _Ended(start_error=f"error: the sandbox's process could not be started: {exc}")
        os.close(status_w)
        status_w = None
        # this module reaps the child itself (wait4 gives its CPU time): a Popen that believes it
        # has reaped it neither warns about it nor waits for it later
        child.returncode = 0
        status, cpu_used, timed_out = _wait(child.pid, timeout_s)
        return _Ended(status, cpu_used, timed_out, _read_status(status_r))
    finally:
        for fd in (stdin, status_w, status_r):
            if fd is not None:
                os.close(fd)


def _code_input(code: str, argv: list[str]) -> int:
    """The child's stdin: /dev/null, with short code appended to `argv`; or a memfd holding longer
    code, which the child reads first (sandbox_child.read_code)."""
    data = code.encode("utf-8")
    if len(data) <= ARGV_CODE_BYTES:
        argv.append(code)
        return os.open(os.devnull, os.O_RDONLY)
    fd = os.memfd_create("rl_lab_tool_code")
    try:
        rest = memoryview(data)
        while rest:
            rest = rest[os.write(fd, rest):]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


def _read_status(fd: int, limit: int = 1 << 16) -> str:
    """What the child wrote on the status pipe.  Read after the whole call has exited, so every
    writer is gone; non-blocking all the same, so that nothing can make the caller wait here."""
    os.set_blocking(fd, False)
    chunks, size = [], 0
    try:
        while size < limit and (chunk := os.read(fd, limit - size)):
            chunks.append(chunk)
            size += len(chunk)
    except BlockingIOError:
        pass
    return b"".join(chunks).decode("utf-8", errors="replace")


def _result(text: str, cut: bool, ran: _Ended, limits: SandboxLimits, cpu_s: int, seconds: float) -> ToolResult:
    """The result from what the parent saw, never from what the code printed: whether the code
    ran at all comes from the status pipe (the code cannot write it), and the kind from the wait
    status.  The parent's notes come after the code's output."""
    if ran.start_error is not None:
        return ToolResult(ran.start_error, "error", seconds)
    returncode = os.waitstatus_to_exitcode(ran.status)
    cpu_limit_hit = returncode in (-signal.SIGXCPU, -signal.SIGKILL) and ran.cpu_used >= cpu_s - 0.05
    if ran.timed_out or cpu_limit_hit:
        why = f"killed after {limits.timeout_s:g} s" if ran.timed_out else f"CPU limit of {cpu_s} s"
        return ToolResult(_with_note(text, f"[timeout: {why}]"), "timeout", seconds)
    said = ran.said.splitlines()
    if "ready" not in said:                  # the set-up did not finish: the code did not run
        failure = next((line for line in said if line.startswith("sandbox setup failed")),
                       f"sandbox setup failed: the process ended first ({_ended_how(returncode)})")
        return ToolResult(_with_note(f"{_shown(failure)}\n{text}",
                                     "[the sandbox could not be built; the code did not run]"), "error", seconds)
    if cut and returncode == 0:
        return ToolResult(_with_note(text, f"[output truncated at {limits.max_output_chars} characters]"),
                          "truncated", seconds)
    if returncode != 0:
        note = f"[{_ended_how(returncode)}]"
        if cut:
            note = f"[output truncated at {limits.max_output_chars} characters] {note}"
        return ToolResult(_with_note(text, note), "error", seconds)
    return ToolResult(text, "ok", seconds)


def _ended_how(returncode: int) -> str:
    return f"exit code {returncode}" if returncode >= 0 else f"killed by signal {-returncode}"


def _with_note(text: str, note: str) -> str:
    return f"{text.rstrip()}\n{note}" if text.strip() else note


_NO_NAMESPACE_HINT = ("unprivileged user namespaces look disabled or restricted (sysctl user.max_user_namespaces, "
                      "kernel.unprivileged_userns_clone, or Ubuntu's kernel.apparmor_restrict_unprivileged_userns)")


@functools.lru_cache(maxsize=1)
def sandbox_mode() -> SandboxMode:
    """Which mode this machine gets, probed once by building the sandbox around `print('ok')`.
    RL_LAB_SANDBOX_MODE=unsandboxed forces the weaker mode (for tests of it; it still needs
    allow_unsandboxed)."""
    if os.environ.get("RL_LAB_SANDBOX_MODE", "") == "unsandboxed":
        return SandboxMode("unsandboxed", "RL_LAB_SANDBOX_MODE=unsandboxed is set")
    if not sys.platform.startswith("linux"):
        return SandboxMode("unsandboxed", f"{sys.platform} is not Linux")
    import platform
    if platform.machine() != "x86_64":
        return SandboxMode("unsandboxed", f"the seccomp filter knows x86_64's system calls, not "
                                          f"{platform.machine()}'s")
    result = _run("print('ok')", SandboxLimits(timeout_s=10.0), "namespaces", time.perf_counter())
    if result.kind == "ok" and result.output.strip() == "ok":
        who = "as root, mapped onto 'nobody'" if _is_root() else "as an unprivileged user"
        if landlock_abi():
            return SandboxMode("namespaces", f"user namespaces, seccomp, a read-only root and Landlock (ABI "
                                             f"{landlock_abi()}) work here ({who})")
        return SandboxMode("namespaces", f"user namespaces, seccomp and a read-only root work here ({who}); "
                                         f"{NO_LANDLOCK}")
    reason = result.output.splitlines()[0] if result.output.strip() else result.kind
    if "namespaces" in reason or "mounts" in reason or "Operation not permitted" in reason:
        reason = f"{reason}: {_NO_NAMESPACE_HINT}"
    return SandboxMode("unsandboxed", reason)


@functools.lru_cache(maxsize=1)
def sandbox_guarantees() -> dict[str, bool]:
    """What the sandbox enforces on this machine, probed by running a tiny program in it:
    mode_namespaces, own_pid_namespace (the code is PID 1), runs_as_other_user (its uid outside any
    namespace differs from the caller's: as root, nobody),
    network_isolated (own network namespace), read_only_root, seccomp (a filter is on), landlock
    (the kernel offers Landlock, so the call ran restricted by it: the set-up fails rather than go on
    without it)."""
    mode = sandbox_mode()
    probe = ("import os\nu = os.getuid()\ninside, outside, _ = open('/proc/self/uid_map').read().split()[:3]\n"
             "print(os.getpid(), int(outside) + u - int(inside), os.readlink('/proc/self/ns/net'))\n"
             "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')][0])\n"
             "print(os.statvfs('/usr').f_flag & os.ST_RDONLY)")
    result = run_python(probe, SandboxLimits(timeout_s=10.0, allow_unsandboxed=True))
    lines = [line.split() for line in result.output.splitlines()] if result.ok else []
    ok = len(lines) >= 3 and len(lines[0]) == 3
    return {"mode_namespaces": mode.name == "namespaces",
            "own_pid_namespace": ok and lines[0][0] == "1",
            "runs_as_other_user": ok and int(lines[0][1]) != os.getuid(),
            "network_isolated": ok and lines[0][2] != os.readlink("/proc/self/ns/net"),
            "read_only_root": ok and lines[2][0] != "0",
            "seccomp": ok and lines[1][0] == "2",
            "landlock": ok and landlock_abi() > 0}
