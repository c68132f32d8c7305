"""The methods a run builds, from their rows in `rl_lab.method_specs.METHOD_SPECS` (hook order;
rl_lab.algos.method explains the hooks).

Adding a method: a `Method` subclass in its own module and one row (rl_lab.method_specs says where).
The order is part of the result: the per-token loss terms are added, and the token masks applied,
in this order (tests/integration/test_golden_methods.py holds every method to its recorded numbers bit for
bit).  Core mechanisms stay in the step: the rollout, the validity checks, the rollout correction
in its two modes (rl_lab.algos.correction), the advantage estimator (rl_lab.algos.estimators),
PPO's loss and the optimizer.
"""
from __future__ import annotations

from rl_lab.algos.method import Method
from rl_lab.method_specs import METHOD_SPECS


def method_classes() -> tuple[type[Method], ...]:
    """Every registered method's class, in hook order."""
    return tuple(spec.load() for spec in METHOD_SPECS)


def build_methods(config) -> list[Method]:
    """The methods the RLConfig turns on, in hook order."""
    return [spec.load()(config, spec) for spec in METHOD_SPECS if spec.active(config)]
