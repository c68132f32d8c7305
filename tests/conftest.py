import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RL_LAB_PRESET", "smoke")


@pytest.fixture(scope="session")
def tiny():
    """A random-init 0.3M model and its tokenizer (do not train it in place)."""
    from rl_lab.models import build_model
    return build_model("0.3M", seed=0)


@pytest.fixture
def fresh_tiny():
    from rl_lab.models import build_model
    return build_model("0.3M", seed=0)


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(2)
