"""SimpleTIR (rl_lab.algos.simpletir): void-turn filtering drops whole episodes from the loss (and,
under the named old scope, from the group statistics), and the measurements the source claims (low-probability tokens right after
tool outputs, their logit gradient norm) on hand-built batches."""
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from helpers import CHARS, scripted_batch, step_on

from rl_lab import RLConfig
from rl_lab.algos.losses import group_advantages
from rl_lab.algos.simpletir import (
    after_tool_output,
    drop_void_trajectories,
    logit_gradient_norm,
    mask_void_rows,
    tool_conditioned_token_stats,
)
from rl_lab.config import ConfigError


def test_under_the_old_scope_a_void_row_leaves_the_loss_and_the_group_statistics():
    valid = torch.tensor([True, True, True, False])
    void = torch.tensor([False, True, False, True])
    kept, metrics = drop_void_trajectories(valid, void)
    assert kept.tolist() == [True, False, True, False]
    assert metrics == {"filter/void_trajectories": 1}      # the invalid row is not counted twice
    rewards = torch.tensor([1.0, 5.0, 0.0, 2.0])
    adv = group_advantages(rewards, torch.zeros(4, dtype=torch.long), kept, "grpo", "none")
    assert adv.tolist() == [0.5, 0.0, -0.5, 0.0]           # mean over the two kept rows only


def test_the_episode_bookkeeping_flags_the_row_cut_mid_turn():
    scripts = ("(2*3)|6", "(1+1)" + "1" * 50, "7", "(1+1)|" + "2" * 50)   # rows 1 and 3 are cut
    batch, _ = scripted_batch(env=replace(CHARS, max_turns=2), scripts=scripts, length=20)
    assert batch.has_void_turn.tolist() == [False, True, False, True]
    assert batch.episode_metrics["turns/void_fraction"] == 0.5


def test_a_turn_ended_early_without_a_call_or_an_answer_is_void():
    """SimpleTIR's definition: neither a complete tool call nor a final answer.  A premature <eos>
    (an unfinished call, nothing at all, or text that is not in the answer format) is void too."""
    digits = replace(CHARS, max_turns=2, answer_pattern=r"-?[\d,]+")
    scripts = ("(2*3)|6", "(2*3", "", "(1+1)|x")
    batch, _ = scripted_batch(env=digits, scripts=scripts, length=20)
    assert batch.has_void_turn.tolist() == [False, True, True, True]
    assert batch.episode_metrics["turns/void_eos_fraction"] == 0.75
    assert batch.episode_metrics["turns/void_fraction"] == 0.75
    anything, _ = scripted_batch(env=replace(CHARS, max_turns=2), scripts=scripts, length=20)
    assert anything.has_void_turn.tolist() == [False, False, True, False]   # default: any text answers
    from rl_lab.tasks import get_task
    env = get_task("multiplication_tool").environment
    assert env.is_final_answer("9716") and env.is_final_answer(" 9,716") and not env.is_final_answer("(347*2")


def test_mask_void_turns_drops_the_void_episode_from_a_trainer_step():
    batch, _ = scripted_batch(scripts=("(2*3)|6", "(1+1)" + "1" * 50, "7", "(9)|5"), length=24)
    assert batch.has_void_turn.tolist() == [False, True, False, False]
    plain = step_on(batch, [], mask_void_turns=False, max_completion_length=24)
    filtered = step_on(batch, [], mask_void_turns=True, max_completion_length=24)
    old = step_on(batch, [], mask_void_turns={"scope": "loss_and_groups"}, max_completion_length=24)
    assert "filter/void_trajectories" not in plain and filtered["filter/void_trajectories"] == 1
    assert "tir/tokens/after_tool" not in plain              # tool_token_stats is off by default
    assert filtered["faults/masked_samples"] == 0          # a design choice, not a fault
    assert filtered["grad_norm"] != plain["grad_norm"] and filtered["grad_norm"] > 0
    assert old["filter/void_trajectories"] == 1 and old["grad_norm"] not in (plain["grad_norm"], filtered["grad_norm"])


def test_mask_void_turns_must_be_a_config_or_a_bool():
    with pytest.raises(ConfigError, match="mask_void_turns"):
        RLConfig(mask_void_turns="yes")


def test_the_default_scope_masks_the_loss_only_and_keeps_the_group_statistics():
    """SimpleTIR's trainer multiplies only the loss mask by the void mask: the advantages are
    computed over every rollout of the prompt.  A success whose seven group-mates are void keeps a
    positive advantage (scope "loss"); dropped from the group statistics too ("loss_and_groups",
    rl_lab before issue 53) it is alone in its group and gets 0."""
    rewards = torch.tensor([1.0] + [0.0] * 7)
    groups, valid = torch.zeros(8, dtype=torch.long), torch.ones(8, dtype=torch.bool)
    void = torch.tensor([False] + [True] * 7)
    mask = torch.ones(8, 3, dtype=torch.bool)
    loss_mask, metrics = mask_void_rows(mask, valid, void)
    assert loss_mask[0].all() and not loss_mask[1:].any() and metrics == {"filter/void_trajectories": 7}
    adv = group_advantages(rewards, groups, valid, "grpo", "group")
    assert adv[0] > 2                                          # (1 - 1/8) / std: a strong push up
    kept, _ = drop_void_trajectories(valid, void)
    assert group_advantages(rewards, groups, kept, "grpo", "group")[0] == 0


@pytest.fixture
def probe():
    from rl_lab.method_specs import MethodSpec, register_method, unregister_method
    register_method(MethodSpec("probe", "helpers:StepProbe", when=None))
    yield
    unregister_method("probe")


@pytest.mark.parametrize("scope", ["loss", "loss_and_groups"])
def test_a_trainer_step_keeps_the_void_row_in_its_group_only_under_the_loss_scope(scope, probe):
    """Rows 0 and 1 answer one prompt; row 1 is cut mid-turn (void).  Scope "loss": row 0's
    advantage is its reward against the group of both rows, and row 1 leaves the loss mask.
    Scope "loss_and_groups": row 0 is alone in its group, advantage 0."""
    batch, _ = scripted_batch(scripts=("(2*3)|6", "(1+1)" + "1" * 50, "7", "(9)|5"), length=24)
    assert batch.has_void_turn.tolist() == [False, True, False, False]
    row = step_on(batch, [], mask_void_turns={"scope": scope}, max_completion_length=24,
                  extra_methods={"probe": True})
    plain = step_on(batch, [], max_completion_length=24, extra_methods={"probe": True})
    adv, mask = row["probe/advantages"], row["probe/mask"]
    assert row["filter/void_trajectories"] == 1
    assert not mask[1].any() and not adv[1].any()              # the void row trains no token
    assert torch.equal(mask[0], plain["probe/mask"][0]) and mask[2:].equal(plain["probe/mask"][2:])
    if scope == "loss":
        assert adv[0].abs().max() > 0
        assert torch.equal(adv[0], plain["probe/advantages"][0])   # the same advantage as without the filter
        assert row["probe/trains"].all()
    else:
        assert not adv[0].any()                                    # alone in its group
        assert row["probe/trains"].tolist() == [True, False, True, True]


def test_mask_void_turns_true_is_simpletirs_scope():
    assert RLConfig(mask_void_turns=True).mask_void_turns.scope == "loss"
    assert RLConfig.from_dict({"mask_void_turns.scope": "loss_and_groups"}).mask_void_turns.scope == "loss_and_groups"
    assert RLConfig(mask_void_turns=False).mask_void_turns is None
    with pytest.raises(ConfigError, match="scope"):
        RLConfig(mask_void_turns={"scope": "groups"})


def test_logit_gradient_norm_is_the_autograd_norm():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(2, 3, 7, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 7, (2, 3), generator=g)
    A = torch.tensor([[1.0, -2.0, 0.5], [3.0, -1.0, 0.0]], dtype=torch.float64)
    rho = torch.rand(2, 3, generator=g, dtype=torch.float64) + 0.5
    logp_all = F.log_softmax(z, -1)
    loss_terms = -(A * rho * logp_all.gather(-1, y[..., None]).squeeze(-1))
    grads = torch.autograd.grad(loss_terms.sum(), z)[0]                       # each term sees only its z_t
    expected = grads.norm(dim=-1)
    got = logit_gradient_norm(logp_all.detach(), y, A, rho)
    assert torch.allclose(got, expected, atol=1e-12)


def test_a_rare_token_under_an_inflated_ratio_gives_the_check_21_numbers():
    """pi_old = 1e-4, pi = 1e-2, A = -1: rho = 100 and the norm is 100 sqrt(1 - 0.02 + sum pi^2),
    between ~99 (pi spread) and ~140 (the rest of pi on one token)."""
    V = 1001
    spread = torch.full((V,), 0.99 / (V - 1), dtype=torch.float64)
    spread[0] = 0.01
    peaked = torch.zeros(V, dtype=torch.float64)
    peaked[0], peaked[1] = 0.01, 0.99
    for pi, lo, hi in ((spread, 98.9, 99.1), (peaked, 139.9, 140.1)):
        logp_all = pi.clamp(min=1e-300).log()[None, None]
        norm = logit_gradient_norm(logp_all, torch.zeros(1, 1, dtype=torch.long),
                                   torch.tensor([-1.0], dtype=torch.float64), torch.tensor([[100.0]]))
        assert lo < norm.item() < hi


def test_after_tool_output_marks_the_first_tokens_the_model_writes_after_an_observation():
    env = torch.tensor([[0, 0, 1, 1, 0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 1, 0, 1, 0], [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    assert after_tool_output(env, mask, 1)[0].nonzero().squeeze(-1).tolist() == [4, 8]
    assert after_tool_output(env, mask, 2)[0].nonzero().squeeze(-1).tolist() == [4, 5, 8]
    assert not after_tool_output(env, mask, 2)[1].any()
    with pytest.raises(ValueError, match="window"):
        after_tool_output(env, mask, 0)


def test_tool_conditioned_stats_on_a_hand_built_batch():
    """Row 0: a confident turn, a tool output, then a token pi gave 0.05 and a confident one; row 1
    has no tool output.  After the tool: 1 token, low; elsewhere 5 tokens, 1 low."""
    V = 4
    probs = torch.tensor([0.9, 0.05, 0.03, 0.02], dtype=torch.float64)
    logp_all = probs.log().expand(2, 5, V).clone()
    tokens = torch.tensor([[0, 0, 3, 1, 0], [0, 2, 0, 0, 0]])
    env = torch.tensor([[0, 0, 1, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    mask = torch.tensor([[1, 1, 0, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)
    stats = tool_conditioned_token_stats(logp_all, tokens, mask, env, low_prob=0.1)
    sum_sq = float((probs ** 2).sum())
    assert stats["tir/tokens/after_tool"] == 1 and stats["tir/tokens/elsewhere"] == 5
    assert stats["tir/low_prob_share/after_tool"] == 1.0
    assert stats["tir/low_prob_share/elsewhere"] == 0.2
    rare = math.sqrt(1 - 2 * 0.05 + sum_sq)
    assert stats["tir/logit_grad_norm/after_tool_mean"] == pytest.approx(rare)
    assert stats["tir/logit_grad_norm/after_tool_max"] > stats["tir/logit_grad_norm/elsewhere_mean"]
    assert "tir/abs_logp_diff/after_tool" not in stats                # only with logp_diff
    diff = torch.tensor([[0.1, -0.2, 9.0, -0.8, 0.3], [0.4, 0.0, 9.0, 9.0, 9.0]], dtype=torch.float64)
    with_diff = tool_conditioned_token_stats(logp_all, tokens, mask, env, logp_diff=diff)
    assert with_diff["tir/abs_logp_diff/after_tool"] == pytest.approx(0.8)          # |-0.8|, one token
    assert with_diff["tir/abs_logp_diff/elsewhere"] == pytest.approx((0.1 + 0.2 + 0.3 + 0.4 + 0.0) / 5)
    empty = tool_conditioned_token_stats(logp_all, tokens, mask, torch.zeros_like(env), logp_diff=diff)
    assert empty["tir/tokens/after_tool"] == 0 and math.isnan(empty["tir/low_prob_share/after_tool"])
    assert math.isnan(empty["tir/abs_logp_diff/after_tool"])
    with pytest.raises(ValueError, match="low_prob"):
        tool_conditioned_token_stats(logp_all, tokens, mask, env, low_prob=1.5)


def test_tool_token_stats_are_logged_for_a_multi_turn_batch():
    batch, _ = scripted_batch()
    row = step_on(batch, [], tool_token_stats=True, max_completion_length=40)
    assert row["tir/tokens/after_tool"] == 4                 # one answer token after each of the 4 outputs
    assert row["tir/tokens/elsewhere"] == int(batch.completion_mask.sum()) - 4
    assert 0 <= row["tir/low_prob_share/after_tool"] <= 1 and row["tir/logit_grad_norm/after_tool_max"] > 0
    assert row["tir/abs_logp_diff/after_tool"] >= 0 and row["tir/abs_logp_diff/elsewhere"] >= 0
