"""The shared-prefix forward (rl_lab.engines.shared_prefix) and the sampler's shared prefill
(StaticDecoder.prefill with repeats) compute what the plain forward computes."""
import pytest
import torch

from rl_lab.algos.losses import token_logprobs
from rl_lab.config import SamplingConfig
from rl_lab.engines.fast_decode import StaticDecoder
from rl_lab.engines.rollout import HFEngine
from rl_lab.engines.shared_prefix import MIN_SAVED_FRACTION, completion_logits, saved_fraction

PROMPTS = ["12+34=", "7+8=", "rev:12345="]   # different lengths: left padding is exercised


def _batch(model, tok, n=4, T=10, seed=0):
    return HFEngine(model, tok).generate(PROMPTS, n, SamplingConfig(max_completion_length=T),
                                         torch.Generator().manual_seed(seed))


def _grads(model, fn):
    model.zero_grad(set_to_none=True)
    out = fn()
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _forward_calls(model, fn):
    """How many times fn calls the model's forward: 2 on the shared path, 1 on the plain one."""
    calls = []
    handle = model.register_forward_hook(lambda *_: calls.append(1))
    try:
        fn()
    finally:
        handle.remove()
    return len(calls)


def test_shared_logits_and_gradients_equal_the_plain_forward(fresh_tiny):
    model, tok = fresh_tiny
    model.train()
    b = _batch(model, tok)
    args = (b.prompt_ids, b.prompt_mask, b.completion_ids)
    plain, g_plain = _grads(model, lambda: completion_logits(model, *args, share_prefix=False))
    shared, g_shared = _grads(model, lambda: completion_logits(model, *args, share_prefix=True))
    assert _forward_calls(model, lambda: completion_logits(model, *args)) == 2   # the shared path ran
    assert _forward_calls(model, lambda: completion_logits(model, *args, share_prefix=False)) == 1
    assert shared.shape == plain.shape == (*b.completion_ids.shape, len(tok))
    assert (shared - plain).abs().max().item() < 1e-5
    assert g_plain.keys() == g_shared.keys() and len(g_plain) > 0
    for name in g_plain:   # the prompt's gradient arrives once per row of its group, summed
        scale = g_plain[name].abs().max().item()
        assert (g_shared[name] - g_plain[name]).abs().max().item() <= 1e-4 * scale + 1e-9, name


def test_token_logprobs_shares_by_default_and_matches(tiny):
    model, tok = tiny
    b = _batch(model, tok, seed=1)
    with torch.no_grad():
        shared = token_logprobs(model, b.prompt_ids, b.prompt_mask, b.completion_ids, 0.7,
                                with_entropy=True, with_all=True)
        plain = token_logprobs(model, b.prompt_ids, b.prompt_mask, b.completion_ids, 0.7,
                               with_entropy=True, with_all=True, share_prefix=False)
    for a, c in ((shared.logp, plain.logp), (shared.entropy, plain.entropy), (shared.logp_all, plain.logp_all)):
        assert (a - c).abs().max().item() < 1e-5


@pytest.mark.parametrize("T", [1, 2])
def test_short_completions_and_distinct_prompts(tiny, T):
    model, tok = tiny
    b = _batch(model, tok, n=3, T=T)
    with torch.no_grad():
        shared = completion_logits(model, b.prompt_ids, b.prompt_mask, b.completion_ids[:, :T])
        plain = completion_logits(model, b.prompt_ids, b.prompt_mask, b.completion_ids[:, :T], share_prefix=False)
        assert shared.shape == plain.shape == (9, T, len(tok))
        assert (shared - plain).abs().max().item() < 1e-5
        one_each = slice(0, 9, 3)   # no prompt repeated: the plain path
        d = completion_logits(model, b.prompt_ids[one_each], b.prompt_mask[one_each], b.completion_ids[one_each, :T])
        assert (d - plain[one_each]).abs().max().item() < 1e-5


def test_shared_forward_through_a_lora_wrapper(fresh_tiny):
    import peft  # a dependency of rl_lab (pyproject.toml), never skipped
    model, tok = fresh_tiny
    cfg = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    lora = peft.get_peft_model(model, cfg)
    b = _batch(model, tok)
    args = (b.prompt_ids, b.prompt_mask, b.completion_ids)
    plain, g_plain = _grads(lora, lambda: completion_logits(lora, *args, share_prefix=False))
    shared, g_shared = _grads(lora, lambda: completion_logits(lora, *args))
    assert (shared - plain).abs().max().item() < 1e-5
    assert g_plain.keys() == g_shared.keys() and all("lora" in n for n in g_plain)
    for name in g_plain:
        scale = g_plain[name].abs().max().item()
        assert (g_shared[name] - g_plain[name]).abs().max().item() <= 1e-4 * scale + 1e-9, name


def test_static_decoder_shared_prefill_equals_per_row_prefill(tiny):
    model, tok = tiny
    n = 3
    enc = tok([p for p in PROMPTS for _ in range(n)], return_tensors="pt", padding=True)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    B, P = ids.shape
    per_row, shared = StaticDecoder(model, B, P + 4), StaticDecoder(model, B, P + 4)
    a = per_row.prefill(ids, mask, pos)
    c = shared.prefill(ids[::n], mask[::n], pos[::n], repeats=n)
    assert (a - c).abs().max().item() < 1e-5
    assert torch.equal(per_row.key_ok, shared.key_ok)
    assert (per_row.k - shared.k).abs().max().item() < 1e-5 and (per_row.v - shared.v).abs().max().item() < 1e-5
    tokens = torch.arange(B) % 10 + 3
    step_a, step_c = per_row.step(tokens, pos[:, -1] + 1), shared.step(tokens, pos[:, -1] + 1)
    assert (step_a - step_c).abs().max().item() < 1e-5
    with pytest.raises(ValueError, match="repeats"):
        shared.prefill(ids[::n], mask[::n], pos[::n], repeats=2)


def test_trainer_updates_equal_with_and_without_sharing():
    from rl_lab import RLConfig, Trainer, build_model
    runs = []
    for share in (True, False):
        model, tok = build_model("0.3M", seed=0)
        cfg = RLConfig(task="addition", task_kwargs={"digits": 2}, prompts_per_step=4, num_generations=4,
                       max_completion_length=8, learning_rate=1e-3, max_steps=2, seed=0, progress_bar=False,
                       share_prefix=share)
        trainer = Trainer(cfg, model=model, tokenizer=tok)
        metrics = [trainer.step() for _ in range(2)]
        runs.append((metrics, {n: p.detach().clone() for n, p in model.named_parameters()}))
    (m_shared, w_shared), (m_plain, w_plain) = runs
    for a, b in zip(m_shared, m_plain):
        assert abs(a["loss"] - b["loss"]) < 1e-5 and abs(a["grad_norm"] - b["grad_norm"]) < 1e-4 * (1 + b["grad_norm"])
        assert a["completions/mean_length"] == b["completions/mean_length"]
    assert max((w_shared[n] - w_plain[n]).abs().max().item() for n in w_plain) < 1e-5


def test_saved_fraction_decides_the_path(tiny):
    """The prompt is shared only when it skips at least MIN_SAVED_FRACTION of the tokens: short
    prompts under long completions take the plain forward (same logits either way)."""
    assert saved_fraction(64, 8, 7, 16) == pytest.approx(56 * 7 / (64 * 23))           # 26.6%: shared
    assert saved_fraction(64, 8, 7, 512) == pytest.approx(56 * 7 / (64 * 519))         # 1.2%: plain
    assert saved_fraction(8, 8, 7, 16) == 0.0                                          # nothing repeats
    model, tok = tiny
    b = HFEngine(model, tok).generate(PROMPTS, 4, SamplingConfig(max_completion_length=80, min_tokens=80),
                                      torch.Generator().manual_seed(0))
    P, T = b.prompt_ids.shape[1], b.completion_ids.shape[1]
    frac = saved_fraction(len(b.prompt_ids), len(PROMPTS), P, T)
    assert 0 < frac < MIN_SAVED_FRACTION, (P, T, frac)    # this batch repeats too little to share
    args = (b.prompt_ids, b.prompt_mask, b.completion_ids)
    with torch.no_grad():
        assert _forward_calls(model, lambda: completion_logits(model, *args)) == 1
        assert _forward_calls(model, lambda: completion_logits(model, *args, min_saved_fraction=0.0)) == 2
        assert _forward_calls(model, lambda: completion_logits(model, *args, min_saved_fraction=frac)) == 2
        default = completion_logits(model, *args)
        forced = completion_logits(model, *args, min_saved_fraction=0.0)
    assert (default - forced).abs().max().item() < 1e-5
