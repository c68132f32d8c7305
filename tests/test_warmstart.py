import subprocess
import sys

import pytest
import torch

from rl_lab.config import WarmStartConfig
from rl_lab.warmstart import SHIPPED, sft_batch, warm_start


def test_sft_labels_cover_only_the_answer_and_eos():
    from rl_lab.tasks import get_task
    from rl_lab.tokenizer import build_tokenizer
    tok, task = build_tokenizer(), get_task("addition")
    ids, attn, labels = sft_batch(tok, task, [{"prompt": "12+34=", "answer": "46"}, {"prompt": "1+2=", "answer": "3"}])
    first = labels[0][labels[0] != -100].tolist()
    assert tok.decode(first[:-1]) == "46" and first[-1] == tok.eos_token_id
    assert attn[1].sum() == len("1+2=") + 1 + 1 + 1     # bos + prompt + answer + eos


def test_warm_start_is_deterministic_and_learns():
    cfg = WarmStartConfig(steps=30, batch_size=16)
    a, _, losses_a = warm_start(cfg, progress=False)
    b, _, losses_b = warm_start(cfg, progress=False)
    assert losses_a == losses_b
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert losses_a[-1] < losses_a[0]


@pytest.mark.slow
def test_shipped_checkpoints_rebuild_bit_for_bit():
    out = subprocess.run([sys.executable, "-m", "rl_lab.warmstart", *SHIPPED, "--check"],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
