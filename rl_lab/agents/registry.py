"""Tools by name: environments look a tool up here and call it through `run_tool`, which turns
any exception a tool raises into an error result, so a broken tool never stops a training step.
The one exception that passes: `SandboxUnavailable`, a machine that cannot isolate the Python tool
and a caller that did not allow it, which must stop the run at its first call, not train a
policy on a wall of error results."""
from __future__ import annotations

import time
from typing import Callable

from rl_lab.agents.calculator import calculator
from rl_lab.agents.python_tool import SandboxUnavailable, run_python
from rl_lab.agents.result import ToolResult

Tool = Callable[[str], ToolResult]
TOOLS: dict[str, Tool] = {"calculator": calculator, "python": run_python}


def register_tool(name: str, tool: Tool, overwrite: bool = False) -> None:
    """Make `tool` (text in, ToolResult out) available as `name`."""
    if not callable(tool):
        raise TypeError(f"register_tool({name!r}, ...): the tool must be callable (text -> ToolResult)")
    if name in TOOLS and not overwrite:
        raise ValueError(f"a tool named {name!r} is already registered; pass overwrite=True to replace it")
    TOOLS[name] = tool


def get_tool(name: str) -> Tool:
    try:
        return TOOLS[name]
    except KeyError:
        raise KeyError(f"no tool named {name!r}; registered: {sorted(TOOLS)}") from None


def run_tool(name: str, text: str) -> ToolResult:
    """Call tool `name` on `text`.  An exception inside the tool, or a return value that is not
    a ToolResult, becomes ToolResult("error: ...", "error"): the model reads it as the tool's output."""
    tool = get_tool(name)
    start = time.perf_counter()
    try:
        result = tool(text)
    except SandboxUnavailable:
        raise
    except Exception as exc:
        return ToolResult(f"error: the tool {name!r} failed: {type(exc).__name__}: {exc}"[:500], "error",
                          time.perf_counter() - start)
    if not isinstance(result, ToolResult):
        return ToolResult(f"error: the tool {name!r} returned {type(result).__name__}, not a ToolResult", "error",
                          time.perf_counter() - start)
    return result
