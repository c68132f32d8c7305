"""The parts of tools/device_check.sh (issue 57), one per `run PART`, and the summary line each ends with.

    python tools/device_check.py run env            # one part; its key=value results go to $DEVICE_CHECK_KV/<part>.kv
    python tools/device_check.py summary env 0 12   # the part's summary line (part, exit status, seconds)
    python tools/device_check.py collect            # every part's results as $OUT/results.json

The summary line (`summary_line`), printed by device_check.sh as each part ends:

    [device-check] part=<name> status=ok|fail|skip seconds=<s> key=value ...

Values hold no spaces (spaces become "_"), so `line.split()` then `split("=", 1)` parses it (`parse_line`).
status: ok (the part ran and passed), fail (an error, a failed test, or `timeout=1`: killed at its
limit), skip (the part could not run here, `reason=`).  A part writes its results as it goes, so a
part killed at its limit still reports what it finished.

RL_LAB_DEVICE_DRY=1: tiny sizes (the CPU rehearsal, tools/device_rehearsal.sh); RL_LAB_DEVICE=cpu|cuda
picks the device (default: cuda when there is one).  Only the standard library is imported at the
top, so `summary` works even where torch does not import.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "[device-check]"
PARTS = ("env", "cuda_tests", "grpo_steps", "bench", "stability")
STATUSES = ("ok", "fail", "skip")
# Dense bf16 matrix-multiply peak (no sparsity), FLOP/s.  H100 SXM and H200: 989.4 TFLOP/s
# (NVIDIA H100 Tensor Core GPU datasheet and NVIDIA H200 datasheet list 1,979 TFLOP/s "with
# sparsity"; dense is half).  H100 PCIe: 756 TFLOP/s.  This workplace's notes saw about 790 TFLOP/s
# sustained on an H200 (the device machine's notes): the fraction is of the datasheet number.
BF16_PEAK = {"H200": 989.4e12, "H100 PCIe": 756e12, "H100": 989.4e12, "A100": 312e12}
# The packages the GPU machine has (issue 57) and the ones it lacks; versions are reported for all.
PACKAGES = {"torch": "torch", "transformers": "transformers", "accelerate": "accelerate", "peft": "peft",
            "pandas": "pandas", "matplotlib": "matplotlib", "pyyaml": "PyYAML", "safetensors": "safetensors",
            "numpy": "numpy", "pytest": "pytest", "xdist": "pytest-xdist", "tokenizers": "tokenizers",
            "vllm": "vllm", "trl": "trl", "jupytext": "jupytext", "nbval": "nbval"}
# missing on the GPU machine by design: vLLM, TRL, and the book's build (rl_lab.book_ext needs sphinx
# and docutils; the book is never built there)
OPTIONAL = ("vllm", "trl", "jupytext", "nbval", "sphinx", "docutils", "myst_parser", "myst_nb", "nbformat")
# The `gpu` preset's engines and estimators, as tests/integration/test_cuda.py lists them.
ENGINES = {"fp32": {}, "bf16": dict(sampler_dtype="bfloat16"), "fp16": dict(sampler_dtype="float16"),
           "stale2": dict(sampler_staleness=2), "noise": dict(sampler_logit_noise=0.5),
           "int8": dict(sampler_quantization="int8"), "temp1.3": dict(sampler_temperature=1.3),
           "minp": dict(min_p=0.1),
           "rs": dict(rollout_correction=dict(rollout_rs="seq_mean_k1,token_kl", rollout_rs_threshold="0.5_2.0,0.5"))}


def dry() -> bool:
    return os.environ.get("RL_LAB_DEVICE_DRY", "0") not in ("", "0", "false", "no")


def clean(value) -> str:
    """A value as the summary line writes it: no spaces, floats to 4 significant digits."""
    if isinstance(value, float):
        value = "nan" if math.isnan(value) else f"{value:.4g}"
    return re.sub(r"\s+", "_", str(value).strip()) or "-"


def summary_line(part: str, status: str, seconds: float, fields: dict | None = None) -> str:
    if status not in STATUSES:
        raise ValueError(f"status {status!r}: one of {STATUSES}")
    kv = "".join(f" {clean(k)}={clean(v)}" for k, v in (fields or {}).items() if k != "status")
    return f"{PREFIX} part={clean(part)} status={status} seconds={int(round(seconds))}{kv}"


def parse_line(line: str) -> dict:
    """A summary line as a dict (part, status, seconds and the rest, all strings)."""
    words = line.split()
    if not words or words[0] != PREFIX:
        raise ValueError(f"not a summary line: {line!r}")
    return dict(w.split("=", 1) for w in words[1:])


def status_of(rc: int, fields: dict) -> str:
    if rc in (124, 137):
        return "fail"
    if rc != 0:
        return "fail"
    return fields.get("status", "ok") if fields.get("status") in STATUSES else "ok"


# --------------------------------------------------------------------------- results as the part goes
def kv_dir() -> Path:
    d = Path(os.environ.get("DEVICE_CHECK_KV") or os.environ.get("OUT") or Path(tempfile.gettempdir()) / "device-check-kv")
    d.mkdir(parents=True, exist_ok=True)
    return d


class Results(dict):
    """A part's key=value results, written to <kv>/<part>.kv on every change."""

    def __init__(self, part: str):
        super().__init__()
        self.path = kv_dir() / f"{part}.kv"
        self.path.write_text("{}")

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.path.write_text(json.dumps({k: clean(v) for k, v in self.items()}))


def read_results(part: str) -> dict:
    try:
        return json.loads((kv_dir() / f"{part}.kv").read_text())
    except (OSError, ValueError):
        return {}


def device_name():
    import torch
    want = os.environ.get("RL_LAB_DEVICE", "").strip()
    if want:
        return want
    return "cuda" if torch.cuda.is_available() else "cpu"


def sync(device):
    import torch
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def peak_flops(device) -> tuple[float, str]:
    """(dense bf16 peak FLOP/s, the GPU's name) from BF16_PEAK; nan on the CPU or an unknown GPU."""
    import torch
    if not str(device).startswith("cuda"):
        return float("nan"), "cpu"
    name = torch.cuda.get_device_name(0)
    for key, peak in BF16_PEAK.items():
        if key in name:
            return peak, name
    return float("nan"), name


# --------------------------------------------------------------------------- (a) env
def part_env(r: Results):
    import importlib
    import importlib.metadata as md
    import pkgutil
    import platform
    r["python"] = platform.python_version()
    missing = []
    for key, dist in PACKAGES.items():
        try:
            r[key] = md.version(dist)
        except md.PackageNotFoundError:
            r[key] = "missing"
            missing.append(key)
    r["missing"] = ",".join(missing) or "none"
    try:
        r["rl_lab_installed"] = md.version("rl_lab")
    except md.PackageNotFoundError:
        r["rl_lab_installed"] = "no"
    import torch
    r["cuda"] = torch.version.cuda or "none"
    r["cuda_available"] = int(torch.cuda.is_available())
    if torch.cuda.is_available():
        r["gpu"] = torch.cuda.get_device_name(0)
        r["gpu_mem_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2 ** 30, 1)
        r["bf16"] = int(torch.cuda.is_bf16_supported())
    print(json.dumps(dict(r), indent=1))
    # rl_lab's own requirements against what is installed
    import tomllib
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("dependencies", [])
    unmet = []
    for dep in deps:
        name = re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0]
        try:
            md.version(name)
        except md.PackageNotFoundError:
            unmet.append(name)
    r["unmet_deps"] = ",".join(unmet) or "none"
    # every rl_lab module imports from the tree (PYTHONPATH=.), except for the optional packages
    import rl_lab
    failed, optional, n = [], [], 0
    for mod in pkgutil.walk_packages(rl_lab.__path__, "rl_lab.", onerror=lambda name: failed.append(name)):
        n += 1
        try:
            importlib.import_module(mod.name)
        except ModuleNotFoundError as e:
            (optional if (e.name or "").split(".")[0] in OPTIONAL else failed).append(mod.name)
            print(f"import {mod.name}: {e!r}")
        except Exception as e:  # noqa: BLE001 -- every import error is a finding
            failed.append(mod.name)
            print(f"import {mod.name}: {e!r}")
    r["modules"] = n
    r["import_failed"] = ",".join(failed) or "none"
    r["import_optional_missing"] = ",".join(optional) or "none"
    if failed:
        raise SystemExit(f"{len(failed)} rl_lab modules fail to import: {failed}")


# --------------------------------------------------------------------------- (b) cuda_tests
def part_cuda_tests(r: Results):
    import subprocess
    import xml.etree.ElementTree as ET
    xml = kv_dir() / "cuda_tests.xml"
    path = "tests/integration/test_cuda.py"
    cmd = [sys.executable, "-m", "pytest", path, "-q", "-rs", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    print(" ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    r["pytest_rc"] = rc
    if xml.exists():
        suite = ET.parse(xml).getroot()
        suite = suite if suite.tag == "testsuite" else suite[0]
        tests, fails, errors, skips = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        for k, v in dict(passed=tests - fails - errors - skips, failed=fails, errors=errors, skipped=skips).items():
            r[k] = v
        bad = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None or c.find("error") is not None]
        r["failed_tests"] = ",".join(bad) or "none"
        reasons = sorted({(s.get("message") or "")[:60] for s in suite.iter("skipped")})
        r["skip_reasons"] = "|".join(reasons) or "none"
    if rc not in (0,):
        raise SystemExit(f"pytest exit status {rc}")


# --------------------------------------------------------------------------- (c) grpo_steps
def part_grpo_steps(r: Results):
    import copy
    import statistics

    import torch

    from rl_lab import Trainer, build_model
    from rl_lab.config import ADV_ESTIMATORS
    from rl_lab.presets import get_preset
    device = device_name()
    size = "0.3M" if dry() else "0.5B"
    shape = dict(prompts_per_step=4, num_generations=4) if dry() else {}
    r["device"], r["model"] = device, size
    base_model, tok = build_model(size, seed=0)
    r["params_M"] = round(sum(p.numel() for p in base_model.parameters()) / 1e6, 1)
    cases = [(f"engine:{k}", v) for k, v in ENGINES.items()]
    cases += [(f"estimator:{e}", dict(advantage_estimator=e, sampler_dtype="bfloat16",
                                      rollout_correction=dict(rollout_is="sequence"))) for e in ADV_ESTIMATORS]
    r["cases"] = len(cases)
    ok, failed, secs = 0, [], []
    for name, changes in cases:
        t = time.perf_counter()
        try:
            cfg = get_preset("gpu", task="addition", model=size, max_steps=1, progress_bar=False, device=device,
                             **shape, **changes)
            trainer = Trainer(cfg, model=copy.deepcopy(base_model), tokenizer=tok)
            m = trainer.step()
            sync(device)
            assert math.isfinite(float(m["loss"])), m["loss"]
            ok += 1
            secs.append(time.perf_counter() - t)
            print(f"{name}: ok {secs[-1]:.2f} s loss {float(m['loss']):.4g} reward {m.get('reward', float('nan'))}",
                  flush=True)
        except Exception as e:  # noqa: BLE001 -- report every case
            failed.append(name)
            print(f"{name}: FAILED {e!r}", flush=True)
        finally:
            trainer = None
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        r["ok"], r["failed"] = ok, len(failed)
        r["failed_cases"] = ",".join(failed) or "none"
        if secs:
            r["median_step_s"] = statistics.median(secs)
    if device.startswith("cuda"):
        r["max_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 1)
    if failed:
        raise SystemExit(f"{len(failed)} of {len(cases)} steps failed: {failed}")


# --------------------------------------------------------------------------- (d) bench
def _roofline_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_roofline", ROOT / "bench" / "bench_roofline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def part_bench(r: Results):
    """Benchmarks 1, 3 and 10 in GPU form, without vLLM or TRL (neither is on the GPU machine):
    1: one rl_lab GRPO step (8 prompts x 8, exactly 16 new tokens) -- bench/bench_rl_step.py's shape;
    3: rollout throughput of the HF engine in bf16 -- bench/bench_rollout.py's HF column;
    10: the trainer's forward + backward against the bf16 peak -- bench/bench_roofline.py's functions.
    Model FLOPs are counted from the shapes (bench_roofline.gemms / sampling_gemms / step_gemms)."""
    import statistics

    import torch

    from rl_lab import Trainer, build_model
    from rl_lab.config import RLConfig, SamplingConfig
    from rl_lab.engines.rollout import HFEngine
    roof = _roofline_module()
    device = device_name()
    peak, gpu = peak_flops(device)
    r["device"], r["gpu"], r["peak_bf16_tflops"] = device, gpu, peak / 1e12
    size = "0.3M" if dry() else "0.5B"
    reps = 2 if dry() else 5
    r["model"] = size

    def flops_of(products):
        return float(sum(p[-1] for p in products))

    # -- 1: one GRPO step of rl_lab
    new, prompts, gens = 16, 8, 8
    model, tok = build_model(size, seed=0)
    cfg = RLConfig(task="addition", model=size, max_steps=100, prompts_per_step=prompts, num_generations=gens,
                   max_completion_length=new, min_tokens=new, progress_bar=False, device=device,
                   sampler_dtype="bfloat16")
    trainer = Trainer(cfg, model=model, tokenizer=tok)
    trainer.step()
    sync(device)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        trainer.step()
        sync(device)
        times.append(time.perf_counter() - t)
    step_s = statistics.median(times)
    rows = prompts * gens
    step_flops = sum(flops_of(v) for v in roof.step_gemms(model.config, rows, roof.PROMPT, new).values())
    r["b1_step_ms"] = step_s * 1e3
    r["b1_tok_s"] = rows * (roof.PROMPT + new) / step_s
    r["b1_tflops"] = step_flops / step_s / 1e12
    r["b1_of_peak"] = step_flops / step_s / peak
    print(f"bench 1: {step_s * 1e3:.1f} ms/step, {rows * (roof.PROMPT + new) / step_s:.0f} tok/s", flush=True)
    trainer = None
    # -- 3: rollout throughput, HF engine, bf16
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    model, tok = build_model(size, seed=0)
    model = model.to(device)
    engine = HFEngine(model, tok, "bfloat16")
    batch = 64 if dry() else 1024
    p = [f"{10 + i % 90}+{10 + (7 * i) % 90}=" for i in range(batch // 8)]
    sampling = SamplingConfig(max_completion_length=new, min_tokens=new)
    g = torch.Generator().manual_seed(0)
    engine.generate(p, 8, sampling, g)
    sync(device)
    times, toks = [], []
    for _ in range(reps):
        t = time.perf_counter()
        out = engine.generate(p, 8, sampling, g)
        sync(device)
        times.append(time.perf_counter() - t)
        toks.append(int(out.completion_mask.sum()))
    roll_s = statistics.median(times)
    roll_flops = flops_of(roof.sampling_gemms(model.config, batch, roof.PROMPT, new))
    r["b3_batch"] = batch
    r["b3_tok_s"] = statistics.median(toks) / roll_s
    r["b3_tflops"] = roll_flops / roll_s / 1e12
    r["b3_of_peak"] = roll_flops / roll_s / peak
    print(f"bench 3: {statistics.median(toks) / roll_s:.0f} tok/s at batch {batch}", flush=True)
    engine = model = None
    # -- 10: the trainer's forward + backward, bf16
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    roof.DEVICE, roof.DTYPE = torch.device(device), torch.bfloat16
    length = 16 if dry() else 512
    sizes = ["0.3M"] if dry() else ["30M", "0.5B"]
    for s in sizes:
        model, inputs = roof.batch(s, length)
        fwd = roof.gemms(model.config, inputs[0].shape[0], inputs[0].shape[1], length)
        flops = flops_of(fwd + roof.backward_gemms(fwd))
        roof.train_pass(model, inputs)
        sync(device)
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            roof.train_pass(model, inputs)
            sync(device)
            ts.append(time.perf_counter() - t)
        t = statistics.median(ts)
        tag = "b10_" + s.replace(".", "p")
        r[tag + "_tok_s"] = inputs[0].shape[0] * (inputs[0].shape[1] + length) / t
        r[tag + "_tflops"] = flops / t / 1e12
        r[tag + "_of_peak"] = flops / t / peak
        print(f"bench 10 {s}: {flops / t / 1e12:.3f} TFLOP/s", flush=True)
        model = inputs = None


# --------------------------------------------------------------------------- (e) stability
def part_stability(r: Results):
    """One cell of research/stability_map/map_gpu.yaml (scratchpad, `gpu` preset, 30M, lr 3e-4,
    no staleness, seed 0), a few steps per sampler dtype: the mean k3 (rollout_corr/k3_kl) of the
    bf16 and fp16 samplers against the fp32 trainer, and of the fp32 sampler (the floor)."""
    import statistics

    from rl_lab import Trainer
    from rl_lab.models import warm_start_path
    from rl_lab.presets import get_preset
    device = device_name()
    size = "0.3M" if dry() else "30M"
    steps = 2 if dry() else 8
    shape = dict(prompts_per_step=4, num_generations=4) if dry() else {}
    warm = (warm_start_path("scratchpad", size) / "model.safetensors").exists()
    model = f"warm-start:{size}" if warm else size
    r["device"], r["model"], r["warm_start"], r["steps"] = device, size, int(warm), steps
    for dtype, tag in (("float32", "fp32"), ("bfloat16", "bf16"), ("float16", "fp16")):
        cfg = get_preset("gpu", task="scratchpad", model=model, max_steps=steps, max_completion_length=56,
                         learning_rate=3e-4, seed=0, sampler_dtype=dtype, progress_bar=False, device=device,
                         **shape)
        trainer = Trainer(cfg)
        k3, reward = [], []
        for _ in range(steps):
            m = trainer.step()
            k3.append(float(m.get("rollout_corr/k3_kl", float("nan"))))
            reward.append(float(m.get("reward", float("nan"))))
        r[f"k3_{tag}"] = statistics.fmean(k3)
        r[f"reward_{tag}"] = statistics.fmean(reward)
        print(f"{tag}: k3 {k3} reward {reward}", flush=True)
        trainer = None


# --------------------------------------------------------------------------- entry points
def run(part: str) -> int:
    if part not in PARTS:
        raise SystemExit(f"part {part!r}: one of {PARTS}")
    r = Results(part)
    if dry():
        r["dry"] = 1
    try:
        import torch
        torch.manual_seed(0)
        if device_name() == "cpu":
            torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2") or 2))
    except ImportError as e:
        if part != "env":
            raise
        r["torch"] = f"import_error:{e}"
    globals()[f"part_{part}"](r)
    return 0


def collect() -> dict:
    allr = {p: read_results(p) for p in PARTS if (kv_dir() / f"{p}.kv").exists()}
    out = os.environ.get("OUT")
    if out:
        Path(out, "results.json").write_text(json.dumps(allr, indent=1))
    return allr


def main(argv):
    if len(argv) >= 2 and argv[0] == "run":
        return run(argv[1])
    if len(argv) == 4 and argv[0] == "summary":
        part, rc, secs = argv[1], int(argv[2]), float(argv[3])
        fields = read_results(part)
        if rc in (124, 137):
            fields = {**fields, "timeout": 1}
        elif rc != 0:
            fields = {**fields, "rc": rc}
        print(summary_line(part, status_of(rc, fields), secs, fields))
        return 0
    if argv == ["collect"]:
        print(json.dumps(collect(), indent=1))
        return 0
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
