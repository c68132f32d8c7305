"""EMPG (rl_lab.algos.empg): the scaling arithmetic (batch mean exactly 1, monotone in entropy,
range e^k), the future-clarity bonus, per-turn entropies from turn ids, and Proposition 1's
identity E_{c~P} ||e_c - P||^2 = 1 - sum P^2 = 1 - exp(-H_2) by enumeration and by autograd."""
import math

import pytest
import torch
import torch.nn.functional as F

from rl_lab import RLConfig
from rl_lab.algos.empg import (
    empg_advantages,
    future_clarity_bonus,
    gini_impurity,
    normalized_entropy,
    renyi2_entropy,
    self_calibrating_scale,
    step_entropies,
)
from rl_lab.config import ConfigError


def test_the_gini_identity_by_enumeration_and_by_autograd():
    g = torch.Generator().manual_seed(0)
    for V in (2, 5, 13):
        z = (3 * torch.randn(V, generator=g, dtype=torch.float64)).requires_grad_()
        P = F.softmax(z, -1)
        enumerated = sum(P[c] * ((F.one_hot(torch.tensor(c), V) - P) ** 2).sum() for c in range(V))
        autograd = sum(P[c] * torch.autograd.grad(F.log_softmax(z, -1)[c], z, retain_graph=True)[0].pow(2).sum()
                       for c in range(V))
        for value in (enumerated, autograd):
            assert value.item() == pytest.approx(gini_impurity(P).item(), abs=1e-14)
            assert value.item() == pytest.approx(1 - math.exp(-renyi2_entropy(P).item()), abs=1e-14)


def test_step_entropies_are_per_turn_means_over_counted_tokens():
    entropy = torch.tensor([[1.0, 3.0, 9.0, 2.0, 4.0, 0.0], [5.0, 7.0, 0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0, 1, 1, 0], [1, 1, 0, 0, 0, 0]], dtype=torch.bool)   # position 2: a tool output
    turns = torch.tensor([[0, 0, 0, 1, 1, -1], [0, 0, -1, -1, -1, -1]])
    H, exists = step_entropies(entropy, mask, turns)
    assert H.tolist() == [[2.0, 3.0], [6.0, 0.0]] and exists.tolist() == [[True, True], [True, False]]
    H1, e1 = step_entropies(entropy, mask)                 # no turn ids: one step per row
    assert H1[:, 0].tolist() == [2.5, 6.0] and e1.all()


def test_the_scale_has_batch_mean_one_falls_with_entropy_and_spans_at_most_e_to_the_k():
    g = torch.Generator().manual_seed(1)
    H = torch.rand(6, 4, generator=g, dtype=torch.float64) * 3
    exists = torch.rand(6, 4, generator=g) > 0.3
    Hn = normalized_entropy(H, exists)
    assert Hn[exists].min() == 0 and Hn[exists].max() == pytest.approx(1, abs=1e-7)
    for k in (0.5, 1.0, 2.0):
        scale = self_calibrating_scale(Hn, exists, k)
        assert scale[exists].mean().item() == pytest.approx(1.0, abs=1e-15)
        assert (scale[~exists] == 0).all()
        order = H[exists].argsort()
        assert (scale[exists][order].diff() <= 0).all()    # more uncertain, smaller scale
        assert scale[exists].max() / scale[exists].min() <= math.exp(k) + 1e-9


def test_the_bonus_reads_the_next_step_and_lies_in_its_range():
    H = torch.tensor([[0.0, 1.0, 0.5], [2.0, 0.0, 0.0]], dtype=torch.float64)
    exists = torch.tensor([[True, True, True], [True, False, False]])
    Hn = normalized_entropy(H, exists)
    f = future_clarity_bonus(Hn, exists, k_f=1.0)
    assert f[0, 0].item() == pytest.approx(math.exp(-0.5))   # next step: H~ = 1/2
    assert f[0, 1].item() == pytest.approx(math.exp(-0.25))
    assert f[0, 2] == 0 and (f[1] == 0).all()                # no next step, no bonus
    assert (0.1 * f[f > 0] >= 0.1 * math.exp(-1) - 1e-12).all() and (0.1 * f <= 0.1).all()


def test_confident_errors_are_penalised_more_than_uncertain_ones():
    """Two failed single-step episodes, one confident (low entropy), one uncertain: before the
    batch normalisation the confident one's advantage is the more negative."""
    adv = torch.tensor([[-1.0, -1.0], [-1.0, -1.0], [1.0, 1.0]])
    entropy = torch.tensor([[0.1, 0.1], [2.0, 2.0], [1.0, 1.0]])
    mask = torch.ones(3, 2, dtype=torch.bool)
    out, metrics = empg_advantages(adv, entropy, mask, zeta=0.0, normalize=False)
    assert out[0, 0] < out[1, 0] < 0 and out[2, 0] > 0
    assert metrics["empg/scale_max"] / metrics["empg/scale_min"] == pytest.approx(math.e, rel=1e-6)
    norm, _ = empg_advantages(adv, entropy, mask)
    assert norm.mean().item() == pytest.approx(0.0, abs=1e-6)


def test_empg_config_is_validated():
    assert RLConfig(empg=True).empg.k == 1.0
    with pytest.raises(ConfigError, match=r"RLConfig.empg: EMPGConfig.k=0.0"):
        RLConfig(empg={"k": 0.0})
    with pytest.raises(ConfigError, match="EMPGConfig.zeta"):
        RLConfig(empg={"zeta": -0.1})


def test_a_trainer_step_with_empg_modulates_per_turn():
    from helpers import scripted_batch, step_on
    batch, _ = scripted_batch()                             # episodes of 1 to 3 turns, with tool outputs
    plain = step_on(batch, [], max_completion_length=40)
    empg = step_on(batch, [], max_completion_length=40, empg=True)
    assert "empg/scale_min" not in plain
    assert 0 < empg["empg/scale_min"] <= 1 <= empg["empg/scale_max"] <= math.e + 1e-9
    assert 0 < empg["empg/bonus_mean"] <= 1
    assert empg["grad_norm"] > 0 and empg["grad_norm"] != plain["grad_norm"]


def _zero_reward_batch():
    """Two-turn episodes (a call turn, an answer turn) whose rewards are all equal: A = 0."""
    g = torch.Generator().manual_seed(0)
    B, T = 8, 10
    turn_ids = torch.tensor([[0] * 6 + [1] * 4] * B)
    return torch.zeros(B, T), torch.rand(B, T, generator=g) * 2, torch.ones(B, T, dtype=torch.bool), turn_ids


def test_without_reward_spread_the_sum_order_pushes_at_full_size():
    A, H, mask, turns = _zero_reward_batch()
    out, _ = empg_advantages(A, H, mask, turns, normalize="sum")
    call, answer = out[turns == 0], out[turns == 1]
    # the bonus alone, whitened: call turns up, answer turns down, unit variance over the batch
    assert call.mean() > 0.5 and (answer < -0.5).all()
    assert abs(out[mask].std().item() - 1) < 1e-4


def test_without_reward_spread_the_scaled_advantage_order_leaves_the_bonus_alone():
    A, H, mask, turns = _zero_reward_batch()
    out, m = empg_advantages(A, H, mask, turns, zeta=0.1, normalize="scaled_advantage")
    call, answer = out[turns == 0], out[turns == 1]
    assert (answer == 0).all()                                   # the last turn has no bonus
    assert (call >= 0.1 * math.exp(-1) - 1e-7).all() and (call <= 0.1 + 1e-7).all()
    none, _ = empg_advantages(A, H, mask, turns, zeta=0.1, normalize="none")
    assert torch.equal(out, none)                                # whitening zeros changes nothing


def test_the_two_orders_agree_when_zeta_is_zero_and_differ_otherwise():
    A, H, mask, turns = _zero_reward_batch()
    A = torch.randn(A.shape, generator=torch.Generator().manual_seed(1)).sign().expand_as(A).clone()
    s0, _ = empg_advantages(A, H, mask, turns, zeta=0.0, normalize="sum")
    a0, _ = empg_advantages(A, H, mask, turns, zeta=0.0, normalize="scaled_advantage")
    assert torch.allclose(s0, a0, atol=1e-12)
    s1, _ = empg_advantages(A, H, mask, turns, normalize="sum")
    a1, _ = empg_advantages(A, H, mask, turns, normalize="scaled_advantage")
    assert not torch.allclose(s1, a1)
    with pytest.raises(ValueError, match="normalize"):
        empg_advantages(A, H, mask, turns, normalize="bonus_first")
    with pytest.raises(ConfigError, match="EMPGConfig.normalize"):
        RLConfig(empg={"normalize": "bonus_first"})


def test_a_trainer_step_without_reward_spread_updates_only_under_empg():
    from helpers import SMALL, FixedEngine, scripted_batch

    from rl_lab import Trainer
    from rl_lab.models import build_model
    batch, _ = scripted_batch()

    def step(**cfg):
        model, tok = build_model("0.3M", seed=0)
        trainer = Trainer(RLConfig(**{**SMALL, "max_completion_length": 40, **cfg}, max_steps=1, seed=0), model=model,
                          tokenizer=tok, engine=FixedEngine(model, tok, batch),
                          reward_funcs=[lambda completions, **kw: [0.0] * len(completions)])
        return trainer.step()["grad_norm"]
    assert step() == 0                                           # GRPO: no spread, no gradient
    full, small = step(empg={"normalize": "sum"}), step(empg={"normalize": "scaled_advantage"})
    assert full > 0 and 0 < small < full                         # a reward-free push; far smaller when
                                                                 # the bonus is added after whitening
