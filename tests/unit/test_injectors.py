"""rl_lab.engines.injectors: the sampler-only temperature (sampler_temperature)."""
import pytest
import torch

from rl_lab.algos.losses import sequence_logprobs
from rl_lab.config import ConfigError, RLConfig, SamplingConfig
from rl_lab.engines import MismatchEngine, make_engine
from rl_lab.engines.rollout import HFEngine

PROMPTS = ["12+34=", "7+8=", "rev:12345="]


def test_sampler_temperature_samples_from_tempered_logits_the_trainer_does_not_know(tiny):
    model, tok = tiny
    tau = 1.5
    eng = MismatchEngine(model, tok, temperature=tau)
    eng.sync_weights(model)
    b = eng.generate(PROMPTS, 4, SamplingConfig(max_completion_length=10), torch.Generator().manual_seed(0))
    m = b.completion_mask.bool()
    with torch.no_grad():   # log_softmax(logits / tau) at the sampled tokens, and the trainer's view
        tempered = sequence_logprobs(model, b.prompt_ids, b.prompt_mask, b.completion_ids, tau)
        trainer = sequence_logprobs(model, b.prompt_ids, b.prompt_mask, b.completion_ids, 1.0)
    assert (tempered - b.sampler_logprobs)[m].abs().max().item() < 1e-5
    gap = (trainer - b.sampler_logprobs)[m].abs()
    assert gap.mean().item() > 1e-2                               # a real mismatch the trainer sees
    # tau = 1 is no perturbation: the sampler equals the trainer again
    b1 = MismatchEngine(model, tok, temperature=1.0).generate(
        PROMPTS, 4, SamplingConfig(max_completion_length=10), torch.Generator().manual_seed(0))
    with torch.no_grad():
        lp1 = sequence_logprobs(model, b1.prompt_ids, b1.prompt_mask, b1.completion_ids, 1.0)
    assert (lp1 - b1.sampler_logprobs)[b1.completion_mask.bool()].abs().max().item() < 1e-5


def test_sampler_temperature_config_builds_a_mismatch_engine_and_is_validated(tiny):
    model, tok = tiny
    assert type(make_engine(RLConfig(), model, tok)) is HFEngine
    eng = make_engine(RLConfig(sampler_temperature=1.5), model, tok)
    assert isinstance(eng, MismatchEngine) and eng.temperature == 1.5
    for bad in (0, -1.0):
        with pytest.raises(ConfigError, match="sampler_temperature"):
            RLConfig(sampler_temperature=bad)
    with pytest.raises(ValueError):
        MismatchEngine(model, tok, temperature=0.0)
