import json
import math

import numpy as np
import pytest
import torch

from rl_lab import RLConfig, Trainer
from rl_lab.config import ConfigError
from rl_lab.engines.rollout import HFEngine
from rl_lab.presets import get_preset
from rl_lab.trainer import TIMING_KEYS, call_reward_funcs
from rl_lab.utils import read_jsonl

SMALL = dict(model="0.3M", prompts_per_step=4, num_generations=4, max_completion_length=6,
             progress_bar=False, task_kwargs={"reward_mode": "partial"}, learning_rate=1e-3)


def _cfg(**kw):
    return RLConfig(**{**SMALL, **kw})


def _strip_timing(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_a_step_changes_every_parameter_and_logs_trl_metrics():
    tr = Trainer(_cfg(max_steps=2))
    before = _weights(tr.model)
    tr.train()
    after = tr.model.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in before), "every trainable parameter should move"
    row = tr.history[-1]
    for key in ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length",
                "completions/clipped_ratio", "entropy", "grad_norm", "loss", "learning_rate",
                "rollout_corr/k3_kl", "rollout_corr/log_ppl_diff", "step_time", "faults/masked_samples"):
        assert key in row, key
    assert row["rollout_corr/k3_kl"] < 1e-8       # fp32 sampler == fp32 trainer


def test_same_seed_gives_bitwise_identical_metrics():
    a = Trainer(_cfg(max_steps=3, seed=5)).train().to_dict("records")
    b = Trainer(_cfg(max_steps=3, seed=5)).train().to_dict("records")
    c = Trainer(_cfg(max_steps=3, seed=6)).train().to_dict("records")
    assert _strip_timing(a) == _strip_timing(b)
    assert _strip_timing(a) != _strip_timing(c)


def test_resume_gives_the_same_result_as_an_uninterrupted_run(tmp_path):
    full = Trainer(_cfg(max_steps=6, output_dir=str(tmp_path / "full"), save_steps=3))
    full.train()
    # "killed" after step 4: checkpoint-3 exists, metrics.jsonl has a row past it and a torn line
    part = Trainer(_cfg(max_steps=4, output_dir=str(tmp_path / "part"), save_steps=3))
    part.train()
    with open(tmp_path / "part" / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "rew')
    resumed = Trainer(_cfg(max_steps=6, output_dir=str(tmp_path / "part"), save_steps=3))
    assert resumed.resume() and resumed.global_step == 4   # the final save of the 4-step run
    resumed = Trainer(_cfg(max_steps=6, output_dir=str(tmp_path / "part"), save_steps=3))
    assert resumed.resume(tmp_path / "part" / "checkpoint-3") and resumed.global_step == 3
    resumed.train()
    rows_full = _strip_timing(read_jsonl(tmp_path / "full" / "metrics.jsonl"))
    rows_res = _strip_timing(read_jsonl(tmp_path / "part" / "metrics.jsonl"))
    assert [r["step"] for r in rows_res] == list(range(1, 7))
    assert rows_full == rows_res
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "part" / "final" / "model.safetensors").exists()
    assert len(list((tmp_path / "part").glob("checkpoint-*"))) <= 2


def test_raising_and_nan_rewards_are_masked_and_counted():
    def flaky(prompts, completions, answer, **kw):
        if len(completions) > 1:
            raise RuntimeError("batch failure")
        if completions[0].startswith("1"):
            raise RuntimeError("bad sample")
        return [0.5]

    def nan_reward(completions, **kw):
        return [math.nan if i % 5 == 0 else 0.0 for i in range(len(completions))]

    tr = Trainer(_cfg(max_steps=1), reward_funcs=[flaky])
    m = tr.step()
    assert m["faults/masked_samples"] == m["faults/reward_errors"]
    assert math.isfinite(m["loss"]) and m["faults/skipped_steps"] == 0
    rewards, _, errors = call_reward_funcs([nan_reward], ["p"] * 10, ["c"] * 10, [[1]] * 10, {})
    assert errors == 2 and np.isnan(rewards[[0, 5]]).all()


class _BrokenEngine(HFEngine):
    """Reports NaN log-probs for some rows and an empty completion for one."""

    def generate(self, prompts, n, sampling, generator=None):
        b = super().generate(prompts, n, sampling, generator)
        b.sampler_logprobs[0, 0] = float("nan")
        b.sampler_logprobs[1, 0] = float("inf")
        b.completion_mask[2] = 0
        return b


def test_nonfinite_sampler_logprobs_and_empty_completions_are_masked():
    cfg = _cfg(max_steps=3)
    tr = Trainer(cfg)
    tr.engine = _BrokenEngine(tr.model, tr.tokenizer)
    df = tr.train()
    assert (df["faults/nonfinite_logprobs"] == 2).all()
    assert (df["faults/empty_completions"] == 1).all()
    assert (df["faults/masked_samples"] >= 3).all()
    assert np.isfinite(df["loss"]).all() and np.isfinite(df["rollout_corr/k3_kl"]).all()
    assert all(torch.isfinite(p).all() for p in tr.model.parameters())


def test_a_nonfinite_gradient_skips_the_step_and_keeps_the_weights():
    tr = Trainer(_cfg(max_steps=1))
    before = _weights(tr.model)
    with torch.no_grad():
        tr.model.model.norm.weight[0] = float("nan")    # the trainer's forward is now poisoned
    before["model.norm.weight"] = tr.model.model.norm.weight.detach().clone()
    m = tr.step()
    assert m["faults/skipped_steps"] == 1
    after = tr.model.state_dict()
    for k in before:
        torch.testing.assert_close(after[k], before[k], rtol=0, atol=0, equal_nan=True)


def test_an_all_rejected_batch_skips_the_step_and_keeps_the_weights():
    """A mask that rejects every sequence leaves nothing to learn from: no AdamW step (its
    momentum from earlier batches would still move the weights), counted as skipped."""
    tr = Trainer(_cfg(max_steps=2, sampler_logit_noise=0.1))
    assert tr.step()["faults/skipped_steps"] == 0                       # builds Adam momentum
    before = _weights(tr.model)
    tr.config = tr.config.replace(rollout_rs="seq_max_k2", rollout_rs_threshold=1e-12)
    m = tr.step()
    assert m["rollout_corr/rollout_rs_seq_masked_fraction"] == 1.0
    assert m["loss"] == 0.0 and m["faults/skipped_steps"] == 1
    after = tr.model.state_dict()
    for k in before:
        torch.testing.assert_close(after[k], before[k], rtol=0, atol=0)


def test_ppo_iterations_reinforce_beta_and_is_hook_run():
    for kw in (dict(num_iterations=2), dict(policy_loss="reinforce"), dict(beta=0.1),
               dict(rollout_is="sequence", sampler_dtype="bfloat16"),
               dict(loss_agg_mode="seq-mean-token-sum-norm", scale_rewards="none"),
               dict(advantage_estimator="rloo", lr_scheduler_type="cosine", warmup_steps=1),
               dict(mask_truncated_completions=True, eval_steps=1, eval_prompts=8)):
        m = Trainer(_cfg(max_steps=1, **kw)).step()
        assert math.isfinite(m["loss"]), kw
    m = Trainer(_cfg(max_steps=1, beta=0.1)).step()
    assert m["kl"] == pytest.approx(0.0, abs=1e-9)      # the first step is at the reference
    m = Trainer(_cfg(max_steps=1, rollout_is="token", sampler_dtype="bfloat16")).step()
    assert m["rollout_corr/k3_kl"] > 0 and "rollout_corr/rollout_is_mean" in m


@pytest.mark.parametrize("field,value,match", [
    ("policy_loss", "ppo", "choose one of"),
    ("loss_agg_mode", "mean", "token-mean"),
    ("epsilon", 1.5, r"out of range"),
    ("num_generations", 1, "num_generations"),
    ("sampler_dtype", "int8", "bfloat16"),
    ("task", "chess", "addition"),
    ("rollout_is", "seq", "sequence"),
    ("top_p", 0.0, "top_p"),
    ("advantage_estimator", "gae", "optimal_token_baseline"),
    ("clip_ratio_c", 0.5, "clip_ratio_c"),
    ("sampler_quantization", "int4", "int8"),
    ("sampler_staleness", -1, "out of range"),
    ("dvp", {"min_p": 1.0}, "out of range"),
    ("rollout_is_threshold", "2_1", "lo <= hi"),
    ("rollout_rs", "seq_max_k1", "seq_max_k2"),
])
def test_bad_config_names_the_field_and_allowed_values(field, value, match):
    with pytest.raises(ConfigError, match=match) as e:
        RLConfig(**{field: value})
    assert field in str(e.value)


def test_unknown_fields_and_presets_are_rejected(monkeypatch):
    with pytest.raises(ConfigError, match="no field"):
        RLConfig().replace(learning_rat=1e-3)
    with pytest.raises(ConfigError, match="unknown RLConfig field"):
        RLConfig.from_dict({"lr": 1})
    monkeypatch.setenv("RL_LAB_PRESET", "huge")
    with pytest.raises(ConfigError, match="smoke"):
        get_preset()
    monkeypatch.setenv("RL_LAB_PRESET", "laptop")
    assert get_preset().max_steps > get_preset("smoke").max_steps
    with pytest.raises(ConfigError, match="output_dir"):
        RLConfig(save_steps=5)


def test_metrics_file_and_config_are_written(tmp_path):
    tr = Trainer(_cfg(max_steps=2, output_dir=str(tmp_path)))
    tr.train()
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert json.loads(json.dumps(rows[0])) == rows[0]
    assert (tmp_path / "config.yaml").read_text().startswith("task: addition")


@pytest.mark.parametrize("kw,keys", [
    (dict(correction="Seq-MIS", sampler_dtype="bfloat16", advantage_estimator="optimal_token_baseline",
          rollout_rs_threshold="0.1_10"),
     ("rollout_corr/rollout_is_eff_sample_size", "rollout_corr/rollout_rs_seq_sum_k1_masked_fraction")),
    (dict(correction="TRM-Exact", sampler_quantization="int8", advantage_estimator="reinforce_plus_plus"),
     ("rollout_corr/rollout_rs_seq_max_kl_max", "rollout_corr/rollout_rs_seq_mean_kl_mean")),
    (dict(correction="Bypass-PG-Seq-TIS", sampler_logit_noise=0.3, num_iterations=2, clip_ratio_c=3.0),
     ("rollout_corr/rollout_is_mean", "actor/ppo_kl")),
    (dict(correction="Bypass-PPO-clip-K3-RS", sampler_staleness=1, advantage_estimator="rloo", num_iterations=2),
     ("rollout_corr/rollout_rs_seq_mean_k3_mean", "actor/pg_clipfrac_lower")),
    (dict(correction="Token-IcePop", rollout_is_batch_normalize=True, rollout_token_veto_threshold=1e-3,
          dvp={"min_p": 0.05}, top_k=20, advantage_estimator="reinforce_plus_plus_baseline"),
     ("rollout_corr/rollout_is_batch_norm_factor", "rollout_corr/rollout_is_veto_fraction", "dvp/outside_fraction")),
])
def test_every_correction_runs_in_the_trainer_by_configuration(kw, keys):
    from rl_lab.corrections import correction_preset
    kw = dict(kw)
    cfg = _cfg(max_steps=1, **correction_preset(kw.pop("correction"), **kw))
    m = Trainer(cfg).step()
    assert math.isfinite(m["loss"]) and m["faults/skipped_steps"] == 0
    for key in keys:
        assert key in m, key


def test_bypass_reinforce_equals_decoupled_reinforce_on_the_first_iteration():
    """With one iteration pi_theta == pi_old, so w = min(pi_theta/mu, C) == min(pi_old/mu, C)."""
    common = dict(max_steps=1, seed=3, sampler_dtype="bfloat16", policy_loss="reinforce",
                  rollout_is="token", rollout_is_threshold=1.5)
    a = Trainer(_cfg(**common)).step()
    b = Trainer(_cfg(**common, bypass_mode=True)).step()
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
    assert a["rollout_corr/rollout_is_mean"] == pytest.approx(b["rollout_corr/rollout_is_mean"], rel=1e-6)


def test_injectors_perturb_the_sampler_as_described(tiny):
    import copy

    from rl_lab.engines.injectors import MismatchEngine, fake_quantize_int8_
    model, tok = tiny
    q = copy.deepcopy(model)
    fake_quantize_int8_(q)
    for (name, p), (_, p_q) in zip(model.named_parameters(), q.named_parameters()):
        if "proj.weight" in name:                # linear layers: rounded to 255 levels per row
            step = p.detach().abs().amax(1, keepdim=True) / 127
            assert (p_q - p).abs().le(step / 2 + 1e-7).all() and not torch.equal(p_q, p)
            assert all(len(torch.unique(row)) <= 255 for row in p_q)
        else:                                    # embeddings / lm_head / norms untouched
            assert torch.equal(p_q, p)
    eng = MismatchEngine(model, tok, staleness=2)
    versions = []
    for k in range(4):                           # the trainer moves; the sampler lags 2 syncs
        trainer = copy.deepcopy(model)
        with torch.no_grad():
            trainer.model.norm.weight.fill_(float(k))
        eng.sync_weights(trainer)
        versions.append(eng.model.model.norm.weight[0].item())
    assert versions == [0.0, 0.0, 0.0, 1.0]
    state = eng.state_dict()
    eng2 = MismatchEngine(model, tok, staleness=2)
    eng2.load_state_dict(state)
    assert [h["model.norm.weight"][0].item() for h in eng2.history] == [1.0, 2.0, 3.0]


def test_injected_mismatch_shows_in_the_monitors_and_is_deterministic(tiny):
    from rl_lab.algos.losses import sequence_logprobs
    from rl_lab.engines import make_engine
    from rl_lab.monitors import mismatch_metrics
    model, tok = tiny

    def rollout(**kw):
        cfg = _cfg(**kw)
        eng = make_engine(cfg, model, tok)
        eng.sync_weights(model)
        b = eng.generate(["12+34=", "5+6="], 4, cfg.sampling(), torch.Generator().manual_seed(0))
        with torch.no_grad():
            lp = sequence_logprobs(model, b.prompt_ids, b.prompt_mask, b.completion_ids)
        return b, mismatch_metrics(lp, b.sampler_logprobs, b.completion_mask)["k3_kl"]

    assert rollout()[1] < 1e-9
    for kw in (dict(sampler_quantization="int8"), dict(sampler_logit_noise=0.5), dict(top_k=3),
               dict(min_p=0.3), dict(sampler_dtype="bfloat16")):
        assert rollout(**kw)[1] > 1e-6, kw
    a, b = rollout(sampler_logit_noise=0.5)[0], rollout(sampler_logit_noise=0.5)[0]
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.sampler_logprobs, b.sampler_logprobs)


def test_dvp_gives_sampler_and_trainer_the_same_safe_vocabulary(tiny):
    """With the same weights and min_p, the sampler's reported log-probs equal the trainer's
    pruned log-probs: both renormalise over the same safe set."""
    from rl_lab import SamplingConfig
    from rl_lab.algos.losses import sequence_logprobs, token_logprobs
    model, tok = tiny
    eng = HFEngine(model, tok)
    eng.record_full_logprobs = True
    b = eng.generate(["12+34="] * 4, 2, SamplingConfig(max_completion_length=6, min_p=0.2),
                     torch.Generator().manual_seed(0))
    with torch.no_grad():
        pi = token_logprobs(model, b.prompt_ids, b.prompt_mask, b.completion_ids, dvp_min_p=0.2, with_all=True)
    lp, lp_all = pi.logp, pi.logp_all
    m = b.completion_mask.bool()
    torch.testing.assert_close(lp[m], b.sampler_logprobs[m], atol=1e-5, rtol=0)
    torch.testing.assert_close(lp_all[m], b.sampler_logprobs_full[m], atol=1e-5, rtol=0)
    full = sequence_logprobs(model, b.prompt_ids, b.prompt_mask, b.completion_ids)
    assert (full[m] - b.sampler_logprobs[m]).abs().max() > 1e-3      # unpruned trainer: a mismatch


def test_correction_needing_missing_logprobs_is_a_config_error():
    class NoLogprobs(HFEngine):
        def generate(self, *a, **k):
            b = super().generate(*a, **k)
            b.sampler_logprobs = None
            return b
    tr = Trainer(_cfg(max_steps=1, rollout_is="token"))
    tr.engine = NoLogprobs(tr.model, tr.tokenizer)
    with pytest.raises(ConfigError, match="rollout_is"):
        tr.step()
    tr = Trainer(_cfg(max_steps=1))
    tr.engine = NoLogprobs(tr.model, tr.tokenizer)
    assert tr.step()["rollout_corr/k3_kl"] == 0.0                        # monitors only: mu := pi_old
