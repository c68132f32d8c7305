import math

import pytest
import torch

from rl_lab.algos.losses import sequence_logprobs, token_logprobs
from rl_lab.config import SamplingConfig
from rl_lab.engines.rollout import HFEngine, process_logits, sample_tokens
from rl_lab.engines.vocabulary import safe_vocabulary

PROMPTS = ["12+34=", "7+8=", "rev:12345="]   # different lengths: left padding is exercised


def _gen(engine, n=4, seed=0, **kw):
    return engine.generate(PROMPTS, n, SamplingConfig(max_completion_length=10, **kw),
                           torch.Generator().manual_seed(seed))


def test_batch_layout_masks_and_eos(tiny):
    model, tok = tiny
    b = _gen(HFEngine(model, tok))
    B, T = len(PROMPTS) * 4, 10
    assert b.completion_ids.shape == (B, T) == b.sampler_logprobs.shape == b.completion_mask.shape
    assert b.group_ids.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert b.prompts[4] == "7+8="
    for i in range(B):
        ids, m = b.completion_ids[i].tolist(), b.completion_mask[i].tolist()
        n = sum(m)
        assert m == [1] * n + [0] * (T - n)                     # contiguous from the start
        assert all(t == tok.pad_token_id for t in ids[n:])
        if tok.eos_token_id in ids[:n]:
            assert ids.index(tok.eos_token_id) == n - 1 and not b.is_truncated[i]   # eos is last, counted
        else:
            assert n == T and b.is_truncated[i]
    assert torch.all(b.sampler_logprobs[b.completion_mask == 0] == 0)
    assert torch.all(b.sampler_logprobs[b.completion_mask == 1] <= 0)


def test_engine_logprobs_equal_trainer_logprobs_fp32(tiny):
    model, tok = tiny
    for temperature in (1.0, 0.7):
        b = _gen(HFEngine(model, tok), temperature=temperature)
        with torch.no_grad():
            lp = sequence_logprobs(model, b.prompt_ids, b.prompt_mask, b.completion_ids, temperature)
        m = b.completion_mask.bool()
        assert (lp - b.sampler_logprobs)[m].abs().max().item() < 1e-5


def test_sampling_is_seeded(tiny):
    model, tok = tiny
    e = HFEngine(model, tok)
    assert torch.equal(_gen(e, seed=1).completion_ids, _gen(e, seed=1).completion_ids)
    assert not torch.equal(_gen(e, seed=1).completion_ids, _gen(e, seed=2).completion_ids)


def test_bf16_engine_is_a_synced_copy_with_real_mismatch(fresh_tiny):
    model, tok = fresh_tiny
    e = HFEngine(model, tok, dtype="bfloat16")
    assert e.model is not model and next(e.model.parameters()).dtype == torch.bfloat16
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    e.sync_weights(model)
    for (n, p), q in zip(model.named_parameters(), e.model.parameters()):
        assert torch.equal(p.detach().to(torch.bfloat16), q), n
    b = _gen(e)
    with torch.no_grad():
        lp = sequence_logprobs(model, b.prompt_ids, b.prompt_mask, b.completion_ids)
    gap = (lp - b.sampler_logprobs)[b.completion_mask.bool()].abs()
    assert 1e-4 < gap.mean().item() < 0.5            # a real, small mismatch


def test_top_k_and_top_p_truncate_the_sampling_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    lp = process_logits(logits, SamplingConfig(top_k=2))
    assert torch.isinf(lp[0, 2:]).all() and torch.allclose(lp[0, :2].exp(), torch.tensor([0.625, 0.375]))
    lp = process_logits(logits, SamplingConfig(top_p=0.8))   # 0.5 + 0.3 reaches 0.8
    assert torch.isinf(lp[0, 2:]).all()
    lp = process_logits(logits, SamplingConfig(top_p=0.81))
    assert torch.isfinite(lp[0, :3]).all() and torch.isinf(lp[0, 3])
    lp = process_logits(logits, SamplingConfig(temperature=2.0))
    assert torch.allclose(lp.exp().sum(), torch.tensor(1.0))


def test_safe_vocabulary_is_relative_to_the_top_token():
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    assert safe_vocabulary(p.log(), 0.2).tolist() == [[True, True, True, False]]   # 0.05 < 0.2 * 0.5
    assert safe_vocabulary(p.log() + 7.0, 0.2).tolist() == [[True, True, True, False]]


def test_nonfinite_logits_are_reported_not_raised():
    logp = torch.log_softmax(torch.randn(3, 5), -1)
    logp[1] = float("nan")
    tokens, token_logp = sample_tokens(logp, torch.Generator().manual_seed(0))
    assert tokens.shape == (3,) and math.isnan(token_logp[1]) and torch.isfinite(token_logp[[0, 2]]).all()


def test_sampled_frequencies_match_the_probabilities():
    """Inverse-CDF sampling draws each token with its probability; removed tokens never."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 16, generator=g) * 2
    logits[:, 5] = 6.0                                              # one dominant token
    logits[:, 12:] = float("-inf")                                  # removed (top-k)
    logp = torch.log_softmax(logits, -1)                            # (4, V)
    n = 20_000
    tokens, token_logp = sample_tokens(logp.repeat(n, 1), g)
    counts = torch.zeros(4, 16).index_put_((torch.arange(4).repeat(n), tokens), torch.ones(4 * n), accumulate=True)
    p = logp.exp()
    assert counts[:, 12:].sum() == 0
    # every frequency within 5 binomial standard errors of its probability
    se = (p * (1 - p) / n).sqrt()
    assert ((counts / n - p).abs() <= 5 * se + 1e-9).all()
    assert torch.equal(token_logp, logp.repeat(n, 1).gather(-1, tokens[:, None]).squeeze(-1))
    # the last token of a long vocabulary, behind a tail of near-zero ones, keeps its share
    tail = torch.full((1, 20_000), -40.0)
    tail[0, 0], tail[0, -1] = 0.0, -2.0
    tokens, _ = sample_tokens(torch.log_softmax(tail, -1).expand(1000, -1).contiguous(), g)
    assert 0.08 < (tokens == 19_999).float().mean() < 0.16        # p = 0.119


def test_bad_dtype_is_rejected(tiny):
    with pytest.raises(ValueError, match="choose one of"):
        HFEngine(*tiny, dtype="int8")


@pytest.fixture(params=[False, True], ids=["rows_first", "weights_first"])
def weights_first(request, monkeypatch):
    """The decode step's products in both orders: rows @ weight^T (F.linear, the tiny models'), and
    weight @ rows^T (`fast_decode.WEIGHTS_FIRST_BYTES`: models whose weights stream from memory)."""
    import rl_lab.engines.fast_decode as fd
    monkeypatch.setattr(fd, "WEIGHTS_FIRST_BYTES", 0 if request.param else 2**62)
    return request.param


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_static_decoder_equals_the_hugging_face_forward(fresh_tiny, dtype, weights_first):
    """The fast path (rl_lab.engines.fast_decode) samples the same tokens with the same log-probs as
    the Hugging Face forward with its dynamic cache, with left-padded prompts of unequal length."""
    from rl_lab.engines.fast_decode import read_weights, supports

    model, tok = fresh_tiny
    assert read_weights(model, 8).weights_first == weights_first
    e = HFEngine(model, tok, dtype=dtype)
    assert supports(e.model) and e.fast
    fast = _gen(e, seed=3, temperature=0.9)
    e.fast = False
    slow = _gen(e, seed=3, temperature=0.9)
    assert torch.equal(fast.completion_ids, slow.completion_ids)
    assert torch.equal(fast.completion_mask, slow.completion_mask)
    tol = 1e-5 if dtype == "float32" else 0.05
    assert (fast.sampler_logprobs - slow.sampler_logprobs).abs().max().item() < tol


def _tiny_llama(tok, **config):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, **config)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():   # the biases start at zero: give them values the test can see
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
    return model


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_static_decoder_equals_the_hugging_face_forward_on_llama_with_biases(fresh_tiny, dtype, weights_first):
    """A Llama with attention and MLP biases, untied embeddings: every weight the decoder reads."""
    from rl_lab.engines.fast_decode import supports

    _, tok = fresh_tiny
    model = _tiny_llama(tok, attention_bias=True, mlp_bias=True, tie_word_embeddings=False)
    e = HFEngine(model, tok, dtype=dtype)
    assert supports(e.model)
    fast = _gen(e, seed=5)
    e.fast = False
    slow = _gen(e, seed=5)
    assert torch.equal(fast.completion_ids, slow.completion_ids)
    tol = 1e-5 if dtype == "float32" else 0.05
    assert (fast.sampler_logprobs - slow.sampler_logprobs).abs().max().item() < tol


def test_static_decoder_steps_keep_their_shapes_and_stop_at_the_end(fresh_tiny):
    """Every step reads and writes the same preallocated tensors; a step past the cache is refused."""
    from rl_lab.engines.fast_decode import StaticDecoder

    model, tok = fresh_tiny
    dec = StaticDecoder(model, batch_size=2, max_len=5)
    ids = torch.tensor([[3, 4, 5], [0, 6, 7]])
    mask = (ids != 0).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    k, v = dec.k.data_ptr(), dec.v.data_ptr()
    dec.prefill(ids, mask, pos)
    assert dec.key_ok.tolist() == [[True] * 3 + [False] * 2, [False] + [True] * 2 + [False] * 2]
    for t in range(2):
        assert dec.step(torch.tensor([8, 9]), pos[:, -1] + 1 + t).shape == (2, len(tok))
    assert (dec.k.data_ptr(), dec.v.data_ptr()) == (k, v) and dec.key_ok.all(-1)[0]
    with pytest.raises(ValueError, match="all are written"):
        dec.step(torch.tensor([8, 9]), pos[:, -1] + 3)


def test_both_decoders_give_the_same_logits_and_the_hugging_face_one_restores_training_mode(fresh_tiny):
    """HFEngine.generate runs one loop over either decoder (rl_lab.engines.rollout.Decoder): each
    prompt prefilled once for its rows, then one token per step, to the same logits.
    HFCacheDecoder runs the model in eval mode; `close` restores its training mode."""
    from rl_lab.engines.fast_decode import StaticDecoder
    from rl_lab.engines.rollout import HFCacheDecoder

    model, _ = fresh_tiny
    model.train()
    ids = torch.tensor([[3, 4, 5], [0, 6, 7]])                          # (N, P), left-padded
    mask = (ids != 0).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    n, T = 2, 3
    static, hf = StaticDecoder(model, 2 * n, 3 + T), HFCacheDecoder(model, 2 * n, 3 + T)
    assert not model.training
    logits = [static.prefill(ids, mask, pos, repeats=n), hf.prefill(ids, mask, pos, repeats=n)]
    next_pos = pos[:, -1].repeat_interleave(n) + 1                      # (B,)
    for t in range(T + 1):
        assert logits[0].shape == logits[1].shape == (2 * n, model.config.vocab_size)
        assert (logits[0] - logits[1]).abs().max().item() < 1e-5
        if t < T:
            tokens = torch.tensor([8, 9, 10, 11])
            logits = [static.step(tokens, next_pos + t), hf.step(tokens, next_pos + t)]
    static.close()
    hf.close()
    assert model.training


def test_static_decoder_declines_what_it_does_not_implement(fresh_tiny):
    from rl_lab.engines.fast_decode import StaticDecoder, supports

    model, _ = fresh_tiny
    model.config.use_sliding_window = True
    assert not supports(model)
    with pytest.raises(ValueError, match="sliding window"):
        StaticDecoder(model, 2, 8)
    model.config.use_sliding_window = False
    assert not supports(torch.nn.Linear(2, 2)) and supports(model)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_static_decoder_attends_over_the_filled_blocks_only_with_the_same_logits(fresh_tiny, dtype):
    """A step attends over the filled cache positions rounded up to `key_block` (its cost grows with
    the length so far, not with the cache size); the logits equal those of attending over the whole
    cache at every step, to float rounding, over 90 steps that cross several block edges."""
    from rl_lab.engines.fast_decode import StaticDecoder

    model, tok = fresh_tiny
    model = model.to(dtype)
    B, P, T = 3, 4, 90
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, len(tok), (B, P), generator=g)
    ids[1, 0] = 0                                                          # one left-padded row
    mask = (ids != 0).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    blocked, whole = StaticDecoder(model, B, P + T, key_block=8), StaticDecoder(model, B, P + T, key_block=P + T)
    calls = []
    import rl_lab.engines.fast_decode as fd
    real = fd.decode_step
    fd.decode_step = lambda w, k, v, key_ok, *a: calls.append(key_ok.shape[1]) or real(w, k, v, key_ok, *a)
    try:
        a, b = blocked.prefill(ids, mask, pos), whole.prefill(ids, mask, pos)
        worst = 0.0
        for t in range(T):
            tokens = torch.randint(1, len(tok), (B,), generator=g)
            a, b = blocked.step(tokens, pos[:, -1] + 1 + t), whole.step(tokens, pos[:, -1] + 1 + t)
            worst = max(worst, (a.float().log_softmax(-1) - b.float().log_softmax(-1)).abs().max().item())
    finally:
        fd.decode_step = real
    assert worst < (1e-5 if dtype == torch.float32 else 0.05), worst
    assert calls[:2 * 5:2] == [8, 8, 8, 8, 16]               # P=4 filled: steps 0-3 see 8 keys, step 4 sees 16
    assert calls[-2] == P + T and all(c == P + T for c in calls[1::2])   # capped at the cache; whole: always S


class EagerToEnd(HFEngine):
    """An engine whose model wants to stop at once: <eos> gets +12 on its logit."""

    def perturb_logits(self, logits, generator):
        return logits.index_add(-1, torch.tensor([self.tokenizer.eos_token_id]),
                                torch.full((len(logits), 1), 12.0))


@pytest.mark.parametrize("fast", [True, False])
def test_min_tokens_holds_eos_back_and_forces_a_length(tiny, fast):
    model, tok = tiny
    engine = EagerToEnd(model, tok)
    engine.fast = fast
    eos = tok.eos_token_id
    free = _gen(engine)
    assert free.completion_mask.sum(1).float().mean() < 1.5            # it stops at once ...
    held = _gen(engine, min_tokens=5)
    lengths = held.completion_mask.sum(1)
    assert lengths.min() >= 6 and lengths.float().mean() < 6.5         # ... or right after min_tokens
    assert not (held.completion_ids[:, :5] == eos).any()
    # mu before min_tokens is the model's distribution with <eos> removed, renormalised
    with torch.no_grad():
        pi = token_logprobs(model, held.prompt_ids, held.prompt_mask, held.completion_ids, with_all=True)
    lp, lp_all = pi.logp, pi.logp_all                                       # (B, T), (B, T, V)
    renormalised = lp[:, :5] - torch.log1p(-lp_all[:, :5, eos].exp())
    assert (held.sampler_logprobs[:, :5] - renormalised).abs().max() < 1e-4
    forced = _gen(engine, min_tokens=10)                                # = max_completion_length
    assert forced.completion_mask.sum(1).tolist() == [10] * len(forced.completion_ids)
    assert forced.is_truncated.all() and not (forced.completion_ids == eos).any()
