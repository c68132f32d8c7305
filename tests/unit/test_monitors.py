import math

import numpy as np
import pytest
import torch

from rl_lab.monitors import MISMATCH_BINS, logit_gradient_norm, mismatch_by_bin


def test_logit_gradient_norm_matches_autograd():
    g = torch.Generator().manual_seed(0)
    B, T, V = 3, 4, 11
    logits = (3 * torch.randn(B, T, V, generator=g, dtype=torch.float64)).requires_grad_(True)
    tokens = torch.randint(0, V, (B, T), generator=g)
    logp_full = torch.log_softmax(logits, -1)                                        # (B, T, V)
    got = logit_gradient_norm(logp_full.detach(), tokens)                            # (B, T)
    assert got.shape == (B, T)
    for b in range(B):
        for t in range(T):
            (grad,) = torch.autograd.grad(logp_full[b, t, tokens[b, t]], logits, retain_graph=True)
            assert got[b, t].item() == pytest.approx(grad[b, t].norm().item(), rel=1e-10, abs=1e-12)
            assert grad[[i for i in range(B) if i != b]].abs().max() == 0   # only its own logits move


def test_logit_gradient_norm_limits():
    # a token of probability 1 has no gradient; a token of probability -> 0 has sqrt(1 + sum p^2)
    sure = torch.log(torch.tensor([[[1.0, 0.0, 0.0]]], dtype=torch.float64))
    assert logit_gradient_norm(sure, torch.tensor([[0]])).item() == 0.0
    p = torch.tensor([0.5, 0.5 - 1e-12, 1e-12], dtype=torch.float64)
    rare = logit_gradient_norm(p.log()[None, None], torch.tensor([[2]])).item()
    assert rare == pytest.approx(math.sqrt(1 + 0.5), rel=1e-9)
    # uniform over V: the sampled token's norm is sqrt(1 - 1/V) whatever it is
    uni = torch.full((1, 2, 4), math.log(0.25), dtype=torch.float64)
    assert torch.allclose(logit_gradient_norm(uni, torch.tensor([[0, 3]])),
                          torch.full((1, 2), math.sqrt(0.75), dtype=torch.float64))


def test_logit_gradient_norm_is_accurate_near_one_in_float32():
    # p_a = 1 - 1e-6: the norm is about 1e-6 (times 1..sqrt 2); 1 - 2 p_a + sum p^2 would lose it
    p = torch.tensor([1 - 1e-6, 1e-6], dtype=torch.float64)
    want = math.sqrt(2) * 1e-6
    got = logit_gradient_norm(p.log().float()[None, None], torch.tensor([[0]])).item()
    assert got == pytest.approx(want, rel=1e-3)
    g = torch.Generator().manual_seed(1)
    logp = torch.log_softmax(torch.randn(2, 5, 64, generator=g) * 8, -1)            # float32, peaked
    tokens = logp.argmax(-1)
    norm = logit_gradient_norm(logp, tokens)                                         # (2, 5)
    one_minus = -torch.expm1(logp.gather(-1, tokens[..., None]).squeeze(-1))        # 1 - p_a
    assert ((norm >= one_minus * (1 - 1e-4)) & (norm <= 2 ** 0.5 * one_minus * (1 + 1e-4))).all()


def test_mismatch_by_bin_hand_example():
    # 5 tokens: two rare (mu < 1e-3), one at 0.05, one at 0.7, one exactly 1 (last bin is closed)
    mu = np.array([1e-4, 5e-4, 0.05, 0.7, 1.0])
    r = np.array([-1.0, 0.5, -0.2, 0.1, 0.0])
    gn = np.array([1.2, 1.4, 1.0, 0.4, 0.0])
    df = mismatch_by_bin(mu, r, gn)
    assert list(df.index) == ["0-0.001", "0.001-0.01", "0.01-0.1", "0.1-0.5", "0.5-0.9", "0.9-1"]
    assert df["tokens"].tolist() == [2, 0, 1, 0, 1, 1]
    assert df["token_share"].tolist() == pytest.approx([0.4, 0, 0.2, 0, 0.2, 0.2])
    low = df.loc["0-0.001"]
    assert low["mean_log_ratio"] == pytest.approx(-0.25)
    assert low["frac_negative"] == pytest.approx(0.5)
    assert low["mean_abs_log_ratio"] == pytest.approx(0.75)
    total_abs = 1.0 + 0.5 + 0.2 + 0.1 + 0.0
    assert low["gap_share"] == pytest.approx(1.5 / total_abs)
    k3 = np.exp(r) - r - 1
    assert low["k3_share"] == pytest.approx((k3[0] + k3[1]) / k3.sum())
    assert low["mean_grad_norm"] == pytest.approx(1.3)
    weighted = np.abs(r) * gn                                          # 1.2, 0.7, 0.2, 0.04, 0
    assert low["grad_gap_share"] == pytest.approx(1.9 / weighted.sum())
    assert df["grad_gap_share"].sum() == pytest.approx(1.0)
    assert df.loc["0.9-1", "frac_negative"] == 0.0 and df.loc["0.9-1", "mean_grad_norm"] == 0.0
    assert df["gap_share"].sum() == pytest.approx(1.0) and df["k3_share"].sum() == pytest.approx(1.0)
    assert df.loc["0.001-0.01"].drop(["tokens", "token_share", "gap_share", "k3_share", "grad_gap_share"]).isna().all()
    assert not {"mean_grad_norm", "grad_gap_share"} & set(mismatch_by_bin(mu, r).columns)


def test_mismatch_by_bin_accepts_tensors_and_custom_bins():
    mu = torch.tensor([0.2, 0.6, 0.9, 1.0 + 1e-7])        # a probability rounded past 1 counts as 1
    r = torch.tensor([0.1, -0.1, -0.3, 0.2])
    df = mismatch_by_bin(mu, r, bins=[0, 0.5, 1])
    assert df["tokens"].tolist() == [1, 3]
    assert df.loc["0.5-1", "frac_negative"] == pytest.approx(2 / 3)
    assert len(mismatch_by_bin(mu, r)) == len(MISMATCH_BINS) - 1
    with pytest.raises(ValueError, match="one entry per token"):
        mismatch_by_bin(mu, r[:2])
    with pytest.raises(ValueError, match="increasing"):
        mismatch_by_bin(mu, r, bins=[0, 0.5, 0.5, 1])


def test_tokens_differ_counts_bitwise_inequality_on_the_mask_only():
    from rl_lab.monitors import mismatch_metrics
    logp = torch.tensor([[-1.0, -2.0, -3.0, -4.0]])
    same = mismatch_metrics(logp, logp.clone(), torch.ones(1, 4))
    assert same["tokens_differ"] == 0.0 and same["k3_kl"] == 0.0
    nudged = logp.clone()
    nudged[0, 1] = torch.nextafter(nudged[0, 1], torch.tensor(0.0))       # one ulp: rounding level
    nudged[0, 3] = 0.0                                                    # outside the mask: not counted
    m = mismatch_metrics(logp, nudged, torch.tensor([[1.0, 1.0, 1.0, 0.0]]))
    assert m["tokens_differ"] == pytest.approx(1 / 3)
