"""The export chapter 13 shows, committed in book/examples/verl_export/ (tests/integration/test_verl_export.py
checks it is up to date).  Regenerate it from the repository root with

    python -m rl_lab.integrations.verl_example

It is `rl-lab export verl --config book/examples/verl_export/config.yaml` with paths written relative
to the repository root, one GPU, and neither the model (a 0.3M warm start: run the export yourself
to get it) nor the parquet files (binary); data_preview.json shows their first rows instead, and
mapping.md is the field table (VERL_FIELD_MAP) the chapter points to.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from rl_lab.config import RLConfig

EXAMPLE_FIELDS = dict(task="addition", model="warm-start", prompts_per_step=32, num_generations=16,
                      max_completion_length=8, sampler_dtype="bfloat16",
                      rollout_correction=dict(rollout_is="token", rollout_is_threshold=2.0,
                                              rollout_rs="seq_mean_k3,seq_max_k2", rollout_rs_threshold="0.001,0.05"),
                      learning_rate=5e-5, max_steps=300, eval_steps=50, eval_prompts=64)
"""A TRM + token-TIS run (chapters 4-5) in the gpu preset's batch shape, sampled in bfloat16."""
EXAMPLE_CONFIG = RLConfig(**EXAMPLE_FIELDS)
FOLDER = Path("book") / "examples" / "verl_export"


def write_example(out: str | Path = FOLDER, cwd: str | Path = ".") -> Path:
    """Write the example into `out` (paths in it relative to `cwd`, the repository root)."""
    from rl_lab.integrations.verl import VerlCluster, export_verl, mapping_table_markdown

    out = Path(out)
    shutil.rmtree(out / "data", ignore_errors=True)
    (out / "config.yaml").parent.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text("# RLConfig fields of the chapter 13 example (rl-lab export verl --config ...)\n"
                                     + yaml.safe_dump(EXAMPLE_FIELDS, sort_keys=False))
    export_verl(EXAMPLE_CONFIG, out, VerlCluster(experiment_name="ch13_trm_token_tis"), with_model=False,
                relative_to=cwd)
    import pyarrow.parquet as pq
    preview = {split: pq.read_table(out / "data" / f"{split}.parquet").slice(0, 2).to_pylist()
               for split in ("train", "val")}
    (out / "data_preview.json").write_text(json.dumps(preview, indent=2) + "\n")
    (out / "mapping.md").write_text(mapping_table_markdown())
    shutil.rmtree(out / "data")
    return out


if __name__ == "__main__":
    print(write_example())
