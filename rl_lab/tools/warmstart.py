"""Supervised warm start: teach a random-init model the task's format and some of its
answers, so RL starts from a policy that sometimes succeeds.

The recipe of a shipped checkpoint is a *target*: train until the held-out sampled success
reaches `target_success`, checked every few steps.  Supervised training of these tiny models has
a steep transition (success goes from ~10% to ~90% within a few hundred steps), and CPUs of
other kinds (AVX2, AVX-512) round differently, so a fixed step count lands on very different
policies on different machines.  A target lands on the same success everywhere.

    python -m rl_lab.tools.warmstart --all            # rebuild rl_lab/checkpoints/* and the manifest
    python -m rl_lab.tools.warmstart --all --check    # rebuild elsewhere, compare with the manifest
    python -m rl_lab.tools.warmstart --task reversal --size 0.3M --out my_checkpoints

`--check` passes when the rebuilt success lies within SUCCESS_TOLERANCE of the recorded one; the
SHA-256 of the weights is compared too, but only on a machine whose signature (torch and
transformers versions, CPU capability, threads) equals the one recorded: bitwise identity is
promised within one machine kind, never across kinds.

Lab 1 (labs/lab01_first_rl_run.md) explains why RL needs a warm start and how this one is built.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from rl_lab.config import SamplingConfig, WarmStartConfig
from rl_lab.demonstrations import sft_batch
from rl_lab.engines.rollout import HFEngine
from rl_lab.models import CHECKPOINT_DIR, build_model, quiet_hf_progress
from rl_lab.tasks import get_task
from rl_lab.utils import atomic_write_text

TARGET_SUCCESS = 0.42
"""Sampled success the shipped warm starts stop at: RL has room to gain and starts from a
policy that already succeeds often enough for group-relative advantages to be non-zero."""
SUCCESS_TOLERANCE = 0.08
"""A rebuilt checkpoint's reported sampled success must lie within this of the recorded one."""
STOP_SET_SEED = 2024      # prompts the stopping rule looks at
REPORT_SET_SEED = 12345   # prompts the manifest's success rates are measured on (never seen by the rule)
REPORT_PROMPTS = 512
THREADS = 2

# The checkpoints the labs use.
SHIPPED: dict[str, WarmStartConfig] = {
    "addition-0.3M": WarmStartConfig(task="addition", task_kwargs={"digits": 2}, steps=1500,
                                     target_success=TARGET_SUCCESS),
    # The long-completion task (~42-token scratchpads, research/long_completions/): a slower build
    # (~5-8 minutes on one core), so it evaluates every 20 steps rather than 5.
    "scratchpad-0.3M": WarmStartConfig(task="scratchpad", task_kwargs={"digits": 5}, steps=3000,
                                       target_success=TARGET_SUCCESS, eval_every=20),
    # The tool task (issue 17): multi-turn demonstrations "(347*28)=9716|9716" whose tool output
    # "=9716|" comes from the real calculator and is masked from the loss.  About a minute to build.
    "multiplication_tool-0.3M": WarmStartConfig(task="multiplication_tool",
                                                task_kwargs={"digits_a": 3, "digits_b": 2},
                                                steps=1500, target_success=TARGET_SUCCESS),
}
CI_REBUILT: tuple[str, ...] = ("addition-0.3M",)
"""The shipped checkpoints the test suite rebuilds (tests/conftest.py `rebuilt_warm_start`, the
CPU-kernel test): those that rebuild in about a minute.  `--all --check` (make check-checkpoints)
rebuilds every one in SHIPPED."""


@dataclass
class WarmStartResult:
    model: torch.nn.Module
    tokenizer: object
    losses: list[float]
    stopped_at: int
    """Optimizer steps taken (== config.steps when no target, or when it was never reached)."""
    stop_success: float | None
    """Sampled success on the stopping set at the last evaluation (None without a target)."""


def machine_signature() -> dict:
    """What bitwise reproducibility of a CPU build depends on."""
    import transformers
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads()}


def lr_factor(step: int, cfg: WarmStartConfig) -> float:
    """Linear warm-up, then cosine decay to 10% at cfg.steps."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return 0.1 + 0.45 * (1 + math.cos(math.pi * frac))


def warm_start(cfg: WarmStartConfig, progress: bool = True) -> WarmStartResult:
    """Train a fresh model of `cfg.model_size` on the task's solutions, until `cfg.steps` or
    until the sampled success on the stopping set reaches `cfg.target_success`."""
    from tqdm.auto import tqdm

    task = get_task(cfg.task, **cfg.task_kwargs)
    model, tok = build_model(cfg.model_size, seed=cfg.seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(step, cfg))
    rng = np.random.default_rng(cfg.seed + 7919)  # its own stream, apart from RL and eval
    losses, stop_success = [], None
    bar = tqdm(range(1, cfg.steps + 1), desc=f"warm start {cfg.task}", disable=not progress)
    for step in bar:
        input_ids, attn, labels = sft_batch(tok, task, [task.sample(rng) for _ in range(cfg.batch_size)])
        logits = model(input_ids=input_ids, attention_mask=attn).logits                 # (B, L, V)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if cfg.target_success is not None and step % cfg.eval_every == 0:
            stop_success = success_rate(model, tok, task, n=cfg.eval_prompts, seed=STOP_SET_SEED)
            bar.set_postfix(loss=f"{losses[-1]:.3f}", success=f"{stop_success:.3f}")
            if stop_success >= cfg.target_success:
                break
    bar.close()
    return WarmStartResult(model, tok, losses, len(losses), stop_success)


@torch.no_grad()
def success_rate(model, tok, task, n: int = 256, seed: int = REPORT_SET_SEED, greedy: bool = False,
                 max_completion_length: int | None = None, environment="task") -> float:
    """Mean reward on n fresh prompts, sampling at temperature 1 (or greedily).  A tool task's
    completions are multi-turn episodes in its own `environment`; pass another
    (rl_lab.agents.ToolEnvironment, e.g. with max_turns=1: no call is executed) or None."""
    examples = task.make_dataset(n, seed=seed)
    sampling = SamplingConfig(max_completion_length=max_completion_length or task.max_answer_length + 2,
                              top_k=1 if greedy else 0)
    env = getattr(task, "environment", None) if isinstance(environment, str) and environment == "task" \
        else environment
    batch = HFEngine(model, tok).generate([e["prompt"] for e in examples], 1, sampling,
                                          torch.Generator().manual_seed(seed), environment=env)
    cols = {k: [e[k] for e in examples] for k in examples[0] if k != "prompt"}
    return float(np.mean(task.reward(prompts=batch.prompts, completions=batch.completions, **cols)))


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def build_checkpoint(cfg: WarmStartConfig, out: Path, progress: bool = True) -> dict:
    """Train, save to `out`, and return the manifest entry: outcome, hash, versions, machine."""
    t0 = time.perf_counter()
    res = warm_start(cfg, progress=progress)
    shutil.rmtree(out, ignore_errors=True)
    with quiet_hf_progress():
        res.model.save_pretrained(out, safe_serialization=True)
    res.tokenizer.save_pretrained(out)
    task = get_task(cfg.task, **cfg.task_kwargs)
    info = {"config": cfg.to_dict(), "sha256": sha256(out / "model.safetensors"),
            "stopped_at_step": res.stopped_at, "stop_set_success": res.stop_success,
            "final_loss": round(res.losses[-1], 4),
            "success_sampled": success_rate(res.model, res.tokenizer, task, n=REPORT_PROMPTS),
            "success_greedy": success_rate(res.model, res.tokenizer, task, n=REPORT_PROMPTS, greedy=True)}
    env = getattr(task, "environment", None)
    if env is not None:   # a tool task: the same prompts with the call never executed
        info["success_sampled_without_tool"] = success_rate(res.model, res.tokenizer, task, n=REPORT_PROMPTS,
                                                            environment=dataclasses.replace(env, max_turns=1))
    info.update({"machine": machine_signature(), "seconds": round(time.perf_counter() - t0, 1)})
    return info


def compare_with_manifest(built: dict, recorded: dict,
                          tolerance: float = SUCCESS_TOLERANCE) -> tuple[list[str], list[str]]:
    """(problems, notes) of a rebuilt checkpoint against its manifest entry.  The outcome is
    checked on every machine; the SHA-256 only where the machine signature is the recorded one."""
    problems, notes = [], []
    if not recorded:
        return ["no manifest entry to compare with"], notes
    gap = abs(built["success_sampled"] - recorded["success_sampled"])
    if gap > tolerance:
        problems.append(f"sampled success {built['success_sampled']:.3f} differs from the recorded "
                        f"{recorded['success_sampled']:.3f} by {gap:.3f} > {tolerance}")
    else:
        notes.append(f"sampled success {built['success_sampled']:.3f} is within {tolerance} of the "
                     f"recorded {recorded['success_sampled']:.3f}")
    if built["machine"] == recorded.get("machine"):
        if built["sha256"] != recorded["sha256"]:
            problems.append(f"same machine signature but SHA-256 {built['sha256'][:16]} != recorded "
                            f"{recorded['sha256'][:16]}: the build is not deterministic")
        else:
            notes.append("same machine signature: SHA-256 identical")
    else:
        notes.append(f"SHA-256 not compared: recorded on {recorded.get('machine')}, "
                     f"rebuilt on {built['machine']}")
    return problems, notes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rl_lab.tools.warmstart", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help=f"shipped checkpoints to build, from {list(SHIPPED)}")
    ap.add_argument("--all", action="store_true", help="every shipped checkpoint")
    ap.add_argument("--check", action="store_true",
                    help="rebuild (in a temporary folder unless --out is given) and compare with the manifest")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"where to write checkpoints (default {CHECKPOINT_DIR}, which also updates the manifest)")
    ap.add_argument("--task", help="build a warm start for another task (with --size, --target)")
    ap.add_argument("--size", default="0.3M", help="model size preset for --task")
    ap.add_argument("--target", type=float, default=TARGET_SUCCESS, help="target sampled success for --task")
    ap.add_argument("--learning-rate", type=float, default=None, help="override the recipe's peak learning rate (--task)")
    ap.add_argument("--steps", type=int, default=None, help="override the recipe's most steps / cosine horizon (--task)")
    ap.add_argument("--eval-every", type=int, default=None, help="override how often the target is checked (--task)")
    ap.add_argument("--seed", type=int, default=None, help="override the recipe's seed")
    ap.add_argument("--threads", type=int, default=THREADS,
                    help=f"torch threads (default {THREADS}); another count rounds differently, like another CPU")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.task:
        shipped = SHIPPED.get(f"{args.task}-{args.size}")
        if shipped is not None:   # the shipped recipe (batch, schedule, evaluation), with these overrides
            cfg = shipped.replace(target_success=args.target, seed=args.seed or 0)
        else:
            cfg = WarmStartConfig(task=args.task, model_size=args.size, target_success=args.target,
                                  seed=args.seed or 0)
        overrides = {k: v for k, v in (("learning_rate", args.learning_rate), ("steps", args.steps),
                                        ("eval_every", args.eval_every)) if v is not None}
        cfg = cfg.replace(**overrides) if overrides else cfg
        out = (args.out or CHECKPOINT_DIR) / f"{args.task}-{args.size}"
        info = build_checkpoint(cfg, out)
        print(json.dumps({k: v for k, v in info.items() if k != "config"}, indent=1))
        return 0
    names = list(SHIPPED) if args.all else args.names
    unknown = [n for n in names if n not in SHIPPED]
    if not names or unknown:
        ap.error(f"name checkpoints from {list(SHIPPED)}, use --all, or --task (unknown: {unknown})")
    manifest_path = CHECKPOINT_DIR / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or (Path(tmp) if args.check else CHECKPOINT_DIR)
        for name in names:
            cfg = SHIPPED[name] if args.seed is None else SHIPPED[name].replace(seed=args.seed)
            info = build_checkpoint(cfg, root / name)
            print(f"{name}: stopped at step {info['stopped_at_step']}, sampled success "
                  f"{info['success_sampled']:.3f}, greedy {info['success_greedy']:.3f}, "
                  f"sha256 {info['sha256'][:16]} ({info['seconds']} s) -> {root / name}")
            if args.check:
                problems, notes = compare_with_manifest(info, manifest.get(name, {}))
                for line in notes:
                    print(f"  ok: {line}")
                for line in problems:
                    print(f"  MISMATCH: {line}", file=sys.stderr)
                if problems:
                    failed.append(name)
            elif root == CHECKPOINT_DIR:
                manifest[name] = info
    if not args.check and root == CHECKPOINT_DIR:
        atomic_write_text(manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if failed:
        print(f"rebuilt checkpoints disagree with the manifest: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
