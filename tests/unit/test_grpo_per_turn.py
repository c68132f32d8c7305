"""GRPO grouped per (prompt, turn) (`advantage_estimator="grpo_per_turn"`, rl_lab.algos.trloo)
against TRLOO and rl_lab's trajectory-level `grpo` (issue 28): the direction bias of a
self-included mean per turn, measured exactly on the two-turn toy, is what TRLOO removes, and
trajectory-level GRPO never had it (its expectation is (1 - 1/N) grad J, a rescaling).  Also the
flaky calculator (`MultiplicationTool(tool_failure_rate=p)`) that makes the number of turns vary
within a group, and the per-step metrics of how per-turn groups differ."""
import math

import pytest
import torch

from rl_lab import RLConfig
from rl_lab.agents import ToolEnvironment
from rl_lab.algos.estimators import ADV_ESTIMATORS, AdvantageInputs
from rl_lab.algos.trloo import (
    grpo_per_turn_advantages,
    trajectory_self_included,
    turn_group_metrics,
    turn_group_normalized,
    turn_leave_one_out,
    turn_self_included,
)
from rl_lab.exact.turns import TwoTurnToy, angle_degrees, expected_update, true_gradient
from rl_lab.tasks import MultiplicationTool


# ----------------------------------------------------------------------------- the exact toy
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("N", [2, 4])
def test_per_turn_grouping_turns_the_update_and_trloo_and_trajectory_grpo_do_not(seed, N):
    toy = TwoTurnToy(n1=3, n2=3, stops=(0,), seed=seed)
    grad = true_gradient(toy)
    per_turn = expected_update(toy, N, turn_self_included)          # GRPO's mean per (prompt, turn)
    loo = expected_update(toy, N, turn_leave_one_out)               # TRLOO
    trajectory = expected_update(toy, N, trajectory_self_included)  # rl_lab's grpo: one mean per episode
    assert 1.0 < angle_degrees(per_turn, grad) < 10.0               # a few degrees off grad J
    assert (loo - grad).abs().max() < 1e-12                          # unbiased
    # the point: trajectory-level mean-centring is exactly (1 - 1/N) grad J, whatever the turns
    assert torch.allclose(trajectory, (1 - 1 / N) * grad, atol=1e-14, rtol=0)
    assert angle_degrees(trajectory, grad) < 1e-5
    # the bias needs n_k to vary: with every episode reaching turn 2 the per-turn mean only rescales
    every = TwoTurnToy(n1=3, n2=3, stops=(), seed=seed)
    assert angle_degrees(expected_update(every, N, turn_self_included), true_gradient(every)) < 1e-5


def test_the_toys_bias_grows_with_the_spread_of_the_turns_shrink_factors():
    """The per-turn mean shrinks turn 1 by 1 - 1/N and turn 2 by E[1 - 1/n_2]; the angle follows
    their gap, largest when turn 2 is rare (a lone episode at turn 2 gets no gradient)."""
    angles = []
    for answer_logit in (-3.0, 0.0, 3.0):                    # how often turn 1 ends the episode
        toy = TwoTurnToy(n1=3, n2=3, stops=(0,), seed=0)
        with torch.no_grad():
            toy.theta1[0] = answer_logit
        angles.append(angle_degrees(expected_update(toy, 4, turn_self_included), true_gradient(toy)))
    assert angles[0] < angles[1] < angles[2] and angles[0] < 1.0


# ----------------------------------------------------------------------------- the estimator
def test_grouping_per_prompt_and_turn_by_hand():
    G = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.5, 0.5]], dtype=torch.float64)
    exists = torch.tensor([[True, True], [True, True], [True, False], [True, True]])
    groups = torch.tensor([0, 0, 0, 1])
    none = turn_group_normalized(G, exists, groups, "none")
    # turn 0: group 0 has rows 0-2 (mean 2/3); turn 1: rows 0 and 1 (mean 1/2); group 1 is alone: 0
    assert none[:, 0].tolist() == pytest.approx([1 / 3, -2 / 3, 1 / 3, 0.0])
    assert none[:, 1].tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])
    assert torch.equal(none, turn_self_included(G, exists, groups))
    group = turn_group_normalized(G, exists, groups, "group")
    std0, std1 = math.sqrt((2 * (1 / 3) ** 2 + (2 / 3) ** 2) / 2), math.sqrt(0.5)   # unbiased, as grpo
    assert group[:, 0].tolist() == pytest.approx([(1 / 3) / (std0 + 1e-6), (-2 / 3) / (std0 + 1e-6),
                                                  (1 / 3) / (std0 + 1e-6), 0.0])
    assert group[:, 1].tolist() == pytest.approx([0.5 / (std1 + 1e-6), -0.5 / (std1 + 1e-6), 0.0, 0.0])
    batch = turn_group_normalized(G, exists, groups, "batch")
    assert batch[exists].tolist() == pytest.approx((none[exists] / (none[exists].std() + 1e-6)).tolist())
    with pytest.raises(ValueError, match="scale_rewards"):
        turn_group_normalized(G, exists, groups, "prompt")


@pytest.mark.parametrize("scale", ["group", "none", "batch"])
def test_one_turn_is_trajectory_level_grpo(scale):
    g = torch.Generator().manual_seed(0)
    rewards = (torch.rand(16, generator=g) > 0.5).float()
    rewards[3] = float("nan")                                    # an invalid row
    mask = torch.ones(16, 5, dtype=torch.bool)
    mask[5, 3:] = False
    group_ids = torch.arange(4).repeat_interleave(4)
    valid = torch.isfinite(rewards)
    grpo = ADV_ESTIMATORS["grpo"](AdvantageInputs(rewards, mask, group_ids, valid, scale))
    assert grpo.abs().sum() > 0
    for turn_ids in (None, torch.zeros(16, 5, dtype=torch.long)):   # no turn ids, or one turn each
        inputs = AdvantageInputs(rewards, mask, group_ids, valid, scale, turn_ids=turn_ids)
        per_turn = ADV_ESTIMATORS["grpo_per_turn"](inputs)
        assert torch.equal(per_turn, grpo)


def test_grpo_per_turn_and_trloo_differ_by_n_over_n_minus_one_per_turn():
    """Without std scaling TRLOO's advantage is n_k / (n_k - 1) times the per-turn GRPO one."""
    mask = torch.ones(4, 4, dtype=torch.bool)
    turn_ids = torch.tensor([[0, 0, 1, 1], [0, 0, 0, 0], [0, 1, 1, 1], [0, 0, 1, 1]])
    rewards, groups, valid = torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.zeros(4, dtype=torch.long), torch.ones(4, dtype=bool)
    grpo = grpo_per_turn_advantages(rewards, mask, turn_ids, groups, valid, "none")
    loo = ADV_ESTIMATORS["trloo"](AdvantageInputs(rewards, mask, groups, valid, turn_ids=turn_ids))
    factor = torch.where(turn_ids == 0, 4 / 3, 3 / 2)           # n_0 = 4, n_1 = 3
    assert torch.allclose(loo, factor * grpo)


# ----------------------------------------------------------------------------- metrics
def test_turn_group_metrics_by_hand():
    mask = torch.ones(6, 3, dtype=torch.bool)
    # group 0: 2, 1, 2 turns (n_0 = 3, n_1 = 2); group 1: 1 turn each (constant; its n_1 = 0 is not "varying")
    turn_ids = torch.tensor([[0, 1, 1], [0, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0], [0, 0, 0]])
    m = turn_group_metrics(mask, turn_ids, torch.tensor([0, 0, 0, 1, 1, 1]))
    assert m["turns/varying_groups"] == 0.5
    # turn 0: every row shrinks by 2/3; turn 1: two rows with n_1 = 2 shrink by 1/2
    assert m["turns/shrink_spread"] == pytest.approx(2 / 3 - 1 / 2)
    flat = turn_group_metrics(mask, torch.zeros(6, 3, dtype=torch.long), torch.tensor([0, 0, 0, 1, 1, 1]))
    assert flat == {"turns/varying_groups": 0.0, "turns/shrink_spread": 0.0}


# ----------------------------------------------------------------------------- a trainer step
def capture_advantages(monkeypatch) -> list:
    """Wrap the registered grpo_per_turn: every call appends (AdvantageInputs, advantages)."""
    estimate, captured = ADV_ESTIMATORS["grpo_per_turn"], []

    def wrapped(inputs):
        captured.append((inputs, estimate(inputs)))
        return captured[-1][1]
    wrapped.needs_full_logprobs, wrapped.needs_turn_rewards = estimate.needs_full_logprobs, estimate.needs_turn_rewards
    monkeypatch.setitem(ADV_ESTIMATORS, "grpo_per_turn", wrapped)
    return captured


def test_a_trainer_step_groups_the_advantages_per_prompt_and_turn(monkeypatch):
    from helpers import SMALL, FixedEngine, distinct_characters, scripted_batch

    from rl_lab import Trainer
    from rl_lab.models import build_model

    captured = capture_advantages(monkeypatch)
    batch, tok = scripted_batch()           # group 0: 2 and 1 turns; group 1: 2 and 3 turns
    model, _ = build_model("0.3M", seed=0)
    trainer = Trainer(RLConfig(**{**SMALL, "max_completion_length": 40}, advantage_estimator="grpo_per_turn",
                               max_steps=1), model=model, tokenizer=tok, reward_funcs=[distinct_characters],
                      engine=FixedEngine(model, tok, batch))
    metrics = trainer.step()
    A, mask, turns = captured[0][1], batch.completion_mask.bool(), batch.turn_ids
    rewards = distinct_characters(batch.completions)
    assert torch.isfinite(A).all() and (A[~mask] == 0).all() and metrics["grad_norm"] > 0
    assert rewards[0] != rewards[1] and rewards[2] != rewards[3]
    # turn 0 of each pair: two rows, (R_i - mean) / (std + eps) = +-1/sqrt(2), the better row positive
    for i, j in ((0, 1), (2, 3)):
        for row, other in ((i, j), (j, i)):
            sign = 1 if rewards[row] > rewards[other] else -1
            assert A[row][mask[row] & (turns[row] == 0)].tolist() == pytest.approx([sign * 0.5 ** 0.5] *
                                                                                  int((mask[row] & (turns[row] == 0)).sum()), abs=1e-5)
    # turn 1: row 0 is alone in group 0 (row 1 answered at once): advantage 0, unlike trajectory-level grpo;
    # rows 2 and 3 are both there; turn 2: row 3 alone, 0
    assert (A[0][mask[0] & (turns[0] == 1)] == 0).all() and (mask[0] & (turns[0] == 1)).any()
    assert torch.allclose(A[2][mask[2] & (turns[2] == 1)], A[2][mask[2] & (turns[2] == 0)][:1])
    assert (A[3][mask[3] & (turns[3] == 2)] == 0).all() and (mask[3] & (turns[3] == 2)).any()
    grpo = ADV_ESTIMATORS["grpo"](AdvantageInputs(torch.tensor(rewards), mask, batch.group_ids,
                                                  torch.ones(4, dtype=torch.bool)))
    assert (grpo[0][mask[0] & (turns[0] == 1)] != 0).all()         # trajectory-level: the episode's advantage
    assert metrics["turns/varying_groups"] == 1.0                  # both groups: 2 vs 1 and 2 vs 3 turns


# ----------------------------------------------------------------------------- the flaky calculator
def test_a_flaky_tool_is_validated_and_deterministic():
    for bad in (-0.1, 1.0, "0.5", True):
        with pytest.raises(ValueError, match="failure_rate"):
            ToolEnvironment(failure_rate=bad)
        with pytest.raises(ValueError, match=r"tool_failure_rate=.*\[0, 1\)"):
            MultiplicationTool(tool_failure_rate=bad)
    env = MultiplicationTool(tool_failure_rate=0.5).environment
    assert env.failure_rate == 0.5 and env.max_turns == 2
    draws = [env.fails(row, 0, "347*28") for row in range(2000)]
    assert draws == [env.fails(row, 0, "347*28") for row in range(2000)]      # a function, no state
    assert abs(sum(draws) / 2000 - 0.5) < 0.05
    assert env.fails(0, 0, "1*2") != env.fails(0, 1, "1*2") or env.fails(1, 0, "1*2") != env.fails(1, 1, "1*2")
    assert not any(MultiplicationTool().environment.fails(row, 0, "347*28") for row in range(200))


def test_a_failed_call_ends_the_episode():
    from helpers import scripted_batch
    env = ToolEnvironment(max_turns=3, call_open="(", call_close=")", output_open="=", output_close="|",
                          failure_rate=0.5)
    scripts = ("(2*3)|6", "(2*3)|6", "(2*3)|6", "(2*3)|6")
    fails = [env.fails(row, 0, "2*3") for row in range(4)]
    assert any(fails) and not all(fails)                      # this rate and these rows give both
    batch, _ = scripted_batch(env, scripts)
    n_turns = (batch.turn_ids.max(-1).values + 1).tolist()
    for row, failed in enumerate(fails):
        assert batch.completions[row] == ("(2*3)=error|" if failed else "(2*3)=6|6")
        assert n_turns[row] == (1 if failed else 2)
    assert not batch.is_truncated.any()                       # ended by the environment, not cut
    assert not batch.has_void_turn.any()
    assert batch.episode_metrics["tools/errors"] == sum(fails)


def test_the_flaky_task_from_the_warm_start_varies_the_turns_within_groups(monkeypatch):
    """One real step from the shipped warm start with half of the calls failing: most groups have
    episodes of one and of two turns, and grpo_per_turn's advantages are the per-(prompt, turn)
    statistics of that batch, recomputed here row by row."""
    from rl_lab import Trainer
    captured = capture_advantages(monkeypatch)
    cfg = RLConfig(task="multiplication_tool", task_kwargs={"tool_failure_rate": 0.5}, model="warm-start",
                   prompts_per_step=4, num_generations=8, max_completion_length=24, max_steps=1, eval_prompts=4,
                   advantage_estimator="grpo_per_turn", progress_bar=False, seed=100)
    metrics = Trainer(cfg).step()
    x, A = captured[0]
    assert torch.isfinite(A).all() and metrics["turns/varying_groups"] >= 0.5
    mask, turns, groups = x.mask, x.turn_ids, x.group_ids
    n_turns = torch.where(mask, turns, -1).max(-1).values + 1
    assert set(n_turns.tolist()) <= {0, 1, 2} and (n_turns == 1).any() and (n_turns == 2).any()
    R = x.rewards.double().tolist()
    for row in range(len(R)):
        for k in range(int(n_turns[row])):
            mates = [j for j in range(len(R)) if groups[j] == groups[row] and n_turns[j] > k and x.valid[j]]
            vals = torch.tensor([R[j] for j in mates], dtype=torch.float64)
            want = 0.0 if len(mates) < 2 else float((R[row] - vals.mean()) / (vals.std() + 1e-6))
            got = A[row][mask[row] & (turns[row] == k)]
            assert torch.allclose(got, torch.full_like(got, want), atol=1e-5), (row, k, got, want)
