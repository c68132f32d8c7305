"""`rl-lab export verl` and `rl-lab import-metrics` (rl_lab.integrations.verl) against verl 0.9.1's
own code, on a CPU: verl's Hydra config composes with the exported command line and its sections
become verl's dataclasses; verl's RLHFDataset and its rollout tokenisation (the Continuous Token
builder the single-turn agent loop uses) give the prompt token ids rl_lab's engine gives; verl's
reward loader calls the exported reward file and scores as the task does; verl's correction
function on a recorded rl_lab batch, configured from the exported overrides, gives rl_lab's weights,
masks and metrics; a metrics file written by verl's own loggers reads back under rl_lab's names.

The table's own tests (coverage, round trip, refusals) need no verl.  The others skip without
verl (and its hydra-core, datasets, pyarrow: `bash tools/install_verl.sh`), or fail with
RL_LAB_REQUIRE_VERL=1 (CI).
"""
import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch

from rl_lab.config import RLConfig
from rl_lab.integrations.verl import (
    VERL_FIELD_MAP,
    VERL_TO_RL_LAB_METRICS,
    VerlCluster,
    VerlExportError,
    command_line_overrides,
    config_from_overrides_file,
    config_from_verl,
    config_overrides,
    export_verl,
    field_value,
    local_fields,
    read_overrides,
    read_verl_metrics,
)

REQUIRE = os.environ.get("RL_LAB_REQUIRE_VERL", "") == "1"
EXAMPLE = Path(__file__).resolve().parents[2] / "book" / "examples" / "verl_export"

CONFIGS = {   # (name, fields): a spread over every exported field's values
    "default": {},
    "trm-token-tis": dict(rollout_correction=dict(rollout_is="token", rollout_rs="seq_mean_k3,seq_max_k2",
                                                  rollout_rs_threshold="0.002,0.1"),
                          beta=0.01, lr_scheduler_type="cosine", warmup_steps=5, epsilon_high=0.28, clip_ratio_c=3.0,
                          top_k=5, top_p=0.9, temperature=0.8, sampler_dtype="bfloat16", seed=3),
    "bypass-reinforce-icepop": dict(rollout_correction=dict(bypass_mode=True, rollout_is="token",
                                                            rollout_is_threshold="0.5_5.0"),
                                    policy_loss="reinforce", scale_rewards="none",
                                    loss_agg_mode="seq-mean-token-sum-norm", num_iterations=2,
                                    advantage_estimator="rloo", save_steps=50, eval_steps=25,
                                    output_dir="runs/x", adam_beta2=0.99, weight_decay=0.1, max_grad_norm=0.5),
    "seq-mis-otb": dict(rollout_correction=dict(rollout_is="sequence", rollout_rs="seq_sum_k1",
                                                rollout_rs_threshold="0.5_2.0", rollout_is_batch_normalize=True),
                        advantage_estimator="optimal_token_baseline",
                        task="countdown", model="0.3M", gamma=0.9, prompts_per_step=4, num_generations=4,
                        max_completion_length=12, max_steps=30, learning_rate=1e-4, progress_bar=False),
}


def _cfg(name):
    return RLConfig(**CONFIGS[name])


def _pyarrow():
    """The export writes parquet: skip (or, with RL_LAB_REQUIRE_VERL=1, fail) without pyarrow."""
    try:
        import pyarrow  # noqa: F401
    except ImportError as exc:
        msg = f"pyarrow is needed to write the parquet data ({exc}): run `bash tools/install_verl.sh`"
        if REQUIRE:
            pytest.fail(msg + " (RL_LAB_REQUIRE_VERL=1 makes this a failure)", pytrace=False)
        pytest.skip(msg)


# ----------------------------------------------------------------------------- the table (no verl)
def test_the_table_covers_every_rlconfig_field_once():
    """One row per field; the nested rollout_correction (verl's own section) has one row per knob."""
    from rl_lab.config import CorrectionConfig
    fields = [f.name for f in dataclasses.fields(RLConfig) if f.name != "rollout_correction"] + \
        [f"rollout_correction.{f.name}" for f in dataclasses.fields(CorrectionConfig)]
    rows = [r.field for r in VERL_FIELD_MAP]
    assert sorted(rows) == sorted(fields), set(rows) ^ set(fields)
    assert len(rows) == len(set(rows))
    for row in VERL_FIELD_MAP:
        assert row.status in ("exported", "files", "local", "refused"), row
        assert row.note, f"{row.field} has no note"
        if row.status == "exported":
            assert row.keys and row.to_verl and row.from_verl, row.field
        if row.status == "refused":   # the default passes, so a plain config always exports
            assert row.allowed(field_value(RLConfig(), row.field)), row.field


@pytest.mark.parametrize("name", CONFIGS)
def test_round_trip_through_the_written_file(name, tmp_path):
    _pyarrow()
    cfg = _cfg(name)
    export = export_verl(cfg, tmp_path, with_model=False)
    assert config_from_overrides_file(tmp_path / "overrides.yaml") == cfg
    flat, local = read_overrides(tmp_path / "overrides.yaml")
    assert flat == export.overrides and local == local_fields(cfg)
    assert config_from_verl(config_overrides(cfg), local_fields(cfg)) == cfg


def test_a_changed_verl_key_changes_the_config_read_back(tmp_path):
    _pyarrow()
    export_verl(RLConfig(), tmp_path, with_model=False)
    flat, local = read_overrides(tmp_path / "overrides.yaml")
    flat["actor_rollout_ref.rollout.n"] = 4
    flat["algorithm.rollout_correction.rollout_is"] = "sequence"
    back = config_from_verl(flat, local)
    assert (back.num_generations, back.rollout_correction.rollout_is) == (4, "sequence")


@pytest.mark.parametrize("fields, named", [
    (dict(sampler_staleness=2), "sampler_staleness"),
    (dict(dvp={"min_p": 0.1}), "dvp"),
    (dict(sampler_logit_noise=0.5, min_p=0.05), "min_p"),
    (dict(rollout_correction=dict(rollout_token_veto_threshold=1e-4)), "rollout_token_veto_threshold"),
    (dict(rollout_correction=dict(extra_modes={"mine": {}})), "extra_modes"),
    (dict(mask_truncated_completions=True), "mask_truncated_completions"),
    (dict(lr_scheduler_type="length_triggered"), "lr_scheduler_type"),
    (dict(scale_rewards="batch"), "scale_rewards"),
    (dict(policy_loss="reinforce"), "bypass_mode"),
    (dict(rollout_correction=dict(rollout_rs="seq_max_kl", rollout_rs_threshold=0.1)), "seq_max_kl"),
])
def test_a_config_verl_cannot_run_is_refused_before_anything_is_written(fields, named, tmp_path):
    with pytest.raises(VerlExportError, match=named) as info:
        export_verl(RLConfig(**fields), tmp_path / "out", with_model=False)
    assert "RLConfig." in str(info.value)
    assert not (tmp_path / "out").exists()


def test_a_batch_that_does_not_split_over_the_gpus_is_refused(tmp_path):
    _pyarrow()
    with pytest.raises(VerlExportError, match="do not split over 24 GPUs"):
        export_verl(RLConfig(), tmp_path / "out", VerlCluster(nnodes=3, n_gpus_per_node=8), with_model=False)
    assert not (tmp_path / "out").exists()
    export = export_verl(RLConfig(), tmp_path / "ok", VerlCluster(n_gpus_per_node=8), with_model=False)
    assert export.overrides["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 8   # 64 rows / 8 GPUs


def test_every_refusal_is_listed_at_once():
    with pytest.raises(VerlExportError) as info:
        config_overrides(RLConfig(sampler_staleness=1, dvp=True, lr_scheduler_type="linear"))
    for name in ("sampler_staleness", "RLConfig.dvp", "lr_scheduler_type"):
        assert name in str(info.value)


def test_hydra_values_keep_strings_strings():
    over = command_line_overrides({"a.thr": "0.5_2.0", "a.n": 8, "a.off": None, "a.on": True,
                                   "a.betas": [0.9, 0.99], "a.path": "/x y/z"})
    assert over == ["a.thr='0.5_2.0'", "a.n=8", "a.off=null", "a.on=true", "a.betas=[0.9,0.99]", "a.path='/x y/z'"]


def test_the_committed_example_is_up_to_date(tmp_path):
    """book/examples/verl_export is what chapter 13 shows: regenerate it with
    `python -m rl_lab.integrations.verl_example` if this fails."""
    _pyarrow()
    from rl_lab.integrations.verl_example import EXAMPLE_CONFIG, write_example
    out = tmp_path / "book" / "examples" / "verl_export"
    write_example(out, cwd=tmp_path)
    for name in ("overrides.yaml", "command.sh", "reward.py", "config.yaml", "data_preview.json", "mapping.md"):
        assert (out / name).read_text() == (EXAMPLE / name).read_text(), (
            f"book/examples/verl_export/{name} is stale: run `python -m rl_lab.integrations.verl_example`")
    assert config_from_overrides_file(EXAMPLE / "overrides.yaml") == EXAMPLE_CONFIG


# ----------------------------------------------------------------------------- against verl
def _verl():
    """Skip (or, with RL_LAB_REQUIRE_VERL=1, fail) unless verl 0.9.1 and its config/data tools import."""
    try:
        from importlib.metadata import version

        import datasets  # noqa: F401
        import hydra  # noqa: F401
        import pyarrow  # noqa: F401
        import verl  # noqa: F401
        assert version("verl") == "0.9.1", f"found verl {version('verl')}"
    except (ImportError, AssertionError) as exc:
        msg = f"verl 0.9.1 with hydra-core, datasets and pyarrow is needed ({exc}): run `bash tools/install_verl.sh`"
        if REQUIRE:
            pytest.fail(msg + " (RL_LAB_REQUIRE_VERL=1 makes this a failure)", pytrace=False)
        pytest.skip(msg)


def compose(overrides: list[str]):
    """verl's packaged ppo_trainer config with these command-line overrides (hydra.compose)."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One export with the model (the 0.3M addition warm start), shared by the verl tests."""
    _verl()
    out = tmp_path_factory.mktemp("verl_export")
    cfg = RLConfig(**CONFIGS["trm-token-tis"], eval_prompts=16)
    return cfg, export_verl(cfg, out, VerlCluster(micro_batch_size_per_gpu=8))


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("nodes, gpus", [(1, 1), (2, 8)])
def test_verl_composes_the_exported_command_line_into_its_dataclasses(name, nodes, gpus, tmp_path):
    """hydra.compose as main_ppo does, then the checks main_ppo runs first (validate_config), then the
    dataclasses the trainer and workers build."""
    _verl()
    from verl.trainer.config import AlgoConfig
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config import FSDPActorConfig, FSDPOptimizerConfig, RolloutConfig

    cfg = _cfg(name)
    export = export_verl(cfg, tmp_path, VerlCluster(nnodes=nodes, n_gpus_per_node=gpus), with_model=False)
    composed = compose(command_line_overrides(export.overrides))
    with pytest.warns(UserWarning, match="Disabled critic"):
        assert not need_critic(composed)
    assert need_reference_policy(composed) == (cfg.beta > 0)
    validate_config(composed, use_reference_policy=cfg.beta > 0, use_critic=False)
    from omegaconf import OmegaConf  # overrides.yaml merged onto verl's defaults:
    merged = OmegaConf.merge(compose([]), OmegaConf.load(tmp_path / "overrides.yaml"))   # the same config
    assert OmegaConf.to_container(merged) == OmegaConf.to_container(composed)
    for key, value in export.overrides.items():          # every key landed, with its type
        node = composed
        for part in key.split("."):
            node = node[part]
        got = list(node) if hasattr(node, "__len__") and not isinstance(node, str) else node
        assert got == value and type(got) is type(value), (key, got, value)
    algo = omega_conf_to_dataclass(composed.algorithm)
    assert isinstance(algo, AlgoConfig)
    # the trainer reads algorithm.rollout_correction as a mapping; the actor's policy loss holds it as
    # verl's dataclass (apply_bypass_mode): both must accept it
    rc = omega_conf_to_dataclass(composed.algorithm.rollout_correction, RolloutCorrectionConfig)
    assert (rc.rollout_is, rc.rollout_is_threshold, rc.rollout_rs, rc.rollout_rs_threshold, rc.bypass_mode,
            rc.rollout_is_batch_normalize, rc.loss_type) == (
        cfg.rollout_correction.rollout_is, cfg.rollout_correction.rollout_is_threshold,
        cfg.rollout_correction.rollout_rs, cfg.rollout_correction.rollout_rs_threshold,
        cfg.rollout_correction.bypass_mode, cfg.rollout_correction.rollout_is_batch_normalize, cfg.policy_loss)
    assert (algo.adv_estimator, algo.gamma) == (cfg.advantage_estimator, cfg.gamma)
    actor = omega_conf_to_dataclass(composed.actor_rollout_ref.actor)
    assert isinstance(actor, FSDPActorConfig) and isinstance(actor.optim, FSDPOptimizerConfig)
    assert actor.calculate_sum_pi_squared == (cfg.advantage_estimator == "optimal_token_baseline")
    assert (actor.clip_ratio_low, actor.ppo_epochs, actor.loss_agg_mode, actor.optim.lr) == (
        cfg.epsilon, cfg.num_iterations, cfg.loss_agg_mode, cfg.learning_rate)
    rollout = omega_conf_to_dataclass(composed.actor_rollout_ref.rollout)
    assert isinstance(rollout, RolloutConfig)
    assert (rollout.n, rollout.response_length, rollout.temperature, rollout.calculate_log_probs) == (
        cfg.num_generations, cfg.max_completion_length, cfg.temperature, True)


def test_a_wrong_key_fails_in_verl_but_is_caught_by_the_export(tmp_path):
    """What the export guards against: verl finds a key it does not have only when the job starts
    (composition), or, added with '+', when its dataclass is built on the cluster."""
    _verl()
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.utils.config import omega_conf_to_dataclass
    with pytest.raises(Exception, match="rollout_token_veto_threshold"):
        compose(["algorithm.rollout_correction.rollout_token_veto_threshold=1e-4"])
    composed = compose(["+algorithm.rollout_correction.rollout_token_veto_threshold=1e-4"])
    with pytest.raises(Exception, match="rollout_token_veto_threshold"):   # omegaconf ConfigKeyError
        omega_conf_to_dataclass(composed.algorithm.rollout_correction, RolloutCorrectionConfig)
    with pytest.raises(VerlExportError, match="rollout_token_veto_threshold"):
        export_verl(RLConfig(rollout_correction={"rollout_token_veto_threshold": 1e-4}), tmp_path, with_model=False)


def test_verl_dataset_and_rollout_tokenisation_give_rl_labs_prompt_ids(exported):
    """verl 0.9.1's RLHFDataset returns the chat messages (raw_prompt); its agent loop tokenises them
    with the Continuous Token builder for the model's type (qwen2), which renders the exported chat
    template.  The ids must be the ones rl_lab's HFEngine feeds the model."""
    from omegaconf import OmegaConf
    from verl.utils import hf_tokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    from rl_lab.config import SamplingConfig
    from rl_lab.engines.rollout import HFEngine
    from rl_lab.models import load_model
    from rl_lab.tokenizer import CHARACTERS

    cfg, export = exported
    model, ours_tok = load_model(export.out_dir / "model")      # what rl_lab's engine uses
    tok = hf_tokenizer(export.overrides["actor_rollout_ref.model.tokenizer_path"])   # what verl loads
    text = "".join(CHARACTERS) + " 12 + 3 ="                    # every character, spaces kept
    assert tok(text)["input_ids"] == ours_tok(text)["input_ids"]
    data_cfg = OmegaConf.create({"prompt_key": "prompt",
                                 "max_prompt_length": export.overrides["data.max_prompt_length"],
                                 "filter_overlong_prompts": True, "filter_overlong_prompts_workers": 1,
                                 "truncation": "error", "cache_dir": str(export.out_dir / "cache")})
    for split in ("train", "val"):
        ds = RLHFDataset(str(export.out_dir / "data" / f"{split}.parquet"), tok, data_cfg)
        n_rows = cfg.max_steps * cfg.prompts_per_step if split == "train" else cfg.eval_prompts
        assert len(ds) == n_rows          # no prompt was filtered as too long
    builder = create_continuous_token_builder(tok, hf_model_type=model.config.model_type)
    items = [ds[i] for i in range(8)]
    prompts = [it["raw_prompt"][0]["content"] for it in items]
    batch = HFEngine(model, tok).generate(prompts, 1, SamplingConfig(max_completion_length=1),
                                          torch.Generator().manual_seed(0))
    for i, it in enumerate(items):
        ours = batch.prompt_ids[i][batch.prompt_mask[i].bool()].tolist()
        assert builder.build_initial_tokens(list(it["raw_prompt"])) == ours, (prompts[i], ours)
        assert it["data_source"] == cfg.task and it["extra_info"]["split"] == "val"


def test_verl_reward_loader_scores_as_the_task(exported):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from rl_lab.tasks import get_task

    cfg, export = exported
    composed = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": export.overrides["reward.custom_reward_function.path"],
        "name": export.overrides["reward.custom_reward_function.name"]}}})
    fn = get_custom_reward_fn(composed)
    import pandas as pd
    df = pd.read_parquet(export.out_dir / "data" / "train.parquet").head(6)
    task = get_task(cfg.task, **cfg.task_kwargs)
    examples = task.make_dataset(6, seed=cfg.seed)
    completions = [ex["answer"] for ex in examples[:2]] + [" " + examples[2]["answer"] + " ", "12", "", "x"]
    ours = task.reward(completions=completions, answer=[ex["answer"] for ex in examples])
    theirs = [fn(r.data_source, c, r.reward_model["ground_truth"], r.extra_info) for r, c in
              zip(df.itertuples(), completions)]
    assert theirs == ours and ours[:3] == [1.0, 1.0, 1.0] and sum(ours) < 6


def test_verl_reward_manager_decodes_sampled_ids_and_scores_as_the_task(exported):
    """The whole reward path verl runs: load_reward_manager (the "naive" manager with the exported
    compute_score) decodes each response's token ids with verl's tokenizer and scores it.  The ids are
    real samples of the exported model, drawn by rl_lab's HFEngine."""

    import numpy as np
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.utils import hf_tokenizer

    from rl_lab.config import SamplingConfig
    from rl_lab.engines.rollout import HFEngine
    from rl_lab.models import load_model
    from rl_lab.tasks import get_task

    cfg, export = exported
    composed = compose(command_line_overrides(export.overrides))
    tok = hf_tokenizer(export.overrides["actor_rollout_ref.model.tokenizer_path"])
    manager = load_reward_manager(composed, tok)
    model, ours_tok = load_model(export.out_dir / "model")
    task = get_task(cfg.task, **cfg.task_kwargs)
    examples = task.make_dataset(4, seed=cfg.seed)
    batch = HFEngine(model, ours_tok).generate([e["prompt"] for e in examples], 4, SamplingConfig(8),
                                               torch.Generator().manual_seed(0))
    rows = [e for e in examples for _ in range(4)]
    ours = task.reward(completions=batch.completions, answer=[e["answer"] for e in rows])
    import pandas as pd
    meta = pd.read_parquet(export.out_dir / "data" / "train.parquet").head(4)
    theirs = []
    for i in range(len(rows)):
        r = meta.iloc[i // 4]
        item = DataProto.from_dict(
            tensors={"responses": batch.completion_ids[i:i + 1],
                     "attention_mask": torch.cat([batch.prompt_mask, batch.completion_mask], -1)[i:i + 1]},
            non_tensors={"data_source": np.array([r.data_source], dtype=object),
                         "reward_model": np.array([dict(r.reward_model)], dtype=object),
                         "extra_info": np.array([dict(r.extra_info)], dtype=object)})
        theirs.append(manager.loop.run_until_complete(manager.run_single(item))["reward_score"])  # its own loop
    assert theirs == ours
    assert 0 < sum(ours) < len(ours), "the warm start should solve some prompts and miss others"


def test_the_reward_file_passes_a_tasks_extra_columns(tmp_path):
    """countdown scores with its 'numbers' and 'target' columns, which travel in extra_info."""
    _verl()
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from rl_lab.tasks import get_task

    export_verl(_cfg("seq-mis-otb"), tmp_path, with_model=False)
    fn = get_custom_reward_fn(OmegaConf.create({"reward": {"custom_reward_function": {
        "path": str(tmp_path / "reward.py"), "name": "compute_score"}}}))
    import pandas as pd
    df = pd.read_parquet(tmp_path / "data" / "train.parquet").head(8)
    task = get_task("countdown")
    examples = task.make_dataset(8, seed=0)
    completions = [task.target(ex) for ex in examples[:4]] + ["1+2", "", "(", "99"]
    cols = {k: [ex[k] for ex in examples] for k in examples[0] if k != "prompt"}
    ours = task.reward(completions=completions, **cols)
    theirs = [fn(r.data_source, c, r.reward_model["ground_truth"], r.extra_info) for r, c in
              zip(df.itertuples(), completions)]
    assert theirs == ours and sum(ours[:4]) == 4


CORRECTIONS = {
    "token-tis": dict(rollout_is="token"),
    "seq-mis": dict(rollout_is="sequence", rollout_rs="seq_sum_k1", rollout_rs_threshold="0.99_1.01"),
    "trm": dict(rollout_is="token", rollout_rs="seq_mean_k3,seq_max_k2", rollout_rs_threshold="5e-6,5e-5"),
    "icepop-normalized": dict(rollout_is="token", rollout_is_threshold="0.995_1.005", rollout_is_batch_normalize=True),
    "geo-rs": dict(rollout_rs="seq_mean_k1", rollout_rs_threshold="0.999_1.001"),
}
"""Thresholds sit inside the recorded batch's spread (bf16 vs fp32 on the 0.3M warm start: sequence
log-ratio sums ~ -0.004..0.026, per-sequence mean k3 ~ 1e-6..6e-5), so every rule masks some rows."""


@pytest.fixture(scope="module")
def recorded_batch():
    """An rl_lab rollout with a real mismatch (bfloat16 sampler): pi_old, mu and the mask, float64."""
    _verl()
    from rl_lab.trainer import Trainer
    trainer = Trainer(RLConfig(sampler_dtype="bfloat16", prompts_per_step=4, num_generations=4, device="cpu",
                               max_completion_length=6, progress_bar=False))
    batch = trainer.engine.generate([trainer.task.sample(trainer.rng)["prompt"] for _ in range(4)], 4,
                                    trainer.config.sampling(), trainer.generator)
    with torch.no_grad():
        old = trainer._logprobs(batch).logp
    mask = batch.completion_mask.bool()
    old = torch.where(mask, old, 0.0).double()
    mu = torch.where(mask, batch.sampler_logprobs, 0.0).double()
    assert (old - mu)[mask].abs().max() > 1e-4, "the bf16 sampler should disagree with the fp32 trainer"
    return old, mu, mask.double()


@pytest.mark.parametrize("name", CORRECTIONS)
def test_verl_correction_configured_from_the_export_matches_rl_lab(name, recorded_batch, tmp_path):
    from test_verl_conformance import assert_metrics_equal, assert_on_mask
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask
    from verl.utils.config import omega_conf_to_dataclass

    from rl_lab.corrections import rollout_correction

    cfg = RLConfig(rollout_correction=CORRECTIONS[name])
    export = export_verl(cfg, tmp_path, with_model=False)
    rc = omega_conf_to_dataclass(compose(command_line_overrides(export.overrides)).algorithm.rollout_correction,
                                 RolloutCorrectionConfig)
    old, mu, m = recorded_batch
    w, mask, metrics = rollout_correction(old, mu, m, config=cfg.rollout_correction)
    proto, mask_v, metrics_v = compute_rollout_correction_and_rejection_mask(
        old, mu, m, rc.rollout_is, rc.rollout_is_threshold, rc.rollout_is_batch_normalize, rc.rollout_rs,
        rc.rollout_rs_threshold)
    assert torch.equal(mask, mask_v)
    assert (w is None) == (proto is None)
    if w is not None:
        assert_on_mask(w, proto.batch["rollout_is_weights"], m)
    assert_metrics_equal(metrics, metrics_v, "rollout_corr/")
    if cfg.rollout_correction.rollout_rs:
        assert 0 < metrics["rollout_corr/rollout_rs_masked_fraction"] < 1, "the rule should bind on this batch"
    if cfg.rollout_correction.rollout_is_threshold == "0.995_1.005":
        assert 0 < metrics["rollout_corr/rollout_is_oob_ratio"] < 1


# ----------------------------------------------------------------------------- metrics back
def _verl_style_records():
    """Metrics as verl's trainer hands them to its loggers: floats, numpy scalars (reduce_metrics)."""
    import numpy as np
    return [(1, {"training/global_step": 1, "critic/score/mean": np.float64(0.25), "response_length/mean": 4.5,
                 "actor/entropy": 1.2, "actor/loss": -0.01, "actor/grad_norm": 0.3, "actor/lr": 5e-5,
                 "actor/pg_clipfrac": 0.0, "rollout_corr/k3_kl": 1e-4, "timing_s/step": 2.0}),
            (2, {"training/global_step": 2, "critic/score/mean": 0.5, "response_length/mean": 4.0,
                 "actor/entropy": 1.1, "actor/loss": 0.02, "actor/grad_norm": np.float32(0.4), "actor/lr": 5e-5,
                 "actor/pg_clipfrac": 0.1, "rollout_corr/k3_kl": 2e-4, "timing_s/step": 1.5}),
            (2, {"val-core/addition/reward/mean@1": 0.75})]


def test_import_metrics_reads_verls_file_logger_output(tmp_path, monkeypatch):
    """The file is written by verl's own FileLogger (trainer.logger=['file'])."""
    _verl()
    from verl.utils.tracking import FileLogger
    path = tmp_path / "verl_metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = FileLogger("rl_lab", "test")
    for step, data in _verl_style_records():
        logger.log(data, step)
    logger.finish()
    df = read_verl_metrics(path)
    assert list(df["step"]) == [1, 2]
    assert list(df["reward"]) == [0.25, 0.5] and list(df["completions/mean_length"]) == [4.5, 4.0]
    assert list(df["loss"]) == [-0.01, 0.02] and list(df["learning_rate"]) == [5e-5, 5e-5]
    assert list(df["rollout_corr/k3_kl"]) == [1e-4, 2e-4]            # the same name on both sides
    assert df["val-core/addition/reward/mean@1"].iloc[1] == 0.75      # verl-only names kept
    assert not set(VERL_TO_RL_LAB_METRICS) & set(df.columns) - {"step"}


def test_imported_names_mean_what_the_trainers_mean(tmp_path, monkeypatch):
    """One rl_lab step: its prompts are the first rows of the exported train.parquet; its batch and
    scores go through verl's own compute_data_metrics and FileLogger,
    and the imported reward and length metrics equal the Trainer's for that step."""
    _verl()
    from verl import DataProto
    from verl.trainer.ppo.metric_utils import compute_data_metrics
    from verl.utils.tracking import FileLogger

    from rl_lab.trainer import Trainer

    trainer = Trainer(RLConfig(prompts_per_step=4, num_generations=4, device="cpu", progress_bar=False))
    recorded = []
    generate = trainer.engine.generate
    monkeypatch.setattr(trainer.engine, "generate", lambda *a, **k: recorded.append(generate(*a, **k)) or recorded[-1])
    ours = trainer.step()
    batch = recorded[0]
    import pandas as pd
    export_verl(trainer.config, tmp_path / "export", with_model=False)
    first = pd.read_parquet(tmp_path / "export" / "data" / "train.parquet").head(4)
    assert [m[0]["content"] for m in first.prompt] == batch.prompts[::4]     # the Trainer's prompts
    answers = [a for a in first.reward_model.map(lambda r: r["ground_truth"]) for _ in range(4)]
    scores = torch.tensor(trainer.task.reward(completions=batch.completions, answer=answers))
    mask = batch.completion_mask.float()
    last = (mask.sum(-1).long() - 1).clamp(min=0)
    token_scores = torch.zeros_like(mask)
    token_scores[torch.arange(len(scores)), last] = scores                   # verl puts the score on the last token
    data = DataProto.from_dict(tensors={
        "responses": batch.completion_ids, "prompts": batch.prompt_ids, "response_mask": mask,
        "attention_mask": torch.cat([batch.prompt_mask, batch.completion_mask], -1),
        "token_level_scores": token_scores, "token_level_rewards": token_scores,
        "advantages": torch.zeros_like(mask), "returns": torch.zeros_like(mask)})
    path = tmp_path / "verl.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = FileLogger("rl_lab", "test")
    logger.log({"training/global_step": 1, **compute_data_metrics(data, use_critic=False)}, step=1)
    logger.finish()
    imported = read_verl_metrics(path).iloc[0]
    for name in ("reward", "completions/mean_length", "completions/min_length", "completions/max_length",
                 "completions/clipped_ratio"):
        assert imported[name] == pytest.approx(ours[name], abs=1e-6), name


def test_import_metrics_reads_verls_console_output(tmp_path, capsys):
    _verl()
    from verl.utils.logger import LocalLogger
    logger = LocalLogger(print_to_console=True)
    print("some other line verl prints")
    for step, data in _verl_style_records():
        logger.log(data, step)
    path = tmp_path / "stdout.log"
    path.write_text(capsys.readouterr().out)
    df = read_verl_metrics(path)
    assert "critic/score/mean:np.float64(0.25)" in path.read_text()          # what pprint prints
    assert list(df["reward"]) == [0.25, 0.5] and list(df["grad_norm"]) == [0.3, 0.4]
    assert df["val-core/addition/reward/mean@1"].iloc[1] == 0.75


def test_import_metrics_refuses_a_file_that_is_not_verls(tmp_path):
    from rl_lab.errors import ConfigError
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"reward": 1.0}) + "\n")
    with pytest.raises(ConfigError, match="'step' and 'data'"):
        read_verl_metrics(path)
    path.write_text("hello\n")
    with pytest.raises(ConfigError, match="no verl metrics"):
        read_verl_metrics(path)


def test_cli_export_and_import_metrics(tmp_path):
    _pyarrow()
    from rl_lab.tools.cli import main
    from rl_lab.utils import read_metrics
    (tmp_path / "my.yaml").write_text("rollout_correction: {rollout_is: token}\nmax_steps: 20\n")
    out = tmp_path / "verl"
    assert main(["export", "verl", "--config", str(tmp_path / "my.yaml"), "--out", str(out), "--no-model",
                 "--set", "num_generations=4", "--gpus-per-node", "8"]) == 0
    back = config_from_overrides_file(out / "overrides.yaml")
    assert (back.rollout_correction.rollout_is, back.max_steps, back.num_generations) == ("token", 20, 4)
    assert "trainer.n_gpus_per_node=8" in (out / "command.sh").read_text()
    assert main(["export", "verl", "--out", str(tmp_path / "bad"), "--no-model", "--set", "dvp.min_p=0.1"]) == 2
    log = tmp_path / "verl.jsonl"
    log.write_text("".join(json.dumps({"step": s, "data": d}, default=float) + "\n" for s, d in _verl_style_records()))
    assert main(["import-metrics", str(log), "--out", str(tmp_path / "run")]) == 0
    df = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert list(df["reward"]) == [0.25, 0.5]
