"""How a run's RLConfig is assembled: the presets (smoke, laptop, gpu; $RL_LAB_PRESET) and the
fields a command line gives (`rl-lab train`, `rl-lab export verl`: a YAML file, --task, --seed and
--set KEY=VALUE)."""
from __future__ import annotations

import os
from typing import Any

from rl_lab.config import RLConfig
from rl_lab.errors import ConfigError

PRESETS = ("smoke", "laptop", "gpu")

# Preset overrides for RLConfig.  smoke: CI, a minute or less; laptop: minutes on 2 cores;
# gpu: full size on one GPU.
_PRESET_OVERRIDES: dict[str, dict[str, Any]] = {
    "smoke": dict(max_steps=700, prompts_per_step=8, num_generations=8),
    "laptop": dict(max_steps=1500, prompts_per_step=8, num_generations=8),
    "gpu": dict(max_steps=3000, prompts_per_step=32, num_generations=16),
}


def command_line_fields(config_file=None, task: str | None = None, seed: int | None = None,
                        sets=()) -> tuple[dict, dict]:
    """The RLConfig fields a command line gives (`rl-lab train`, `rl-lab export verl`): (those of
    a YAML file, --task and --seed; those of --set KEY=VALUE), each value read as YAML (numbers,
    booleans, null, lists, mappings; a dotted KEY sets one knob of a nested config)."""
    import yaml
    given = {}
    if config_file:
        loaded = yaml.safe_load(open(config_file, encoding="utf-8").read()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{config_file} must hold a mapping of RLConfig fields")
        given.update(loaded)
    if task:
        given["task"] = task
    if seed is not None:
        given["seed"] = seed
    set_fields = {}
    for item in sets or ():
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: write it as key=value, e.g. --set learning_rate=3e-4")
        key, value = item.split("=", 1)
        set_fields[key.strip()] = yaml.safe_load(value)
    return given, set_fields


def preset_name(name: str | None = None) -> str:
    """The preset in force: `name`, else $RL_LAB_PRESET, else "smoke"."""
    name = name or os.environ.get("RL_LAB_PRESET") or "smoke"
    if name not in PRESETS:
        raise ConfigError(f"preset {name!r} is unknown (from RL_LAB_PRESET or the argument); "
                          f"choose one of {list(PRESETS)}")
    return name


def get_preset(name: str | None = None, **overrides) -> RLConfig:
    """An `RLConfig` for the preset (`smoke`/`laptop`/`gpu`, default $RL_LAB_PRESET),
    with `overrides` applied on top."""
    base = dict(_PRESET_OVERRIDES[preset_name(name)])
    base.update(overrides)
    return RLConfig.from_dict(base)
