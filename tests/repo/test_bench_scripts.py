"""The long-completion and sweep benchmarks run (no timing is checked here: benchmarks print
ratios, tests only keep the scripts working): a forced length really forces it for every
contender, rl_lab's phase timers add up to its step, the FLOPs the roofline counts are torch's
count, and the sweep benchmark's cell is a valid stability-map run."""
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name):
    sys.path.insert(0, str(BENCH))
    try:
        if name not in sys.modules:   # registered first: a dataclass looks its module up there
            spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
            sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(sys.modules[name])
        return sys.modules[name]
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.slow
def test_forced_length_holds_for_rl_lab_and_the_plain_step(monkeypatch):
    rl_step = load("bench_rl_step")
    shape = rl_step.Shape(prompts=2, generations=2, max_new=12, forced=True)
    trainer = rl_step.rl_lab_trainer("0.3M", 1, 0, shape)
    assert trainer.step()["completions/mean_length"] == 12
    import transformers
    seen = []
    generate = transformers.GenerationMixin.generate
    monkeypatch.setattr(transformers.GenerationMixin, "generate",
                        lambda self, *a, **k: seen.append(out := generate(self, *a, **k)) or out)
    next(rl_step.plain_steps("0.3M", 1, 0, shape))
    tok = trainer.tokenizer
    completions = seen[0][:, -12:]                          # (B, 12): the new tokens, none of them <eos>
    assert not (completions == tok.eos_token_id).any()


@pytest.mark.slow
def test_long_completion_benchmark_runs_and_its_phases_add_up(capsys, monkeypatch):
    bench = load("bench_long_completions")
    monkeypatch.setattr(sys, "argv", ["bench_long_completions.py", "--sizes", "0.3M", "--lengths", "4", "8",
                                      "--steps", "2", "--no-trl", "--threads", "1"])
    bench.main()
    out = capsys.readouterr().out
    assert "rl_lab/plain time" in out and "fitted exponent" in out and "rl_lab/TRL" not in out
    assert "GFLOP/s (of roof)" in out and "model GFLOP per step" in out
    timers = bench.PhaseTimers()
    timed_sum = timers.wrap("forward", lambda: sum(range(1000)))
    with timers.step():
        timed_sum()
    row = timers.steps[0]
    assert set(row) == set(bench.PHASES) and row["forward"] > 0 and row["other"] >= 0
    timed_sum()                                             # disarmed: not counted
    assert len(timers.steps) == 1


def test_sweep_benchmark_cell_is_a_valid_sweep(tmp_path):
    from rl_lab.tools.sweep import plan_sweep
    bench = load("bench_sweep")
    sweep = plan_sweep(bench.spec(steps=300, seeds=4, out=str(tmp_path)))
    assert len(sweep.runs) == 4
    config = sweep.runs[0].config
    assert (config.sampler_staleness, config.learning_rate, config.max_steps) == (2, 5e-4, 300)


@pytest.mark.slow
def test_the_before_after_benchmark_runs_the_maps_cell_under_two_versions(capsys):
    """bench_commits: the map's cell (benchmark 7's) as `rl-lab train` arguments, run under a git
    worktree of the base and under this checkout; the worktree is removed afterwards."""
    import argparse
    import subprocess

    from rl_lab.tools.cli import build_config
    bench = load("bench_commits")
    words = bench.cell_args(300)
    given = argparse.Namespace(config=None, seed=None, out=None, task=words[1], preset=words[3],
                               set=[words[i + 1] for i, w in enumerate(words) if w == "--set"])
    config = build_config(given)
    assert (config.sampler_staleness, config.learning_rate, config.max_steps, config.prompts_per_step,
            config.num_generations) == (2, 5e-4, 300, 8, 8)
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=BENCH.parent, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: bench_commits needs one")
    before = subprocess.run(["git", "worktree", "list"], cwd=BENCH.parent, capture_output=True, text=True).stdout
    bench.main(["--base", "HEAD", "--steps", "2", "--reps", "1"])
    out = capsys.readouterr().out
    assert "whole run: before" in out and "median step: before" in out
    assert subprocess.run(["git", "worktree", "list"], cwd=BENCH.parent, capture_output=True,
                          text=True).stdout == before


def test_the_roofline_counts_what_torch_counts(capsys, monkeypatch):
    """bench_roofline's FLOPs of the linear layers equal torch's FlopCounterMode's for the pass it
    times, for every size's shape (attention, which FlopCounterMode does not count on a CPU, apart);
    the backward's products are the forward's twice over; the table prints."""
    bench = load("bench_roofline")
    for size in ("0.3M", "3M"):
        model, inputs = bench.batch(size, 4)
        fwd = bench.gemms(model.config, inputs[0].shape[0], inputs[0].shape[1], 4)
        linear = [p for p in fwd + bench.backward_gemms(fwd) if p[0].lstrip("d").split("_")[0]
                  not in ("scores", "values")]
        assert sum(p[-1] for p in linear) == pytest.approx(bench.counted_flops(model, inputs), rel=1e-9)
        assert sum(p[-1] for p in bench.backward_gemms(fwd)) == 2 * sum(p[-1] for p in fwd)
    monkeypatch.setattr(sys, "argv", ["bench_roofline.py", "--sizes", "0.3M", "--lengths", "4", "--reps", "1",
                                      "--threads", "1", "--levers", "no_mask", "lean", "--memory"])
    bench.main()
    out = capsys.readouterr().out
    assert "1.000x" in out and "of roof" in out and "no_mask" in out
    assert "lean" in out
    assert "reading the weights" in out and "weight @ rows^T" in out


def test_the_sampling_flops_are_what_torch_counts_in_generate():
    """bench_roofline.sampling_gemms (a prefill, then length - 1 one-token steps on the cache)
    counts the linear layers' FLOPs of Hugging Face's `generate` exactly, as FlopCounterMode
    counts them; a step's FLOPs are sampling's plus the training pass's."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    bench = load("bench_roofline")
    model, (ids, mask, _) = bench.batch("0.3M", 4)
    for length in (1, 5):
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            out = model.generate(input_ids=ids, attention_mask=mask, min_new_tokens=length,
                                 max_new_tokens=length, do_sample=False)
        assert out.shape[1] == ids.shape[1] + length
        products = bench.sampling_gemms(model.config, ids.shape[0], ids.shape[1], length)
        linear = sum(p[-1] for p in products if not p[0].endswith(("scores", "values")))
        assert linear == pytest.approx(fc.get_total_flops(), rel=1e-9)
    step = bench.step_gemms(model.config, ids.shape[0], ids.shape[1], 5)
    fwd = bench.gemms(model.config, ids.shape[0], ids.shape[1], 5)
    assert sum(p[-1] for p in step["train"]) == pytest.approx(3 * sum(p[-1] for p in fwd))
    assert step["sampling"] == bench.sampling_gemms(model.config, ids.shape[0], ids.shape[1], 5)


def test_the_hand_written_forward_is_the_models_and_each_lever_changes_one_thing():
    """bench_roofline.LeanForward with no option computes what the Hugging Face forward computes
    (logits and every parameter's gradient, padded rows or none); each option keeps the values
    (it changes how they are computed, not what), and an unknown lever is refused."""
    import torch
    bench = load("bench_roofline")
    model, (ids, mask, completion) = bench.batch("0.3M", 5)
    padded = mask.clone()
    padded[::3, :2] = 0                                   # left padding in a third of the rows
    for prompt_mask in (mask, padded):
        inputs = (ids, prompt_mask, completion)
        logp, grads = bench.train_pass(model, inputs, with_grads=True)
        for options in ((), *((o,) for o in bench.LeanForward.OPTIONS)):
            lean = bench.LeanForward(model, *options)
            lp, g = bench.train_pass(lean, inputs, with_grads=True)
            tol = 1e-6 if not options else 1e-5
            torch.testing.assert_close(lp, logp, rtol=0, atol=tol)
            for a, b in zip(g, grads):
                torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    with pytest.raises(SystemExit, match="unknown lever"):
        bench.compare_levers(model, (ids, mask, completion), ["fused_everything"], reps=1)
