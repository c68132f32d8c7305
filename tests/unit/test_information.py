"""Information figures against hand-computed values; dense per-token task rewards."""
import math

import numpy as np
import pytest
import torch

from rl_lab import build_model
from rl_lab.tasks import Addition, Countdown, Reversal, digit_token_rewards
from rl_lab.toolkits.information import (
    answer_probabilities,
    bandwidth_table,
    bernoulli_kl_bits,
    binary_entropy_bits,
    bits_learned,
    capacity_table,
    count_parameters,
    entropy_bits,
    per_timestep_bits,
    plugin_entropy_bits,
    published_config,
    scalar_advantage_bits,
    sum_pmf,
)
from rl_lab.toolkits.lora import lora_parameter_count


def test_entropies_by_hand():
    assert entropy_bits([0.5, 0.5]) == pytest.approx(1.0)
    assert entropy_bits([1.0, 0.0]) == 0.0
    assert entropy_bits(np.full(5, 0.2)) == pytest.approx(math.log2(5))
    assert entropy_bits([0.5, 0.25, 0.25]) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="summing to 1"):
        entropy_bits([0.5, 0.6])
    np.testing.assert_allclose(binary_entropy_bits([0.0, 0.5, 1.0, 0.25]),
                               [0.0, 1.0, 0.0, 0.25 * 2 + 0.75 * math.log2(4 / 3)])


def test_sum_of_independent_rewards():
    np.testing.assert_allclose(sum_pmf([0.5, 0.5], 3), np.array([1, 3, 3, 1]) / 8)
    two = sum_pmf(np.full(3, 1 / 3), 2)
    np.testing.assert_allclose(two, np.array([1, 2, 3, 2, 1]) / 9)
    by_hand = -(2 * (1 / 9) * math.log2(1 / 9) + 2 * (2 / 9) * math.log2(2 / 9) + (3 / 9) * math.log2(3 / 9))
    assert scalar_advantage_bits(np.full(3, 1 / 3), 2)["exact"] == pytest.approx(by_hand)
    assert len(sum_pmf(np.full(3, 1 / 3), 1000)) == 2001
    np.testing.assert_allclose(sum_pmf([0.2, 0.3, 0.5], 7), _convolve_n([0.2, 0.3, 0.5], 7))


def _convolve_n(p, n):
    out = np.array([1.0])
    for _ in range(n):
        out = np.convolve(out, p)
    return out


def test_dense_ternary_at_T1000_matches_the_reference_numbers():
    # Gaussian approximation of the sum of 1000 uniform ternary rewards (variance 2/3 each):
    # 0.5 log2(2 pi e * 1000 * 2/3) = 6.74 bits; support bound log2 2001 = 10.97; 8-bit cap 8.
    out = scalar_advantage_bits(np.full(3, 1 / 3), 1000, quantization_levels=256)
    assert out["exact"] == pytest.approx(0.5 * math.log2(2 * math.pi * math.e * 1000 * 2 / 3), abs=1e-3)
    assert out["support_bound"] == pytest.approx(math.log2(2001))
    assert out["quantized_bound"] == 8.0
    assert per_timestep_bits(np.full(3, 1 / 3), 1000) == pytest.approx(1000 * math.log2(3))


def test_bandwidth_table():
    table = bandwidth_table(T=1000, likert_levels=5, quantization_levels=256)
    assert list(table.index) == ["terminal binary", "terminal Likert-5", "dense ternary, T=1000"]
    np.testing.assert_allclose(table.loc["terminal binary"].to_numpy(), [1, 1, 1])
    np.testing.assert_allclose(table.loc["terminal Likert-5"].to_numpy(), [math.log2(5)] * 3)
    dense = table.loc["dense ternary, T=1000"].to_numpy()
    assert dense[1] == 8.0 and dense[2] == pytest.approx(1584.9625, abs=1e-3) and 6.7 < dense[0] < 6.8


def test_plugin_entropy():
    assert plugin_entropy_bits([0, 0, 1, 1]) == pytest.approx(1.0)
    assert plugin_entropy_bits([3.0, 3.0, 3.0]) == 0.0
    assert plugin_entropy_bits(np.array([[1, 0], [1, 0], [0, 1], [1, 1]])) == pytest.approx(1.5)


def test_bernoulli_kl_and_bits_learned():
    assert bernoulli_kl_bits(0.5, 0.25) == pytest.approx(0.5 + 0.5 * math.log2(2 / 3))
    assert bernoulli_kl_bits(0.3, 0.3) == pytest.approx(0.0, abs=1e-12)
    out = bits_learned([0.25, 0.5], [0.5, 0.5])  # learned 1 bit on the first prompt
    assert out["success_kl"] == pytest.approx(0.5 + 0.5 * math.log2(2 / 3))
    assert out["code_length_gain"] == pytest.approx(1.0)          # log2(0.5 / 0.25) + 0
    assert bits_learned([0.4] * 3, [0.4] * 3)["success_kl"] == pytest.approx(0.0, abs=1e-12)


def test_answer_probabilities_match_one_by_one_teacher_forcing():
    model, tok = build_model("0.3M", seed=1)
    examples = [{"prompt": "7+5=", "answer": "12"}, {"prompt": "31+45=", "answer": "76"},
                {"prompt": "1+1=", "answer": "2"}]
    batched = answer_probabilities(model, tok, examples, batch_size=2)
    for e, p in zip(examples, batched):  # no padding: one example at a time
        ids = tok(e["prompt"], return_tensors="pt")["input_ids"]
        answer = tok(e["answer"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        logp = 0.0
        with torch.no_grad():
            for a in answer:
                logp += torch.log_softmax(model(input_ids=ids).logits[0, -1], -1)[a].item()
                ids = torch.cat([ids, torch.tensor([[a]])], 1)
        assert p == pytest.approx(math.exp(logp), rel=1e-4)


def test_parameter_counts_from_configs():
    tiny, _ = build_model("0.3M")
    assert count_parameters(tiny.config) == sum(p.numel() for p in tiny.parameters()) == 304_256
    llama = published_config("Llama-3.1-8B")
    h, kv, inter, V, L = 4096, 1024, 14336, 128256, 32
    by_hand = 2 * V * h + L * (2 * h * h + 2 * h * kv + 3 * h * inter + 2 * h) + h
    assert count_parameters(llama) == by_hand == 8_030_261_248
    qwen = published_config("Qwen2.5-7B")
    h, kv, inter, V, L = 3584, 512, 18944, 152064, 28
    by_hand = 2 * V * h + L * (2 * h * h + 2 * h * kv + (h + 2 * kv) + 3 * h * inter + 2 * h) + h
    assert count_parameters(qwen) == by_hand
    with pytest.raises(ValueError, match="unknown"):
        published_config("GPT-5")


def test_capacity_table():
    table = capacity_table(models=("Llama-3.1-8B",), ranks=(1,), episodes=320_000)
    r1 = table[table.adapter == "LoRA r=1"].iloc[0]
    assert r1["trainable parameters"] == lora_parameter_count(published_config("Llama-3.1-8B"), 1)
    assert r1["capacity / signal"] == pytest.approx(2 * 2_621_440 / 320_000)


def test_dense_token_rewards():
    assert digit_token_rewards("82", "82") == [1, 1, 0]
    assert digit_token_rewards("83", "82") == [1, -1, 0]
    assert digit_token_rewards("8", "82") == [1, -1]
    assert digit_token_rewards("823", "82") == [1, 1, -1, -1]
    assert digit_token_rewards("", "82") == [-1]
    ex = {"answer": "82"}
    assert Addition().token_rewards("82", ex) == [0, 0, 1.0]            # terminal only
    assert Addition().token_rewards("83", ex) == [0, 0, 0.0]
    assert Addition(reward_mode="partial").token_rewards(" 83", ex) == [1, -1, 0]
    assert Reversal(reward_mode="partial").token_rewards("123", {"answer": "124"}) == [1, 1, -1, 0]
    assert Countdown().token_rewards("3*5+7", {"numbers": [3, 5, 7], "target": 22})[-1] == 1.0
    # the dense scalar the trainer uses is still the fraction of digits right
    assert Addition(reward_mode="partial").score("83", ex) == 0.5


def test_all_addition_examples():
    every = Addition(digits=2).all_examples()
    assert len(every) == 90 * 90 == len({e["prompt"] for e in every})
    assert all(int(e["prompt"][:-1].split("+")[0]) + int(e["prompt"][:-1].split("+")[1]) == int(e["answer"])
               for e in every)
    assert len(Addition(digits=1).all_examples()) == 100
    with pytest.raises(ValueError, match="digits"):
        Addition(digits=4).all_examples()


def test_token_return_is_a_trl_reward_function():
    task = Addition(reward_mode="partial")
    out = task.token_return(prompts=["40+42=", "40+42=", "40+42="], completions=["82", "83", "8"],
                            answer=["82"] * 3, completion_ids=[[1], [1], [1]])
    assert out == [2.0, 0.0, 0.0]          # "8": +1 for the 8, -1 for stopping early
    assert Addition().token_return(completions=["82", "83"], answer=["82", "82"]) == [1.0, 0.0]
    assert task.token_return.__name__ == "token_return"


def test_run_ceiling_is_the_trapezoid_integral():
    from rl_lab.toolkits.information import run_ceiling_bits

    assert run_ceiling_bits([0, 100], [1.0, 1.0]) == pytest.approx(100.0)
    assert run_ceiling_bits([0, 100, 300], [1.0, 0.5, 0.5]) == pytest.approx(75 + 100)
    with pytest.raises(ValueError, match="increasing"):
        run_ceiling_bits([0, 0], [1.0, 1.0])
