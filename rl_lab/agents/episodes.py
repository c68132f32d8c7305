"""Multi-turn episodes: the model writes until it calls a tool (or answers), the environment
runs the tool and appends its output as tokens, up to `max_turns` model turns.

`ToolEnvironment` is the configuration (which tool, the delimiters, K); `Episodes` is the
bookkeeping of one batch, driven token by token by the sampler (rl_lab.engines.rollout.HFEngine):
before each sampled position it says which rows must take an environment token instead
(`next_tokens`), after it reads what was sampled (`observe`), and at the end it returns the
per-token environment mask, the turn ids and the batch's tool metrics (`finish`).  An engine that
samples a whole model turn per request (rl_lab.engines.vllm_engine.VLLMEngine) drives the same
bookkeeping row by row: `record_model_token` for each sampled id, then `take_environment_tokens`.

Environment tokens condition the model (they are in the context of every later token, for the
sampler mu and the trainer pi alike) but are not sampled: the engine leaves them out of
`completion_mask`, so they add nothing to the loss, the pi/mu ratios, the mismatch monitors, the
KL terms or the token counts.

Turns: model turn k (k = 0, 1, ...) is the text the model writes after k tool outputs; the
environment tokens that answer its call carry turn id k as well.  In the last allowed turn
(k = max_turns - 1) a call is not executed: the model writes on until <eos> or the length limit,
so max_turns = 1 is exactly the single-turn case.  A *void* turn (SimpleTIR) yields neither a
complete tool call nor a final answer: every turn but the last ends in an executed call, so the
void turn is a last turn that was cut by the length limit, or that ended (<eos>) without a call
and without text in the answer format (`ToolEnvironment.answer_pattern`): a premature <eos>.

A flaky tool (`ToolEnvironment.failure_rate` > 0) fails a call at random, as a sandbox that
crashes or times out does: the environment writes `failure_output` and the episode ends there,
without an <eos> and without another model turn (`ended_rows`; the engines stop such a row).  The
number of turns then varies within a group whatever the policy does.  Such an episode is not void:
its last model turn made a complete call.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rl_lab.agents.registry import run_tool
from rl_lab.agents.result import ToolResult

if TYPE_CHECKING:   # the episode's tensors; torch itself loads when a batch is sampled, so that
    import torch  # rl_lab.tasks, and so building an RLConfig, does not import it


@dataclass(frozen=True)
class ToolEnvironment:
    """One tool behind text delimiters.

    tool              registered tool name (rl_lab.agents.registry): "calculator", "python", ...
    max_turns         K, the most model turns per episode (1: single-turn, no call is executed)
    call_open/close   the model's call is the text between them, at the end of its turn
    output_open/close wrap the tool's output in the environment's turn
    max_output_chars  the tool output is cut to this many characters before tokenizing
    answer_pattern    a final answer: a turn ended by <eos> whose text (stripped) matches this
                      regular expression in full; the default accepts any non-empty text
    failure_rate      the share of calls that fail whatever they ask (a flaky tool): such a call is
                      not run; the environment writes `failure_output` and ends the episode.  Which
                      calls fail is a hash of (row, turn, call text), not a random draw (`fails`):
                      the same batch fails the same way, and the rows of a group fail independently
                      of each other.  0: never.
    """
    tool: str = "calculator"
    max_turns: int = 2
    call_open: str = "<calc>"
    call_close: str = "</calc>"
    output_open: str = "<output>"
    output_close: str = "</output>"
    max_output_chars: int = 200
    answer_pattern: str = r"(?s).*\S.*"
    failure_rate: float = 0.0
    failure_output: str = "error"

    def __post_init__(self):
        if self.max_turns < 1:
            raise ValueError(f"ToolEnvironment.max_turns={self.max_turns}: an episode has at least one turn")
        if not self.call_open or not self.call_close:
            raise ValueError("ToolEnvironment.call_open and call_close must be non-empty delimiters")
        if isinstance(self.failure_rate, bool) or not isinstance(self.failure_rate, (int, float)) \
                or not 0 <= self.failure_rate < 1:
            raise ValueError(f"ToolEnvironment.failure_rate={self.failure_rate!r} must be a number in [0, 1): "
                             "the share of calls that fail and end the episode (0: the tool never fails)")

    def fails(self, row: int, turn: int, call: str) -> bool:
        """Whether the call `call`, made by row `row` in model turn `turn`, fails: a number in
        [0, 1) hashed from the three (blake2b) falls below `failure_rate`.  A pure function, with
        no random state: sampling, resuming and every engine see the same failures."""
        if self.failure_rate <= 0:
            return False
        digest = hashlib.blake2b(f"{row}|{turn}|{call}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2 ** 64 < self.failure_rate

    def parse_call(self, turn_text: str) -> str | None:
        """The call's argument if `turn_text` ends with a complete call, else None."""
        if not turn_text.endswith(self.call_close):
            return None
        body = turn_text[: len(turn_text) - len(self.call_close)]
        start = body.rfind(self.call_open)
        return None if start < 0 else body[start + len(self.call_open):]

    def is_final_answer(self, turn_text: str) -> bool:
        """Whether a turn that ended with <eos> wrote a final answer (`answer_pattern`)."""
        return re.fullmatch(self.answer_pattern, turn_text.strip()) is not None

    def observation(self, result: ToolResult) -> str:
        """The text of the environment's turn for one tool result."""
        return f"{self.output_open}{result.output[: self.max_output_chars]}{self.output_close}"

    def start(self, batch_size: int, tokenizer) -> "Episodes":
        return Episodes(self, batch_size, tokenizer)


class Episodes:
    """The turn state of a batch of B episodes during sampling (see the module docstring)."""

    def __init__(self, env: ToolEnvironment, batch_size: int, tokenizer):
        self.env, self.tokenizer, self.B = env, tokenizer, batch_size
        close_ids = tokenizer(env.call_close, add_special_tokens=False)["input_ids"]
        if not close_ids:
            raise ValueError(f"the tokenizer turns call_close={env.call_close!r} into no tokens")
        self.close_last = close_ids[-1]       # a call can only end on this token: decode only then
        self.turn = [0] * batch_size          # current model turn of each row
        self.turn_tokens = [[] for _ in range(batch_size)]   # the current model turn's sampled ids
        self.pending = [[] for _ in range(batch_size)]       # environment ids still to append (reversed)
        self.ended_with_call = [False] * batch_size
        self.failing = [False] * batch_size           # the row's call failed: its output ends the episode
        self.ended = [False] * batch_size             # the environment ended the row's episode
        self.env_positions = [[] for _ in range(batch_size)]
        self.turn_ids = [[] for _ in range(batch_size)]
        self.results: list[ToolResult] = []

    @property
    def multi_turn(self) -> bool:
        return self.env.max_turns > 1

    def next_tokens(self, device):
        """(tokens (B,) long, is_env (B,) bool) of the environment's next tokens, or None."""
        import torch

        if not any(self.pending):
            return None
        is_env = [bool(p) for p in self.pending]
        tokens = [p.pop() if p else 0 for p in self.pending]
        return (torch.tensor(tokens, dtype=torch.long, device=device),
                torch.tensor(is_env, dtype=torch.bool, device=device))

    def observe(self, position: int, tokens: list[int], sampled: list[bool], env: list[bool]) -> None:
        """Record the ids written at `position` (sampled by the model, or the environment's), run
        the tool for every row whose turn now ends with a call, and queue its output."""
        for b in range(self.B):
            if env[b]:
                self.record_environment_token(b, position)
            elif sampled[b]:
                self.record_model_token(b, tokens[b])

    # per-row API: the token-by-token `observe` above, or an engine that samples a whole model
    # turn at once (rl_lab.engines.vllm_engine) and then asks for the environment's turn
    def may_call(self, b: int) -> bool:
        """Whether row b's current turn may still end in an executed call (not the last turn)."""
        return self.turn[b] < self.env.max_turns - 1

    def record_model_token(self, b: int, token: int) -> None:
        """Row b sampled `token`; when its turn now ends with a complete call (and may call), run
        the tool and queue its output for `take_environment_tokens` / `next_tokens`."""
        self.turn_ids[b].append(self.turn[b])
        self.turn_tokens[b].append(token)
        self.ended_with_call[b] = False
        if token != self.close_last or not self.may_call(b):
            return
        call = self.env.parse_call(self.tokenizer.decode(self.turn_tokens[b], skip_special_tokens=True))
        if call is None:
            return
        self.failing[b] = self.env.fails(b, self.turn[b], call)
        result = ToolResult(self.env.failure_output, "error") if self.failing[b] else run_tool(self.env.tool, call)
        self.results.append(result)
        ids = self.tokenizer(self.env.observation(result), add_special_tokens=False)["input_ids"]
        self.pending[b] = list(reversed(ids))
        self.ended_with_call[b] = True
        if not ids:                                     # an empty observation: the next turn starts now
            self._next_turn(b)

    def record_environment_token(self, b: int, position: int) -> None:
        """Row b took its next queued environment token at `position` (already popped)."""
        self.env_positions[b].append(position)
        self.turn_ids[b].append(self.turn[b])
        if not self.pending[b]:                         # the tool's output is complete: next turn
            self._next_turn(b)

    def take_environment_tokens(self, b: int, position: int, room: int) -> list[int]:
        """Row b's queued environment ids in order (at most `room`: the rest of the length limit),
        recorded at positions `position`, `position + 1`, ...; [] when nothing is queued."""
        taken = []
        while self.pending[b] and len(taken) < room:
            taken.append(self.pending[b].pop())
            self.record_environment_token(b, position + len(taken) - 1)
        return taken

    def _next_turn(self, b: int) -> None:
        if self.failing[b]:                             # a failed call: no next turn
            self.ended[b] = True
            return
        self.turn[b] += 1
        self.turn_tokens[b] = []

    def ended_rows(self, device=None) -> torch.Tensor:
        """(B,) bool: the rows whose episode the environment ended (a failed call's output is
        written): the engine samples nothing more for them."""
        import torch

        return torch.tensor(self.ended, dtype=torch.bool, device=device)

    def void_rows(self, has_eos: torch.Tensor) -> torch.Tensor:
        """(B,) bool once sampling is over: the rows whose episode has a void turn (SimpleTIR), a
        turn with neither a complete tool call nor a final answer.  Every turn but the last ends in
        an executed call, so this is the last turn: cut by the length limit (an episode cut while
        the tool's output was being appended is not void: its last model turn made a call), or
        ended by <eos> with neither a call nor an answer (`ToolEnvironment.is_final_answer`)."""
        import torch

        cut, early = self._void_kinds(has_eos)
        return torch.tensor([c or e for c, e in zip(cut, early)], dtype=torch.bool, device=has_eos.device)

    def _void_kinds(self, has_eos: torch.Tensor) -> tuple[list[bool], list[bool]]:
        """Per row: (void by the length limit, void by an early <eos>)."""
        eos = has_eos.cpu().tolist()
        cut = [not eos[b] and not self.ended_with_call[b] for b in range(self.B)]
        early = []
        for b in range(self.B):
            if not eos[b]:
                early.append(False)
                continue
            text = self.tokenizer.decode(self.turn_tokens[b], skip_special_tokens=True)
            early.append(self.env.parse_call(text.strip()) is None and not self.env.is_final_answer(text))
        return cut, early

    def finish(self, T: int, has_eos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """(env_mask (B, T) bool, turn_ids (B, T) long, metrics) once sampling is over.  turn_ids
        is -1 where nothing was written (padding)."""
        import torch

        env_mask = torch.zeros((self.B, T), dtype=torch.bool)
        turn_ids = torch.full((self.B, T), -1, dtype=torch.long)
        for b in range(self.B):
            env_mask[b, self.env_positions[b]] = True
            turn_ids[b, : len(self.turn_ids[b])] = torch.tensor(self.turn_ids[b], dtype=torch.long)
        turns = [max(ids) + 1 if ids else 0 for ids in self.turn_ids]
        cut, early = self._void_kinds(has_eos)
        kinds = [r.kind for r in self.results]
        metrics = {"turns/mean": sum(turns) / max(1, self.B),
                   "turns/void_fraction": sum(c or e for c, e in zip(cut, early)) / max(1, self.B),
                   "turns/void_eos_fraction": sum(early) / max(1, self.B),
                   "tools/calls": len(kinds), "tools/errors": kinds.count("error"),
                   "tools/timeouts": kinds.count("timeout"), "tools/truncated": kinds.count("truncated")}
        return env_mask.to(has_eos.device), turn_ids.to(has_eos.device), metrics
