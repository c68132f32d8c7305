import pytest
import torch

from rl_lab.models import build_model, load_model, num_parameters, resolve_model


@pytest.mark.parametrize("size,lo,hi", [("0.3M", 0.25e6, 0.35e6), ("3M", 2.8e6, 3.5e6), ("30M", 25e6, 35e6)])
def test_size_presets(size, lo, hi):
    model, tok = build_model(size)
    assert lo < num_parameters(model) < hi
    assert model.config.vocab_size == len(tok)
    assert type(model).__name__ == "Qwen2ForCausalLM"


def test_build_is_seeded(tiny):
    a, _ = build_model("0.3M", seed=0)
    b, _ = build_model("0.3M", seed=1)
    sd_tiny, sd_a, sd_b = tiny[0].state_dict(), a.state_dict(), b.state_dict()
    assert all(torch.equal(sd_tiny[k], sd_a[k]) for k in sd_a)
    assert not all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a)


def test_save_and_load_any_local_causal_lm(tmp_path, tiny):
    model, tok = tiny
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    again, tok2 = load_model(tmp_path / "m")
    x = tok(["12+34="], return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(model(**x).logits, again(**x).logits)
    assert tok2.get_vocab() == tok.get_vocab()
    # resolve_model takes a path too
    m3, _ = resolve_model(str(tmp_path / "m"), task="addition")
    assert num_parameters(m3) == num_parameters(model)


def test_a_loaded_moe_keeps_the_batch_independent_experts(tmp_path):
    """A saved 0.3M-moe loaded by path gets build_model's experts implementation (MOE_EXPERTS), not
    transformers' default, so the exact-zero engine stays exact on a mixture-of-experts warm start."""
    from rl_lab.models import MOE_EXPERTS
    model, tok = build_model("0.3M-moe")
    model.save_pretrained(tmp_path / "moe")
    tok.save_pretrained(tmp_path / "moe")
    again, _ = load_model(tmp_path / "moe")
    assert again.config._experts_implementation == MOE_EXPERTS == model.config._experts_implementation
    x = tok(["12+34=", "5+6="], return_tensors="pt", padding=True)
    with torch.no_grad():
        assert torch.equal(model(**x).logits, again(**x).logits)


def test_unknown_model_spec_says_what_to_do():
    with pytest.raises(ValueError, match="size preset"):
        resolve_model("does-not-exist", task="addition")
    with pytest.raises(ValueError, match="choose one of"):
        build_model("7B")


def _measured_success(model, tok, task, greedy: bool, n: int = 1024, seed: int = 777) -> float:
    """Mean reward on n fresh prompts (not the manifest's), sampled at temperature 1 or greedily."""
    from rl_lab.config import SamplingConfig
    from rl_lab.engines.rollout import HFEngine
    examples = task.make_dataset(n, seed=seed)
    sampling = SamplingConfig(max_completion_length=task.max_answer_length + 2, top_k=1 if greedy else 0)
    batch = HFEngine(model, tok).generate([e["prompt"] for e in examples], 1, sampling,
                                          torch.Generator().manual_seed(seed),
                                          environment=getattr(task, "environment", None))   # a tool task's episodes
    cols = {k: [e[k] for e in examples] for k in examples[0] if k != "prompt"}
    return float(sum(task.reward(prompts=batch.prompts, completions=batch.completions, **cols)) / n)


def test_warm_start_checkpoints_are_shipped_and_do_what_the_manifest_says():
    """Every recipe in SHIPPED has a checkpoint; the success it reaches, measured here on fresh
    prompts, is the manifest's (within 0.12: ~3.4 standard errors of the difference when the
    manifest measured 256 prompts) and in the useful range."""
    import json

    from rl_lab.models import CHECKPOINT_DIR, load_warm_start
    from rl_lab.tasks import get_task
    from rl_lab.tools.warmstart import SHIPPED
    manifest = json.loads((CHECKPOINT_DIR / "MANIFEST.json").read_text())
    assert SHIPPED
    for name, recipe in SHIPPED.items():
        task, size = name.rsplit("-", 1)
        assert (task, size) == (recipe.task, recipe.model_size), name
        model, tok = load_warm_start(task, size)
        t = get_task(recipe.task, **recipe.task_kwargs)
        sampled = _measured_success(model, tok, t, greedy=False)
        greedy = _measured_success(model, tok, t, greedy=True)
        assert 0.05 < sampled < 0.9, f"{name}: a warm start must sometimes, not always, succeed ({sampled:.3f})"
        assert abs(sampled - manifest[name]["success_sampled"]) < 0.12, (name, sampled, manifest[name])
        assert abs(greedy - manifest[name]["success_greedy"]) < 0.12, (name, greedy, manifest[name])
    with pytest.raises(FileNotFoundError, match="warmstart"):
        load_warm_start("addition", "30M")


def test_half_billion_preset_has_the_qwen25_shape():
    """The GPU benchmark size: Qwen2.5-0.5B's shape with its real vocabulary (built on `meta`)."""
    from transformers import Qwen2ForCausalLM

    from rl_lab.models import model_config
    cfg = model_config("0.5B", vocab_size=64)
    assert cfg.vocab_size == 151936 and cfg.num_hidden_layers == 24 and cfg.hidden_size == 896
    with torch.device("meta"):
        n = sum(p.numel() for p in Qwen2ForCausalLM(cfg).parameters())
    assert 0.45e9 < n < 0.55e9
