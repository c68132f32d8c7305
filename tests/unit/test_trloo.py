"""TRLOO (rl_lab.algos.trloo) and the exact two-turn toy (rl_lab.exact.turns): the turn returns and
leave-one-out baselines on hand-built batches, and, by enumerating every group of episodes, that
GRPO's self-including baseline shrinks the turns unevenly (a visible bias in direction) while
TRLOO's expected update is the policy gradient to rounding (check 18)."""
import math

import pytest
import torch

from rl_lab import RLConfig
from rl_lab.algos.estimators import ADV_ESTIMATORS, AdvantageInputs
from rl_lab.algos.trloo import (
    outcome_turn_rewards,
    per_token,
    trloo_advantages,
    turn_leave_one_out,
    turn_returns,
    turn_self_included,
    turns_present,
)
from rl_lab.exact.turns import TwoTurnToy, angle_degrees, expected_update, true_gradient


def test_turn_returns_and_the_leave_one_out_baseline_by_hand():
    r = torch.tensor([[0.5, 1.0], [0.0, 0.0], [0.2, 9.0], [1.0, 0.0]], dtype=torch.float64)
    exists = torch.tensor([[True, True], [True, True], [True, False], [True, False]])
    G = turn_returns(r, exists, gamma=0.5)
    assert G.tolist() == [[1.0, 1.0], [0.0, 0.0], [0.2, 0.0], [1.0, 0.0]]   # 9.0 sits on an absent turn
    A = turn_leave_one_out(G, exists, torch.tensor([0, 0, 0, 1]))
    # group 0, turn 0: three rows; turn 1: two rows; group 1: alone, so A = G
    assert A[:, 0].tolist() == pytest.approx([1.0 - 0.1, 0.0 - 0.6, 0.2 - 0.5, 1.0])
    assert A[:, 1].tolist() == [1.0, -1.0, 0.0, 0.0]
    S = turn_self_included(G, exists, torch.tensor([0, 0, 0, 1]))
    assert S[:, 1].tolist() == [0.5, -0.5, 0.0, 0.0] and S[3, 0] == 0.0


def test_outcome_rewards_sit_on_the_last_turn_and_tokens_get_their_turns_value():
    mask = torch.tensor([[1, 1, 0, 1, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    turns = torch.tensor([[0, 0, 0, 1, -1], [0, 0, -1, -1, -1]])
    exists = turns_present(mask, turns)
    assert exists.tolist() == [[True, True], [True, False]]
    r = outcome_turn_rewards(torch.tensor([3.0, 2.0]), exists)
    assert r.tolist() == [[0.0, 3.0], [2.0, 0.0]]
    assert per_token(torch.tensor([[7.0, 8.0], [9.0, 0.0]]), turns, mask).tolist() == [
        [7.0, 7.0, 0.0, 8.0, 0.0], [9.0, 9.0, 0.0, 0.0, 0.0]]


def test_single_turn_trloo_is_rloo():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(8, generator=g)
    mask = torch.ones(8, 3, dtype=torch.bool)
    group_ids = torch.arange(2).repeat_interleave(4)
    valid = torch.ones(8, dtype=torch.bool)
    trloo = ADV_ESTIMATORS["trloo"](AdvantageInputs(rewards, mask, group_ids, valid))
    rloo = ADV_ESTIMATORS["rloo"](AdvantageInputs(rewards, mask, group_ids, valid))
    assert torch.allclose(trloo, rloo, atol=1e-6)


def test_per_turn_rewards_are_used_when_given():
    mask = torch.ones(2, 2, dtype=torch.bool)
    turns = torch.tensor([[0, 1], [0, 1]])
    adv = trloo_advantages(torch.tensor([1.5, 1.0]), mask, turns, torch.tensor([0, 0]), torch.ones(2, dtype=torch.bool),
                           turn_rewards=torch.tensor([[0.5, 1.0], [0.0, 1.0]]))
    assert adv.tolist() == [[0.5, 0.0], [-0.5, 0.0]]          # the turns' returns differ only at turn 0
    with pytest.raises(ValueError, match="turn_rewards"):
        trloo_advantages(torch.ones(2), mask, turns, torch.tensor([0, 0]), torch.ones(2, dtype=torch.bool),
                         turn_rewards=torch.ones(2, 1))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("N", [2, 4])
def test_exact_expectations_on_the_two_turn_toy(seed, N):
    toy = TwoTurnToy(n1=3, n2=2, stops=(0,), seed=seed)
    grad = true_gradient(toy)
    loo = expected_update(toy, N, turn_leave_one_out)
    grpo = expected_update(toy, N, turn_self_included)
    assert (loo - grad).abs().max() < 1e-10                      # TRLOO: unbiased
    assert angle_degrees(grpo, grad) > 1.0                      # GRPO: a visibly different direction
    # the mechanism, exactly: turn 1 shrinks by 1 - 1/N, turn 2 by E[1 - 1/n_2 | this episode reached it]
    n1 = toy.n1
    assert torch.allclose(grpo[:n1], (1 - 1 / N) * grad[:n1], atol=1e-12)
    q = 1 - torch.softmax(toy.theta1.detach(), -1)[list(toy.stops)].sum().item()   # P(reach turn 2)
    shrink2 = sum(math.comb(N - 1, m) * q ** m * (1 - q) ** (N - 1 - m) * (1 - 1 / (1 + m)) for m in range(N))
    assert torch.allclose(grpo[n1:], shrink2 * grad[n1:], atol=1e-12)
    assert abs(shrink2 - (1 - 1 / N)) > 0.05


def test_a_bandit_group_of_four_gets_three_quarters_of_the_gradient():
    toy = TwoTurnToy(n1=4, stops=(0, 1, 2, 3), seed=1)        # every episode stops: one turn
    grad = true_gradient(toy)
    grpo = expected_update(toy, 4, turn_self_included)
    assert torch.allclose(grpo, 0.75 * grad, atol=1e-12)
    assert angle_degrees(grpo, grad) < 1e-5                     # same turn count: scaled, not turned


def test_trloo_is_a_configurable_estimator():
    assert RLConfig(advantage_estimator="trloo").advantage_estimator == "trloo"


def test_a_trainer_step_with_trloo_reads_the_tasks_per_turn_rewards():
    from dataclasses import dataclass

    from helpers import SMALL, FixedEngine, scripted_batch, step_on

    from rl_lab import Trainer
    from rl_lab.models import build_model
    from rl_lab.tasks import Addition

    @dataclass
    class TwoTurnRewards(Addition):
        """0.25 for opening with a call, then 1 for an even-length episode text."""
        def turn_rewards(self, completion, example):
            first = [0.25] if completion.startswith("(") else []
            return first + [float(len(completion) % 2 == 0)]

        def score(self, completion, example):
            return sum(self.turn_rewards(completion, example))

    batch, tok = scripted_batch()           # 2, 1, 2 and 3 turns
    task = TwoTurnRewards()
    model, _ = build_model("0.3M", seed=0)
    trainer = Trainer(RLConfig(**{**SMALL, "max_completion_length": 40}, advantage_estimator="trloo", max_steps=1),
                      model=model, tokenizer=tok, task=task, engine=FixedEngine(model, tok, batch))
    rows = [{"prompt": p, "answer": "2"} for p in batch.prompts]
    from rl_lab.algos.trloo import task_turn_rewards
    per_turn = task_turn_rewards(trainer.task, trainer.reward_funcs, batch, rows, trainer.device)
    turns = [2, 1, 2, 3]
    for i, c in enumerate(batch.completions):
        last = float(len(c) % 2 == 0)
        expected = [0.0] * 3
        expected[turns[i] - 1] += last                     # the answer's reward on the last turn
        expected[0] += 0.25 if c.startswith("(") else 0.0  # the call's on the first
        assert per_turn[i].tolist() == expected, (c, per_turn[i])
    assert per_turn.sum(-1).tolist() == [task.score(c, {}) for c in batch.completions]
    assert trainer.step()["grad_norm"] > 0
    # with a reward function that is not the task, the outcome sits on the last turn
    trloo, rloo = step_on(batch, [], advantage_estimator="trloo"), step_on(batch, [], advantage_estimator="rloo")
    assert trloo["grad_norm"] > 0 and trloo["grad_norm"] != rloo["grad_norm"]
