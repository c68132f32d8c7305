"""Make TRL 1.16 GRPO runs on the CPU for `rl-lab diagnose` (issue 50; design and labels in NOTES.md).

    OMP_NUM_THREADS=1 python research/diagnose/make_trl_runs.py            # every run -> research/diagnose/trl_runs/
    OMP_NUM_THREADS=1 python research/diagnose/make_trl_runs.py --only lr_collapse-log10-s1
    python research/diagnose/make_trl_runs.py --fixtures tests/integration/fixtures/trl_runs   # trim into fixtures

Each run is TRL's `GRPOTrainer` on the shipped 0.3M addition warm start (a local Qwen2 and its own
character tokenizer, loaded with `PreTrainedTokenizerFast`: no hub), `use_vllm=False`,
`report_to="none"`, one thread.  TRL writes its output folder as it always does (trainer_state.json,
checkpoint-N/); the script adds what a person would have next to it: `console.log` (TRL's printed
log dicts, its stdout), and `truth.json`, the label of NOTES.md, from a wrapper that records the
mean reward of every generation batch (one per optimizer step) whatever `logging_steps` is.

`--fixtures DIR` copies what the tests need, trimmed: per run only the JSON TRL wrote
(trainer_state.json at the root and in each checkpoint), console.log and truth.json; model weights,
optimizer states, tokenizer files and `training_args.bin` are left out (the last is a pickle; one
small one is kept for the test that the tool never unpickles it).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).parent / "trl_runs"

# kind -> GRPOConfig settings that differ between the kinds (NOTES.md, "Design")
KINDS = {
    "healthy": dict(learning_rate=2e-5, warmup_steps=0),
    "lr_collapse": dict(learning_rate=3e-3, warmup_steps=0.2),
    "crash": dict(learning_rate=2e-5, warmup_steps=0),
}
STEPS, CRASH_AT, SAVE_EVERY = 100, 70, 25
SEEDS = {"healthy": (1, 2, 3), "lr_collapse": (1, 2, 3), "crash": (1,)}


def plan() -> list[dict]:
    """Every run of the evaluation: kind x logging_steps x seed."""
    return [{"name": f"{kind}-log{log}-s{seed}", "kind": kind, "logging_steps": log, "seed": seed}
            for kind in KINDS for log in (1, 10) for seed in SEEDS[kind]]


class Crash(RuntimeError):
    """Raised inside training to leave what a crashed run leaves."""


def make_run(spec: dict, out: Path) -> dict:
    """One TRL run into out/<name>/; returns its truth (NOTES.md, "Labels")."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rl_lab.models import warm_start_path
    from rl_lab.tasks import get_task
    from rl_lab.tokenizer import load_tokenizer
    from rl_lab.toolkits.collapse import detect_collapse

    torch.set_num_threads(1)
    folder = out / spec["name"]
    shutil.rmtree(folder, ignore_errors=True)
    task = get_task("addition")
    per_step: list[float] = []

    def addition(completions, answer, **kwargs):      # TRL logs rewards/addition/mean
        rewards = task.reward(completions=completions, answer=answer)
        per_step.append(sum(rewards) / len(rewards))
        return rewards

    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if spec["kind"] == "crash" and state.global_step >= CRASH_AT:
                raise Crash(f"simulated crash at step {state.global_step}")

    path = warm_start_path("addition")
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    config = GRPOConfig(
        output_dir=str(folder), use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        per_device_train_batch_size=64, gradient_accumulation_steps=1, num_generations=8,
        max_completion_length=8, max_steps=STEPS, logging_steps=spec["logging_steps"], lr_scheduler_type="linear",
        save_strategy="steps", save_steps=SAVE_EVERY, save_only_model=True, report_to="none", temperature=1.0,
        beta=0.0, use_vllm=False, dataloader_num_workers=0, disable_tqdm=True, seed=spec["seed"],
        **KINDS[spec["kind"]])
    trainer = GRPOTrainer(model=model, reward_funcs=[addition], args=config,
                          train_dataset=Dataset.from_list(task.make_dataset(2000, seed=spec["seed"])),
                          processing_class=load_tokenizer(path), callbacks=[StopAt()])
    console = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(console):
        try:
            trainer.train()
            trainer.save_state()                      # the root trainer_state.json of a finished run
        except Crash as e:
            print(f"Traceback (most recent call last):\n  ...\n{type(e).__name__}: {e}")
    (folder / "console.log").write_text(console.getvalue())
    seen = len(per_step)
    if spec["kind"] == "crash":                        # the newest state left is the last checkpoint
        seen = max(int(p.name.split("-")[1]) for p in folder.glob("checkpoint-*"))
    col = detect_collapse(per_step[:seen], steps=list(range(1, seen + 1)))
    truth = {**spec, **KINDS[spec["kind"]], "steps_run": len(per_step), "steps_judged": seen,
             "collapsed": bool(col["collapsed"]), "fall_step": col["fall_step"], "peak_step": col["peak_step"],
             "cause": "learning rate" if col["collapsed"] else None, "seconds": round(time.perf_counter() - started, 1),
             "per_step_reward": [round(r, 4) for r in per_step]}
    (folder / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return truth


KEEP = ("trainer_state.json", "console.log", "truth.json")


def trim_into(src: Path, dest: Path, names: list[str]) -> None:
    """Copy the runs' JSON and logs (KEEP), root and checkpoints, without weights or pickles."""
    for name in names:
        for f in (src / name).rglob("*"):
            inside = f.relative_to(src / name).parts
            if inside[0].startswith("checkpoint-") and name not in WITH_CHECKPOINTS:
                continue                               # the root's state is enough for these
            if f.name == "console.log" and "-log1-" in name:
                continue                               # 100 printed dicts: the log10 consoles suffice
            if f.is_file() and f.name in KEEP:
                target = dest / name / f.relative_to(src / name)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, target)
    first = next((src / names[0]).rglob("training_args.bin"), None)
    if first is not None:                              # one pickle, never loaded: the safe-reading test
        shutil.copyfile(first, dest / names[0] / "training_args.bin")


WITH_CHECKPOINTS = ("crash-log10-s1", "lr_collapse-log10-s1")
FIXTURE_RUNS = ["lr_collapse-log10-s1", "lr_collapse-log1-s1", "crash-log10-s1", "healthy-log10-s1"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="run only these names (see plan())")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--fixtures", help="trim the fixture runs from --out into this folder and stop")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.fixtures:
        trim_into(out, Path(args.fixtures), FIXTURE_RUNS)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for spec in plan():
        if args.only and spec["name"] not in args.only:
            continue
        truth = make_run(spec, out)
        print(f"{spec['name']}: collapsed={truth['collapsed']} fall={truth['fall_step']} "
              f"({truth['seconds']} s)", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
