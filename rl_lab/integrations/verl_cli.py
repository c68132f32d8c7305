"""`rl-lab export verl|trl` and `rl-lab import-metrics` (wired into rl_lab.tools.cli).

    rl-lab export verl --config my.yaml --out verl_run            # overrides, command, data, reward, model
    rl-lab export trl --config my.yaml --out trl_run              # GRPOConfig arguments, train_trl.py, data, model
    rl-lab export verl --task addition --set rollout_correction.rollout_is=token --out verl_run --gpus-per-node 8 --nnodes 2
    rl-lab import-metrics verl_run/rl_lab/export.jsonl --out runs/cluster   # then: rl-lab plot runs/cluster
"""
from __future__ import annotations

import argparse
from pathlib import Path


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    from rl_lab.presets import PRESETS
    parser.add_argument("target", choices=["verl", "trl"],
                        help="the stack to export to: verl 0.9.1 or TRL 1.16 (the options below marked verl "
                             "are ignored for trl)")
    parser.add_argument("--config", help="YAML file of RLConfig fields")
    parser.add_argument("--task", help="task name (overrides the config's)")
    parser.add_argument("--preset", choices=PRESETS, default=None,
                        help="size preset under the config (default: $RL_LAB_PRESET, else smoke)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="override any RLConfig field")
    parser.add_argument("--out", type=Path, required=True, help="folder to write the export into")
    parser.add_argument("--no-model", action="store_true",
                        help="do not save the model (model.path still points at <out>/model)")
    parser.add_argument("--nnodes", type=int, default=1, help="verl: trainer.nnodes (default 1)")
    parser.add_argument("--gpus-per-node", type=int, default=1, help="verl: trainer.n_gpus_per_node (default 1)")
    parser.add_argument("--rollout", choices=["vllm", "sglang"], default="vllm", help="verl: the inference engine")
    parser.add_argument("--micro-batch", type=int, default=16, help="verl: rows per GPU forward/backward (memory only)")
    parser.add_argument("--experiment", default="export", help="verl: trainer.experiment_name (names the metrics file)")
    parser.set_defaults(run=cmd_export)


def add_import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("metrics", type=Path,
                        help="verl's file-logger JSONL (trainer.logger=[console,file]) or a saved console log")
    parser.add_argument("--out", type=Path, required=True,
                        help="run folder to write metrics.jsonl into (then `rl-lab plot <out>`)")
    parser.set_defaults(run=cmd_import_metrics)


def export_config(args):
    """The RLConfig the command line describes: preset, then --config, --task, then --set."""
    from rl_lab.presets import command_line_fields, get_preset, preset_name

    given, set_fields = command_line_fields(args.config, args.task, None, args.set)
    fields = {**given, **set_fields}
    preset = fields.pop("preset", None) or args.preset
    return get_preset(preset_name(preset), **fields)


def cmd_export(args) -> int:
    cfg = export_config(args)
    if args.target == "trl":
        return _export_trl(cfg, args)
    from rl_lab.integrations.verl import VERL_VERSION, VerlCluster, export_verl

    cluster = VerlCluster(nnodes=args.nnodes, n_gpus_per_node=args.gpus_per_node, rollout_name=args.rollout,
                          micro_batch_size_per_gpu=args.micro_batch, experiment_name=args.experiment)
    result = export_verl(cfg, args.out, cluster, with_model=not args.no_model)
    for path in result.files:
        print(path)
    print(f"run it on a machine with verl {VERL_VERSION} and GPUs: bash {result.out_dir / 'command.sh'}")
    return 0


def _export_trl(cfg, args) -> int:
    from rl_lab.integrations.trl import TRL_VERSION, export_trl

    result = export_trl(cfg, args.out, with_model=not args.no_model)
    for path in result.files:
        print(path)
    print(f"run it where TRL {TRL_VERSION} and rl_lab import: python {result.out_dir / 'train_trl.py'}")
    return 0


def cmd_import_metrics(args) -> int:
    from rl_lab.errors import ConfigError
    from rl_lab.integrations.verl import read_verl_metrics
    from rl_lab.utils import atomic_write_text, json_line

    path = args.out / "metrics.jsonl"
    if path.exists():
        raise ConfigError(f"{path} exists: import into a new folder (--out), or delete that file first")
    df = read_verl_metrics(args.metrics)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [{k: v for k, v in row.items() if v == v} for row in df.to_dict("records")]   # drop NaN gaps
    atomic_write_text(path, "".join(json_line(r) for r in rows))
    print(f"{path}: {len(rows)} steps, {len(df.columns) - 1} metrics")
    return 0
