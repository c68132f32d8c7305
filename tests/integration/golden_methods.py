"""Golden metrics and weights of a few trainer steps, one case per method (issue 31).

The trainer's step is being split into plug-ins; every method must compute exactly what it
computed before.  `record()` runs each case and returns its per-step metrics (timing removed)
and a SHA-256 of the final weights.  `tests/integration/golden/methods-<cpu>.json` holds a recording per CPU
kind, with the machine signature it was made on (torch version, CPU capability, CPU vendor,
threads): methods-avx512.json is what the trainer before the refactor produced; methods-avx2.json
was recorded later on an AVX2 machine from the refactored trainer, after the AVX-512 recording had
held it bit for bit; methods-avx512-genuineintel.json on an Intel AVX-512 machine from the trainer
before the methods' nested configs (issue 31), which then held bit for bit.  tests/integration/test_golden_methods.py compares bit for bit with the recording whose
signature is this machine's; elsewhere (another CPU rounds differently and samples other tokens)
it checks that every case still runs and logs the same metric names.

A metric added later (ADDED; rollout_corr/tokens_differ for issue 49's exact-zero control) is not in the older recordings; it must not change the training
(the weights' hash and every recorded metric stay bit-identical), and is tested on its own.

The cases run in one fresh process with one thread, always all of them and in the order of
CASES: within a process, what ran before changes where tensors are allocated, and some CPU
kernels round differently with the alignment (a case run after other cases than when it was
recorded differed from its golden run in the 8th digit of its rounding-level monitors).

    .venv/bin/python tests/integration/golden_methods.py --write     # record this CPU kind (only before a refactor)
    .venv/bin/python tests/integration/golden_methods.py --all       # every case, as JSON on stdout
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import torch

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
ADDED = frozenset({"tir/abs_logp_diff/after_tool", "tir/abs_logp_diff/elsewhere", "turns/void_eos_fraction",
                   "turns/varying_groups", "turns/shrink_spread", "rollout_corr/tokens_differ"})
"""Metrics added after the AVX-512 recording (research/post_miniature's question (a); SimpleTIR's early-<eos>
void turns and the per-turn group sizes of research/trloo_turns, issue 28)."""
STEPS = 3
TIMING = ("step_time", "time/rollout", "time/update", "time/eval")
ADDITION = dict(task="addition", model="warm-start", preset="smoke", prompts_per_step=4, num_generations=4,
                learning_rate=5e-4, eval_steps=0, progress_bar=False, seed=0)
TOOL = dict(ADDITION, task="multiplication_tool", max_completion_length=24)
CASES: dict[str, dict] = {
    "grpo": dict(ADDITION),
    "rloo": dict(ADDITION, advantage_estimator="rloo"),
    "reinforce_plus_plus": dict(ADDITION, advantage_estimator="reinforce_plus_plus"),
    "reinforce_plus_plus_baseline": dict(ADDITION, advantage_estimator="reinforce_plus_plus_baseline"),
    "optimal_token_baseline": dict(ADDITION, advantage_estimator="optimal_token_baseline"),
    "truncation_mask": dict(ADDITION, mask_truncated_completions=True, max_completion_length=3),
    "dvp": dict(ADDITION, dvp={"min_p": 0.05}),
    "reference_kl": dict(ADDITION, beta=0.05),
    "num_iterations": dict(ADDITION, num_iterations=2),
    "seq_tis_decoupled": dict(ADDITION, sampler_staleness=2,
                              rollout_correction=dict(rollout_is="sequence", rollout_is_threshold=2.0)),
    "geo_rs": dict(ADDITION, sampler_logit_noise=0.5,
                   rollout_correction=dict(rollout_rs="seq_mean_k1", rollout_rs_threshold="0.9_1.1")),
    "exact_kl_rs": dict(ADDITION, sampler_logit_noise=0.5,
                        rollout_correction=dict(rollout_rs="seq_max_kl", rollout_rs_threshold=0.5)),
    "bypass_ppo_clip": dict(ADDITION, sampler_staleness=2, rollout_correction=dict(bypass_mode=True)),
    "bypass_reinforce_tis": dict(ADDITION, sampler_staleness=2, policy_loss="reinforce",
                                 rollout_correction=dict(bypass_mode=True, rollout_is="token",
                                                         rollout_is_threshold=2.0)),
    "tool_grpo": dict(TOOL),
    "tool_void_filter": dict(TOOL, mask_void_turns={"scope": "loss_and_groups"}, max_completion_length=21),
    "tool_empg": dict(TOOL, empg=True),
    "tool_trloo": dict(TOOL, advantage_estimator="trloo"),
    "tool_teacher_kl": dict(TOOL, teacher_kl={"coef": 0.1, "model": "warm-start"}),
    "tool_imitation": dict(TOOL, imitation={"coef": 0.1}),
    "tool_token_stats": dict(TOOL, tool_token_stats=True),
}


def cpu_vendor() -> str:
    """The CPU's vendor id (AuthenticAMD, GenuineIntel), or "" where /proc/cpuinfo does not say:
    two vendors' kernels for the same instruction set need not round alike."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def signature() -> dict:
    return {"torch": torch.__version__, "cpu": torch.backends.cpu.get_cpu_capability(),
            "vendor": cpu_vendor(), "threads": torch.get_num_threads()}


def golden_path(sig: dict) -> Path:
    """methods-<cpu>.json for an AMD CPU (the first recordings), methods-<cpu>-<vendor>.json else."""
    vendor = "" if sig.get("vendor") == "AuthenticAMD" else f"-{sig.get('vendor') or 'unknown'}".lower()
    return GOLDEN_DIR / f"methods-{sig['cpu'].lower()}{vendor}.json"


def recordings() -> dict[str, dict]:
    """Every recording, by file name."""
    return {p.name: json.loads(p.read_text()) for p in sorted(GOLDEN_DIR.glob("methods-*.json"))}


def _value(v):
    """A metric as JSON can hold it exactly: floats by their hex form, NaN/inf by name."""
    if isinstance(v, float):
        return v.hex() if math.isfinite(v) else repr(v)
    if isinstance(v, (int, str, bool)) or v is None:
        return v
    return repr(v)


def run_case(name: str) -> dict:
    from rl_lab import Trainer
    from rl_lab.presets import get_preset

    overrides = dict(CASES[name])
    cfg = get_preset(overrides.pop("preset"), max_steps=STEPS, **overrides)
    trainer = Trainer(cfg)
    steps = []
    for _ in range(STEPS):
        m = trainer.step()
        steps.append({k: _value(v) for k, v in sorted(m.items()) if k not in TIMING})
    h = hashlib.sha256()
    for key, tensor in sorted(trainer.model.state_dict().items()):
        h.update(key.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return {"steps": steps, "weights_sha256": h.hexdigest()}


def run_all_fresh() -> dict:
    """{"signature": ..., "cases": {name: run_case(name)}} from a fresh one-thread process that runs
    every case in the order of CASES (see the module docstring)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, __file__, "--all"], capture_output=True, text=True, env=env,
                         timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(f"the golden cases failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def record() -> dict:
    return {**run_all_fresh(), "steps": STEPS}


if __name__ == "__main__":
    if "--all" in sys.argv:
        torch.set_num_threads(1)
        print(json.dumps({"signature": signature(), "cases": {n: run_case(n) for n in CASES}}, sort_keys=True))
        sys.exit(0)
    if "--write" not in sys.argv:
        sys.exit("usage: golden_methods.py --write | --all")
    GOLDEN_DIR.mkdir(exist_ok=True)
    data = record()
    path = golden_path(data["signature"])
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}: {len(data['cases'])} cases on {data['signature']}")
