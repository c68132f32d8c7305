import pytest
import torch

from rl_lab.algos.losses import aggregate_loss, group_advantages, kl_k3, policy_loss


def test_grpo_advantages_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])   # two groups of 3
    g = torch.tensor([0, 0, 0, 1, 1, 1])
    adv = group_advantages(r, g, scale_rewards="none")
    assert torch.allclose(adv, torch.tensor([2 / 3, -1 / 3, -1 / 3, 0, 0, 0]))
    adv = group_advantages(r, g, scale_rewards="group")
    std = torch.tensor([1.0, 0.0, 0.0]).std()          # unbiased, as TRL and verl
    assert torch.allclose(adv[:3], torch.tensor([2 / 3, -1 / 3, -1 / 3]) / (std + 1e-6))
    assert torch.equal(adv[3:], torch.zeros(3))         # no spread, no signal


def test_batch_scaling_and_rloo():
    r = torch.tensor([1.0, 0.0, 3.0, 1.0])
    g = torch.tensor([0, 0, 1, 1])
    centred = torch.tensor([0.5, -0.5, 1.0, -1.0])
    assert torch.allclose(group_advantages(r, g, scale_rewards="batch"), centred / (centred.std() + 1e-6))
    # leave-one-out: r_i - mean of the others
    assert torch.allclose(group_advantages(r, g, estimator="rloo"), torch.tensor([1.0, -1.0, 2.0, -2.0]))


def test_invalid_rows_are_left_out_of_the_statistics():
    r = torch.tensor([1.0, 0.0, float("nan"), 5.0])
    g = torch.tensor([0, 0, 0, 0])
    valid = torch.tensor([True, True, False, False])
    adv = group_advantages(r, g, valid, scale_rewards="none")
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, 0.0, 0.0]))
    lonely = group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), torch.tensor([True, False]))
    assert torch.equal(lonely, torch.zeros(2))          # one valid member: no baseline, no signal


def test_aggregation_modes_by_hand():
    L = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])   # last row empty
    assert aggregate_loss(L, m, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate_loss(L, m, "token-sum").item() == pytest.approx(10)
    assert aggregate_loss(L, m, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate_loss(L, m, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate_loss(L, m, "seq-mean-token-sum-norm").item() == pytest.approx(10 / (2 * 3))
    assert aggregate_loss(L, m, "seq-mean-token-sum-norm", norm_length=5).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        aggregate_loss(L, m, "mean")


def test_on_policy_ppo_and_reinforce_have_the_same_gradient():
    torch.manual_seed(0)
    theta = torch.randn(4, 5, requires_grad=True)
    adv = torch.tensor([1.0, -0.5, 2.0, 0.0])
    mask = torch.ones(4, 5)
    grads = []
    for loss in ("reinforce", "ppo_clip"):
        logp = torch.log_softmax(theta, -1)
        per_tok, _ = policy_loss(logp, logp.detach(), adv, mask, loss)
        g, = torch.autograd.grad(aggregate_loss(per_tok, mask), theta)
        grads.append(g)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_ppo_clip_stops_the_gradient_outside_the_trust_region():
    logp = torch.tensor([[0.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-1.0, 0.0]])                   # token 0: ratio e > 1 + eps
    per_tok, info = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), "ppo_clip", 0.2)
    g, = torch.autograd.grad(per_tok.sum(), logp)
    assert g[0, 0] == 0 and g[0, 1] != 0
    assert info["clip_ratio/region_mean"] == 0.5


def test_is_weights_scale_each_token():
    logp = torch.zeros(1, 2, requires_grad=True)
    w = torch.tensor([[2.0, 0.5]])
    per_tok, _ = policy_loss(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2), "reinforce",
                             is_weights=w)
    g, = torch.autograd.grad(per_tok.sum(), logp)
    assert torch.allclose(g, -w)


def test_k3_is_nonnegative_and_zero_on_policy():
    lp = torch.log_softmax(torch.randn(3, 4), -1)
    assert torch.all(kl_k3(lp, lp) == 0)
    assert torch.all(kl_k3(lp, lp + torch.randn(3, 4)) >= 0)


def test_dual_clip_caps_the_loss_of_negative_advantages():
    logp = torch.log(torch.tensor([[5.0, 5.0, 0.5]])).requires_grad_(True)
    old = torch.zeros(1, 3)                                           # ratios 5, 5, 0.5
    A = torch.tensor([[-1.0, 1.0, -1.0]])                             # per-token advantages (B, T)
    per_tok, info = policy_loss(logp, old, A, torch.ones(1, 3), "ppo_clip", 0.2, clip_ratio_c=3.0)
    assert per_tok.tolist()[0] == pytest.approx([3.0, -1.2, 0.8])     # -A*c, clipped, clipped
    g, = torch.autograd.grad(per_tok.sum(), logp)
    assert g.abs().sum() == 0                                         # all three are flat
    assert info["actor/pg_clipfrac_lower"] == pytest.approx(1 / 3)
    plain, _ = policy_loss(logp, old, A, torch.ones(1, 3), "ppo_clip", 0.2)
    assert plain[0, 0].item() == pytest.approx(5.0)                   # without it: -A * r, unbounded


def test_padding_never_changes_the_loss():
    L = torch.tensor([[1.0, float("nan")], [2.0, float("inf")]])
    m = torch.tensor([[1, 0], [1, 0]])
    for mode in ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum",
                 "seq-mean-token-sum-norm"):
        assert torch.isfinite(aggregate_loss(L, m, mode)), mode


def test_reinforce_plus_plus_and_reward_to_go_by_hand():
    from rl_lab.algos.advantages import outcome_token_rewards, reinforce_plus_plus, reward_to_go
    m = torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0]])
    r = outcome_token_rewards(torch.tensor([4.0, 2.0]), m)
    assert r.tolist() == [[0, 0, 4, 0], [0, 2, 0, 0]]
    assert reward_to_go(r, m, 0.5).tolist() == [[1, 2, 4, 0], [1, 2, 0, 0]]
    adv, _ = reinforce_plus_plus(r, m, 0.5)
    vals = torch.tensor([1.0, 2, 4, 1, 2])                            # whitened over the 5 counted tokens
    assert torch.allclose(adv[m.bool()], (vals - vals.mean()) / vals.std(), atol=1e-6)


def test_optimal_token_baseline_by_hand():
    from rl_lab.algos.advantages import optimal_token_baseline
    m = torch.ones(2, 3, dtype=torch.float64)
    r = torch.tensor([[0, 0, 1.0], [0, 0, 0.0]], dtype=torch.float64)
    lp = torch.log(torch.full((2, 3), 0.5, dtype=torch.float64))
    spp = torch.full((2, 3), 0.5, dtype=torch.float64)               # w = 1 - 2(0.5) + 0.5 = 0.5
    adv, G = optimal_token_baseline(r, m, torch.tensor([0, 0]), lp, spp)
    assert torch.allclose(adv, torch.tensor([[0.5] * 3, [-0.5] * 3], dtype=torch.float64), atol=1e-7)
    # unequal path variance: the baseline leans toward the high-variance (low-probability) path
    lp2 = torch.log(torch.tensor([[0.1] * 3, [0.9] * 3], dtype=torch.float64))
    adv, _ = optimal_token_baseline(r, m, torch.tensor([0, 0]), lp2, spp)
    assert adv[0, 0] < 0.5 and adv[1, 0] < -0.5
    # zero tail: past the second-longest member the longest gets no baseline (A = G)
    m3 = torch.tensor([[1.0, 1, 1], [1, 0, 0]], dtype=torch.float64)
    adv, G = optimal_token_baseline(r, m3, torch.tensor([0, 0]), lp, spp)
    assert torch.equal(adv[0, 1:], G[0, 1:])


def test_the_registered_estimators_on_advantage_inputs():
    from rl_lab.algos.estimators import ADV_ESTIMATORS, AdvantageInputs
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    g = torch.tensor([0, 0, 1, 1])
    m = torch.ones(4, 3, dtype=torch.bool)
    inputs = AdvantageInputs(r, m, g, valid=torch.ones(4, dtype=torch.bool))
    grpo = ADV_ESTIMATORS["grpo"](inputs)
    assert torch.allclose(grpo, group_advantages(r, g)[:, None].expand(4, 3))
    for est in ("reinforce_plus_plus", "reinforce_plus_plus_baseline"):
        adv = ADV_ESTIMATORS[est](inputs)
        assert adv.shape == (4, 3) and torch.isfinite(adv).all()
    with pytest.raises(ValueError, match="needs old_logp and sum_pi_sq"):
        ADV_ESTIMATORS["optimal_token_baseline"](inputs)
    inputs.old_logp, inputs.sum_pi_sq = torch.full((4, 3), -1.0), torch.full((4, 3), 0.3)
    adv = ADV_ESTIMATORS["optimal_token_baseline"](inputs)
    assert adv[2:].abs().max() < 1e-6                                 # a group with equal rewards: no signal


def test_only_one_vocabulary_sized_tensor_is_kept_for_the_backward(fresh_tiny):
    """token_logprobs keeps one (B, T, V) tensor in the autograd graph (log_softmax's output,
    which its backward needs, and which gather's backward references too), with or without the
    entropy metric; the entropy has no gradient."""
    from rl_lab.algos.losses import token_logprobs

    model, tok = fresh_tiny
    B, P, T, V = 2, 3, 5, len(tok)
    g = torch.Generator().manual_seed(0)
    prompt, completion = torch.randint(1, V, (B, P), generator=g), torch.randint(1, V, (B, T), generator=g)
    saved_shapes = []

    def pack(t):
        saved_shapes.append((*t.shape, t.untyped_storage().data_ptr()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        pi = token_logprobs(model, prompt, torch.ones_like(prompt), completion, with_entropy=True)
        logp, entropy = pi.logp, pi.entropy
    vocab_sized = {s for s in saved_shapes if s[-2] == V and s[0] == B}     # distinct storages
    assert [s[:3] for s in vocab_sized] == [(B, T, V)], vocab_sized
    assert logp.requires_grad and not entropy.requires_grad and entropy.shape == (B, T)


@pytest.mark.parametrize("estimator,needs", [("grpo", False), ("optimal_token_baseline", True)])
def test_the_trainer_keeps_the_full_distributions_only_when_an_estimator_reads_them(estimator, needs):
    from rl_lab.config import RLConfig, SamplingConfig
    from rl_lab.trainer import Trainer

    tr = Trainer(RLConfig(task="addition", model="0.3M", max_steps=1, prompts_per_step=2, num_generations=2,
                          max_completion_length=4, advantage_estimator=estimator, progress_bar=False))
    batch = tr.engine.generate(["1+2=", "3+4="], 2, SamplingConfig(max_completion_length=4))
    pi = tr._logprobs(batch, with_entropy=True)
    assert (pi.logp_all is not None) == needs and pi.logp.shape == pi.entropy.shape
    assert tr._needs_full_logprobs() == needs
