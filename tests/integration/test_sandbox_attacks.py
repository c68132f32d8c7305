"""Issue 30: the Python tool's sandbox against a hostile policy.

The attacks S1-S7 of the security review, and variants, run through the tool's own API.  Each
asserts what a caller needs: the decoy outside the sandbox (writable by the sandbox user, so only
the sandbox stands in the way) is unchanged, no process of the call is alive afterwards (found in
/proc by a marker every process of the call carries in its arguments), no folder is left in the
temporary folder, and a structured result comes back within the timeout.

In namespaces mode the kernel is the boundary, so every attack first gets past the audit hook (or
runs with it off) and then tries the harm.  Unsandboxed mode (`allow_unsandboxed`) promises only
the parent's side: no hang, no exception, no folder left, result kinds that say what happened.
As root, `test_the_attacks_fail_as_an_unprivileged_user_too` runs this file and
tests/unit/test_agent_tools.py again as `nobody` under setpriv.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
from sandbox_helpers import decoy_folder, marked, processes_with, snapshot

from rl_lab.agents import SandboxLimits, SandboxUnavailable, ToolResult, python_tool, run_python, run_tool, sandbox_mode

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")
NAMESPACES = sys.platform.startswith("linux") and sandbox_mode().name == "namespaces"
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason="this machine gives no namespaces mode: "
                                      + (sandbox_mode().reason if sys.platform.startswith("linux") else ""))
LIMITS = SandboxLimits(timeout_s=2.0)
HARMS = ("write", "plant", "remove", "rename", "chmod", "mkfifo", "mknod", "fork", "thread", "setsid", "setpgid",
         "exec", "posix-fork", "posix-mknod", "loader")


def hook_locals(imports: str, refused: str) -> str:
    """Code that makes the hook refuse `refused` and takes the hook's locals, L, from the refusal's
    traceback (attack S1)."""
    return (f"\nimport {imports}\ntry:\n    {refused}\nexcept PermissionError as e:\n    tb = e.__traceback__\n"
            "    while tb.tb_next:\n        tb = tb.tb_next\n    L = tb.tb_frame.f_locals\n")


# a function with the path check's three free variables that says every path is inside
STAND_IN = """def _mk():
    realpath = fsdecode = work = None
    return lambda path: bool(realpath or fsdecode or work or True)
"""

# Ways past the audit hook.  Each leaves `posix2` (a posix module: fresh where the bypass makes one).
BYPASSES = {
    "S1 the hook's sets from a refusal's traceback": hook_locals("os", "os.fork()") + """L['denied'].clear(); L['path_events'].clear()
posix2 = os
""",
    "S1 the path check's __code__ replaced": hook_locals("os", "open('/x', 'w')") + STAND_IN + """L['inside'].__code__ = _mk().__code__
L['denied'].clear()
posix2 = os
""",
    "S1 via marshal.loads and code.replace": hook_locals("os, marshal", "os.system('true')") + STAND_IN + """L['inside'].__code__ = marshal.loads(marshal.dumps(_mk().__code__)).replace(co_name='inside')
L['denied'].clear()
posix2 = os
""",
    "S1 with a code object built by code.__new__": hook_locals("os", "open('/x', 'w')") + STAND_IN + """c = _mk().__code__
L['inside'].__code__ = type(c)(c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount, c.co_nlocals,
                               c.co_stacksize, c.co_flags, c.co_code, c.co_consts, c.co_names, c.co_varnames,
                               c.co_filename, 'inside', 'inside', c.co_firstlineno, c.co_linetable,
                               c.co_exceptiontable, c.co_freevars, c.co_cellvars)
L['denied'].clear()
posix2 = os
""",
    "S1 via gc (made by _imp) after a refused gc walk": """
import os, _imp, _frozen_importlib as fb
gc = _imp.create_builtin(fb.ModuleSpec('gc', fb.BuiltinImporter))
try:
    gc.get_objects()
except PermissionError as e:
    tb = e.__traceback__
    while tb.tb_next:
        tb = tb.tb_next
    tb.tb_frame.f_locals['denied'].clear()
for o in gc.get_objects():
    if isinstance(o, set) and 'os.fork' in o:
        o.clear()
posix2 = os
""",
    "sys._getframe to the bootstrap's globals": """
import sys
g = sys._getframe().f_back.f_globals if sys._getframe().f_back else {}
os = g.get('os') or __import__('os')
posix2 = os
""",
    "S2 posixpath.abspath replaced": """
import os, posixpath
w = os.getcwd()
posixpath.abspath = lambda p: w
posix2 = os
""",
    "S4 a fresh, unaudited posix module": """
import os, _imp, _frozen_importlib as fb
posix2 = _imp.create_builtin(fb.ModuleSpec('posix', fb.BuiltinImporter))
""",
}

# What a policy past the hook tries; prints DID <harm> for each that worked.
PAYLOAD = """
import time
def attempt(name, f):
    try:
        f()
        print('DID', name, flush=True)
    except BaseException as exc:
        print('NOT', name, type(exc).__name__, exc, flush=True)
def survive():
    if os.fork() == 0:
        try:
            os.execv('/bin/sleep', ['sleep', '30', MARKER])
        finally:
            time.sleep(30)
def survive_posix():
    if posix2.fork() == 0:
        time.sleep(30)
def thread():
    import _thread
    _thread.start_new_thread(time.sleep, (30,))
def loader():
    from importlib.machinery import SourceFileLoader
    import importlib.util as u
    spec = u.spec_from_file_location('subprocess', os.__file__.replace('os.py', 'subprocess.py'))
    m = u.module_from_spec(spec); spec.loader.exec_module(m)
    m.Popen(['sleep', '30', MARKER], start_new_session=True)
attempt('write', lambda: open(KEEP, 'w').write('overwritten'))
attempt('plant', lambda: open(DIR + '/planted', 'w').write('x'))
attempt('remove', lambda: os.remove(KEEP))
attempt('rename', lambda: os.rename(KEEP, DIR + '/moved'))
attempt('chmod', lambda: os.chmod(KEEP, 0o600))
attempt('mkfifo', lambda: os.mkfifo(DIR + '/fifo'))
attempt('mknod', lambda: os.mknod(DIR + '/node'))
attempt('posix-mknod', lambda: posix2.mknod(DIR + '/node2'))
attempt('fork', survive)
attempt('posix-fork', survive_posix)
attempt('thread', thread)
attempt('setsid', os.setsid)
attempt('setpgid', lambda: os.setpgid(0, 0))
attempt('exec', lambda: os.execv('/bin/sh', ['sh', '-c', 'sleep 30 ' + MARKER]))
attempt('loader', loader)
print('END', flush=True)
"""


def tool_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("rl_lab_tool_*")}


def run_attack(code: str, victim: Path, limits: SandboxLimits = LIMITS) -> ToolResult:
    """Run `code` (with KEEP, DIR and MARKER defined) and check the caller's guarantees."""
    folders = tool_folders()
    keep = victim / "keep.txt"
    # the code must see the decoy, or the test proves nothing (sandbox_helpers.decoy_folder)
    body, marker = marked(f"KEEP, DIR = {str(keep)!r}, {str(victim)!r}\nimport os as _os\n"
                          f"print('SEES', _os.path.exists(KEEP), flush=True)\n" + code)
    body = body.replace("MARKER", repr(marker))
    before = snapshot(victim)
    start = time.monotonic()
    result = run_python(body, limits)
    assert isinstance(result, ToolResult) and result.kind in ("ok", "error", "timeout", "truncated"), result
    assert time.monotonic() - start < limits.timeout_s + 3, result
    assert "SEES True" in result.output, result.output
    assert snapshot(victim) == before, result.output
    assert processes_with(marker) == [], result.output
    assert tool_folders() <= folders
    return result


@pytest.fixture
def victim():
    folder = decoy_folder()
    (folder / "keep.txt").write_text("precious")
    (folder / "keep.txt").chmod(0o666)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@needs_namespaces
@pytest.mark.parametrize("bypass", list(BYPASSES), ids=list(BYPASSES))
def test_no_way_past_the_audit_hook_reaches_past_the_kernel(bypass, victim):
    result = run_attack(BYPASSES[bypass] + PAYLOAD, victim)
    assert "END" in result.output, result.output                 # the payload ran to its end
    assert not [h for h in HARMS if f"DID {h}\n" in result.output], result.output


@needs_namespaces
def test_with_the_hook_off_the_kernel_alone_stops_every_harm(victim):
    result = run_attack("import os\nposix2 = os\n" + PAYLOAD, victim, replace(LIMITS, audit_hook=False))
    assert "END" in result.output, result.output
    assert not [h for h in HARMS if f"DID {h}\n" in result.output], result.output
    for harm in ("write", "fork", "exec", "setsid", "mknod"):   # refused by the kernel, not the hook
        line = next(line for line in result.output.splitlines() if line.startswith(f"NOT {harm} "))
        assert "sandbox:" not in line, line


@needs_namespaces
def test_the_code_sees_its_own_namespaces_only():
    probe = ("import os\nprint(os.getpid(), sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
             "print(open('/proc/net/dev').read())\nprint(os.statvfs('/').f_flag & os.ST_RDONLY)")
    result = run_python(probe, replace(LIMITS, audit_hook=False))
    lines = result.output.splitlines()
    assert lines[0] == "1 ['1']", result.output                  # PID 1, alone in its /proc
    interfaces = [line.split(":")[0].strip() for line in lines if ":" in line and "|" not in line]
    assert interfaces == ["lo"], result.output
    assert lines[-1] == "1", result.output                       # the root is read-only


@needs_namespaces
def test_the_work_folder_is_capped_and_vanishes(victim):
    """S6 in namespaces mode: 1200 nested folders stop at the tmpfs's file cap, a big file at its
    size cap; nothing is left anywhere."""
    code = ("import os\nfor i in range(1200):\n    try:\n        os.mkdir('d'); os.chdir('d')\n"
            "    except OSError as e:\n        print('stopped at', i, e.errno); break\nos.chdir('/tmp')\n"
            "try:\n    open('big', 'wb').write(b'x' * (8 << 20))\nexcept OSError as e:\n    print('big', e.errno)\n")
    result = run_attack(code, victim, replace(LIMITS, audit_hook=False))
    assert "stopped at" in result.output and "big" in result.output, result.output
    assert int(result.output.split("stopped at")[1].split()[0]) < LIMITS.folder_files
    again = run_python("import os\nprint(os.listdir('.'))", LIMITS)
    assert again.output == "[]\n", again                         # a fresh folder for every call


@needs_namespaces
def test_the_seccomp_filter_denies_what_it_lists():
    """The filter by itself, installed in a plain child process: each listed call fails with EPERM
    (the raw ones with arguments the kernel would refuse otherwise with another errno: EBADF,
    EINVAL), fcntl with a listed command too, while fcntl(F_GETFD) and getpid work."""
    code = r"""
import ctypes, os, socket, _thread
from rl_lab.agents import sandbox_child as c
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
c.prctl(libc, c.PR_SET_NO_NEW_PRIVS, 1)
c.install_seccomp(libc, ctypes)
def errno_of(f):
    try:
        f()
    except OSError as e:
        return e.errno
    except RuntimeError:
        return 'runtime'
    return 0
def raw(number, *args):
    return lambda: c.check(libc.syscall(number, *args), ctypes)
checks = {'socket': lambda: socket.socket(), 'fork': os.fork, 'exec': lambda: os.execv('/bin/true', ['true']),
          'setsid': os.setsid, 'setpgid': lambda: os.setpgid(0, 0), 'kill': lambda: os.kill(os.getpid(), 0),
          'mkfifo': lambda: os.mkfifo('/nonexistent/fifo'), 'thread': lambda: _thread.start_new_thread(id, (1,)),
          'mount': lambda: c.check(libc.mount(b'none', b'/', b'tmpfs', 0, None), ctypes),
          'unshare': lambda: c.check(libc.unshare(0x10000000), ctypes),
          'shmget': raw(29, 0, 1 << 20, 0o1600), 'shmat': raw(30, -1, None, 0), 'msgget': raw(68, 0, 0o1600),
          'msgsnd': raw(69, -1, None, 0, 0), 'semget': raw(64, 0, 1, 0o1600), 'io_setup': raw(206, 1, None),
          'fallocate': raw(285, -1, 1, 0, 1 << 30), 'inotify_init': raw(253), 'inotify_init1': raw(294, 0),
          'flock': raw(73, -1, 1), 'F_SETLEASE': raw(72, -1, 1024, 0), 'F_SETLK': raw(72, -1, 6, None),
          'F_OFD_SETLK': raw(72, -1, 37, None), 'F_NOTIFY': raw(72, -1, 1026, 0),
          'F_GETFD': raw(72, 0, 1, 0)}
print({k: errno_of(f) for k, f in checks.items()}, os.getpid() > 0)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    got = eval(out.stdout.split("} ")[0] + "}")
    assert got == {**{k: 1 for k in got}, "thread": "runtime", "F_GETFD": 0}, got   # EPERM everywhere else
    assert out.stdout.strip().endswith("True")


# ---------------------------------------------------------------- both modes: the parent's side
@pytest.fixture(params=["namespaces", "unsandboxed"])
def mode_limits(request, monkeypatch, tmp_path):
    """Limits for one mode; unsandboxed mode is forced, allowed, and given its own folder root."""
    if request.param == "namespaces":
        if not NAMESPACES:
            pytest.skip("no namespaces mode on this machine")
        yield LIMITS
        return
    monkeypatch.setattr(python_tool, "sandbox_mode", lambda: python_tool.SandboxMode("unsandboxed", "forced"))
    monkeypatch.setattr(python_tool, "_warned_unsandboxed", True)
    root = tmp_path / "tools"
    root.mkdir()
    root.chmod(0o711)
    tmp_path.chmod(0o711)
    yield replace(LIMITS, allow_unsandboxed=True, temp_root=str(root))
    assert list(root.iterdir()) == [], "the unsandboxed call left its folder"


def test_s5_a_fifo_cannot_hang_the_caller(mode_limits, victim):
    """The output is read through a descriptor opened before the spawn: no named file to replace."""
    code = ("import os\nfor p in ('fifo', '../output', '../work2'):\n    try:\n        os.mkfifo(p)\n"
            "    except OSError as e:\n        print(p, e)\n")
    result = run_attack(code, victim, replace(mode_limits, audit_hook=False))
    assert result.kind == "ok", result


def test_s6_a_deep_folder_cannot_make_the_caller_raise_or_leak(mode_limits, victim):
    code = ("import os\nfor i in range(1200):\n    try:\n        os.mkdir('d'); os.chdir('d')\n"
            "    except OSError as e:\n        print('stopped', i); break\nos.chmod('.', 0)\n")
    result = run_attack(code, victim, replace(mode_limits, audit_hook=False))
    assert result.kind == "ok", result


@pytest.mark.parametrize("code, note", [
    ("print('x' * 5000)\nraise SystemExit(3)", "[output truncated at 2000 characters] [exit code 3]"),
    ("import signal\nsignal.raise_signal(signal.SIGXCPU)", None),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", None),
])
def test_s7_result_kinds_say_what_happened(code, note, mode_limits):
    """'truncated' only with exit 0; a signal the code raised itself is an error, not a timeout."""
    result = run_python(code, replace(mode_limits, audit_hook=False))
    assert result.kind == "error", result
    if note:
        assert result.output.endswith(note), result


def test_without_isolation_the_tool_refuses_unless_allowed(monkeypatch):
    monkeypatch.setattr(python_tool, "sandbox_mode",
                        lambda: python_tool.SandboxMode("unsandboxed", "no user namespaces (test)"))
    with pytest.raises(SandboxUnavailable, match=r"no user namespaces \(test\).*allow_unsandboxed=True"):
        run_python("print(1)")
    monkeypatch.setattr(python_tool, "_warned_unsandboxed", False)
    with pytest.warns(RuntimeWarning, match="UNSANDBOXED"):
        assert run_python("print(1)", SandboxLimits(allow_unsandboxed=True)).output == "1\n"
    with warnings_as_errors():                                 # once, not at every call
        assert run_python("print(2)", SandboxLimits(allow_unsandboxed=True)).output == "2\n"
    with pytest.raises(SandboxUnavailable):                    # the registry lets this one through
        run_tool("python", "print(1)")


def warnings_as_errors():
    import warnings
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error")

    class Exit:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            ctx.__exit__(*exc)
    return Exit()


# ---------------------------------------------------------------- issue 55: the second round
LANDLOCK = sys.platform.startswith("linux") and python_tool.landlock_abi() > 0
needs_landlock = pytest.mark.skipif(not LANDLOCK, reason="this kernel offers no Landlock: the sandbox says so "
                                    "(test_without_landlock_the_sandbox_says_what_it_lacks)")

# the audit hook's path check resolves paths through posixpath, which the code may replace
PATH_CHECK_REPLACED = """
import os, posixpath
_work = os.getcwd()
posixpath.abspath = lambda path: _work
posixpath._joinrealpath = lambda path, rest, strict, seen: (_work, True)
"""
INTO_A_FIFO = """
import os, stat
print('IS FIFO', stat.S_ISFIFO(os.stat(FIFO).st_mode), flush=True)
for name, path in (('fifo', FIFO), ('file', KEEP)):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b'overwritten')
        print('DID', name, flush=True)
    except OSError as e:
        print('NOT', name, e, flush=True)
"""


@needs_landlock
@pytest.mark.parametrize("hook", ["path check replaced", "hook off"])
def test_i55_no_write_into_a_fifo_or_file_outside_tmp(hook, mode_limits, victim):
    """Issue 55, 1: a read-only mount lets a FIFO be opened for writing (the kernel skips the check
    for special files); Landlock allows writing only beneath the code's own /tmp (its folder in
    unsandboxed mode).  The FIFO and the file sit beside the decoy, which the code sees; a reader
    holds the FIFO open, so an open for writing would succeed at once.  Whatever the code does to
    the hook's path check, the kernel refuses both (its message, not the hook's)."""
    fifo = victim / "control.fifo"
    os.mkfifo(fifo)
    fifo.chmod(0o666)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    prefix = PATH_CHECK_REPLACED if hook == "path check replaced" else ""
    limits = replace(mode_limits, audit_hook=hook != "hook off")
    try:
        result = run_attack(f"FIFO = {str(fifo)!r}\n" + prefix + INTO_A_FIFO, victim, limits)
        try:
            got = os.read(reader, 100)
        except BlockingIOError:
            got = b""
    finally:
        os.close(reader)
    assert "IS FIFO True" in result.output, result.output
    assert got == b"", (got, result.output)
    for name in ("fifo", "file"):
        line = next(line for line in result.output.splitlines() if line.split()[:2] in (["DID", name], ["NOT", name]))
        assert line.startswith("NOT") and "sandbox:" not in line and "[Errno" in line, result.output


@needs_landlock
def test_landlock_alone_confines_writes_to_one_folder(victim, tmp_path):
    """The Landlock rule by itself, set in a plain child process on a writable file system: beneath
    the allowed folder it writes, creates, renames and removes; beside it (a world-writable decoy)
    it cannot write, truncate, create a file, folder or FIFO, rename, remove or open a FIFO for
    writing: EACCES (a rename out: EXDEV under ABI 1, which refuses every move across folders)."""
    inside = tmp_path / "inside"
    inside.mkdir()
    fifo = victim / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    code = r"""
import ctypes, os, sys
from rl_lab.agents import sandbox_child as c
from rl_lab.agents.python_tool import landlock_abi
inside, outside = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
c.prctl(libc, c.PR_SET_NO_NEW_PRIVS, 1)
c.restrict_writes(libc, landlock_abi(), inside)
def errno_of(f):
    try:
        f()
    except OSError as e:
        return e.errno
    return 0
keep = os.path.join(outside, 'keep.txt')
checks = {
    'write inside': lambda: open(os.path.join(inside, 'a'), 'w').write('x'),
    'rename inside': lambda: os.rename(os.path.join(inside, 'a'), os.path.join(inside, 'b')),
    'mkdir inside': lambda: os.mkdir(os.path.join(inside, 'd')),
    'remove inside': lambda: os.remove(os.path.join(inside, 'b')),
    'read outside': lambda: open(keep).read(),
    'write outside': lambda: open(keep, 'r+').write('overwritten'),
    'truncate outside': lambda: os.truncate(keep, 0),
    'create outside': lambda: open(os.path.join(outside, 'new'), 'w'),
    'mkdir outside': lambda: os.mkdir(os.path.join(outside, 'd')),
    'mkfifo outside': lambda: os.mkfifo(os.path.join(outside, 'f2')),
    'fifo outside': lambda: os.open(os.path.join(outside, 'fifo'), os.O_WRONLY | os.O_NONBLOCK),
    'rename out': lambda: os.rename(keep, os.path.join(inside, 'stolen')),
    'remove outside': lambda: os.remove(keep),
}
print({k: errno_of(f) for k, f in checks.items()})
"""
    before = snapshot(victim)
    try:
        out = subprocess.run([sys.executable, "-c", code, str(inside), str(victim)], capture_output=True, text=True,
                             timeout=60, cwd=Path(__file__).resolve().parent.parent)
    finally:
        os.close(reader)
    assert out.returncode == 0, out.stderr
    got = eval(out.stdout)
    import errno
    assert got == {"write inside": 0, "rename inside": 0, "mkdir inside": 0, "remove inside": 0, "read outside": 0,
                   "write outside": errno.EACCES, "truncate outside": errno.EACCES, "create outside": errno.EACCES,
                   "mkdir outside": errno.EACCES, "mkfifo outside": errno.EACCES, "fifo outside": errno.EACCES,
                   "rename out": errno.EXDEV if python_tool.landlock_abi() == 1 else errno.EACCES,   # ABI 1: no REFER
                   "remove outside": errno.EACCES}, got
    assert snapshot(victim) == before


INHERITED = """
import os
found = []
for fd in range(3, 1024):
    try:
        os.fstat(fd)
    except OSError:
        continue
    found.append(fd)
    for name, harm in (('write', lambda: os.pwrite(fd, b'overwritten', 0)),
                       ('plant', lambda: os.close(os.open('planted', os.O_CREAT | os.O_WRONLY, 0o666, dir_fd=fd)))):
        try:
            harm()
            print('DID', name, fd, flush=True)
        except OSError as e:
            print('NOT', name, fd, e, flush=True)
print('OPEN', found, flush=True)
"""


@pytest.mark.parametrize("layers", ["both", "the parent's alone"])
def test_i55_descriptors_the_caller_left_open_are_closed(layers, mode_limits, victim, monkeypatch):
    """Issue 55, 2: the caller holds the decoy file (read-write) and its folder open without
    close-on-exec, as job runners and notebook servers hand such to their children.  Through them
    the code would write past the read-only mounts and Landlock, which check paths at open only,
    and, as root, past the switch to nobody.  The parent passes only the child's own descriptors,
    and the child closes every other one first: the code finds none, also with the child's step
    taken out (test_the_child_closes_what_it_inherits_itself takes the parent's out)."""
    if layers == "the parent's alone":
        source = python_tool.CHILD.read_text()
        assert 'step("descriptors", close_inherited,' in source
        source = source.replace('step("descriptors", close_inherited,', 'step("descriptors", lambda keep: None,')
        monkeypatch.setattr(python_tool, "_child_source", lambda: source)
    held = [os.open(victim / "keep.txt", os.O_RDWR), os.open(victim, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for fd in held:
            os.set_inheritable(fd, True)
        result = run_attack(INHERITED, victim, replace(mode_limits, audit_hook=False))
    finally:
        for fd in held:
            os.close(fd)
    assert "OPEN []" in result.output, (held, result.output)


def test_the_child_closes_what_it_inherits_itself(victim):
    """The child's own step, without the parent's close_fds: sandbox_child run by hand through
    posix_spawn, which passes every inheritable descriptor, closes them before the code runs."""
    held = os.open(victim / "keep.txt", os.O_RDWR)
    os.set_inheritable(held, True)
    settings = {"mode": "unsandboxed", "uid": -1, "gid": -1, "preload": [], "hook": False, "cpu_s": 10,
                "memory_bytes": 1 << 30, "file_bytes": 1 << 20, "open_files": 64, "folder_bytes": 0,
                "folder_files": 0, "isolate_network": False, "nproc": 10_000, "landlock_abi": 0, "status_fd": None}
    code = f"import os\ntry:\n    os.fstat({held})\n    print('OPEN')\nexcept OSError:\n    print('CLOSED')\n"
    with tempfile.TemporaryFile() as out:
        try:
            pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-c", python_tool._child_source(),
                                                  json.dumps(settings), code], {"PATH": "/usr/bin:/bin"},
                                 file_actions=[(os.POSIX_SPAWN_DUP2, out.fileno(), 1)])
            os.waitpid(pid, 0)
        finally:
            os.close(held)
        out.seek(0)
        assert out.read() == b"CLOSED\n"


# SysV IPC, AIO, fallocate, inotify, locks and leases through the tool with the hook off.  user=None:
# as root the code keeps the caller's uid (mapped, without capabilities), so it may import ctypes
# and fcntl from an interpreter under a home that nobody cannot read.
RAW = """
import ctypes, fcntl, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def attempt(name, f):
    try:
        if f() == -1:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        print('DID', name, flush=True)
    except OSError as e:
        print('NOT', name, e.errno, flush=True)
mine = os.open('mine', os.O_CREAT | os.O_RDONLY, 0o600)
"""
HOST_RESOURCES = {
    "shared memory": "libc.syscall(29, 0, 64 << 20, 0o1600)",                 # shmget(IPC_PRIVATE, 64 MiB)
    "message queue": "libc.syscall(68, 0, 0o1600)",                           # msgget(IPC_PRIVATE)
    "semaphores": "libc.syscall(64, 0, 1, 0o1600)",                           # semget
    "AIO context": "libc.syscall(206, 1, ctypes.byref(ctypes.c_ulong(0)))",   # io_setup: a host-wide quota
    "fallocate on the output": "libc.syscall(285, 1, 1, 0, 8 << 20)",         # KEEP_SIZE: past RLIMIT_FSIZE
    "inotify": "libc.syscall(294, 0)",                                        # inotify_init1
    "flock": "fcntl.flock(os.open('/usr', os.O_RDONLY), fcntl.LOCK_SH)",
    "POSIX lock": "fcntl.lockf(mine, fcntl.LOCK_SH)",
    "lease": "fcntl.fcntl(mine, fcntl.F_SETLEASE, fcntl.F_RDLCK)",
    "dnotify": "fcntl.fcntl(os.open('/usr', os.O_RDONLY), fcntl.F_NOTIFY, fcntl.DN_CREATE)",
}


@needs_namespaces
@pytest.mark.parametrize("harm", list(HOST_RESOURCES))
def test_i55_the_code_takes_no_host_memory_disk_or_quota(harm):
    """Issue 55, 3-5: memory that RLIMIT_AS does not count (SysV segments and queues), disk past
    the file-size limit (fallocate KEEP_SIZE on the output's descriptor), host-wide quotas (AIO
    contexts, inotify instances) and locks or leases that hold up other processes: EPERM."""
    code = RAW + f"attempt({harm!r}, lambda: {HOST_RESOURCES[harm]})\n"
    result = run_python(code, replace(LIMITS, audit_hook=False, user=None))
    assert f"NOT {harm} 1\n" in result.output, result.output


def test_i55_a_note_printed_by_the_code_is_not_the_parents(mode_limits):
    """Issue 55, 6: the parent learns whether the sandbox was built from a pipe the code never
    holds, not from the output: the code printing the set-up failure and exiting with its code is
    an exit code 121, with no "could not be built" note; a real set-up failure still has it."""
    spoof = ("import os, sys\nsys.stderr.write('sandbox setup failed at mounts: spoofed\\n')\nsys.stderr.flush()\n"
             "os._exit(121)")
    result = run_python(spoof, mode_limits)
    assert result.kind == "error" and result.output.endswith("spoofed\n[exit code 121]"), result
    assert "could not be built" not in result.output, result
    real = run_python("print('ran')", replace(mode_limits, open_files=2**40))
    assert real.kind == "error" and real.output.startswith("sandbox setup failed at limits"), real
    assert real.output.endswith("[the sandbox could not be built; the code did not run]") and "ran" not in real.output


def test_i55_output_reaches_terminals_with_control_characters_shown(mode_limits):
    """Terminal escape sequences, NUL, carriage return and C1 controls come back as Python escapes;
    tabs, newlines and printable Unicode pass; invalid UTF-8 is replaced."""
    code = ("import sys\nsys.stdout.buffer.write(b'a\\x1b[2J\\x1b]0;owned\\x07b\\x00c\\rd\\x7f\\xc2\\x9b\\te\\xff\\n')\n"
            "print('\u00e9\U0001d54f')")
    result = run_python(code, mode_limits)
    assert result.kind == "ok", result
    assert result.output == "a\\x1b[2J\\x1b]0;owned\\x07b\\x00c\\rd\\x7f\\x9b\te\ufffd\n\u00e9\U0001d54f\n", result


def test_i55_code_longer_than_an_argument_may_be_runs(mode_limits):
    """A `max_code_chars` above what one argument may hold: 100,000 four-byte characters (400 kB,
    past the kernel's 128 KiB per argument) go through stdin, which the code then finds empty."""
    code = "s = '" + "\U0001d54f" * 100_000 + "'\nimport sys\nprint(len(s), repr(sys.stdin.read()))"
    result = run_python(code, replace(mode_limits, max_code_chars=200_000))
    assert result.kind == "ok" and result.output == "100000 ''\n", result


def test_i55_a_process_that_cannot_start_is_an_error_not_an_exception(mode_limits, monkeypatch):
    """Whatever stops the child from starting (here E2BIG, as an over-long argument list gave) is a
    result, not an exception in the caller."""
    import errno

    popen = subprocess.Popen

    def too_long(args, *rest, **kwargs):
        if args[:2] == [sys.executable, "-I"]:           # the sandbox's child, not the clean-up's rm
            raise OSError(errno.E2BIG, "Argument list too long")
        return popen(args, *rest, **kwargs)
    monkeypatch.setattr(python_tool.subprocess, "Popen", too_long)
    result = run_python("print(1)", mode_limits)
    assert result.kind == "error" and result.output.startswith("error: ") and "Argument list too long" in result.output


@needs_namespaces
def test_without_landlock_the_sandbox_says_what_it_lacks(monkeypatch):
    """Where the kernel offers no Landlock the sandbox runs without it, and says so: in the mode's
    reason (what rl-lab doctor prints), in sandbox_guarantees and in a warning, once."""
    monkeypatch.setattr(python_tool, "landlock_abi", lambda: 0)
    monkeypatch.setattr(python_tool, "_warned_no_landlock", False)
    python_tool.sandbox_mode.cache_clear()
    python_tool.sandbox_guarantees.cache_clear()
    try:
        mode = sandbox_mode()
        assert mode.name == "namespaces" and "no Landlock" in mode.reason and "FIFOs" in mode.reason, mode
        with pytest.warns(RuntimeWarning, match="without Landlock"):
            assert run_python("print(1)", LIMITS).output == "1\n"
        assert python_tool.sandbox_guarantees()["landlock"] is False
    finally:
        python_tool.sandbox_mode.cache_clear()
        python_tool.sandbox_guarantees.cache_clear()


# ---------------------------------------------------------------- as an unprivileged user
def _reachable_by_others(path: Path) -> bool:
    """Whether a user with only "others'" rights can read `path` (and pass every folder above it)."""
    path = path.resolve()
    return bool(path.stat().st_mode & 0o004) and all(p.stat().st_mode & 0o001 for p in path.parents)


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _interpreter_for_nobody(env: dict) -> str | None:
    """An interpreter `nobody` can run with this environment's packages (PYTHONPATH in `env`): this
    one, or else a system interpreter of the same version (a pyenv interpreter under a private
    home cannot be executed by another user).  Tried, not guessed."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, shutil.which(version, path="/usr/bin:/bin:/usr/local/bin")):
        if candidate is None:
            continue
        probe = "import os, sys, torch, pytest, rl_lab; os.posix_spawn(sys.executable, [sys.executable, '-c', ''], {})"
        try:
            ok = subprocess.run(NOBODY + [candidate, "-c", probe], env=env, capture_output=True,
                                timeout=120).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return candidate
    return None


@pytest.mark.slow             # > 20 s: not in the fast tier (make test-fast)
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="re-running as `nobody` needs root and setpriv")
def test_the_attacks_fail_as_an_unprivileged_user_too():
    repo = Path(__file__).resolve().parents[2]
    if not _reachable_by_others(repo / "tests" / "integration" / "test_sandbox_attacks.py"):
        pytest.skip(f"the repository {repo} is not readable by nobody")
    base = Path(tempfile.gettempdir()).resolve()
    if not all(p.stat().st_mode & 0o001 for p in [base, *base.parents]):   # passable is enough: 711 will do
        pytest.skip(f"the temporary folder {base} is not reachable by nobody (.ci/run makes its own so)")
    import site
    packages = os.pathsep.join(site.getsitepackages())
    home = Path(tempfile.mkdtemp(prefix="rl_lab_nobody_", dir=base))
    home.chmod(0o777)
    decoy_folder().rmdir()                                     # makes _build/sandbox-decoys, open to all
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(home),
           "PYTHONPATH": f"{repo}{os.pathsep}{packages}", "PYTHONDONTWRITEBYTECODE": "1", "RL_LAB_PRESET": "smoke",
           "HF_HUB_OFFLINE": "1"}
    interpreter = _interpreter_for_nobody(env)
    if interpreter is None:
        shutil.rmtree(home, ignore_errors=True)
        pytest.skip("no Python interpreter of this version that nobody may run with this environment")
    try:
        out = subprocess.run(NOBODY + [interpreter, "-m",
                              "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/integration/test_sandbox_attacks.py",
                              "tests/unit/test_agent_tools.py"],
                             cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    tail = out.stdout[-3000:] + out.stderr[-2000:]
    assert out.returncode == 0, tail
    assert " passed" in out.stdout and " failed" not in out.stdout, tail
    if NAMESPACES:      # the unprivileged run gets the namespaces mode too, so its attacks ran
        assert "no namespaces mode" not in out.stdout, tail
