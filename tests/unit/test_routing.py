"""Top-K routing (chapter 8): gates, the toy mixture policy, the tiny MoE LM and routing replay."""
import numpy as np
import pytest
import torch

from rl_lab.toolkits.routing import (
    TinyMoELM,
    count_switches,
    flip_probability,
    kl_along_direction,
    mc_flip_probability,
    mixture_logprobs,
    pg_ascent,
    population_kl,
    routing_flip_fraction,
    routing_mismatch,
    soft_gate,
    token_logprobs,
    topk_gate,
    topk_mask,
)

D64 = torch.float64
E = torch.tensor([[3.0, 0, 0, 0], [0, 3.0, 0, 0], [0, 0, 3.0, 0]], dtype=D64)


def test_topk_mask_ties_go_to_lower_index_and_validates_k():
    h = torch.tensor([[1.0, 0.0, 0.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
    assert topk_mask(h, 2).tolist() == [[True, False, False, True], [True, True, False, False]]
    with pytest.raises(ValueError, match="1 <= k"):
        topk_mask(h, 5)


def test_topk_gate_weights_and_gradient_blackout():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(200, 6, generator=g, dtype=D64).requires_grad_()
    w, mask = topk_gate(h, 3)
    assert torch.allclose(w.sum(-1), torch.ones(200, dtype=D64))
    assert (w[~mask] == 0).all() and (w[mask] > 0).all()
    expect = torch.softmax(h.detach()[mask].view(200, 3), -1)   # mask rows are in index order
    assert torch.allclose(w.detach()[mask].view(200, 3), expect)
    out = (w * torch.randn(200, 6, generator=g, dtype=D64)).sum()
    (grad,) = torch.autograd.grad(out, h)
    assert (grad[~mask] == 0).all()                              # the lab's section 1 claim
    assert (grad[mask].abs() > 0).all()
    with pytest.raises(ValueError, match="temperature"):
        topk_gate(h, 2, temperature=0.0)


def test_unnormalised_topk_gate_weights_and_the_minus_p_u_y_gradient():
    """norm_topk_prob=False: weights are the full softmax on the selected set, and for an
    unselected u, dy/dh_u = -p_u y (not 0): autograd against the closed form."""
    g = torch.Generator().manual_seed(1)
    M, N, K, D = 300, 6, 2, 5
    h = torch.randn(M, N, generator=g, dtype=D64).requires_grad_()
    experts = torch.randn(N, D, generator=g, dtype=D64)          # E_j, fixed outputs
    w, mask = topk_gate(h, K, norm_topk_prob=False)
    p = torch.softmax(h.detach(), -1)
    assert torch.equal(mask, topk_mask(h, K))
    assert torch.allclose(w.detach(), p * mask) and (w.detach().sum(-1) < 1).all()
    y = w @ experts                                              # (M, D)
    c = torch.randn(D, generator=g, dtype=D64)                   # loss L = sum_m c . y_m
    (grad,) = torch.autograd.grad((y @ c).sum(), h, retain_graph=True)
    closed = -p * (y.detach() @ c)[:, None]                      # dL/dh_u = -p_u (c . y)
    assert torch.allclose(grad[~mask], closed[~mask], rtol=1e-10, atol=1e-14)
    assert (grad[~mask].abs() > 0).all()
    # the same with every output coordinate separately (the full Jacobian dy/dh_u = -p_u y)
    for d in range(D):
        (gd,) = torch.autograd.grad(y[:, d].sum(), h, retain_graph=True)
        assert torch.allclose(gd[~mask], (-p * y.detach()[:, d:d + 1])[~mask], rtol=1e-10, atol=1e-14)
    # the renormalised gate on the same logits: exactly zero
    w1, _ = topk_gate(h, K)
    (g1,) = torch.autograd.grad(((w1 @ experts) @ c).sum(), h)
    assert (g1[~mask] == 0).all()
    # with a temperature the unnormalised gradient is divided by it
    wt, _ = topk_gate(h, K, temperature=2.0, norm_topk_prob=False)
    (gt,) = torch.autograd.grad(((wt @ experts) @ c).sum(), h)
    pt = torch.softmax(h.detach() / 2, -1)
    assert torch.allclose(gt[~mask], (-pt * ((wt.detach() @ experts) @ c)[:, None] / 2)[~mask])


def test_both_gates_jump_across_the_switch():
    h0 = torch.tensor([1.0, 0.0, 0.0], dtype=D64)
    eps = torch.logspace(-6, -2, 5, dtype=D64)
    for norm in (True, False):
        cross = kl_along_direction(h0, torch.tensor([0.0, 0, 1], dtype=D64), eps, E, k=2, norm_topk_prob=norm)
        along = kl_along_direction(h0, torch.tensor([0.0, 1, 0], dtype=D64), eps, E, k=2, norm_topk_prob=norm)
        assert cross.min() > 0.01 and np.ptp(cross.numpy()) / cross.min() < 0.01
        slope = np.polyfit(np.log(eps.numpy()[1:]), np.log(along.numpy()[1:]), 1)[0]
        assert abs(slope - 2) < 0.05


def test_population_kl_mean_is_linear_while_max_does_not_shrink():
    g = torch.Generator().manual_seed(0)
    M, N, V, d = 40000, 8, 16, 16
    experts = 2 * torch.randn(N, V, generator=g, dtype=D64)
    x = torch.randn(M, d, generator=g, dtype=D64)
    h = x @ (2 * torch.randn(N, d, generator=g, dtype=D64) / 4).T
    v = x @ (torch.randn(N, d, generator=g, dtype=D64) / 4).T
    eps = torch.logspace(-3, -1, 5, dtype=D64)
    for norm in (True, False):
        r = population_kl(h, v, eps, experts, k=2, norm_topk_prob=norm)
        assert r["kl"].shape == (5, M)
        slope = np.polyfit(np.log(eps.numpy()), np.log(r["mean"]), 1)[0]
        assert 0.8 < slope < 1.2                                  # continuous, O(eps), not eps^2
        # over the 100x range of eps the mean falls ~100x; the worst sampled context stays O(1)
        assert r["max"][0] > 0.1 and r["max"][-1] / r["max"][0] < 5
        assert (np.diff(r["switched"]) > 0).all() and r["switched"][0] > 0
    dense = population_kl(h, v, eps, experts, k=None)
    assert abs(np.polyfit(np.log(eps.numpy()), np.log(dense["mean"]), 1)[0] - 2) < 0.05
    assert (dense["switched"] == 0).all() and dense["max"][0] < 1e-4
    with pytest.raises(ValueError, match=r"\(M, N\)"):
        population_kl(h[0], v[0], eps, experts, k=2)


def test_soft_gate_is_dense_and_top_n_equals_soft():
    h = torch.tensor([0.3, -1.0, 2.0], dtype=D64)
    assert torch.allclose(soft_gate(h), torch.softmax(h, -1))
    assert torch.allclose(topk_gate(h, 3)[0], soft_gate(h))
    assert torch.allclose(soft_gate(h, 2.0), torch.softmax(h / 2, -1))


def test_mixture_logprobs_shapes_and_validation():
    h = torch.zeros(5, 3, dtype=D64)
    lp = mixture_logprobs(h, E, k=2)
    assert lp.shape == (5, 4) and torch.allclose(lp.exp().sum(-1), torch.ones(5, dtype=D64))
    with pytest.raises(ValueError, match=r"\(N, V\)"):
        mixture_logprobs(torch.zeros(4, dtype=D64), E, k=2)


def test_kl_is_bounded_away_from_zero_across_the_switch_and_quadratic_otherwise():
    h0 = torch.tensor([1.0, 0.0, 0.0], dtype=D64)
    eps = torch.logspace(-6, -2, 5, dtype=D64)
    cross = kl_along_direction(h0, torch.tensor([0.0, 0, 1], dtype=D64), eps, E, k=2)
    along = kl_along_direction(h0, torch.tensor([0.0, 1, 0], dtype=D64), eps, E, k=2)
    dense = kl_along_direction(h0, torch.tensor([0.0, 0, 1], dtype=D64), eps, E, k=None)
    # the limit across the surface is KL between the {1,2} and {1,3} mixtures
    p = mixture_logprobs(h0, E, k=2)
    q = torch.log_softmax(torch.softmax(torch.tensor([1.0, 0.0], dtype=D64), -1) @ E[[0, 2]], -1)
    assert cross[0].item() == pytest.approx((p.exp() * (p - q)).sum().item(), rel=1e-4)
    assert cross.min() > 0.05
    for kl in (along, dense):
        slope = np.polyfit(np.log(eps.numpy()[1:]), np.log(kl.numpy()[1:]), 1)[0]
        assert abs(slope - 2) < 0.05
    with pytest.raises(ValueError, match="1-D eps"):
        kl_along_direction(h0, h0, torch.ones(2, 2), E, k=2)


def test_pg_ascent_chatters_with_topk_and_converges_with_dense_gate():
    reward = torch.tensor([1.0, 0.3, 0.0, 0.0], dtype=D64)
    U = torch.tensor([[0.0], [1.0], [-1.0]], dtype=D64)
    off = torch.zeros(3, dtype=D64)
    top = pg_ascent([1.0], U, off, E, reward, k=2, lr=0.5, steps=120)
    dense = pg_ascent([1.0], U, off, E, reward, k=None, lr=0.5, steps=120)
    th = top["theta"][60:, 0]
    assert (np.diff(np.sign(th)) != 0).sum() > 15 and np.abs(th).max() < 0.5
    assert np.ptp(top["objective"][60:]) > 0.05
    assert count_switches(dense["selected"]) == 0 and np.ptp(dense["objective"][60:]) < 1e-6
    assert top["theta"].shape == (121, 1) and top["selected"].shape == (121, 3)
    with pytest.raises(ValueError, match="router_matrix"):
        pg_ascent([1.0, 2.0], U, off, E, reward, k=2, lr=0.5, steps=2)


def test_count_switches():
    sel = np.array([[1, 1, 0], [1, 1, 0], [1, 0, 1], [1, 1, 0]], dtype=bool)
    assert count_switches(sel) == 2


def test_routing_flip_fraction_ignores_order():
    a = torch.tensor([[[0, 1], [2, 3]], [[1, 4], [0, 2]]])
    b = torch.tensor([[[1, 0], [2, 5]], [[1, 4], [0, 2]]])
    frac, flipped = routing_flip_fraction(a, b)
    assert frac == 0.25 and flipped.tolist() == [[False, True], [False, False]]
    with pytest.raises(ValueError, match="same shape"):
        routing_flip_fraction(a, b[..., :1])


def test_tiny_moe_forward_shapes_forcing_and_token_logprobs():
    m = TinyMoELM(vocab=32, d_model=32, n_layers=2, n_heads=4, n_experts=4, k=2, seed=0)
    ids = torch.randint(0, 32, (3, 10), generator=torch.Generator().manual_seed(0))
    logits, h, e = m(ids)
    assert logits.shape == (3, 10, 32) and h.shape == (2, 3, 10, 4) and e.shape == (2, 3, 10, 2)
    # forcing the model's own choice reproduces the forward exactly
    logits2, _, e2 = m(ids, forced_experts=e)
    assert torch.equal(e2, e) and torch.allclose(logits, logits2)
    # forcing other experts changes the output and is reported
    other = (e + 1) % 4
    logits3, _, e3 = m(ids, forced_experts=other)
    assert torch.equal(e3.sort(-1).values, other.sort(-1).values) and not torch.allclose(logits, logits3)
    lp = token_logprobs(logits, ids)
    assert lp.shape == (3, 9)
    assert torch.allclose(lp[0, 0], torch.log_softmax(logits[0, 0], -1)[ids[0, 1]])
    with pytest.raises(ValueError, match="forced_experts"):
        m(ids, forced_experts=e[:1])
    with pytest.raises(ValueError, match="divisible"):
        TinyMoELM(d_model=30, n_heads=4)


def test_tiny_moe_unnormalised_gate_default_unchanged_and_replay_still_exact():
    ids = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0))
    kw = dict(vocab=32, d_model=32, n_layers=2, n_heads=4, n_experts=4, k=2, seed=0)
    a, b = TinyMoELM(**kw), TinyMoELM(**kw, norm_topk_prob=True)
    la, ha, ea = a(ids)
    lb, hb, eb = b(ids)
    assert torch.equal(la, lb) and torch.equal(ea, eb)              # the default is the renormalised gate
    c = TinyMoELM(**kw, norm_topk_prob=False)
    lc, hc, ec = c(ids)
    assert torch.equal(hc[0], ha[0]) and not torch.allclose(lc, la)    # same first router, other gate
    lc2, _, ec2 = c(ids, forced_experts=ec)
    assert torch.equal(ec2, ec) and torch.allclose(lc, lc2)
    r = routing_mismatch(c, ids)
    assert r["replay_flip_fraction"] == 0.0


def test_routing_mismatch_flipped_tokens_carry_the_gap_and_replay_removes_it():
    flipped, gap, rep = [], [], []
    for seed in range(2):
        m = TinyMoELM(vocab=64, d_model=64, n_layers=2, n_experts=8, k=2, seed=seed)
        ids = torch.randint(0, 64, (16, 48), generator=torch.Generator().manual_seed(100 + seed))
        r = routing_mismatch(m, ids)
        assert 0 < r["flip_fraction"] < 0.1 and r["replay_flip_fraction"] == 0.0
        assert r["router_gap"].shape == (2, 16, 48) and (r["router_gap"] >= 0).all()
        flipped.append(r["flipped"].flatten()), gap.append(r["gap"].flatten()), rep.append(r["gap_replay"].flatten())
    f, g, gr = torch.cat(flipped), torch.cat(gap), torch.cat(rep)
    assert f.sum() >= 3
    assert g[f].mean() > 5 * g[~f].mean()            # the lab's section 4 claims
    assert gr[f].mean() < 2 * gr[~f].mean()


def test_flip_probability_formula_and_monte_carlo():
    assert flip_probability(0.0, 1.0) == pytest.approx(0.5)
    assert flip_probability(np.sqrt(2.0), 1.0) == pytest.approx(0.158655, abs=1e-5)   # Phi(-1)
    with pytest.raises(ValueError, match="sigma"):
        flip_probability(0.1, 0.0)
    h = torch.tensor([[10.0, 0.1, 0.0, -10.0]], dtype=D64)    # K=2: the 2nd and 3rd are 0.1 apart
    mc = mc_flip_probability(h, 0.1, 2, n_draws=4000, seed=0)
    assert mc == pytest.approx(float(flip_probability(0.1, 0.1)), abs=0.03)
    with pytest.raises(ValueError, match=r"\(M, N\)"):
        mc_flip_probability(h[0], 0.1, 2)
