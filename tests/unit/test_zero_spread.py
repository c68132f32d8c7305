"""Zero-spread steps (rl_lab.algos.zero_spread): skipping them keeps the weights and AdamW's moments
bit for bit; without the skip AdamW moves the weights on a zero gradient; DAPO's dynamic sampling
keeps only groups whose rewards differ."""
import pytest
import torch

from rl_lab import RLConfig, Trainer
from rl_lab.algos.zero_spread import group_spread, keep_spread_groups
from rl_lab.config import ConfigError
from rl_lab.models import build_model

SMALL = dict(model="0.3M", task="addition", prompts_per_step=2, num_generations=4, max_completion_length=8,
             progress_bar=False, learning_rate=1e-2, seed=0)


def test_group_spread_and_the_kept_groups():
    rewards = torch.tensor([0., 1., 0., 0., 1., 1., 0., 1.])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    rows = torch.ones(8, dtype=torch.bool)
    assert group_spread(rewards, groups, rows).tolist() == [1, 0, 0, 1]
    rows[1] = False                                            # group 0 keeps one row: no spread
    assert group_spread(rewards, groups, rows).tolist() == [0, 0, 0, 1]
    kept, n = keep_spread_groups(rewards, groups, torch.ones(8, dtype=torch.bool), max_groups=1)
    assert n == 1 and kept.tolist() == [True, True] + [False] * 6     # the first group with spread only
    kept, n = keep_spread_groups(rewards, groups, torch.ones(8, dtype=torch.bool), max_groups=5)
    assert n == 2 and kept.tolist() == [True, True, False, False, False, False, True, True]


class Switch:
    """A reward with spread until `flat` is set, then 0 for every completion."""
    def __init__(self):
        self.flat = False

    def __call__(self, completions, **kw):
        return [0.0] * len(completions) if self.flat else [float(len(set(c))) for c in completions]


def _trainer(**cfg):
    reward = Switch()
    model, tok = build_model("0.3M", seed=0)
    return Trainer(RLConfig(**{**SMALL, **cfg}, max_steps=3), model=model, tokenizer=tok,
                   reward_funcs=[reward]), reward


def _weights(trainer):
    return [p.detach().clone() for p in trainer.model.parameters()]


def _adam_state(trainer):
    return [{k: v.clone() for k, v in st.items()} for st in trainer.optimizer.state.values()]


@pytest.mark.parametrize("skip", [False, True])
def test_a_zero_spread_step_moves_the_weights_only_without_the_skip(skip):
    trainer, reward = _trainer(skip_zero_spread_steps=skip)
    first = trainer.step()                                    # rewards with spread: a real update
    assert first["grad_norm"] > 0 and first.get("filter/zero_spread_skipped", 0) == 0
    before, adam = _weights(trainer), _adam_state(trainer)
    reward.flat = True
    second = trainer.step()                                   # every group's rewards are 0
    after = _weights(trainer)
    same = all(torch.equal(a, b) for a, b in zip(before, after))
    if skip:
        assert same and second["filter/zero_spread_skipped"] == 1 and second["faults/skipped_steps"] == 0
        for old, new in zip(adam, _adam_state(trainer)):      # AdamW's moments and step count too
            assert all(torch.equal(old[k], new[k]) for k in old)
    else:                                                     # gradient 0, and still the weights move
        assert second["grad_norm"] == 0 and not same


def test_dynamic_sampling_draws_more_prompts_and_trains_on_groups_with_spread():
    trainer, reward = _trainer(filter_groups={"max_num_gen_batches": 3})
    m = trainer.step()
    assert m["filter/groups_drawn"] == 6                      # 3 batches of 2 prompts
    assert 1 <= m["filter/groups_kept"] <= 2 and m["grad_norm"] > 0
    reward.flat = True
    before = _weights(trainer)
    m = trainer.step()
    assert m["filter/groups_kept"] == 0 and m["faults/skipped_steps"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(trainer)))


def test_zero_spread_options_are_validated():
    with pytest.raises(ConfigError, match="FilterGroupsConfig.max_num_gen_batches"):
        RLConfig(filter_groups={"max_num_gen_batches": 0})
    with pytest.raises(ConfigError, match="max_num_gen_batches=2.5 must be an integer"):
        RLConfig(filter_groups={"max_num_gen_batches": 2.5})
    assert RLConfig(filter_groups=True).filter_groups.max_num_gen_batches == 3
    assert RLConfig(filter_groups=False).filter_groups is None


@pytest.mark.parametrize("extra", [dict(beta=0.1), dict(teacher_kl={"coef": 0.1, "model": "warm-start"}),
                                   dict(imitation={"coef": 0.1}),
                                   dict(empg={"normalize": "sum"}, task="multiplication_tool", model="warm-start",
                                        max_completion_length=24, learning_rate=5e-4)],
                         ids=["reference_kl", "teacher_kl", "imitation", "empg_sum"])
def test_the_skip_also_discards_the_gradients_that_do_not_vanish_without_spread(extra):
    """skip_zero_spread_steps decides on the rewards alone: a step without reward spread takes no
    optimizer step even when a KL to the reference or a teacher, an imitation term or EMPG's
    whitened bonus has a nonzero gradient there (documented in RLConfig.skip_zero_spread_steps)."""
    for skip in (False, True):
        if extra.get("model") == "warm-start":                # EMPG's bonus needs episodes with two turns
            reward = Switch()
            trainer = Trainer(RLConfig(**{**SMALL, **extra}, skip_zero_spread_steps=skip, max_steps=3),
                              reward_funcs=[reward])
        else:
            trainer, reward = _trainer(skip_zero_spread_steps=skip, **extra)
        trainer.step()                                        # spread: a real update (the reference moves apart)
        before = _weights(trainer)
        reward.flat = True
        m = trainer.step()
        same = all(torch.equal(a, b) for a, b in zip(before, _weights(trainer)))
        if skip:
            assert same and m["filter/zero_spread_skipped"] == 1
        else:
            assert m["grad_norm"] > 0 and not same            # the extra term alone moves the weights
