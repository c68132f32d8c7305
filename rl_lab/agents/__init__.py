"""Tools for multi-turn episodes, and the sandbox that keeps them harmless.

  result       ToolResult: the text the model reads and how the call ended
  calculator   arithmetic parsed with `ast`, with limits; never `eval`
  python_tool  model-written Python in a separate, limited process (what is enforced: its docstring)
  registry     tools by name; `run_tool` turns a tool's exception into an error result
  episodes     ToolEnvironment: multi-turn episodes (model turn, tool output as tokens, ... up to K
               turns) that HFEngine.generate(..., environment=), VLLMEngine.generate(...,
               environment=) and Trainer(..., environment=) run

Nothing here imports torch (rl_lab.tasks, and so building an RLConfig, reads ToolEnvironment), nor
any other part of rl_lab; the engine that writes fixed episode scripts is rl_lab.engines.scripted.
"""
# calculator first: the function's name is its module's, and importing the module later would bind the module
from rl_lab.agents.calculator import CalculatorLimits, calculator
from rl_lab.agents.episodes import ToolEnvironment
from rl_lab.agents.python_tool import (
    SandboxLimits,
    SandboxMode,
    SandboxUnavailable,
    run_python,
    sandbox_guarantees,
    sandbox_mode,
)
from rl_lab.agents.registry import TOOLS, get_tool, register_tool, run_tool
from rl_lab.agents.result import ToolResult

__all__ = ["TOOLS", "CalculatorLimits", "SandboxLimits", "SandboxMode", "SandboxUnavailable", "ToolEnvironment",
           "ToolResult", "calculator", "get_tool", "register_tool", "run_python", "run_tool", "sandbox_guarantees",
           "sandbox_mode"]
