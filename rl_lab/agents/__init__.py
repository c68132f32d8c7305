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
from rl_lab._lazy import lazy_exports
# Eager: a function named like its module (importing the module would bind the module's name).
from rl_lab.agents.calculator import CalculatorLimits, calculator

# Loaded on first use (rl_lab/_lazy.py): rl_lab.tasks, and so building an RLConfig, reads
# ToolEnvironment without importing torch, which the scripted engine needs.
_EXPORTS = {
    "ToolEnvironment": "rl_lab.agents.episodes",
    **dict.fromkeys(["SandboxLimits", "SandboxMode", "SandboxUnavailable", "run_python", "sandbox_guarantees",
                     "sandbox_mode"], "rl_lab.agents.python_tool"),
    **dict.fromkeys(["TOOLS", "get_tool", "register_tool", "run_tool"], "rl_lab.agents.registry"),
    "ToolResult": "rl_lab.agents.result",
    "ScriptedEngine": "rl_lab.agents.scripted", "script_token_ids": "rl_lab.agents.scripted",
}
__all__ = sorted([*_EXPORTS, "CalculatorLimits", "calculator"])

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
