"""What loads without torch and transformers (5-10 s on a 2-core laptop): `import rl_lab` (a book
page that reads result files pays only for what it uses), the command line's parser and
`rl-lab diagnose` (a practitioner's log check), the statistics and the collapse toolkit, and a
checked `RLConfig` for every task and a sweep's plan (`rl-lab sweep --dry-run`), so a bad
`--set` fails at once."""
import subprocess
import sys

import pytest

LIGHT = ["rl_lab", "rl_lab.config", "rl_lab.tools.cli", "rl_lab.tools.diagnose", "rl_lab.tools.stats",
         "rl_lab.toolkits.collapse", "rl_lab.integrations.verl", "rl_lab.tasks", "rl_lab.agents",
         "rl_lab.correction_options", "rl_lab.utils", "rl_lab.models", "rl_lab.runs", "rl_lab.tools.sweep",
         "rl_lab.presets", "rl_lab.method_specs"]


@pytest.mark.parametrize("module", LIGHT)
def test_module_loads_without_torch_or_transformers(module):
    code = (f"import sys, {module}; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", f"importing {module} loads {out.stdout.strip()}"


def test_the_public_names_still_load_on_first_use():
    code = "import rl_lab; print(rl_lab.RLConfig.__name__, rl_lab.Trainer.__name__, rl_lab.trainer.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["RLConfig", "Trainer", "rl_lab.trainer"]
    missing = subprocess.run([sys.executable, "-c", "import rl_lab; rl_lab.no_such_name"],
                             capture_output=True, text=True, timeout=60)
    assert "AttributeError" in missing.stderr and "no_such_name" in missing.stderr


def test_a_checked_config_for_every_task_loads_neither():
    code = ("import sys; from rl_lab.config import RLConfig; from rl_lab.presets import get_preset; from rl_lab.tasks import TASKS\n"
            "for name in TASKS:\n"
            "    RLConfig(task=name, rollout_correction=dict(rollout_is='token', rollout_rs='seq_mean_k3,token_k1', "
            "rollout_rs_threshold='2,0.5_2'))\n"
            "get_preset('smoke', task='multiplication_tool', max_turns=2)\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", f"a checked RLConfig loads {out.stdout.strip()}"


def test_the_agents_names_load_and_the_scripted_engine_is_an_engine():
    code = ("import rl_lab.agents as a; print(a.calculator.__name__, a.ToolEnvironment.__name__, "
            "a.run_python.__name__, all(hasattr(a, n) for n in a.__all__), hasattr(a, 'ScriptedEngine'))\n"
            "from rl_lab.engines.scripted import ScriptedEngine; print(ScriptedEngine.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["calculator", "ToolEnvironment", "run_python", "True", "False", "ScriptedEngine"]


def test_a_bad_training_command_fails_before_torch_loads(tmp_path):
    """`rl-lab train` checks the config, the model spec and the run folder first: a mistake is
    reported without loading torch or transformers."""
    taken = tmp_path / "run"
    taken.mkdir()
    (taken / "metrics.jsonl").write_text('{"step": 1}\n')
    for argv in (["--set", "learning_rate=-1"], ["--set", "model=no/such/model"], ["--out", str(taken)]):
        code = ("import sys; from rl_lab.tools.cli import main\n"
                f"rc = main(['train', '--task', 'addition', *{argv!r}])\n"
                "print(rc, sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.stdout.strip().endswith("[]"), (argv, out.stdout, out.stderr[-2000:])
        assert not out.stdout.startswith("0 "), (argv, out.stdout)
