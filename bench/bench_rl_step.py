"""Benchmarks 1 and 2: one GRPO step of rl_lab against TRL's GRPOTrainer and against a plain step.

Same tiny Qwen2 model (random init, built from config), same tokenizer, same task (2-digit
addition, partial-credit reward), same batch (8 prompts x 8 completions, up to 16 new tokens),
same hyper-parameters (lr 1e-4, AdamW, grad clip 1.0, group-scaled advantages, token-mean loss,
no KL, one update per batch, fp32 on the CPU, 2 threads). The implementations run in this one
process. A fourth contender, rl_lab with `share_prefix=False`, measures what the shared-prompt forward
(rl_lab.engines.shared_prefix) saves (skip it with --no-ablation).

    python bench/bench_rl_step.py                  # 0.3M and 3M, 3 rounds of 20 steps each
    python bench/bench_rl_step.py --sizes 0.3M --rounds 5 --steps 30

The contenders alternate step by step (after each TRL step, one step of each of the others),
so the machine's drifting speed hits them alike. Prints ms per step (median over steps 5.. of
each round, then over rounds), steps/s, and each ratio as the median of the step-by-step
ratios with their quartiles. Needs `trl` (pip install -e ".[bench]"; `make bench` does it).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch

from rl_lab import RLConfig, Trainer, build_model, get_task
from rl_lab.models import quiet_hf_progress

LR = 1e-4
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class Shape:
    """One step's batch: prompts x generations completions of up to max_new tokens; forced: every
    completion is exactly max_new tokens (<eos> held back: min_tokens / min_new_tokens), so every
    contender generates, scores and trains the same number of tokens."""
    prompts: int = 8
    generations: int = 8
    max_new: int = 16
    forced: bool = False

    @property
    def rows(self) -> int:
        return self.prompts * self.generations

    @property
    def min_new(self) -> int:
        return self.max_new if self.forced else 0


DEFAULT = Shape()


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def task_and_reward():
    task = get_task("addition", digits=2)
    return task, task.reward          # TRL signature: f(prompts, completions, answer, **kw)


# --------------------------------------------------------------------------- rl_lab
def rl_lab_trainer(size: str, steps: int, seed: int, shape: Shape = DEFAULT, share_prefix: bool = True):
    model, tok = build_model(size, seed=seed)
    cfg = RLConfig(task="addition", task_kwargs={"digits": 2}, prompts_per_step=shape.prompts,
                   num_generations=shape.generations, max_completion_length=shape.max_new,
                   min_tokens=shape.min_new, learning_rate=LR, lr_scheduler_type="linear", max_steps=steps,
                   seed=seed, progress_bar=False, share_prefix=share_prefix)
    return Trainer(cfg, model=model, tokenizer=tok)


def rl_lab_steps(size: str, steps: int, seed: int, shape: Shape = DEFAULT, share_prefix: bool = True,
                 trainer=None):
    """Yields the wall time of each of `steps` rl_lab Trainer steps."""
    trainer = trainer or rl_lab_trainer(size, steps, seed, shape, share_prefix)
    for _ in range(steps):
        t = time.perf_counter()
        trainer.step()
        sync()
        yield time.perf_counter() - t


# --------------------------------------------------------------------------- plain
def plain_steps(size: str, steps: int, seed: int, shape: Shape = DEFAULT):
    """The least a GRPO step can do: HF generate, one forward/backward, AdamW.  Yields step times."""
    torch.manual_seed(seed)
    model, tok = build_model(size, seed=seed)
    model = model.to(DEVICE)
    task, reward = task_and_reward()
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    for step in range(steps):
        t = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = LR * (1 - step / steps)
        examples = [task.sample(rng) for _ in range(shape.prompts)]
        rows = [e for e in examples for _ in range(shape.generations)]
        enc = tok([e["prompt"] for e in rows], return_tensors="pt", padding=True).to(DEVICE)
        model.eval()
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                 max_new_tokens=shape.max_new, min_new_tokens=shape.min_new,
                                 pad_token_id=tok.pad_token_id,
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
        rg = r.view(shape.prompts, shape.generations)
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
        yield time.perf_counter() - t


# --------------------------------------------------------------------------- TRL
def trl_steps(size: str, steps: int, seed: int, workdir: str, others: dict,
              shape: Shape = DEFAULT) -> dict[str, list[float]]:
    """TRL's GRPOTrainer for `steps` steps; after each of its steps, one step of every generator in
    `others` (name -> step-time generator), so all contenders alternate step by step.  Returns
    every contender's step times, TRL's under "TRL" (its clock excludes the others' steps)."""
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
            self.times, self.last = {"TRL": [], **{k: [] for k in others}}, None

        def on_step_begin(self, args, state, control, **kw):
            self.last = time.perf_counter() if self.last is None else self.last

        def on_step_end(self, args, state, control, **kw):
            sync()
            self.times["TRL"].append(time.perf_counter() - self.last)
            for name, gen in others.items():
                self.times[name].append(next(gen))
            self.last = time.perf_counter()

    fields = GRPOConfig.__dataclass_fields__
    ckpt = ({"activation_checkpointing": False} if "activation_checkpointing" in fields
            else {"gradient_checkpointing": False})
    args = GRPOConfig(output_dir=os.path.join(workdir, "trl-out"), use_cpu=DEVICE == "cpu", bf16=False, fp16=False,
                      per_device_train_batch_size=shape.rows, gradient_accumulation_steps=1,
                      num_generations=shape.generations, max_completion_length=shape.max_new, learning_rate=LR,
                      generation_kwargs={"min_new_tokens": shape.min_new} if shape.forced else None,
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


def paired(num: list[float], den: list[float], skip: int = 4) -> list[float]:
    """Step-by-step ratios num_i / den_i of two contenders that ran alternately."""
    return [a / b for a, b in zip(num[skip:], den[skip:])]


def one_round(size: str, steps: int, seed: int, workdir: str, with_trl: bool, ablation: bool,
              shape: Shape = DEFAULT, rl_lab_trainer_=None) -> dict:
    """Every contender for `steps` steps, alternating step by step: TRL, rl_lab, plain, [ablation].
    rl_lab_trainer_: a prepared rl_lab Trainer to step (e.g. one with timers attached)."""
    others = {"rl_lab": rl_lab_steps(size, steps, seed, shape, trainer=rl_lab_trainer_),
              "plain": plain_steps(size, steps, seed, shape)}
    if ablation:
        others["rl_lab, share_prefix=False"] = rl_lab_steps(size, steps, seed, shape, share_prefix=False)
    if with_trl:
        return trl_steps(size, steps, seed, workdir, others, shape)
    times = {k: [] for k in others}
    for _ in range(steps):
        for name, gen in others.items():
            times[name].append(next(gen))
    return times


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
    if not a.no_trl:
        try:
            import trl  # noqa: F401
        except ImportError:
            raise SystemExit("TRL is not installed: pip install -e '.[bench]' (or pass --no-trl)")
    print(f"device {DEVICE}, torch {torch.__version__}, {torch.get_num_threads()} threads; batch "
          f"{DEFAULT.prompts}x{DEFAULT.generations}, max {DEFAULT.max_new} new tokens; {a.rounds} rounds x {a.steps} steps, contenders alternating step by "
          "step; medians of steps 5..")
    with tempfile.TemporaryDirectory() as work:
        for size in a.sizes:
            rounds = [one_round(size, a.steps, r + 1, work, not a.no_trl, not a.no_ablation) for r in range(a.rounds)]
            names = list(rounds[0])
            ms = {k: 1000 * statistics.median([summarize(t[k]) for t in rounds]) for k in names}
            print(f"\n== model {size} ==")
            for k in names:
                spread = ", ".join(f"{1000 * summarize(t[k]):.0f}" for t in rounds)
                print(f"  {k:27s} {ms[k]:7.1f} ms/step  {1000 / ms[k]:6.2f} steps/s   (rounds: {spread})")

            def ratio(num, den, label):
                r = [x for t in rounds for x in paired(t[num], t[den])]
                q = statistics.quantiles(r, n=4)
                print(f"  {label:52s} = {statistics.median(r):.2f}x  (step pairs: quartiles {q[0]:.2f}-{q[2]:.2f})")
            if "TRL" in names:
                ratio("TRL", "rl_lab", "ratio steps/s rl_lab / TRL")
            ratio("rl_lab", "plain", "ratio step time rl_lab / plain")
            if "rl_lab, share_prefix=False" in names:
                ratio("rl_lab", "rl_lab, share_prefix=False", "ratio step time rl_lab / (share_prefix=False)")


if __name__ == "__main__":
    main()
