"""The trainer's methods are plug-ins (issue 31): the step has no method-specific branch, every
method is registered once, and the advantage estimators by name match RLConfig's choices."""
import inspect
import re

import pytest

from rl_lab import RLConfig, Trainer
from rl_lab.algos.estimators import ADV_ESTIMATORS
from rl_lab.algos.method import Method
from rl_lab.algos.methods import METHODS, build_methods
from rl_lab.config import ADV_ESTIMATORS as CONFIG_ESTIMATORS

METHOD_FLAGS = ("mask_truncated_completions", "dvp", "mask_void_turns", "empg", "beta", "teacher_kl", "imitation",
                "filter_groups", "skip_zero_spread", "tool_token_stats", "advantage_estimator ==",
                "environment is not None")


def test_the_step_has_no_method_branch_and_fits_a_screen():
    src = inspect.getsource(Trainer.step)
    assert len(src.splitlines()) <= 70, len(src.splitlines())
    code = re.sub(r"#.*", "", src)                            # comments may name the methods
    found = [f for f in METHOD_FLAGS if re.search(rf"\b{re.escape(f)}", code)]
    assert not found, f"Trainer.step reads method flags {found}: move the logic into a Method's hook"


def test_every_method_is_registered_once_with_a_name():
    names = [m.name for m in METHODS]
    assert len(set(names)) == len(names) and all(names)
    assert all(issubclass(m, Method) for m in METHODS)


def test_estimators_match_the_config_choices():
    assert set(ADV_ESTIMATORS) == set(CONFIG_ESTIMATORS)
    assert [n for n, f in ADV_ESTIMATORS.items() if f.needs_full_logprobs] == ["optimal_token_baseline"]


@pytest.mark.parametrize("flags, expected", [
    ({}, ["turn_reward_metrics"]),
    ({"beta": 0.1}, ["reference_kl", "turn_reward_metrics"]),
    ({"mask_truncated_completions": True, "dvp": {"min_p": 0.1}}, ["truncation_mask", "dvp", "turn_reward_metrics"]),
    ({"empg": True, "imitation": True, "teacher_kl": {"model": "warm-start"}},
     ["empg", "teacher_kl", "imitation", "turn_reward_metrics"]),
])
def test_the_config_turns_methods_on_in_hook_order(flags, expected):
    assert [m.name for m in build_methods(RLConfig(**flags))] == expected


def test_a_new_method_plugs_in_without_touching_the_step(monkeypatch):
    """A method added to the registry sees the step's state and its metric reaches the log."""
    import rl_lab.algos.methods as methods

    class CountTokens(Method):
        name = "count_tokens"

        @staticmethod
        def active(config):
            return True

        def metrics(self, s):
            return {"count/tokens": int(s.counted.sum())}

    monkeypatch.setattr(methods, "METHODS", methods.METHODS + (CountTokens,))
    trainer = Trainer(RLConfig(model="0.3M", prompts_per_step=2, num_generations=2, max_steps=1, progress_bar=False))
    assert trainer.step()["count/tokens"] > 0
