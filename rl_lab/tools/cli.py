"""Command line: `rl-lab train`, `rl-lab plot`, `rl-lab sweep`, `rl-lab warmstart`, `rl-lab doctor`,
`rl-lab export verl|trl`, `rl-lab import-metrics`, `rl-lab diagnose`.

    rl-lab train --task addition --preset smoke --out runs/x
    rl-lab train --config my.yaml --set learning_rate=3e-4 --set sampler_dtype=bfloat16
    rl-lab train --task multiplication_tool --set empg.k=2   # a nested config's knob (turns EMPG on)
    rl-lab train --out runs/x --resume          # continue a killed run (its saved config)
    rl-lab train --task addition --out runs/x --overwrite   # delete the run in runs/x, start over
    rl-lab plot runs/x                          # runs/x/metrics.png
    rl-lab sweep grid.yaml --workers 2          # a grid x seeds; one row per run in <out>/results.csv
    rl-lab doctor                               # is this machine ready for the labs? (exit 1 if not)
    rl-lab export verl --config my.yaml --out verl_run   # a verl 0.9.1 run of the same config (chapter 13)
    rl-lab export trl --config my.yaml --out trl_run     # a TRL 1.16 GRPOTrainer run of it (train_trl.py)
    rl-lab import-metrics verl.jsonl --out runs/cluster  # a verl run's metrics under rl_lab's names
    rl-lab diagnose verl.jsonl --plot d.png     # collapsed? why? which verl overrides to try (exit 0/1/3)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def build_config(args):
    from rl_lab.models import check_model_spec
    from rl_lab.presets import get_preset, preset_name

    given, set_fields = _cli_fields(args)
    overrides = {**given, **set_fields}
    if args.out:
        overrides["output_dir"] = str(args.out)
    preset = overrides.pop("preset", None) or args.preset
    cfg = get_preset(preset_name(preset), **overrides)
    check_model_spec(cfg.model, cfg.task)      # a missing warm start is a config error, up front
    return cfg


def _cli_fields(args) -> tuple[dict, dict]:
    """The RLConfig fields a command line gives: (from --config, --task, --seed; from --set)."""
    from rl_lab.presets import command_line_fields
    return command_line_fields(args.config, args.task, args.seed, args.set)


def resume_config(args):
    """`--resume`: the config saved in <out>/config.yaml.  A field this command line gives a
    different value is refused unless it came with --set (a deliberate change), and the changed
    fields are listed on stderr; $RL_LAB_PRESET and the preset defaults do not apply."""
    from rl_lab.config import CORRECTION_FIELDS, RLConfig
    from rl_lab.errors import ConfigError
    from rl_lab.presets import _PRESET_OVERRIDES, preset_name
    from rl_lab.runs import RunFolder, config_changes

    folder = RunFolder(args.out)
    saved = folder.saved_config()
    if saved is None:
        raise ConfigError(f"{folder.config_path} must hold a mapping of RLConfig fields")
    given, set_fields = _cli_fields(args)
    for fields, preset in ((given, given.pop("preset", None) or args.preset),
                           (set_fields, set_fields.pop("preset", None))):
        if preset:   # a preset named again counts for the fields it sets
            for key, value in _PRESET_OVERRIDES[preset_name(preset)].items():
                fields.setdefault(key, value)
    fields = {k: v for k, v in saved.items() if k != "output_dir"}
    fields.update({**given, **set_fields, "output_dir": str(args.out)})
    cfg = RLConfig.from_dict(fields)
    changes = config_changes(saved, cfg)
    # "empg.k" covers empg.k, and empg when it turns EMPG on; a correction knob by its old flat name its new one
    deliberate = [f"rollout_correction.{k}" if k in CORRECTION_FIELDS else k for k in set_fields]
    refused = {k: v for k, v in changes.items()
               if not any(k == s or s.startswith(k + ".") or k.startswith(s + ".") for s in deliberate)}
    if refused:
        what = ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in refused.items())
        example = next(iter(refused))
        raise ConfigError(f"--resume continues {args.out} with its saved {folder.config_path}, and this "
                          f"command changes {what}.  Leave those options out to continue the run as it was, or change a "
                          f"field on purpose with --set (e.g. --set {example}={refused[example][1]!r})")
    if changes:
        print(f"resuming {args.out} with changed config (saved -> now): "
              + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items()), file=sys.stderr)
    return cfg


def cmd_train(args) -> int:
    from rl_lab.runs import RunFolder, check_resume_overwrite

    check_resume_overwrite(args.resume, args.overwrite, args.out)   # before --resume reads a saved config
    if args.resume and args.out and RunFolder(args.out).config_path.exists():
        cfg = resume_config(args)
    else:
        cfg = build_config(args)
    RunFolder.check(cfg, args.resume, args.overwrite)   # before the model is built; Trainer.train begins the folder
    from rl_lab.trainer import Trainer, first_last_fifth  # torch and transformers: after the checks

    trainer = Trainer(cfg)
    resumed = trainer.resume() if args.resume else False
    if args.resume and not resumed:
        print(f"no checkpoint in {cfg.output_dir}; starting from step 0", file=sys.stderr)
    start_step = trainer.global_step
    t0 = time.perf_counter()
    df = trainer.train(overwrite=args.overwrite)
    wall = time.perf_counter() - t0
    first, last = first_last_fifth(df)
    new_steps = max(1, trainer.global_step - start_step)
    print(f"task={cfg.task} model={cfg.model} steps={trainer.global_step} "
          f"wall={wall:.1f}s ({1000 * wall / new_steps:.0f} ms/step)")
    print(f"mean reward: first fifth {first:.3f} -> last fifth {last:.3f} (gain {last - first:+.3f})")
    if "eval/reward" in df:
        print(f"greedy eval reward (last): {df['eval/reward'].dropna().iloc[-1]:.3f}")
    if cfg.output_dir:
        print(f"metrics: {Path(cfg.output_dir) / 'metrics.jsonl'}   model: {Path(cfg.output_dir) / 'final'}")
    return 0


def cmd_plot(args) -> int:
    from rl_lab.tools.plots import plot_training
    from rl_lab.utils import read_metrics

    df = read_metrics(Path(args.run) / "metrics.jsonl")
    fig = plot_training(df)
    out = Path(args.run) / "metrics.png"
    fig.savefig(out, dpi=120, bbox_inches="tight")
    print(out)
    return 0


def main(argv=None) -> int:
    from rl_lab.errors import ConfigError
    from rl_lab.presets import PRESETS

    ap = argparse.ArgumentParser(prog="rl-lab", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="run RL on a task")
    tr.add_argument("--task", help="addition, reversal, sorting, countdown, scratchpad or multiplication_tool "
                                   "(a tool task: multi-turn episodes with a calculator)")
    tr.add_argument("--preset", choices=PRESETS, default=None,
                    help="size preset (default: $RL_LAB_PRESET, else smoke)")
    tr.add_argument("--config", help="YAML file of RLConfig fields")
    tr.add_argument("--out", type=Path, help="output directory (metrics, checkpoints, final model)")
    tr.add_argument("--seed", type=int)
    tr.add_argument("--set", action="append", metavar="KEY=VALUE", help="override any RLConfig field")
    tr.add_argument("--resume", action="store_true",
                    help="continue from the last checkpoint in --out, with its saved config.yaml "
                         "(change a field with --set)")
    tr.add_argument("--overwrite", action="store_true",
                    help="delete the run already in --out (metrics, checkpoints, final model) and start over")
    pl = sub.add_parser("plot", help="plot a run's metrics to <run>/metrics.png")
    pl.add_argument("run")
    sw = sub.add_parser("sweep", help="run a YAML grid of RLConfig fields x seeds (see rl_lab.tools.sweep)")
    sw.add_argument("spec", help="YAML file with base:, grid:, seeds:, out: (and optional metrics:)")
    sw.add_argument("--workers", type=int, default=1, help="parallel worker processes (default 1)")
    sw.add_argument("--threads", type=int, help="torch threads per worker (default: cpu count // workers)")
    sw.add_argument("--out", type=Path, help="override the spec's out: folder")
    sw.add_argument("--dry-run", action="store_true", help="print the run list and what is done, run nothing")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    ws = sub.add_parser("warmstart", help="build the warm-start checkpoints (see python -m rl_lab.tools.warmstart -h)")
    ws.add_argument("rest", nargs=argparse.REMAINDER)
    from rl_lab.integrations.verl_cli import add_export_arguments, add_import_arguments
    add_export_arguments(sub.add_parser("export", help="write an RLConfig as a verl run (overrides, command, "
                                        "data, reward, model) or a TRL run (GRPOConfig arguments, train_trl.py, data, "
                                        "model); see rl_lab.integrations.verl and .trl"))
    add_import_arguments(sub.add_parser("import-metrics", help="read a verl run's logged metrics into "
                                        "<out>/metrics.jsonl, under Trainer.metrics() names"))
    from rl_lab.tools.doctor import add_arguments as add_doctor_arguments
    add_doctor_arguments(sub.add_parser("doctor", help="check this machine for the labs: Python, torch, "
                                        "threads, vLLM, one step's time, disk, the Jupyter kernel"))
    from rl_lab.tools.diagnose import add_arguments as add_diagnose_arguments
    add_diagnose_arguments(sub.add_parser("diagnose", help="read a run's metrics (rl_lab, verl, flat JSONL, W&B "
                                          "CSV) and say whether and why it collapsed, with verl overrides to try"))
    args = ap.parse_args(argv)
    try:
        if args.command == "train":
            return cmd_train(args)
        if args.command == "plot":
            return cmd_plot(args)
        if args.command in ("export", "import-metrics"):
            return args.run(args)
        if args.command == "sweep":
            from rl_lab.tools.sweep import cmd_sweep
            return cmd_sweep(args)
        if args.command == "doctor":
            from rl_lab.tools.doctor import cmd_doctor
            return cmd_doctor(args)
        if args.command == "diagnose":
            from rl_lab.tools.diagnose import cmd_diagnose
            return cmd_diagnose(args)
        from rl_lab.tools.warmstart import main as warmstart_main
        return warmstart_main(args.rest)
    except ConfigError as e:
        print(f"rl-lab: config error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
