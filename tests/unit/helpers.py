"""Helpers shared by several test files (multi-turn episodes on a fixed, scripted batch).

pytest puts a test's folder, tests/unit/, on the path ("prepend" imports), so a test file here
imports them with `from helpers import ...`, without touching sys.path."""
import copy

import torch

from rl_lab import RLConfig, Trainer
from rl_lab.agents import ToolEnvironment
from rl_lab.algos.method import Method
from rl_lab.config import SamplingConfig
from rl_lab.engines.rollout import HFEngine
from rl_lab.engines.scripted import ScriptedEngine
from rl_lab.models import build_model
from rl_lab.trainer import TIMING_KEYS

# the character tokenizer has no '<': a call is "(2*3)", its answer "=6|"
CHARS = ToolEnvironment(max_turns=3, call_open="(", call_close=")", output_open="=", output_close="|")
SMALL = dict(model="0.3M", prompts_per_step=2, num_generations=2, max_completion_length=16,
             progress_bar=False, learning_rate=1e-3)


def distinct_characters(completions, **kw):
    """A reward with spread, so the advantages and the gradient are not zero."""
    return [float(len(set(c))) for c in completions]


def strip_timing(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


class FixedEngine(HFEngine):
    """Returns the same batch at every step (to compare steps on batches that differ in one token)."""

    def __init__(self, model, tokenizer, batch):
        super().__init__(model, tokenizer)
        self.batch = batch

    def generate(self, *args, **kwargs):
        return copy.deepcopy(self.batch)


def scripted_batch(env=CHARS, scripts=("(2*3)|6", "7", "(1/0)|x", "(9)|(8)|5"), length=40):
    model, tok = build_model("0.3M", seed=0)
    engine = ScriptedEngine(model, tok, list(scripts), env)
    return engine.generate(["1+1=", "2+2="], 2, SamplingConfig(max_completion_length=length), torch.Generator(),
                           environment=env), tok


def step_on(batch, capture, **cfg):
    """One trainer step on a fixed batch, from the same initial weights; `capture` gets the
    trainer's (B, T) log pi, with its gradient kept."""
    model, tok = build_model("0.3M", seed=0)
    trainer = Trainer(RLConfig(**{**SMALL, **cfg}, max_steps=1, seed=0), model=model, tokenizer=tok,
                      engine=FixedEngine(model, tok, batch), reward_funcs=[distinct_characters])
    return trainer.step()



class StepProbe(Method):
    """A method a test registers (rl_lab.method_specs.register_method, `extra_methods={"probe": True}`)
    to see the step's tensors: the final advantages, loss mask and training rows, and, when the run
    keeps pi's (B, T, V) log-probs, the gradient of the loss with respect to them (its token_loss
    runs after every other method's)."""
    name = "probe"

    def token_loss(self, s):
        if s.logp_all is not None and s.logp_all.requires_grad:
            s.logp_all.retain_grad()
            s.extra["probe_logp_all"] = s.logp_all
        return None

    def metrics(self, s):
        out = {"probe/advantages": s.advantages.detach().clone(), "probe/mask": s.mask.clone(),
               "probe/trains": s.trains.clone()}
        if "probe_logp_all" in s.extra:
            logp_all = s.extra["probe_logp_all"]
            out.update({"probe/logp_all": logp_all.detach().clone(), "probe/logp_all_grad": logp_all.grad.clone(),
                        "probe/loss_mask": s.loss_mask.clone()})
        return out
