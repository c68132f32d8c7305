"""Tools for multi-turn episodes, and the sandbox that keeps them harmless.

  result       ToolResult: the text the model reads and how the call ended
  calculator   arithmetic parsed with `ast`, with limits; never `eval`
  python_tool  model-written Python in a separate, limited process (what is enforced: its docstring)
  registry     tools by name; `run_tool` turns a tool's exception into an error result
  episodes     ToolEnvironment: multi-turn episodes (model turn, tool output as tokens, ... up to K
               turns) that HFEngine.generate(..., environment=), VLLMEngine.generate(...,
               environment=) and Trainer(..., environment=) run
  scripted     ScriptedEngine: HFEngine writing fixed episode scripts ("(2*3)|6"), for examples and tests
"""
from rl_lab.agents.calculator import CalculatorLimits, calculator
from rl_lab.agents.episodes import ToolEnvironment
from rl_lab.agents.python_tool import (SandboxLimits, SandboxMode, SandboxUnavailable, run_python, sandbox_guarantees,
                                       sandbox_mode)
from rl_lab.agents.registry import TOOLS, get_tool, register_tool, run_tool
from rl_lab.agents.result import ToolResult
from rl_lab.agents.scripted import ScriptedEngine, script_token_ids

__all__ = ["CalculatorLimits", "SandboxLimits", "SandboxMode", "SandboxUnavailable", "ScriptedEngine", "TOOLS", "ToolEnvironment", "ToolResult", "calculator",
           "get_tool", "register_tool", "run_python", "run_tool", "sandbox_guarantees", "sandbox_mode", "script_token_ids"]
