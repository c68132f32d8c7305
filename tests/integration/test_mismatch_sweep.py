"""A mismatch source in a sweep spec (issue 49): the dotted keys of RLConfig.mismatch in `base` and
`grid`, as the stability map's specs will write them, for 2 steps."""
import yaml

from rl_lab.tools.sweep import plan_sweep, run_sweep


def test_a_sweep_turns_a_source_and_its_fix(tmp_path):
    spec = dict(base={"task": "addition", "preset": "smoke", "model": "warm-start", "max_steps": 2,
                      "prompts_per_step": 2, "num_generations": 4, "mismatch.precision.dtype": "bfloat16"},
                grid={"mismatch.precision.fix": ["none", "same_dtype"]}, seeds=[0], out=str(tmp_path / "sweep"))
    runs = plan_sweep(spec).runs
    assert [r.config.mismatch.precision.fix for r in runs] == ["none", "same_dtype"]
    df = run_sweep(spec, threads=1, progress=False).set_index("mismatch.precision.fix")
    assert (df["steps"] == 2).all()
    assert df.loc["none", "k3_kl_mean"] > 0 and df.loc["same_dtype", "k3_kl_mean"] == 0
    saved = yaml.safe_load((tmp_path / "sweep" / runs[0].run_id / "config.yaml").read_text())
    assert saved["mismatch"]["precision"] == {"dtype": "bfloat16", "lm_head": "same", "fix": "none"}
