"""What loads without torch and transformers (5-10 s on a 2-core laptop): `import rl_lab` (a book
page that reads result files pays only for what it uses), the command line's parser and
`rl-lab diagnose` (a practitioner's log check), the statistics and the collapse toolkit."""
import subprocess
import sys

import pytest

LIGHT = ["rl_lab", "rl_lab.config", "rl_lab.tools.cli", "rl_lab.tools.diagnose", "rl_lab.tools.stats",
         "rl_lab.toolkits.collapse", "rl_lab.integrations.verl"]


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
