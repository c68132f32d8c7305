"""A method owns everything about itself (issues 31, 51): one torch-free row per method
(rl_lab.method_specs) from which the config's nested fields, the built methods and the verl export
derive; the trainer names no method or correction field; a method from outside is one module and one
registered row (it trains, exports to verl and resumes), and a correction mode is one registered
function."""
import ast
import dataclasses
import inspect
import re
import textwrap

import pytest

import rl_lab.trainer
from rl_lab import RLConfig, Trainer
from rl_lab.algos.estimators import ADV_ESTIMATORS
from rl_lab.algos.method import Method
from rl_lab.algos.methods import build_methods, method_classes
from rl_lab.config import ADV_ESTIMATORS as CONFIG_ESTIMATORS
from rl_lab.config import METHOD_CONFIGS
from rl_lab.method_specs import METHOD_SPECS, MethodSpec, local, register_method, unregister_method

CORRECTION_FIELDS = ("rollout_correction", "rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize",
                     "rollout_rs", "rollout_rs_threshold", "rollout_token_veto_threshold", "bypass_mode",
                     "extra_modes")
METHOD_NAMES = ("DVP", "ReferenceKL", "TeacherKL", "Imitation", "EMPG", "VoidFilter", "DynamicSampling",
                "ZeroSpreadSkip", "TruncationMask", "ToolTokenStats", "LengthTriggered", "ref_model", "teacher",
                "mean_lengths", "_kl", "length_triggered", "advantage_estimator ==")


def _code_without_docs(source: str) -> str:
    """The source with comments, docstrings and other bare string statements removed."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            node.body = [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                                                 and isinstance(n.value.value, str))] or [ast.Pass()]
    return ast.unparse(tree)


def test_the_trainer_names_no_method_or_correction_field():
    """The whole of rl_lab/trainer.py, not only `step`: a method's knowledge lives in its module and
    row, the correction's in rl_lab.algos.correction."""
    code = _code_without_docs(inspect.getsource(rl_lab.trainer))
    fields = [s.field for s in METHOD_SPECS if s.field] + list(CORRECTION_FIELDS) + ["extra_methods"]
    found = [f for f in fields + list(METHOD_NAMES) if re.search(rf"(?<![\w.]){re.escape(f)}\b|\.{re.escape(f)}\b", code)]
    assert not found, f"rl_lab/trainer.py names {found}: move the logic into the method's or the correction's module"


def test_the_step_fits_a_screen_and_branches_on_no_run_kind():
    src = inspect.getsource(Trainer.step)
    assert len(src.splitlines()) <= 70, len(src.splitlines())
    assert not re.search(r"environment is not None|\bif cfg\.", _code_without_docs(textwrap.dedent(src)))


def test_every_method_has_one_row_with_a_name_and_a_class():
    names = [s.name for s in METHOD_SPECS]
    assert len(set(names)) == len(names) and all(names)
    classes = method_classes()
    assert all(issubclass(c, Method) for c in classes)
    assert [c.name for c in classes] == names, "a class's name differs from its row's"


def test_rows_and_rlconfig_fields_agree():
    """Every row's field is an RLConfig field of the row's config type; every nested config is a row's;
    the verl export has one row per method field."""
    from rl_lab.integrations.verl import FIELD_ROWS
    fields = {f.name: f for f in dataclasses.fields(RLConfig)}
    for spec in METHOD_SPECS:
        if spec.field is None:
            continue
        assert spec.field in fields, f"{spec.name}: RLConfig has no field {spec.field!r}"
        default = fields[spec.field].default
        assert default == spec.off and type(default) is type(spec.off), f"{spec.name}: off={spec.off!r}, default {default!r}"
        if spec.config is not None:
            assert spec.config.__name__ in str(fields[spec.field].type), spec.name
        assert FIELD_ROWS[spec.field].status == spec.verl.status, spec.name
    assert set(METHOD_CONFIGS) == {s.field for s in METHOD_SPECS if s.config is not None}


def test_estimators_match_the_config_choices():
    assert set(ADV_ESTIMATORS) == set(CONFIG_ESTIMATORS)
    assert [n for n, f in ADV_ESTIMATORS.items() if f.needs_full_logprobs] == ["optimal_token_baseline"]


@pytest.mark.parametrize("flags, expected", [
    ({}, ["turn_reward_metrics"]),
    ({"beta": 0.1}, ["reference_kl", "turn_reward_metrics"]),
    ({"mask_truncated_completions": True, "dvp": {"min_p": 0.1}}, ["truncation_mask", "dvp", "turn_reward_metrics"]),
    ({"empg": True, "imitation": True, "teacher_kl": {"model": "warm-start"}},
     ["empg", "teacher_kl", "imitation", "turn_reward_metrics"]),
    ({"lr_scheduler_type": "length_triggered"}, ["turn_reward_metrics", "length_triggered"]),
])
def test_the_config_turns_methods_on_in_hook_order(flags, expected):
    assert [m.name for m in build_methods(RLConfig(**flags))] == expected


TOY_MODULE = '''
    """A toy method from outside rl_lab: counts the tokens it saw, adds coef x (-log pi) per token."""
    from dataclasses import dataclass

    from rl_lab.algos.method import Method
    from rl_lab.config_checks import _check_range, _Validated


    @dataclass
    class ToyConfig(_Validated):
        coef: float = 0.0

        def validate(self):
            _check_range(self, "coef", lo=0)


    class Toy(Method):
        name = "toy"

        def __init__(self, config, spec=None):
            super().__init__(config, spec)
            self.tokens = 0

        def token_loss(self, s):
            return -self.knobs.coef * s.logp_safe

        def metrics(self, s):
            self.tokens += int(s.counted.sum())
            return {"toy/tokens": self.tokens}

        def state_dict(self):
            return {"tokens": self.tokens}

        def load_state_dict(self, state):
            self.tokens = state["tokens"]
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """One module and one row: the whole of a method added from outside."""
    (tmp_path / "toy_method.py").write_text(textwrap.dedent(TOY_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_method
    row = register_method(MethodSpec("toy", "toy_method:Toy", config=toy_method.ToyConfig,
                                     verl=local("a toy: a metric and a small loss term")), after="empg")
    yield row
    unregister_method("toy")


def _toy_config(out, steps, **kw):
    return RLConfig(model="0.3M", prompts_per_step=2, num_generations=2, max_completion_length=4, max_steps=steps,
                    save_steps=2, output_dir=str(out), progress_bar=False,
                    extra_methods={"toy": {"coef": 0.01}}, **kw)


def test_a_method_from_outside_trains_exports_and_resumes(toy, tmp_path):
    from rl_lab.integrations.verl import config_from_overrides_file, config_overrides, local_fields, overrides_yaml
    cfg = _toy_config(tmp_path / "run", 2, beta=0.05)
    assert [m.name for m in build_methods(cfg)] == ["toy", "reference_kl", "turn_reward_metrics"]  # after empg
    trainer = Trainer(cfg)
    df = trainer.train()
    assert df["toy/tokens"].tolist()[-1] == trainer.method("toy").tokens > 0
    # verl: the registered row says "local", so the run exports and reads back the same config
    path = tmp_path / "overrides.yaml"
    path.write_text(overrides_yaml(config_overrides(cfg), local_fields(cfg)))
    assert config_from_overrides_file(path) == cfg
    # resume: the method's state is in the checkpoint
    tokens = trainer.method("toy").tokens
    more = Trainer(_toy_config(tmp_path / "run", 3, beta=0.05))
    assert more.resume() and more.method("toy").tokens == tokens
    m = more.step()
    assert m["toy/tokens"] > tokens


def test_a_method_from_outside_is_configured_by_name(toy):
    from rl_lab.errors import ConfigError
    assert RLConfig.from_dict({"extra_methods.toy.coef": 0.5}).extra_methods["toy"].coef == 0.5
    assert RLConfig(extra_methods={"toy": True}).extra_methods["toy"].coef == 0.0
    with pytest.raises(ConfigError, match="ToyConfig.coef"):
        RLConfig(extra_methods={"toy": {"coef": -1}})
    with pytest.raises(ConfigError, match="no method 'nope' is registered"):
        RLConfig(extra_methods={"nope": True})


def test_a_refused_registered_method_refuses_the_verl_export(tmp_path, monkeypatch):
    from rl_lab.integrations.verl import VerlExportError, check_exportable
    register_method(MethodSpec("counts", "rl_lab.algos.turn_metrics:TurnRewardMetrics"))
    try:
        with pytest.raises(VerlExportError, match="extra_methods"):
            check_exportable(RLConfig(model="0.3M", extra_methods={"counts": True}))
    finally:
        unregister_method("counts")


def test_a_correction_mode_is_one_registered_function():
    """A mode that zeroes the rows whose largest |log rho| exceeds a bound: registered, it runs in
    the correction, its mask reaches the loss and its metric the log; the trainer is not touched."""
    import torch

    from rl_lab.corrections import CorrectionMode, register_correction_mode, unregister_correction_mode

    def row_cap(x, cfg):
        worst = (x.log_ratio.abs() * x.mask).amax(-1)                                  # (B,)
        keep = worst <= cfg.extra_modes["row_cap"]["bound"]
        return None, x.mask & keep[:, None], {"row_cap_fraction": 1 - keep.float().mean().item()}

    register_correction_mode(CorrectionMode("row_cap", row_cap))
    try:
        cfg = RLConfig(model="0.3M", prompts_per_step=2, num_generations=2, max_completion_length=4, max_steps=1,
                       sampler_logit_noise=1.0, rollout_correction={"extra_modes": {"row_cap": {"bound": 1e-9}}},
                       progress_bar=False)
        tr = Trainer(cfg)
        assert tr.correction.needs_sampler_logprobs and [m.name for m in tr.correction.modes] == ["row_cap"]
        m = tr.step()
        assert m["rollout_corr/row_cap_fraction"] == 1.0            # noise on every token: every row capped
        assert m["grad_norm"] == 0.0 or m["faults/skipped_steps"] == 1   # nothing left to train on
        assert torch.isfinite(torch.tensor(m["loss"]))
    finally:
        unregister_correction_mode("row_cap")


def test_an_earlier_checkpoint_resumes_into_its_methods(tmp_path):
    """Checkpoints before issue 51 kept the reference model and the lengths at their top level."""
    import torch
    cfg = RLConfig(model="0.3M", prompts_per_step=2, num_generations=2, max_completion_length=4, max_steps=2,
                   beta=0.1, lr_scheduler_type="length_triggered", output_dir=str(tmp_path / "run"),
                   progress_bar=False)
    tr = Trainer(cfg)
    tr.train()
    ckpt = tr.last_checkpoint()
    files = [f for f in ckpt.iterdir() if f.suffix == ".pt"]
    (state_file,) = [f for f in files if "methods" in torch.load(f, weights_only=True)]
    state = torch.load(state_file, weights_only=True)
    methods = state.pop("methods")
    state["ref_model"] = methods["reference_kl"]["ref_model"]
    state["mean_lengths"] = methods["length_triggered"]["mean_lengths"]
    torch.save(state, state_file)
    again = Trainer(cfg)
    with torch.no_grad():
        for p in again.method("reference_kl").ref_model.parameters():
            p.zero_()
    assert again.resume()
    assert again.method("length_triggered").mean_lengths == tr.method("length_triggered").mean_lengths
    for a, b in zip(again.method("reference_kl").ref_model.parameters(), tr.method("reference_kl").ref_model.parameters()):
        assert torch.equal(a, b)
