"""Config validation up front: field types, task_kwargs, the model spec, and the CLI's exit 2."""
import dataclasses

import numpy as np
import pytest

from rl_lab.tools.cli import main as cli_main
from rl_lab.config import ConfigError, RLConfig, SamplingConfig, WarmStartConfig
from rl_lab.models import CHECKPOINT_DIR, warm_start_path


@pytest.mark.parametrize("field,value", [
    ("num_iterations", 2.0), ("max_steps", 10.5), ("prompts_per_step", "8"), ("seed", 1.0),
    ("max_completion_length", True), ("top_k", 0.0), ("save_steps", 2.0),
])
def test_integer_fields_refuse_floats_strings_and_bools(field, value):
    with pytest.raises(ConfigError, match=rf"{field}=.*integer"):
        RLConfig(**{field: value})


def test_integer_fields_of_every_config_are_checked():
    with pytest.raises(ConfigError, match="max_completion_length"):
        SamplingConfig(max_completion_length=4.0)
    with pytest.raises(ConfigError, match="steps"):
        WarmStartConfig(steps=100.0)
    # a numpy integer is an integer (a sweep may build configs from numpy arrays); stored as int
    cfg = RLConfig(max_steps=np.int64(3), num_generations=np.arange(4, 5)[0])
    assert type(cfg.max_steps) is int and type(cfg.num_generations) is int and cfg.max_steps == 3


@pytest.mark.parametrize("field,value", [
    ("use_vllm", 1), ("use_vllm", "yes"), ("share_prefix", 0), ("progress_bar", "false"),
    ("mask_truncated_completions", 1.0), ("bypass_mode", "true"),
])
def test_bool_fields_refuse_non_bools(field, value):
    with pytest.raises(ConfigError, match=rf"{field}=.*True or False"):
        RLConfig(**{field: value})


def test_valid_types_still_pass():
    cfg = RLConfig(num_iterations=2, learning_rate=1, use_vllm=False, progress_bar=np.bool_(False),
                   rollout_rs_threshold=None, epsilon_high=0.3)
    assert cfg.progress_bar is False and cfg.learning_rate == 1
    assert RLConfig(learning_rate="3e-4").learning_rate == 3e-4     # YAML's string floats


def test_task_kwargs_are_checked_up_front():
    with pytest.raises(ConfigError, match=r"task 'addition' accepts .*digits") as e:
        RLConfig(task="addition", task_kwargs={"length": 3})
    assert "length" in str(e.value) and "reward_mode" in str(e.value)
    with pytest.raises(ConfigError, match=r"digits=9"):
        RLConfig(task="addition", task_kwargs={"digits": 9})
    with pytest.raises(ConfigError, match="task_kwargs"):
        RLConfig(task_kwargs=[("digits", 3)])
    assert RLConfig(task="reversal", task_kwargs={"length": 3}, model="0.3M").task_kwargs == {"length": 3}


def test_sampling_config_has_no_dtype_that_no_engine_reads():
    """The sampler's precision belongs to the engine (HFEngine/VLLMEngine(dtype=...), set from
    RLConfig.sampler_dtype); a SamplingConfig.dtype was validated and then ignored."""
    assert "dtype" not in {f.name for f in dataclasses.fields(SamplingConfig)}
    with pytest.raises(ConfigError, match="dtype"):
        SamplingConfig.from_dict({"dtype": "bfloat16"})
    assert "dtype" not in RLConfig(sampler_dtype="bfloat16").sampling().to_dict()


def _missing_task():
    from rl_lab.tasks import TASKS
    missing = [t for t in TASKS if not (warm_start_path(t) / "model.safetensors").exists()]
    assert missing, "every task has a shipped warm start: pick another missing one for this test"
    return missing[0]


def test_a_missing_warm_start_is_a_config_error_that_says_how_to_build_one():
    from rl_lab.models import check_model_spec, resolve_model
    task = _missing_task()
    shipped = sorted(p.name for p in CHECKPOINT_DIR.iterdir() if (p / "model.safetensors").exists())
    for call in (lambda: check_model_spec("warm-start", task), lambda: resolve_model("warm-start", task)):
        with pytest.raises(ConfigError) as e:
            call()
        msg = str(e.value)
        assert f"python -m rl_lab.tools.warmstart --task {task}" in msg
        assert all(name in msg for name in shipped) and "size preset" in msg
    with pytest.raises(ConfigError, match="warm-start:7B"):
        check_model_spec("warm-start:7B", "addition")
    with pytest.raises(ConfigError, match="nor an existing path"):
        check_model_spec("/no/such/model", "addition")
    check_model_spec("warm-start", "addition")      # shipped
    check_model_spec("0.3M", task)                  # random init needs no checkpoint


def test_cli_turns_model_and_task_errors_into_exit_2(capsys, tmp_path):
    task = _missing_task()
    for argv, words in [
        (["train", "--task", task], ["python -m rl_lab.tools.warmstart", "warm start"]),
        (["train", "--task", "addition", "--set", "task_kwargs={length: 3}"], ["accepts", "digits"]),
        (["train", "--task", "addition", "--set", "task_kwargs={digits: 9}"], ["digits=9"]),
        (["train", "--set", "model=/no/such/model"], ["/no/such/model"]),
        (["train", "--set", "num_iterations=2.0"], ["num_iterations", "integer"]),
    ]:
        assert cli_main(argv + ["--out", str(tmp_path / "run")]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("rl-lab: config error:") and "Traceback" not in err, err
        assert all(w in err for w in words), (argv, err)
    assert not (tmp_path / "run").exists()        # nothing was started


def test_min_tokens_reaches_the_sampler_and_cannot_exceed_the_length():
    assert RLConfig(max_completion_length=12, min_tokens=12).sampling().min_tokens == 12
    for cls in (RLConfig, SamplingConfig):
        with pytest.raises(ConfigError, match="min_tokens=20 exceeds max_completion_length=16"):
            cls(max_completion_length=16, min_tokens=20)
        with pytest.raises(ConfigError, match="min_tokens"):
            cls(min_tokens=-1)


def test_a_field_without_effect_is_a_warning():
    """empg_k with EMPG off, a threshold without its correction: said, not silently ignored."""
    import warnings

    from rl_lab.errors import ConfigWarning
    with pytest.warns(ConfigWarning, match=r"empg_k=2.0 has no effect: empg is off"):
        RLConfig(empg_k=2.0)
    with pytest.warns(ConfigWarning, match=r"rollout_rs_threshold='0.5_2' has no effect: rollout_rs is None"):
        RLConfig(rollout_rs_threshold="0.5_2")
    with pytest.warns(ConfigWarning, match="length_surge_factor"):
        RLConfig(length_surge_factor=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)       # the option on, or the default: no warning
        RLConfig(empg=True, empg_k=2.0, task="multiplication_tool")
        RLConfig(rollout_is="token", rollout_is_threshold=3.0)
        RLConfig(lr_scheduler_type="length_triggered", length_surge_factor=2.0)
        RLConfig()
