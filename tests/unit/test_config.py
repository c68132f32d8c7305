"""Config validation up front: field types, task_kwargs, the model spec, and the CLI's exit 2."""
import dataclasses

import numpy as np
import pytest

from rl_lab.config import ConfigError, RLConfig, SamplingConfig, WarmStartConfig
from rl_lab.models import CHECKPOINT_DIR, warm_start_path
from rl_lab.tools.cli import main as cli_main


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


def test_building_a_config_builds_no_task(monkeypatch):
    """The config checks a task's knobs and sizes its episodes from the task's class
    (`check_task`, `answer_tokens`), without building a task, for every task and for the warm start's."""
    from rl_lab import tasks

    def built(self):
        raise AssertionError(f"the config built a {type(self).__name__}")

    monkeypatch.setattr(tasks.Task, "__post_init__", built)
    for name in tasks.TASKS:
        RLConfig(task=name)
        WarmStartConfig(task=name)
    assert RLConfig(task="multiplication_tool", task_kwargs={"digits_a": 4}).max_completion_length == 24
    with pytest.raises(ConfigError, match=r"WarmStartConfig.task_kwargs=.*digits=9"):
        WarmStartConfig(task="addition", task_kwargs={"digits": 9})
    with pytest.raises(ConfigError, match=r"bad value"):
        RLConfig(task="addition", task_kwargs={"digits": "2"})


def test_checked_knobs_size_episodes_as_the_task_does():
    from rl_lab.tasks import TASKS, check_task, get_task
    cases = {"addition": {"digits": 3}, "reversal": {"length": 7}, "countdown": {"max_number": 20},
             "scratchpad": {"digits": 4}, "multiplication_tool": {"digits_b": 3, "tool_output_style": "ood"}}
    for name, knobs in cases.items():
        assert TASKS[name].answer_tokens(check_task(name, knobs)) == get_task(name, **knobs).max_answer_length


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
    """A threshold without its correction, the length-triggered knobs under another schedule: said,
    not silently ignored.  (A method's own knobs live in its nested config, None when it is off.)"""
    import warnings

    from rl_lab.errors import ConfigWarning
    with pytest.warns(ConfigWarning, match=r"rollout_rs_threshold='0.5_2' has no effect: rollout_rs is None"):
        RLConfig(rollout_correction={"rollout_rs_threshold": "0.5_2"})
    with pytest.warns(ConfigWarning, match="length_triggered=.* has no effect"):
        RLConfig(length_triggered={"surge_factor": 2.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)       # the option on, or the default: no warning
        RLConfig(empg={"k": 2.0}, task="multiplication_tool")
        RLConfig(rollout_correction={"rollout_is": "token", "rollout_is_threshold": 3.0})
        RLConfig(lr_scheduler_type="length_triggered", length_triggered={"surge_factor": 2.0})
        RLConfig()


def test_a_method_with_knobs_has_a_nested_config_that_is_none_when_off():
    from rl_lab.config import METHOD_CONFIGS, EMPGConfig
    cfg = RLConfig()
    assert all(getattr(cfg, name) is None for name in METHOD_CONFIGS)
    assert RLConfig(empg=True).empg == EMPGConfig()                       # true: its defaults
    assert RLConfig(empg={"k": 2.0}).empg == EMPGConfig(k=2.0)             # a mapping of its fields
    assert RLConfig(empg=EMPGConfig(zeta=0.0)).empg.zeta == 0.0           # an instance
    assert RLConfig(empg=False).empg is None
    d = RLConfig(empg={"k": 2.0}).to_dict()
    assert d["empg"] == {"k": 2.0, "k_f": 1.0, "zeta": 0.1, "normalize": "sum"} and d["dvp"] is None
    assert RLConfig.from_dict(d) == RLConfig(empg={"k": 2.0})              # config.yaml round trip
    with pytest.raises(ConfigError, match=r"RLConfig.empg=3: give EMPGConfig\(...\)"):
        RLConfig(empg=3)
    with pytest.raises(ConfigError, match=r"unknown EMPGConfig field\(s\) \['kk'\]"):
        RLConfig(empg={"kk": 2.0})


def test_a_dotted_key_sets_one_knob_and_turns_the_method_on():
    cfg = RLConfig.from_dict({"empg.k": 3.0, "empg.zeta": 0.0, "dvp.min_p": 0.05})
    assert (cfg.empg.k, cfg.empg.zeta, cfg.empg.normalize, cfg.dvp.min_p) == (3.0, 0.0, "sum", 0.05)
    assert RLConfig.from_dict({"empg": {"k": 2.0}, "empg.zeta": 0.5}).empg.k == 2.0     # merged
    with pytest.raises(ConfigError, match="only a nested config takes a dotted key"):
        RLConfig.from_dict({"learning_rate.x": 1})
    with pytest.raises(ConfigError, match="empg=false .off. and empg.k both given"):
        RLConfig.from_dict({"empg": False, "empg.k": 2.0})


def test_the_cli_sets_a_nested_knob(tmp_path):
    import argparse

    from rl_lab.tools.cli import build_config
    (tmp_path / "c.yaml").write_text("task: multiplication_tool\nempg: {normalize: scaled_advantage}\n")
    args = argparse.Namespace(config=str(tmp_path / "c.yaml"), task=None, seed=None, out=None, preset="smoke",
                              set=["empg.k=2", "model=0.3M"])
    cfg = build_config(args)
    assert (cfg.empg.k, cfg.empg.normalize) == (2, "scaled_advantage")


def test_the_flat_fields_of_earlier_versions_are_read_with_a_warning():
    """A config.yaml written before the nested configs (every field, defaults included) still
    loads, so an old run resumes; a method that was off stays off."""
    from rl_lab.config import LEGACY_FIELDS
    from rl_lab.errors import ConfigWarning
    old = {**{k: v for k, v in RLConfig().to_dict().items() if k not in ("empg", "dvp", "imitation", "teacher_kl",
                                                                             "filter_groups", "length_triggered")},
           "empg": True, "empg_k": 2.0, "empg_k_f": 1.0, "empg_zeta": 0.1, "empg_normalize": "scaled_advantage",
           "il_coef": 0.0, "teacher_kl_coef": 0.0, "teacher_model": None, "dvp_min_p": 0.05,
           "filter_groups": False, "max_num_gen_batches": 3, "lr_scheduler_type": "constant",
           "length_baseline_steps": 50, "length_surge_factor": 3.0, "lr_decay_period_factor": 1.8,
           "min_lr_ratio": 0.1}
    assert set(LEGACY_FIELDS) <= set(old)
    with pytest.warns(ConfigWarning, match="empg_k -> empg.k"):
        cfg = RLConfig.from_dict(old)
    assert (cfg.empg.k, cfg.empg.normalize, cfg.dvp.min_p) == (2.0, "scaled_advantage", 0.05)
    assert cfg.imitation is None and cfg.teacher_kl is None and cfg.filter_groups is None
    assert cfg.length_triggered is None


def test_sampling_fields_are_declared_once():
    """RLConfig's sampling fields are SamplingConfig's (one declaration, one check), under TRL's names."""
    from rl_lab.config import _SamplingFields
    names = {f.name for f in dataclasses.fields(_SamplingFields)}
    assert names == {"max_completion_length", "temperature", "top_p", "top_k", "min_p", "min_tokens"}
    assert issubclass(RLConfig, _SamplingFields) and issubclass(SamplingConfig, _SamplingFields)
    assert set(RLConfig().sampling().to_dict()) == names
    for cls in (RLConfig, SamplingConfig):
        with pytest.raises(ConfigError, match=rf"{cls.__name__}.top_p=0.0 is out of range"):
            cls(top_p=0.0)
    assert RLConfig(dvp={"min_p": 0.2}, min_p=0.1).sampling().min_p == 0.2    # DVP prunes the sampler too


def test_resuming_changes_a_nested_knob_only_with_set(tmp_path):
    """config.yaml holds nested configs as mappings; --resume --set empg.k=3 changes one knob (and
    names it), a --config that changes it without --set is refused."""
    import argparse

    import yaml

    from rl_lab.runs import config_changes
    from rl_lab.tools.cli import resume_config
    saved = RLConfig(task="multiplication_tool", empg={"k": 2.0}, output_dir=str(tmp_path)).to_dict()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    assert config_changes(saved, RLConfig.from_dict({**saved, "empg.zeta": 0.0})) == {"empg.zeta": (0.1, 0.0)}
    assert config_changes(saved, RLConfig.from_dict({**saved, "empg": None})) == {"empg": (saved["empg"], None)}

    def args(*sets, config=None):
        return argparse.Namespace(out=str(tmp_path), config=config, task=None, seed=None, preset=None, set=list(sets))
    assert resume_config(args("empg.k=3")).empg.k == 3
    assert resume_config(args("dvp.min_p=0.1")).dvp.min_p == 0.1               # turns DVP on, deliberately
    (tmp_path / "c.yaml").write_text("empg: {k: 3.0}\n")
    with pytest.raises(ConfigError, match=r"empg.k 2.0 -> 3.0.*--set empg.k=3.0"):
        resume_config(args(config=str(tmp_path / "c.yaml")))


def test_the_correction_is_one_nested_config_as_verl_has_it():
    """RLConfig.rollout_correction (verl's algorithm.rollout_correction); the flat fields of earlier
    versions load into it with a ConfigWarning, from Python, a config.yaml or --set, so old run
    folders resume; a dotted key sets one knob."""
    from rl_lab.config import CorrectionConfig
    from rl_lab.errors import ConfigWarning
    assert RLConfig().rollout_correction == CorrectionConfig()
    new = RLConfig(rollout_correction={"rollout_is": "token", "bypass_mode": True})
    assert RLConfig.from_dict({"rollout_correction.rollout_is": "token", "rollout_correction.bypass_mode": True}) == new
    with pytest.warns(ConfigWarning, match="rollout_is -> rollout_correction.rollout_is"):
        assert RLConfig(rollout_is="token", bypass_mode=True) == new
    with pytest.warns(ConfigWarning, match="bypass_mode -> rollout_correction.bypass_mode"):
        assert RLConfig.from_dict({"rollout_is": "token", "bypass_mode": True}) == new
    assert new.replace(rollout_is="sequence").rollout_correction.rollout_is == "sequence"
    with pytest.raises(ConfigError, match="CorrectionConfig.rollout_is='tok'"):
        RLConfig(rollout_correction={"rollout_is": "tok"})
    with pytest.raises(ConfigError, match="unknown CorrectionConfig field"):
        RLConfig(rollout_correction={"rollout_iss": "token"})


def test_an_old_run_folder_with_flat_correction_fields_resumes(tmp_path):
    """A config.yaml written before the nested correction: read back, it is the same run (no
    config change is reported)."""
    import yaml

    from rl_lab.errors import ConfigWarning
    from rl_lab.runs import RunFolder
    cfg = RLConfig(model="0.3M", rollout_correction={"rollout_is": "sequence", "rollout_rs": "seq_mean_k1",
                                                     "rollout_rs_threshold": "0.9_1.1"}, output_dir=str(tmp_path))
    old = cfg.to_dict()
    old.update(old.pop("rollout_correction"))
    old.pop("extra_modes")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    with pytest.warns(ConfigWarning, match="rollout_correction"):
        assert RunFolder(tmp_path).config_changes(cfg) == {}
