"""ScriptedEngine: the real sampler (HFEngine) made to write fixed texts, for reproducible
multi-turn episodes without a trained model (chapter 12, lab 12 and tests/unit/test_episodes.py).

A script is the model's side of one episode with `|` where the tool's answer goes:
"(2*3)|6" is the model's call "(2*3)", the environment's answer "=6|" (written by the
environment, not the script), then the model's "6" and <eos>. The engine samples through the
whole HFEngine.generate loop, environment turns included; only the logits are replaced.
"""
from __future__ import annotations

import torch

from rl_lab.agents.episodes import ToolEnvironment
from rl_lab.agents.registry import run_tool
from rl_lab.config import SamplingConfig
from rl_lab.engines.rollout import HFEngine, RolloutBatch

ANSWER_MARK = "|"


def script_token_ids(script: str, tokenizer, env: ToolEnvironment) -> list[int]:
    """The token ids the model must emit, position by position, for one script.

    Each text before a `|` must end with a complete call (env.parse_call); after it the script
    leaves room (pad tokens, never emitted: the environment writes there) as long as the tool's
    answer, found by running the tool here. The last text is the final answer, followed by <eos>."""
    *calls, last = script.split(ANSWER_MARK)
    ids = []
    for k, text in enumerate(calls):
        call = env.parse_call(text)
        if call is None:
            raise ValueError(f"script {script!r}: turn {k} ({text!r}) is followed by {ANSWER_MARK!r}, the place of a "
                             f"tool answer, but does not end with a complete call {env.call_open}...{env.call_close}; "
                             f"end the turn with a call or remove the {ANSWER_MARK!r}")
        answer = env.observation(run_tool(env.tool, call))
        ids += tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += [tokenizer.pad_token_id] * len(tokenizer(answer, add_special_tokens=False)["input_ids"])
    return ids + tokenizer(last, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


class ScriptedEngine(HFEngine):
    """HFEngine that samples a fixed script per row, whatever the model's logits: at decode step t
    row i's logits become 0 on its script's t-th token and -1e4 elsewhere (through
    `perturb_logits`), so the sampler's log-prob of a scripted token is 0. Past a script's end the
    row writes <eos>. Scripts are in row order (prompt-major, as HFEngine lays out its rows)."""

    def __init__(self, model, tokenizer, scripts: list[str], env: ToolEnvironment):
        super().__init__(model, tokenizer)
        self.scripts = [script_token_ids(s, tokenizer, env) for s in scripts]
        self.step = 0

    def generate(self, prompts: list[str], n: int, sampling: SamplingConfig,
                 generator: torch.Generator | None = None, environment=None) -> RolloutBatch:
        if len(prompts) * n != len(self.scripts):
            raise ValueError(f"ScriptedEngine has {len(self.scripts)} scripts but generate() asks for "
                             f"{len(prompts)} prompts x {n} = {len(prompts) * n} rows; give one script per row")
        self.step = 0
        return super().generate(prompts, n, sampling, generator, environment=environment)

    def perturb_logits(self, logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        wanted = torch.tensor([s[min(self.step, len(s) - 1)] for s in self.scripts], device=logits.device)
        self.step += 1
        return torch.full_like(logits, -1e4).scatter(-1, wanted[:, None], 0.0)
