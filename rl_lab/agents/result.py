"""What a tool returns to the environment: `ToolResult`, the text the model will read and how the
call ended.  Its own module so that the tools and the registry import it without importing each
other."""
from __future__ import annotations

from dataclasses import dataclass

TOOL_KINDS = ("ok", "error", "timeout", "truncated")


@dataclass(frozen=True)
class ToolResult:
    """One tool call's outcome.

    output   the text appended to the episode as the environment's turn (already truncated)
    kind     "ok"; "error" (bad input, a refused operation, an exception, a non-zero exit);
             "timeout" (killed at the wall-clock or CPU limit); "truncated" (ran, but its output
             was cut at the limit)
    seconds  wall-clock time of the call
    """
    output: str
    kind: str = "ok"
    seconds: float = 0.0

    def __post_init__(self):
        if self.kind not in TOOL_KINDS:
            raise ValueError(f"ToolResult kind={self.kind!r}: choose one of {TOOL_KINDS}")

    @property
    def ok(self) -> bool:
        return self.kind == "ok"
