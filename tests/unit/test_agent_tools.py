"""The tool sandbox (rl_lab.agents): the calculator refuses what it cannot bound, and the Python
tool's bad inputs end as tool errors with nothing outside its temporary folder changed and no
process left behind."""
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from sandbox_helpers import decoy_folder, marked, processes_with, snapshot

from rl_lab.agents import (
    CalculatorLimits,
    SandboxLimits,
    ToolResult,
    calculator,
    get_tool,
    register_tool,
    run_python,
    run_tool,
    sandbox_guarantees,
    sandbox_mode,
)
from rl_lab.agents.python_tool import landlock_abi
from rl_lab.agents.registry import TOOLS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")


# ---------------------------------------------------------------- calculator
@pytest.mark.parametrize("expression, value", [
    ("2*(3+4)", "14"), ("7/2", "3.5"), ("12/4", "3"), ("7//2", "3"), ("-7 % 3", "2"), ("2**10", "1024"),
    ("-(-3)", "3"), ("1.5*4", "6"), ("3 × 4 − 2 ÷ 2", "11"), ("1/3", "0.333333333333"), ("2**-1", "0.5"),
    ("1_000 + 1", "1001"), (" 6 ", "6"),
])
def test_calculator_computes_arithmetic(expression, value):
    result = calculator(expression)
    assert result == ToolResult(value, "ok", result.seconds), result


@pytest.mark.parametrize("expression, message", [
    ("9**9**9", "exponent"), ("10**59 * 10**59", "too large"), ("2**64**2", "exponent"), ("1e308*10", "too large"),
    ("1/0", "division by zero"), ("5 % 0", "division by zero"), ("0**-1", "division by zero"),
    ("(-8)**(1/3)", "fractional power"), ("__import__('os').remove('x')", "unsupported syntax: Call"),
    ("x + 1", "unsupported syntax: Name"), ("'a' * 3", "only numbers"), ("True + 1", "only numbers"),
    ("1j * 2", "only numbers"), ("2 ^ 3", "a ** b"), ("1 < 2", "unsupported syntax: Compare"), ("(1", "cannot parse"),
    ("", "empty"), ("1+" * 150 + "1", "too long"), ("-" * 30 + "1", "nested too deeply"),
    ("\udcff\x00ǅ𝕏", "cannot parse"), ("ǅ", "unsupported syntax"), ("\u202e1+1", "cannot parse"),
])
def test_calculator_refuses_with_a_message(expression, message):
    result = calculator(expression)
    assert result.kind == "error" and result.output.startswith("error: ") and message in result.output, result
    assert result.seconds < 1.0      # refused before computing: 9**9**9 itself would take minutes


def test_calculator_limits_are_configurable():
    assert calculator("2**100").kind == "error"
    assert calculator("2**100", CalculatorLimits(max_exponent=100, max_digits=40)).output == str(2**100)


# ---------------------------------------------------------------- the Python tool
# What these tests need from the sandbox works in both modes; tests/integration/test_sandbox_attacks.py holds
# the attacks, which only the namespaces mode must stop.
@pytest.fixture
def fast():
    """Limits for these tests: a 1.5 s timeout (a busy machine needs the margin); in unsandboxed mode the per-call folders go to a fresh
    root (traversable by the sandbox user) that must be empty afterwards."""
    root = Path(tempfile.mkdtemp(prefix="rl_lab_test_tools_"))
    root.chmod(0o711)
    yield SandboxLimits(timeout_s=1.5, temp_root=str(root),
                        allow_unsandboxed=sandbox_mode().name != "namespaces")
    left = list(root.iterdir())
    for p in left:
        shutil.rmtree(p, ignore_errors=True)
    root.rmdir()
    assert not left, f"the sandbox left {left}"


@pytest.fixture
def victim():
    """A file and folder outside the sandbox that the tests' code tries to damage (both writable by
    the sandbox user)."""
    folder = decoy_folder()
    (folder / "keep.txt").write_text("precious")
    (folder / "keep.txt").chmod(0o666)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_python_tool_runs_code_and_returns_its_output(fast):
    result = run_python("import math\nprint(sum(i * i for i in range(10)), math.gcd(12, 18))", fast)
    assert result.kind == "ok" and result.output == "285 6\n", result
    inside = run_python("open('f.txt', 'w').write('hi')\nimport os\nos.mkdir('d')\nos.rename('f.txt', 'd/g.txt')\n"
                        "print(open('d/g.txt').read(), sorted(os.listdir('.')))", fast)
    if landlock_abi() == 1:          # Landlock's first version refuses moves into another folder, its own too
        assert inside.kind == "error" and "[Errno 18]" in inside.output, inside
    else:
        assert inside.kind == "ok" and inside.output == "hi ['d']\n", inside


@pytest.mark.parametrize("attack", [
    "import os\nos.remove({keep!r})",
    "import os\nos.rename({keep!r}, 'stolen')",
    "import os\nos.chmod({keep!r}, 0o777)",
    "open({keep!r}, 'w').write('overwritten')",
    "open({new!r}, 'w').write('planted')",
    "import os\nos.mkdir({dir!r} + '/made')",
    "import os\nos.symlink({keep!r}, 'link')\nopen('link', 'w').write('through a link')",
    "import os\nos.link({keep!r}, 'hard')\nopen('hard', 'w').write('through a hard link')",
    "import os\nfd = os.open({dir!r}, os.O_RDONLY)\nos.remove('keep.txt', dir_fd=fd)",
    "import os\nfd = os.open({dir!r}, os.O_RDONLY)\nos.open('new.txt', os.O_WRONLY | os.O_CREAT, dir_fd=fd)",
    "import os\nos.chdir({dir!r})\nopen('keep.txt', 'a').write('appended')",
    "import shutil\nshutil.rmtree({dir!r})",
    "import ctypes",
    "import subprocess\nsubprocess.run(['rm', {keep!r}])",
    "import os\nos.system('rm ' + {keep!r})",
    "import os\nos.execv('/bin/rm', ['rm', {keep!r}])",
    "import gc\nprint(len(gc.get_objects()))",
    "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (100, 100))",
    "import os\nos.mkfifo({dir!r} + '/fifo')",
    "import posix\nposix.mknod({dir!r} + '/node')",
    "import sys\nsys.modules['__main__'].__dict__.clear()\nopen({new!r}, 'w')",
])
def test_python_tool_changes_nothing_outside_its_folder(attack, victim, fast):
    seen = run_python(f"import os\nprint(os.path.exists({str(victim / 'keep.txt')!r}))", fast)
    assert seen.output == "True\n", seen          # the code sees the decoy, so the test can fail
    before = snapshot(victim)
    code = attack.format(keep=str(victim / "keep.txt"), new=str(victim / "new.txt"), dir=str(victim))
    result = run_python(code, fast)
    assert result.kind == "error" and ("PermissionError" in result.output or "sandbox" in result.output), result
    assert snapshot(victim) == before


def test_python_tool_cannot_write_to_world_writable_places(fast):
    """The system temporary folder is writable by the sandbox user too.  Namespaces mode: the code's
    /tmp is its own tmpfs, so a write there lands in it and vanishes; unsandboxed: the audit hook
    refuses it.  Either way nothing appears on the host."""
    target = Path(tempfile.gettempdir()) / f"rl_lab_test_planted_{os.getpid()}"
    result = run_python(f"open({str(target)!r}, 'w').write('x')", fast)
    assert result.kind in ("ok", "error"), result
    assert not target.exists()


def test_python_tool_has_no_network(fast):
    result = run_python("import socket", fast)
    assert result.kind == "error" and "not available" in result.output, result
    if sandbox_guarantees()["network_isolated"]:   # the OS layer alone: no interface is up
        raw = run_python("print(open('/proc/net/dev').read())", replace(fast, audit_hook=False))
        interfaces = [line.split(":")[0].strip() for line in raw.output.splitlines() if ":" in line]
        assert interfaces == ["lo"], raw


def test_an_endless_loop_times_out_and_its_process_is_gone(fast):
    code, marker = marked("while True: pass")
    result = run_python(code, fast)
    assert result.kind == "timeout" and "timeout" in result.output, result
    assert result.seconds >= fast.timeout_s
    assert processes_with(marker) == []


def test_fork_is_refused(fast):
    result = run_python("import os\nwhile True:\n    os.fork()", fast)
    assert result.kind == "error" and "os.fork is not allowed" in result.output, result


def test_a_bounded_fork_bomb_is_stopped_and_cleaned_up(fast):
    """The OS layer alone (audit hook off).  Namespaces mode: seccomp refuses the first fork.
    Unsandboxed mode: RLIMIT_NPROC refuses forks past the limit, and the children left sleeping
    are killed with the process group.  Bounded (40 forks at most, children sleep then exit) so
    it cannot hurt a shared machine."""
    namespaces = sandbox_mode().name == "namespaces"
    if not namespaces and os.geteuid() == 0 and not sandbox_guarantees()["runs_as_other_user"]:
        pytest.skip("RLIMIT_NPROC does not apply to root and the sandbox cannot switch user here")
    code, marker = marked(
        "import os, time\nkids = []\nfor i in range(40):\n    try:\n        pid = os.fork()\n"
        "    except OSError as e:\n        print('refused', i, flush=True)\n        break\n    if pid == 0:\n"
        "        time.sleep(20)\n        os._exit(0)\n    kids.append(pid)\nprint('kids', len(kids))")
    result = run_python(code, replace(fast, timeout_s=5.0, max_processes=6, audit_hook=False))
    assert "refused" in result.output, result
    kids = int(result.output.split("kids")[1].split()[0])
    assert kids == 0 if namespaces else kids < 40
    assert processes_with(marker) == []


def test_long_output_is_truncated_and_output_past_the_file_limit_is_an_error(fast):
    """'truncated' means exit 0 with the output cut at max_output_chars; ten megabytes pass the
    file-size limit (1 MiB), the write fails and the program exits non-zero: an error, cut too."""
    result = run_python("print('x' * 100_000)", fast)
    assert result.kind == "truncated" and len(result.output) < fast.max_output_chars + 100, result.kind
    assert result.output.startswith("x" * 100) and result.output.endswith("[output truncated at 2000 characters]")
    many = run_python("for i in range(100_000):\n    print(i)", fast)
    assert many.kind == "truncated" and many.output.startswith("0\n1\n2\n"), many.kind
    huge = run_python("print('x' * 10_000_000)", fast)
    assert huge.kind == "error" and "[output truncated at 2000 characters] [exit code" in huge.output, huge.kind


def test_nine_to_the_nine_to_the_nine_is_refused_or_killed(fast):
    assert calculator("9**9**9").kind == "error"
    result = run_python("print(9**9**9)", fast)
    assert result.kind in ("timeout", "error"), result
    memory = run_python("x = bytearray(10**9)", fast)
    assert memory.kind == "error" and "MemoryError" in memory.output, memory


@pytest.mark.parametrize("code, expected", [
    ("x = (", "SyntaxError"), ("def f(:\n  pass", "SyntaxError"), ("\tprint(1)\n  print(2)", "Error"),
    ("raise ValueError('boom')", "ValueError: boom"), ("import sys\nsys.exit(3)", "[exit code 3]"),
    ("import numpy", "not available"), ("print(undefined_name)", "NameError"),
])
def test_bad_programs_end_as_tool_errors(code, expected, fast):
    result = run_python(code, fast)
    assert result.kind == "error" and expected in result.output, result


@pytest.mark.parametrize("code", ["\udcff\udcfe", "print(1)\x00", "x" * 30_000, b"print(1)"])
def test_programs_that_cannot_be_passed_are_refused_without_a_process(code, fast, monkeypatch):
    def no_spawn(*args, **kwargs):
        raise AssertionError("a process was started")
    monkeypatch.setattr(os, "posix_spawn", no_spawn)
    monkeypatch.setattr(subprocess, "Popen", no_spawn)
    result = run_python(code, fast)
    assert result.kind == "error" and result.output.startswith("error: "), result


def test_unicode_output_and_identifiers_pass_through(fast):
    result = run_python("ǅ = '\u202e\ufeff𝕏 é'\nprint(ǅ)", fast)
    assert result.kind == "ok" and result.output == "\u202e\ufeff𝕏 é\n", result
    garbage = run_python("import sys\nsys.stdout.buffer.write(bytes(range(256)))", fast)
    assert garbage.kind == "ok" and "\ufffd" in garbage.output     # invalid UTF-8 decoded with replacement


# ---------------------------------------------------------------- registry
def test_registry_finds_tools_and_a_raising_tool_becomes_an_error(monkeypatch):
    monkeypatch.setitem(TOOLS, "broken", lambda text: 1 / 0)
    monkeypatch.setitem(TOOLS, "wrong_type", lambda text: "just text")
    assert run_tool("calculator", "6*7").output == "42"
    broken = run_tool("broken", "anything")
    assert broken.kind == "error" and "ZeroDivisionError" in broken.output
    assert run_tool("wrong_type", "x").kind == "error"
    with pytest.raises(KeyError, match="registered: .*calculator"):
        get_tool("no_such_tool")
    with pytest.raises(ValueError, match="already registered"):
        register_tool("calculator", calculator)
    with pytest.raises(ValueError, match="kind="):
        ToolResult("x", "exploded")


def test_the_mode_and_guarantees_on_this_machine_are_reported():
    mode, g = sandbox_mode(), sandbox_guarantees()
    assert mode.name in ("namespaces", "unsandboxed") and mode.reason
    assert set(g) == {"mode_namespaces", "own_pid_namespace", "runs_as_other_user", "network_isolated",
                      "read_only_root", "seccomp", "landlock"}
    assert g["landlock"] == (landlock_abi() > 0)   # a kernel without it: the mode's reason says so
    if mode.name == "namespaces":     # every layer is on: the probe ran inside them
        assert all(v for k, v in g.items() if k not in ("runs_as_other_user", "landlock")), g
    if os.geteuid() == 0:             # root's code runs as nobody in either mode
        assert g["runs_as_other_user"], g


def test_a_call_returns_only_when_its_process_group_has_exited():
    """The wait behind "nothing the code starts survives the call": SIGKILL is delivered at once,
    but the process takes a moment to exit; _await_group_exit returns when nothing of the group
    runs, and a zombie (exited, not yet reaped) does not count as running."""
    import signal
    import subprocess as sp

    from rl_lab.agents.python_tool import _await_group_exit, _group_alive
    proc = sp.Popen(["sleep", "30"], start_new_session=True)
    assert _group_alive(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    _await_group_exit(proc.pid)
    assert not _group_alive(proc.pid)
    state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    assert state == "Z"                      # exited, left for its parent (this test) to reap
    proc.wait()
    assert not _group_alive(proc.pid)
