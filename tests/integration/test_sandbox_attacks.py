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
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rl_lab.agents import SandboxLimits, SandboxUnavailable, ToolResult, run_python, run_tool, sandbox_mode
from rl_lab.agents import python_tool
from sandbox_helpers import decoy_folder, marked, processes_with, snapshot

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
    """The filter by itself, installed in a plain child process: each listed call fails with EPERM,
    an unlisted one (getpid) works."""
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
checks = {'socket': lambda: socket.socket(), 'fork': os.fork, 'exec': lambda: os.execv('/bin/true', ['true']),
          'setsid': os.setsid, 'setpgid': lambda: os.setpgid(0, 0), 'kill': lambda: os.kill(os.getpid(), 0),
          'mkfifo': lambda: os.mkfifo('/nonexistent/fifo'), 'thread': lambda: _thread.start_new_thread(id, (1,)),
          'mount': lambda: c.check(libc.mount(b'none', b'/', b'tmpfs', 0, None), ctypes),
          'unshare': lambda: c.check(libc.unshare(0x10000000), ctypes)}
print({k: errno_of(f) for k, f in checks.items()}, os.getpid() > 0)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    got = eval(out.stdout.split("} ")[0] + "}")
    assert got == {**{k: 1 for k in got}, "thread": "runtime"}, got   # EPERM everywhere
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
