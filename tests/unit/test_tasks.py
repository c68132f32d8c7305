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


def test_scratchpad_writes_the_column_addition_with_carries():
    from rl_lab.tasks import ScratchpadAddition
    task = ScratchpadAddition(digits=4)
    assert task.target({"prompt": "4837+2956=", "answer": "7793"}) == "7+6=13,3+5+1=9,8+9=17,4+2+1=7>7793"
    # a carry out of the last column becomes the sum's leading digit; a column that sums to 10
    # with the carry in carries on
    assert ScratchpadAddition.scratchpad(9999, 1001) == "9+1=10,9+0+1=10,9+0+1=10,9+1+1=11>11000"
    assert ScratchpadAddition.scratchpad(1234, 4321) == "4+1=5,3+2=5,2+3=5,1+4=5>5555"
    import numpy as np
    rng = np.random.default_rng(0)
    for _ in range(200):
        a, b = (int(x) for x in rng.integers(0, 10**6, 2))
        pad = ScratchpadAddition.scratchpad(a, b)
        assert int(pad.rsplit(">", 1)[1]) == a + b
        digits = [int(step.split("=")[1]) % 10 for step in pad.split(">")[0].split(",")]
        assert str(a + b).endswith("".join(map(str, digits[::-1])).lstrip("0") or "0")


def test_scratchpad_score_reads_only_the_final_answer():
    from rl_lab.tasks import ScratchpadAddition
    task, ex = ScratchpadAddition(digits=4), {"prompt": "4837+2956=", "answer": "7793"}
    assert task.score("7+6=13,3+5+1=9,8+9=17,4+2+1=7>7793", ex) == 1.0
    assert task.score("garbage scratchpad>7793", ex) == 1.0          # a wrong scratchpad still counts
    assert task.score(">7793", ex) == 1.0 and task.score("1>2>7793 ", ex) == 1.0   # the last ">"
    assert task.score("7+6=13,3+5+1=9,8+9=17,4+2+1=7>7794", ex) == 0.0
    assert task.score("7+6=13,3+5+1=9,8+9=17,4+2+1=7", ex) == 0.0    # no final answer
    assert task.score("7793", ex) == 0.0 and task.score("7793>", ex) == 0.0
    assert task.token_rewards("ab>7793", ex) == [0.0] * 7 + [1.0]


def test_scratchpad_lengths_and_vocabulary():
    from rl_lab.tasks import ScratchpadAddition
    from rl_lab.tokenizer import CHARACTERS, build_tokenizer
    tok = build_tokenizer()
    task = get_task("scratchpad")
    assert task.digits == 5 and task.max_answer_length == 49
    targets = [task.target(e) for e in task.make_dataset(2000, seed=0)]
    lengths = [len(t) for t in targets]
    assert 32 <= min(lengths) and max(lengths) <= task.max_answer_length <= 128
    assert 40 <= sum(lengths) / len(lengths) <= 60
    assert set("".join(targets)) <= set(CHARACTERS)
    ids = tok(targets[0], add_special_tokens=False)["input_ids"]
    assert len(ids) == len(targets[0]) and tok.unk_token_id not in ids      # one token per character
    for digits in (1, 3, 8):                                                  # the bound is tight
        t = ScratchpadAddition(digits=digits)
        assert max(len(t.target(e)) for e in t.make_dataset(3000, seed=1)) <= t.max_answer_length
    assert len(ScratchpadAddition.scratchpad(99999, 99999)) == ScratchpadAddition().max_answer_length
    with pytest.raises(ValueError, match="digits"):
        get_task("scratchpad", digits=0)


def test_rl_config_accepts_the_scratchpad_task():
    from rl_lab.config import ConfigError, RLConfig
    cfg = RLConfig(task="scratchpad", task_kwargs={"digits": 5}, max_completion_length=56)
    assert cfg.task == "scratchpad"
    with pytest.raises(ConfigError):
        RLConfig(task="scratchpad", task_kwargs={"digits": 0})
