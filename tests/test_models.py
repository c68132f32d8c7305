import pytest
import torch

from rl_lab.models import MODEL_SIZES, build_model, load_model, num_parameters, resolve_model


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


def test_unknown_model_spec_says_what_to_do():
    with pytest.raises(ValueError, match="size preset"):
        resolve_model("does-not-exist", task="addition")
    with pytest.raises(ValueError, match="choose one of"):
        build_model("7B")


def test_warm_start_checkpoints_are_shipped():
    import json

    from rl_lab.models import CHECKPOINT_DIR, load_warm_start
    manifest = json.loads((CHECKPOINT_DIR / "MANIFEST.json").read_text())
    for name, info in manifest.items():
        task, size = name.rsplit("-", 1)
        model, _ = load_warm_start(task, size)
        assert num_parameters(model) > 0
        assert 0.05 < info["success_sampled"] < 0.9, "a warm start must sometimes, not always, succeed"
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
