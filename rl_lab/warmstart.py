"""Supervised warm start: teach a random-init model the task's format and some of its
answers, so RL starts from a policy that sometimes succeeds.

Regenerate the shipped checkpoints bit for bit (same machine type; 2 threads are fixed):

    python -m rl_lab.warmstart --all            # rewrite rl_lab/checkpoints/*
    python -m rl_lab.warmstart --all --check    # rebuild in a temp dir, compare SHA-256
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from rl_lab.config import SamplingConfig, WarmStartConfig
from rl_lab.models import CHECKPOINT_DIR, build_model
from rl_lab.rollout import HFEngine
from rl_lab.tasks import get_task
from rl_lab.utils import atomic_write_text

# The checkpoints the labs use.  Steps are chosen so that sampling at temperature 1
# succeeds sometimes (roughly 20-60%), leaving room for RL.
SHIPPED: dict[str, WarmStartConfig] = {
    "addition-0.3M": WarmStartConfig(task="addition", task_kwargs={"digits": 2}, steps=520),
}
THREADS = 2


def sft_batch(tok, task, examples):
    """Right-padded prompt+answer+<eos> ids, attention mask and labels (-100 off the answer)."""
    ids, labels = [], []
    for e in examples:
        p = tok(e["prompt"])["input_ids"]
        a = tok(task.target(e), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        ids.append(p + a)
        labels.append([-100] * len(p) + a)
    L = max(map(len, ids))
    input_ids = torch.full((len(ids), L), tok.pad_token_id)
    label_t = torch.full((len(ids), L), -100)
    attn = torch.zeros((len(ids), L), dtype=torch.long)
    for i, (x, y) in enumerate(zip(ids, labels)):
        input_ids[i, : len(x)], label_t[i, : len(y)], attn[i, : len(x)] = torch.tensor(x), torch.tensor(y), 1
    return input_ids, attn, label_t


def warm_start(cfg: WarmStartConfig, progress: bool = True):
    """Train a fresh model of `cfg.model_size` on the task's solutions.  Returns (model, tok,
    losses)."""
    from tqdm.auto import tqdm

    task = get_task(cfg.task, **cfg.task_kwargs)
    model, tok = build_model(cfg.model_size, seed=cfg.seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.0)

    def factor(step):  # linear warm-up, cosine decay to 10%
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return 0.1 + 0.45 * (1 + math.cos(math.pi * frac))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    rng = np.random.default_rng(cfg.seed + 7919)  # its own stream, apart from RL and eval
    losses = []
    for _ in tqdm(range(cfg.steps), desc=f"warm start {cfg.task}", disable=not progress):
        input_ids, attn, labels = sft_batch(tok, task, [task.sample(rng) for _ in range(cfg.batch_size)])
        logits = model(input_ids=input_ids, attention_mask=attn).logits                 # (B, L, V)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    return model, tok, losses


@torch.no_grad()
def success_rate(model, tok, task, n: int = 256, seed: int = 12345, greedy: bool = False,
                 max_completion_length: int | None = None) -> float:
    """Mean reward on n fresh prompts, sampling at temperature 1 (or greedily)."""
    examples = task.make_dataset(n, seed=seed)
    sampling = SamplingConfig(max_completion_length=max_completion_length or task.max_answer_length + 2,
                              top_k=1 if greedy else 0)
    batch = HFEngine(model, tok).generate([e["prompt"] for e in examples], 1, sampling,
                                          torch.Generator().manual_seed(seed))
    cols = {k: [e[k] for e in examples] for k in examples[0] if k != "prompt"}
    return float(np.mean(task.reward(prompts=batch.prompts, completions=batch.completions, **cols)))


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def build_checkpoint(name: str, out_root: Path, progress: bool = True) -> dict:
    cfg = SHIPPED[name]
    t0 = time.perf_counter()
    model, tok, losses = warm_start(cfg, progress=progress)
    out = out_root / name
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    task = get_task(cfg.task, **cfg.task_kwargs)
    return {"config": cfg.to_dict(), "sha256": sha256(out / "model.safetensors"),
            "final_loss": round(losses[-1], 4),
            "success_sampled": success_rate(model, tok, task),
            "success_greedy": success_rate(model, tok, task, greedy=True),
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rl_lab.warmstart", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help=f"checkpoints to build, from {list(SHIPPED)}")
    ap.add_argument("--all", action="store_true", help="every shipped checkpoint")
    ap.add_argument("--check", action="store_true",
                    help="rebuild in a temporary folder and compare with the shipped hashes")
    ap.add_argument("--out", type=Path, default=CHECKPOINT_DIR)
    args = ap.parse_args(argv)
    names = list(SHIPPED) if args.all else args.names
    unknown = [n for n in names if n not in SHIPPED]
    if not names or unknown:
        ap.error(f"name checkpoints from {list(SHIPPED)} or use --all (unknown: {unknown})")
    torch.set_num_threads(THREADS)
    manifest_path = CHECKPOINT_DIR / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) if args.check else args.out
        for name in names:
            info = build_checkpoint(name, root)
            print(f"{name}: sha256 {info['sha256'][:16]}  sampled success {info['success_sampled']:.3f}  "
                  f"greedy {info['success_greedy']:.3f}  ({info['seconds']} s)")
            if args.check:
                want = manifest.get(name, {}).get("sha256")
                if want != info["sha256"]:
                    failed.append(name)
                    print(f"  MISMATCH: shipped {want}", file=sys.stderr)
            else:
                manifest[name] = info
    if not args.check and args.out == CHECKPOINT_DIR:
        atomic_write_text(manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if failed:
        print(f"checkpoints differ from the shipped ones: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
