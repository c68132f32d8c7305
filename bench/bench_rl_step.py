"""Benchmarks 1 and 2: one GRPO step of rl_lab against TRL's GRPOTrainer and against a plain step.

Same tiny Qwen2 model (random init, built from config), same tokenizer, same task (2-digit
addition, partial-credit reward), same batch (8 prompts x 8 completions, up to 16 new tokens),
same hyper-parameters (lr 1e-4, AdamW, grad clip 1.0, group-scaled advantages, token-mean loss,
no KL, one update per batch, fp32 on the CPU, 2 threads). The implementations run in this one
process, interleaved in rounds, so slow phases of a shared machine hit all of them. A fourth
contender, rl_lab with `share_prefix=False`, measures what the shared-prompt forward
(rl_lab.shared_prefix) saves (skip it with --no-ablation).

    python bench/bench_rl_step.py                  # 0.3M and 3M, 3 rounds of 20 steps each
    python bench/bench_rl_step.py --sizes 0.3M --rounds 5 --steps 30

Prints ms per step (median over steps 5.. of each round, then median over rounds), steps/s
and the ratios. Needs `trl` (pip install -e ".[bench]"; `make bench` does it).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch

from rl_lab import RLConfig, Trainer, build_model, get_task
from rl_lab.models import quiet_hf_progress

N_PROMPTS, N_GEN, MAX_NEW, LR = 8, 8, 16, 1e-4
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def task_and_reward():
    task = get_task("addition", digits=2)
    return task, task.reward          # TRL signature: f(prompts, completions, answer, **kw)


# --------------------------------------------------------------------------- rl_lab
def rl_lab_steps(size: str, steps: int, seed: int, share_prefix: bool = True) -> list[float]:
    model, tok = build_model(size, seed=seed)
    cfg = RLConfig(task="addition", task_kwargs={"digits": 2}, prompts_per_step=N_PROMPTS,
                   num_generations=N_GEN, max_completion_length=MAX_NEW, learning_rate=LR,
                   lr_scheduler_type="linear", max_steps=steps, seed=seed, progress_bar=False,
                   share_prefix=share_prefix)
    trainer = Trainer(cfg, model=model, tokenizer=tok)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        trainer.step()
        sync()
        times.append(time.perf_counter() - t)
    return times


# --------------------------------------------------------------------------- plain
def plain_steps(size: str, steps: int, seed: int) -> list[float]:
    """The least a GRPO step can do: HF generate, one forward/backward, AdamW."""
    torch.manual_seed(seed)
    model, tok = build_model(size, seed=seed)
    model = model.to(DEVICE)
    task, reward = task_and_reward()
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    times = []
    for step in range(steps):
        t = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = LR * (1 - step / steps)
        examples = [task.sample(rng) for _ in range(N_PROMPTS)]
        rows = [e for e in examples for _ in range(N_GEN)]
        enc = tok([e["prompt"] for e in rows], return_tensors="pt", padding=True).to(DEVICE)
        model.eval()
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                 max_new_tokens=MAX_NEW, pad_token_id=tok.pad_token_id,
                                 eos_token_id=tok.eos_token_id, disable_compile=True)
        model.train()
        P = enc["input_ids"].shape[1]
        comp = out[:, P:]                                                   # (B, T)
        is_eos = comp == tok.eos_token_id
        first = torch.where(is_eos.any(1), is_eos.float().argmax(1),
                            torch.full((len(comp),), comp.shape[1], device=DEVICE))
        mask = (torch.arange(comp.shape[1], device=DEVICE)[None] <= first[:, None]).float()  # incl. <eos>
        texts = tok.batch_decode(comp, skip_special_tokens=True)
        r = torch.tensor(reward(completions=texts, answer=[e["answer"] for e in rows]), dtype=torch.float32,
                         device=DEVICE)
        rg = r.view(N_PROMPTS, N_GEN)
        adv = ((rg - rg.mean(1, keepdim=True)) / (rg.std(1, keepdim=True) + 1e-4)).view(-1)
        attn = torch.cat([enc["attention_mask"], torch.ones_like(comp)], 1)
        logits = model(input_ids=out, attention_mask=attn, logits_to_keep=comp.shape[1] + 1).logits
        logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, comp[..., None])[..., 0]
        loss = -((torch.exp(logp - logp.detach()) * adv[:, None]) * mask).sum() / mask.sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        times.append(time.perf_counter() - t)
    return times


# --------------------------------------------------------------------------- TRL
def trl_steps(size: str, steps: int, seed: int, workdir: str) -> list[float]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    path = os.path.join(workdir, f"model-{size}")
    if not os.path.isdir(path):
        model, tok = build_model(size, seed=seed)
        with quiet_hf_progress():
            model.save_pretrained(path)
        tok.save_pretrained(path)
    _, tok = build_model(size, seed=seed)
    with quiet_hf_progress():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    task, reward = task_and_reward()
    data = Dataset.from_list(task.make_dataset(2000, seed=seed))

    class Clock(TrainerCallback):
        def __init__(self):
            self.times, self.last = [], None

        def on_step_begin(self, args, state, control, **kw):
            self.last = time.perf_counter() if self.last is None else self.last

        def on_step_end(self, args, state, control, **kw):
            sync()
            now = time.perf_counter()
            self.times.append(now - self.last)
            self.last = now

    fields = GRPOConfig.__dataclass_fields__
    ckpt = ({"activation_checkpointing": False} if "activation_checkpointing" in fields
            else {"gradient_checkpointing": False})
    args = GRPOConfig(output_dir=os.path.join(workdir, "trl-out"), use_cpu=DEVICE == "cpu", bf16=False, fp16=False,
                      per_device_train_batch_size=N_PROMPTS * N_GEN, gradient_accumulation_steps=1,
                      num_generations=N_GEN, max_completion_length=MAX_NEW, learning_rate=LR,
                      lr_scheduler_type="linear", max_steps=steps, logging_strategy="no", save_strategy="no",
                      report_to="none", temperature=1.0, top_k=0, top_p=1.0, beta=0.0, use_vllm=False,
                      dataloader_num_workers=0, disable_tqdm=True, seed=seed, scale_rewards="group",
                      loss_type="dapo", max_grad_norm=1.0, **ckpt)
    clock = Clock()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=data,
                              processing_class=tok, callbacks=[clock])
        trainer.train()
    return clock.times


def summarize(times: list[float], skip: int = 4) -> float:
    return statistics.median(times[skip:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["0.3M", "3M"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--no-trl", action="store_true", help="skip TRL (if it is not installed)")
    ap.add_argument("--no-ablation", action="store_true",
                    help="skip the rl_lab run with share_prefix=False (every prompt row recomputed)")
    a = ap.parse_args()
    if DEVICE == "cpu":
        torch.set_num_threads(2)
    impls = {"rl_lab": rl_lab_steps, "plain": plain_steps}
    if not a.no_ablation:
        impls["rl_lab, share_prefix=False"] = lambda s, n, seed: rl_lab_steps(s, n, seed, share_prefix=False)
    if not a.no_trl:
        try:
            import trl  # noqa: F401
        except ImportError:
            raise SystemExit("TRL is not installed: pip install -e '.[bench]' (or pass --no-trl)")
        impls["TRL"] = None
    print(f"device {DEVICE}, torch {torch.__version__}, {torch.get_num_threads()} threads; batch {N_PROMPTS}x{N_GEN}, "
          f"max {MAX_NEW} new tokens; {a.rounds} rounds x {a.steps} steps, median of steps 5..")
    with tempfile.TemporaryDirectory() as work:
        for size in a.sizes:
            per = {k: [] for k in impls}
            for r in range(a.rounds):
                for name in impls:                            # interleaved: A B C, A B C, ...
                    fn = (lambda s, n, seed: trl_steps(s, n, seed, work)) if name == "TRL" else impls[name]
                    per[name].append(summarize(fn(size, a.steps, seed=r + 1)))
            ms = {k: 1000 * statistics.median(v) for k, v in per.items()}
            print(f"\n== model {size} ==")
            for k, v in ms.items():
                spread = ", ".join(f"{1000 * x:.0f}" for x in per[k])
                print(f"  {k:27s} {v:7.1f} ms/step  {1000 / v:6.2f} steps/s   (rounds: {spread})")
            if "TRL" in ms:
                print(f"  ratio steps/s rl_lab / TRL   = {ms['TRL'] / ms['rl_lab']:.2f}x")
            print(f"  ratio step time rl_lab / plain = {ms['rl_lab'] / ms['plain']:.2f}x")
            if "rl_lab, share_prefix=False" in ms:
                print(f"  ratio step time rl_lab / rl_lab with share_prefix=False = "
                      f"{ms['rl_lab'] / ms['rl_lab, share_prefix=False']:.2f}x")


if __name__ == "__main__":
    main()
