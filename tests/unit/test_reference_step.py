"""Trainer.step with the default RLConfig is the one-screen GRPO step of rl_lab.reference_step
(chapter 1), plus bookkeeping: the same batch gives the same reward, loss, gradient norm and
weights, with the static decoder and the shared-prefix forward on and off."""
import copy

import numpy as np
import pytest
import torch

from rl_lab import RLConfig, Trainer
from rl_lab.engines.rollout import HFEngine
from rl_lab.reference_step import reference_grpo_step


@pytest.mark.parametrize("share_prefix,fast", [(False, True), (True, True), (True, False)])
def test_trainer_step_is_the_reference_step(share_prefix, fast):
    cfg = RLConfig(task="addition", max_steps=2, prompts_per_step=4, num_generations=8, progress_bar=False,
                   share_prefix=share_prefix, device="cpu")
    trainer = Trainer(cfg)
    trainer.engine.fast = fast
    model = copy.deepcopy(trainer.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, eps=1e-8, weight_decay=0.0,
                                  betas=(cfg.adam_beta1, cfg.adam_beta2), fused=True)   # as the trainer's
    engine = HFEngine(model, trainer.tokenizer)
    engine.fast = fast
    rng, gen = np.random.default_rng(cfg.seed), torch.Generator().manual_seed(cfg.seed)  # the trainer's streams
    for _ in range(2):   # two steps: the second starts from updated weights and Adam state
        examples = [trainer.task.sample(rng) for _ in range(cfg.prompts_per_step)]
        ref = reference_grpo_step(model, optimizer, engine, trainer.task, examples, cfg.num_generations,
                                  cfg.sampling(), gen, cfg.epsilon, cfg.max_grad_norm)
        got = trainer.step()
        assert got["reward"] == ref["reward"]
        assert got["loss"] == pytest.approx(ref["loss"], abs=1e-6)
        assert got["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-4)
    atol = 0 if not share_prefix else 1e-5     # the shared-prefix forward rounds differently
    for (name, a), b in zip(trainer.model.named_parameters(), model.parameters()):
        torch.testing.assert_close(a, b, atol=atol, rtol=0 if atol == 0 else 1e-4, msg=name)
