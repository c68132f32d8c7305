"""The teacher of the teacher-KL arm (research/tool_methods/NOTES.md, "Block 3"): the shipped warm
start of `multiplication_tool`, fine-tuned by supervised learning on the task's demonstrations
with OUT-OF-DISTRIBUTION tool outputs ("=9,716|"), so that it copies through the separators the
warm start never saw.  Deterministic per seed on one machine; about a minute on one thread.

    python research/tool_methods/make_teacher.py [--out runs/tool_methods/teacher_ood] [--steps 300]

Prints the teacher's greedy held-out success on OOD outputs (and the warm start's, for scale).
It is trained on gold demonstrations: the teacher-KL arm therefore also learns, through the
teacher, from dense gold labels (the confound NOTES.md states)."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from rl_lab.demonstrations import sft_batch
from rl_lab.models import load_warm_start, quiet_hf_progress
from rl_lab.tasks import get_task
from rl_lab.tools.warmstart import success_rate

EVAL_SEED = 90_001          # apart from the RL runs' held-out sets (seeded by the run's seed)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/tool_methods/teacher_ood")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    task = get_task("multiplication_tool", tool_output_style="ood")
    model, tok = load_warm_start("multiplication_tool")
    before = success_rate(model, tok, task, n=512, seed=EVAL_SEED, greedy=True)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    rng = np.random.default_rng(args.seed + 7919)
    for step in range(args.steps):
        input_ids, attn, labels = sft_batch(tok, task, [task.sample(rng) for _ in range(args.batch_size)])
        logits = model(input_ids=input_ids, attention_mask=attn).logits                 # (B, L, V)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    model.eval()
    after = success_rate(model, tok, task, n=512, seed=EVAL_SEED, greedy=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with quiet_hf_progress():
        model.save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out)
    print(f"teacher: greedy held-out success on OOD outputs {after:.3f} (warm start {before:.3f}), "
          f"last SFT loss {loss.item():.4f}, saved to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
