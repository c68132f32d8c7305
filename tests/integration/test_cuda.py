"""The CUDA smoke suite: one training step per engine and per estimator, an engine built before
the trainer moved the model to the GPU, the vLLM engine, and the CLI in the `gpu` preset.
Every test is marked `cuda`: it runs wherever a CUDA GPU is present and skips elsewhere
(tests/conftest.py).  On CPU-only machines the device logic is covered by
test_device_helpers_on_cpu below."""
import subprocess
import sys

import pytest
import torch

from rl_lab import RLConfig, Trainer, load_warm_start
from rl_lab.config import ADV_ESTIMATORS
from rl_lab.engines.rollout import HFEngine
from rl_lab.utils import generator_on, pick_device

TINY = dict(task="addition", max_steps=1, prompts_per_step=4, num_generations=4, progress_bar=False,
            device="cuda")


def _one_step(**changes):
    trainer = Trainer(RLConfig(**{**TINY, **changes}))
    metrics = trainer.step()
    assert torch.isfinite(torch.tensor(metrics["loss"])), metrics
    assert next(trainer.model.parameters()).is_cuda
    return metrics


@pytest.mark.cuda
@pytest.mark.parametrize("engine", [dict(), dict(sampler_dtype="bfloat16"), dict(sampler_dtype="float16"),
                                    dict(sampler_staleness=2), dict(sampler_logit_noise=0.5),
                                    dict(sampler_quantization="int8"), dict(sampler_temperature=1.3),
                                    dict(min_p=0.1),
                                    dict(rollout_correction=dict(rollout_rs="seq_mean_k1,token_kl",
                                                                 rollout_rs_threshold="0.5_2.0,0.5"))])
def test_one_step_per_engine(engine):
    _one_step(**engine)


@pytest.mark.cuda
@pytest.mark.parametrize("estimator", ADV_ESTIMATORS)
def test_one_step_per_estimator(estimator):
    _one_step(advantage_estimator=estimator, sampler_dtype="bfloat16", rollout_correction=dict(rollout_is="sequence"))


@pytest.mark.cuda
@pytest.mark.parametrize("mode", [dict(bypass_mode=False, num_iterations=2), dict(bypass_mode=True)])
def test_one_step_per_correction_mode(mode):
    mode = dict(mode)
    _one_step(sampler_dtype="bfloat16", num_iterations=mode.pop("num_iterations", 1),
              rollout_correction=dict(rollout_is="token", rollout_rs="seq_sum_k1", rollout_rs_threshold="0.5_2.0",
                                      **mode))


@pytest.mark.cuda
def test_an_engine_built_before_the_trainer_moved_the_model():
    """The "measure your mismatch" lab builds a bf16 engine on the CPU model first."""
    model, tok = load_warm_start("addition")
    engine = HFEngine(model, tok, "bfloat16")              # its copy sits on the CPU
    trainer = Trainer(RLConfig(**TINY, sampler_dtype="bfloat16"), model=model, tokenizer=tok, engine=engine)
    trainer.step()
    assert next(engine.model.parameters()).is_cuda         # the copy followed the trainer's model


@pytest.mark.cuda
def test_vllm_engine_on_cuda():
    pytest.importorskip("vllm")
    _one_step(use_vllm=True, sampler_dtype="bfloat16")


@pytest.mark.cuda
def test_cli_gpu_preset_runs_a_few_steps(tmp_path):
    out = subprocess.run([sys.executable, "-m", "rl_lab.tools.cli", "train", "--task", "addition", "--preset", "gpu",
                          "--out", str(tmp_path / "run"), "--set", "max_steps=3", "--set", "progress_bar=false"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]


def test_device_helpers_on_cpu(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    assert generator_on("cpu", gen) is gen and generator_on("cpu", None) is None
    monkeypatch.setenv("RL_LAB_DEVICE", "cpu")
    assert pick_device("auto") == torch.device("cpu")
    monkeypatch.setenv("RL_LAB_DEVICE", "tpu")
    with pytest.raises(ValueError, match="RL_LAB_DEVICE"):
        pick_device("auto")
    if not torch.cuda.is_available():
        monkeypatch.setenv("RL_LAB_DEVICE", "cuda")
        with pytest.raises(RuntimeError, match="no CUDA GPU"):
            pick_device("auto")
