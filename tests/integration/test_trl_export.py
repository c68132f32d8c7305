"""`rl-lab export trl` (rl_lab.integrations.trl): the table covers every RLConfig field, what TRL has
no counterpart for is refused by name before anything is written, the arguments are GRPOConfig's,
and the exported train_trl.py runs one step of TRL 1.16's GRPOTrainer on a CPU, offline.

The table's tests need no TRL; the others skip without TRL 1.16, or fail with RL_LAB_REQUIRE_TRL=1 (CI).
"""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rl_lab.config import CorrectionConfig, RLConfig
from rl_lab.integrations.trl import (
    FIXED_ARGS,
    TRL_FIELD_MAP,
    TrlExportError,
    export_trl,
    grpo_config_args,
    trl_correction_args,
)
from rl_lab.tools.cli import main as cli

REPO = Path(__file__).resolve().parents[2]
REQUIRE = os.environ.get("RL_LAB_REQUIRE_TRL", "") == "1"


def _trl():
    """Skip (or, with RL_LAB_REQUIRE_TRL=1, fail) without TRL 1.16."""
    try:
        from importlib.metadata import version
        found = version("trl")
    except Exception as exc:                      # PackageNotFoundError
        found = f"none ({exc})"
    if found != "1.16.0":
        msg = f"TRL 1.16.0 is needed, found {found}: `make setup` installs it (the [trl] extra)"
        if REQUIRE:
            pytest.fail(msg + " (RL_LAB_REQUIRE_TRL=1 makes this a failure)", pytrace=False)
        pytest.skip(msg)


# ----------------------------------------------------------------------------- the table (no TRL)
def test_the_table_covers_every_rlconfig_field_once():
    fields = [f.name for f in dataclasses.fields(RLConfig)]
    rows = [row.field for row in TRL_FIELD_MAP]
    assert sorted(rows) == sorted(fields), set(rows) ^ set(fields)
    for row in TRL_FIELD_MAP:
        assert row.status in ("exported", "files", "local", "refused") and row.note, row
        assert (row.to_trl is not None) == (row.status == "exported"), row.field
        assert (row.allowed is not None) == (row.status == "refused"), row.field


def test_the_defaults_export_and_every_exported_key_is_written():
    full = grpo_config_args(RLConfig(use_vllm=True, save_steps=10, output_dir="runs/x", rollout_correction=dict(rollout_is="token")))
    for row in TRL_FIELD_MAP:
        assert set(row.keys) <= set(full), row.field
    assert full["vllm_mode"] == "colocate"
    args = grpo_config_args(RLConfig())
    assert args["per_device_train_batch_size"] == 64                 # 8 prompts x 8 completions
    assert args["vllm_importance_sampling_correction"] is False      # rl_lab's default: no weights
    assert args["loss_type"] == "dapo" and args["use_bias_correction_kl"] is False
    assert {k: args[k] for k in FIXED_ARGS} == FIXED_ARGS


@pytest.mark.parametrize("fields,expected", [
    ({}, {"vllm_importance_sampling_correction": False}),
    ({"rollout_is": "token", "rollout_is_threshold": 2.0},
     {"vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "token_truncate",
      "vllm_importance_sampling_clip_max": 2.0, "vllm_importance_sampling_clip_min": None}),
    ({"rollout_is": "sequence", "rollout_is_threshold": "0.5_3.0"},
     {"vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "sequence_mask",
      "vllm_importance_sampling_clip_max": 3.0, "vllm_importance_sampling_clip_min": 0.5}),
])
def test_the_correction_maps_onto_trls_arguments(fields, expected):
    assert trl_correction_args(CorrectionConfig(**fields)) == expected


REFUSED = [   # (RLConfig fields, what the message must name)
    (dict(rollout_correction=dict(rollout_is="sequence", rollout_rs="seq_sum_k1", rollout_rs_threshold="0.5_2.0")),
     ["rollout_correction.rollout_rs"]),
    (dict(rollout_correction=dict(bypass_mode=True, rollout_is_batch_normalize=True, rollout_is="token")),
     ["rollout_correction.bypass_mode", "rollout_correction.rollout_is_batch_normalize"]),
    (dict(rollout_correction=dict(rollout_token_veto_threshold=1e-4)), ["rollout_correction.rollout_token_veto_threshold"]),
    (dict(empg=True, dvp=True), ["RLConfig.empg", "RLConfig.dvp"]),
    (dict(advantage_estimator="rloo", policy_loss="reinforce",
          rollout_correction=dict(bypass_mode=True)), ["advantage_estimator", "policy_loss"]),
    (dict(clip_ratio_c=3.0, sampler_dtype="bfloat16"), ["clip_ratio_c", "sampler_dtype"]),
    (dict(loss_agg_mode="token-sum"), ["loss_agg_mode"]),
    (dict(lr_scheduler_type="length_triggered"), ["lr_scheduler_type"]),
    (dict(task="multiplication_tool"), ["task='multiplication_tool'"]),
    (dict(sampler_staleness=2), ["sampler_staleness"]),
]


@pytest.mark.parametrize("fields,named", REFUSED, ids=[", ".join(n) for _, n in REFUSED])
def test_what_trl_cannot_run_is_refused_by_name_before_anything_is_written(fields, named, tmp_path):
    with pytest.raises(TrlExportError) as err:
        export_trl(RLConfig(**fields), tmp_path / "out", with_model=False)
    for name in named:
        assert name in str(err.value), (name, str(err.value))
    assert not (tmp_path / "out").exists()


def test_the_method_rows_refuse_with_their_trl_notes():
    """The methods' refusals come from their `trl=` entries in rl_lab.method_specs."""
    from rl_lab.method_specs import spec
    with pytest.raises(TrlExportError) as err:
        grpo_config_args(RLConfig(filter_groups=True))
    assert spec("filter_groups").trl.note in str(err.value)


def test_the_files(tmp_path):
    cfg = RLConfig(task="reversal", max_steps=3, prompts_per_step=2, num_generations=4, seed=5, beta=0.01,
                   rollout_correction=dict(rollout_is="token", rollout_is_threshold=2.0))
    result = export_trl(cfg, tmp_path, with_model=False)
    args = json.loads((tmp_path / "grpo_config.json").read_text())
    assert args == result.args and args["beta"] == 0.01 and args["per_device_train_batch_size"] == 8
    rows = [json.loads(line) for line in (tmp_path / "data" / "train.jsonl").read_text().splitlines()]
    from rl_lab.tasks import get_task
    assert rows == get_task("reversal").make_dataset(6, seed=5)    # the Trainer's prompt stream, in order
    meta = json.loads((tmp_path / "grpo_export.json").read_text())
    assert meta["task"] == "reversal" and "eval_steps" in meta["not_exported"]
    compile((tmp_path / "train_trl.py").read_text(), "train_trl.py", "exec")


# ----------------------------------------------------------------------------- with TRL
def test_the_arguments_are_grpo_configs():
    _trl()
    from trl import GRPOConfig
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    args = grpo_config_args(RLConfig(beta=0.02, mask_truncated_completions=True, warmup_steps=3,
                                     rollout_correction=dict(rollout_is="sequence", rollout_is_threshold="0.5_3.0")))
    assert set(args) <= names, set(args) - names
    assert args["lr_scheduler_type"] == "constant_with_warmup"


@pytest.mark.slow
def test_the_exported_script_runs_one_trl_step(tmp_path):
    """train_trl.py builds TRL's GRPOConfig from the export (TRL's own checks) and runs one step of
    GRPOTrainer on the saved warm start, on a CPU with one thread and no network."""
    _trl()
    cfg = RLConfig(task="addition", max_steps=5, prompts_per_step=2, num_generations=4, max_completion_length=6,
                   rollout_correction=dict(rollout_is="sequence", rollout_is_threshold="0.5_3.0"))
    export_trl(cfg, tmp_path / "run")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, str(tmp_path / "run" / "train_trl.py"), "--max-steps", "1",
                          "--output-dir", str(tmp_path / "trl_output")], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    state = json.loads((tmp_path / "trl_output" / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    record = state["log_history"][0]
    assert record["step"] == 1 and "rewards/addition/mean" in record and "loss" in record


def test_cli_export_trl_and_its_refusal(tmp_path, capsys):
    assert cli(["export", "trl", "--task", "addition", "--preset", "smoke", "--set", "max_steps=2",
                "--out", str(tmp_path / "ok"), "--no-model"]) == 0
    assert (tmp_path / "ok" / "train_trl.py").exists()
    assert "train_trl.py" in capsys.readouterr().out
    assert cli(["export", "trl", "--task", "addition", "--set", "rollout_correction.bypass_mode=true",
                "--out", str(tmp_path / "no")]) == 2
    assert "rollout_correction.bypass_mode" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()
