import pytest

from rl_lab.tasks import TASKS, Addition, Countdown, get_task, safe_eval


@pytest.mark.parametrize("name", list(TASKS))
def test_seeded_generation_and_reference_answer_scores_one(name):
    task = get_task(name)
    a, b = task.make_dataset(50, seed=3), task.make_dataset(50, seed=3)
    assert a == b and task.make_dataset(50, seed=4) != a
    completions = [task.target(e) for e in a]
    cols = {k: [e[k] for e in a] for k in a[0] if k != "prompt"}
    rewards = task.reward(prompts=[e["prompt"] for e in a], completions=completions, **cols)
    assert rewards == [1.0] * 50
    wrong = task.reward(prompts=[e["prompt"] for e in a], completions=["x"] * 50, **cols)
    assert wrong == [0.0] * 50
    assert all(len(task.target(e)) <= task.max_answer_length for e in a)


def test_addition_exact_and_partial():
    ex = {"answer": "82"}
    assert Addition().score("82", ex) == 1.0 and Addition().score(" 82 ", ex) == 1.0
    assert Addition().score("83", ex) == 0.0
    assert Addition(reward_mode="partial").score("83", ex) == 0.5
    assert Addition(reward_mode="partial").score("823", ex) == pytest.approx(2 / 3)
    assert Addition(digits=3).make_dataset(20, 0)[0]["prompt"].count("+") == 1


def test_difficulty_knobs_and_errors():
    assert len(get_task("reversal", length=8).sample(__import__("numpy").random.default_rng(0))["answer"]) == 8
    with pytest.raises(ValueError, match="digits"):
        get_task("addition", digits=0)
    with pytest.raises(ValueError, match="unknown"):
        get_task("chess")
    with pytest.raises(ValueError, match="accepts"):
        get_task("addition", length=3)


def test_countdown_accepts_any_correct_expression():
    task = Countdown()
    ex = {"numbers": [3, 5, 7], "target": 22}
    assert task.score("3*5+7", ex) == 1.0
    assert task.score("7+5*3", ex) == 1.0          # another order, same value and numbers
    assert task.score("3*5+7+0", ex) == 0.0        # extra number
    assert task.score("22", ex) == 0.0             # numbers not used
    assert task.score("__import__('os')", ex) == 0.0
    assert task.score("3**5", ex) == 0.0
    assert safe_eval("(1+2)*3") == (9, [1, 2, 3])


def test_reward_signature_matches_trl():
    task = get_task("addition")
    # TRL calls reward_func(prompts=..., completions=..., completion_ids=..., **columns)
    out = task(prompts=["1+1="], completions=["2"], completion_ids=[[6]], answer=["2"], trainer_state=None)
    assert out == [1.0]
