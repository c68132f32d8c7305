"""The checks every rl_lab config runs when it is built (torch-free): a choice among names, a number
in a range, the types the fields are annotated with, and `_Validated`, the base class that runs them
and gives `replace`, `to_dict` and `from_dict`.  rl_lab.config (RLConfig and the presets) and
rl_lab.method_specs (the methods' own configs) build on it."""
from __future__ import annotations

import dataclasses
from typing import Any

from rl_lab.errors import ConfigError


def _check_choice(obj, name: str, allowed) -> None:
    value = getattr(obj, name)
    if value not in allowed:
        raise ConfigError(f"{type(obj).__name__}.{name}={value!r} is not allowed; "
                          f"choose one of {list(allowed)}")


def _check_range(obj, name: str, lo=None, hi=None, lo_open=False, hi_open=False) -> None:
    value = getattr(obj, name)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ConfigError(f"{type(obj).__name__}.{name}={value!r} must be a number")
    bad_lo = lo is not None and (value <= lo if lo_open else value < lo)
    bad_hi = hi is not None and (value >= hi if hi_open else value > hi)
    if bad_lo or bad_hi:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        raise ConfigError(f"{type(obj).__name__}.{name}={value!r} is out of range; "
                          f"use a value in {left}{lo if lo is not None else '-inf'}, "
                          f"{hi if hi is not None else 'inf'}{right}")


def _check_min_tokens(obj) -> None:
    _check_range(obj, "min_tokens", lo=0)
    if obj.min_tokens > obj.max_completion_length:
        raise ConfigError(f"{type(obj).__name__}.min_tokens={obj.min_tokens} exceeds max_completion_length="
                          f"{obj.max_completion_length}: lower min_tokens or raise max_completion_length")


def _check_types(obj) -> None:
    """Fields annotated `int` hold integers (not floats, strings or bools: `num_iterations=2.0`
    would pass a range check and then fail in `range`), `bool` fields hold True or False (not 1 or
    "false"), `dict` fields hold mappings.  numpy integers and bools are stored as Python ones."""
    import numbers

    import numpy as np
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        kinds = {t.strip() for t in str(f.type).split("|")}
        if value is None and "None" in kinds:
            continue
        name = f"{type(obj).__name__}.{f.name}={value!r}"
        if kinds <= {"bool", "None"}:
            if not isinstance(value, (bool, np.bool_)):
                raise ConfigError(f"{name} must be True or False")
            setattr(obj, f.name, bool(value))
        elif kinds <= {"int", "None"}:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
                raise ConfigError(f"{name} must be an integer (write {f.name}=2, not 2.0)")
            setattr(obj, f.name, int(value))
        elif kinds <= {"dict", "None"} and not isinstance(value, dict):
            raise ConfigError(f"{name} must be a mapping, e.g. {{\"digits\": 3}}")


class _Validated:
    def _coerce(self):
        """Nested configs from mappings (RLConfig); nothing elsewhere."""

    def __post_init__(self):
        self._coerce()
        for f in dataclasses.fields(self):  # YAML reads "3e-4" as a string: accept it for a float
            value = getattr(self, f.name)
            if f.type in ("float", "float | None") and isinstance(value, str):
                try:
                    setattr(self, f.name, float(value))
                except ValueError:
                    pass
        _check_types(self)
        self.validate()

    def replace(self, **changes):
        """A copy with some fields changed (validated)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f"{type(self).__name__} has no field(s) {sorted(unknown)}; "
                              f"fields are {[f.name for f in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} field(s) {sorted(unknown)}; "
                              f"fields are {sorted(names)}")
        return cls(**d)
