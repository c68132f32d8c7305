"""tools/device_check.sh and tools/device_check.py (issue 57): the parts are all there, each runs
under its own timeout, and the summary line has the parseable format the README documents."""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^\[device-check\] part=[a-z_]+ status=(ok|fail|skip) seconds=\d+( [A-Za-z0-9_.:/-]+=\S+)*$")


def _module():
    spec = importlib.util.spec_from_file_location("device_check", ROOT / "tools" / "device_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_part_is_defined_listed_and_timed():
    dc = _module()
    sh = (ROOT / "tools" / "device_check.sh").read_text()
    assert dc.PARTS == ("env", "cuda_tests", "grpo_steps", "bench", "stability")
    listed = re.search(r'PARTS=\$\{DEVICE_CHECK_PARTS:-"([^"]+)"\}', sh).group(1).split()
    assert tuple(listed) == dc.PARTS
    limits = dict(re.findall(r"\[(\w+)\]=(\d+)", re.search(r"declare -A LIMIT=\(([^)]*)\)", sh).group(1)))
    assert set(limits) == set(dc.PARTS) and sum(map(int, limits.values())) <= 480   # under 8 minutes
    assert "timeout -k" in sh and "set -e" not in sh.replace("set -euo", "")        # a failed part does not stop the rest
    for part in dc.PARTS:
        assert callable(getattr(dc, f"part_{part}"))
    assert (ROOT / "tests" / "integration" / "test_cuda.py").exists()
    assert "989.4e12" in (ROOT / "tools" / "device_check.py").read_text()


def test_summary_line_format_and_parse():
    dc = _module()
    line = dc.summary_line("bench", "ok", 12.4, {"gpu": "NVIDIA H200", "b1_tok_s": 1234.5678, "b3_of_peak": float("nan")})
    assert LINE.match(line), line
    assert dc.parse_line(line) == {"part": "bench", "status": "ok", "seconds": "12", "gpu": "NVIDIA_H200",
                                   "b1_tok_s": "1235", "b3_of_peak": "nan"}
    assert dc.status_of(0, {}) == "ok" and dc.status_of(0, {"status": "skip"}) == "skip"
    assert dc.status_of(124, {}) == "fail" and dc.status_of(1, {}) == "fail"


def test_summary_command_reports_a_timed_out_part_with_what_it_finished(tmp_path):
    """The shell's `summary` call: a part killed at its limit (124) still shows the results it wrote."""
    (tmp_path / "grpo_steps.kv").write_text(json.dumps({"ok": "5", "failed": "0"}))
    env = {**os.environ, "DEVICE_CHECK_KV": str(tmp_path), "OUT": str(tmp_path)}
    out = subprocess.run([sys.executable, "tools/device_check.py", "summary", "grpo_steps", "124", "99"],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert LINE.match(out), out
    fields = _module().parse_line(out)
    assert fields["status"] == "fail" and fields["timeout"] == "1" and fields["ok"] == "5"


def test_the_rehearsal_builds_the_gpu_machines_versions_and_runs_the_dry_mode():
    sh = (ROOT / "tools" / "device_rehearsal.sh").read_text()
    assert '"torch==2.11.*"' in sh and '"transformers==5.17.*"' in sh
    assert "pip install" in sh and not re.search(r"pip install[^\n]*\b(vllm|trl)\b", sh)
    assert "RL_LAB_DEVICE_DRY=1 RL_LAB_DEVICE=cpu" in sh and "tools/device_check.sh" in sh
