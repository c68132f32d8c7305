"""A contextual bandit whose features come from a tiny language model of `rl_lab`: the
laptop-sized analogue of the GPT-based bandits of the Ensemble++ paper.

Each round shows every seed one string of a synthetic task (for example "rev:30417=", a
prompt of the reversal task).  The agent must label it: action a in {0, ..., K-1}, reward 1
if a is the string's class, else 0, plus Gaussian noise.  The class is a property of the
digits (how many are odd, bucketed into K classes).  The agent never sees the string, only a
feature vector: the language model's last-token hidden state, reduced by PCA to a few
dimensions.  Action a gets the "disjoint" features e_a (x) phi(s) (a copy of phi(s) in the
a-th block), so a linear agent learns one weight vector per class.  In the default
"moderate" version there are two actions: skip (a fixed reward, features: a constant only)
and publish (reward 1 for a string of class 1, else 0), so an agent that never publishes
never learns which strings were safe to publish: exploration matters.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rl_lab.errors import ConfigError
from rl_lab.toolkits.bandits.envs import DTYPE, FiniteBandit


@torch.no_grad()
def lm_features(strings: list[str], model, tokenizer, batch_size: int = 256) -> torch.Tensor:
    """Last-token hidden state of the final layer for each string: (N, hidden_size).
    The tokenizer pads on the left, so position -1 is every string's own last token."""
    model.eval()
    out = []
    for i in range(0, len(strings), batch_size):
        enc = tokenizer(strings[i:i + batch_size], return_tensors="pt", padding=True)
        hidden = model(**enc, output_hidden_states=True).hidden_states[-1]   # (B, L, H)
        out.append(hidden[:, -1].double())
    return torch.cat(out)


def pca_features(H: torch.Tensor, dim: int) -> torch.Tensor:
    """Project (N, H) features on their top `dim` principal components, whiten them, scale to
    unit expected norm and append a constant coordinate: (N, dim + 1), rows of norm about 1."""
    if not 1 <= dim <= min(H.shape):
        raise ConfigError(f"feature_dim={dim} must be in [1, {min(H.shape)}] for {tuple(H.shape)} features")
    centred = H - H.mean(0)
    _, _, Vt = torch.linalg.svd(centred, full_matrices=False)
    Z = centred @ Vt[:dim].T                                             # (N, dim)
    Z = Z / Z.std(0) / math.sqrt(dim + 1)
    return torch.cat([Z, torch.full((len(Z), 1), 1 / math.sqrt(dim + 1), dtype=Z.dtype)], dim=1)


def odd_digit_class(prompt: str, num_classes: int) -> int:
    """The class of a digit string: its number of odd digits, bucketed into `num_classes`."""
    digits = [c for c in prompt if c.isdigit()]
    odd = sum(int(c) % 2 for c in digits)
    return min(num_classes - 1, odd * num_classes // (len(digits) + 1))


@dataclass
class StringClassificationBandit(FiniteBandit):
    """K-action contextual bandit over a fixed pool of strings with precomputed features.
    Build it with `make_lm_bandit`; `features` (N, p) and `labels` (N,) are the pool."""
    features: torch.Tensor = None
    labels: torch.Tensor = None
    strings: list = None
    contexts: str = "varying"
    num_actions: int = 2
    noise_std: float = 0.5
    reward: str = "moderate"
    """"moderate" (2 actions): skip earns `skip_reward`, publish earns 1 if the string is of
    class 1, else 0 (a content-moderation bandit: skipping teaches nothing about the string).
    "classify" (K actions): reward 1 for naming the string's class."""
    skip_reward: float = 0.5
    name = "lm-features"

    def __post_init__(self):
        if self.features is None or self.labels is None:
            raise ConfigError("StringClassificationBandit needs features (N, p) and labels (N,); "
                              "use make_lm_bandit(...) to build one from a language model")
        self.features = self.features.to(DTYPE)
        self.labels = self.labels.long()
        if self.features.dim() != 2 or self.labels.shape != (len(self.features),):
            raise ConfigError(f"features {tuple(self.features.shape)} and labels "
                              f"{tuple(self.labels.shape)} must be (N, p) and (N,)")
        self.d = self.num_actions * self.features.shape[1]
        super().__post_init__()
        if self.contexts != "varying":
            raise ConfigError("StringClassificationBandit.contexts must be 'varying' (one string per round)")
        if self.reward not in ("moderate", "classify"):
            raise ConfigError(f"StringClassificationBandit.reward={self.reward!r} is not allowed; "
                              "choose one of ['moderate', 'classify']")
        if self.reward == "moderate" and self.num_actions != 2:
            raise ConfigError("reward='moderate' has two actions (skip, publish): set num_actions=2")
        if int(self.labels.max()) >= self.num_actions or int(self.labels.min()) < 0:
            raise ConfigError(f"labels must lie in [0, num_actions={self.num_actions})")

    def _draw_problem(self, gen):
        pass                                         # the problem is the pool itself

    def _draw_actions(self, gen):
        S, K = self._S, self.num_actions
        self._rows = torch.randint(0, len(self.features), (S,), generator=gen)   # (S,)
        phi = self.features[self._rows]                                           # (S, p)
        per_action = phi[:, None, :].expand(S, K, phi.shape[1]).clone()         # (S, K, p)
        if self.reward == "moderate":   # skipping does not depend on the string: bias only
            per_action[:, 0, :-1] = 0
        eye = torch.eye(K, dtype=DTYPE)
        return (eye[None, :, :, None] * per_action[:, :, None, :]).reshape(S, K, self.d)   # e_a (x) phi

    def mean_reward(self, X):
        labels = self.labels[self._rows]                                          # (S,)
        if self.reward == "classify":
            return torch.nn.functional.one_hot(labels, self.num_actions).to(DTYPE)  # (S, K)
        skip = torch.full((len(labels),), float(self.skip_reward), dtype=DTYPE)
        return torch.stack([skip, (labels == 1).to(DTYPE)], dim=1)                 # (S, 2)


def make_lm_bandit(num_strings: int = 1024, length: int = 5, num_classes: int = 2,
                   feature_dim: int = 8, model_size: str = "0.3M", model_seed: int = 0,
                   noise_std: float = 0.5, reward: str = "moderate", data_seed: int = 0,
                   model=None, tokenizer=None):
    """Build a `StringClassificationBandit` from prompts of the reversal task and the hidden
    states of a randomly initialised `rl_lab` model (`build_model(model_size, model_seed)`;
    no download), or of `model`/`tokenizer` if given."""
    from rl_lab.models import build_model
    from rl_lab.tasks import get_task
    for name, value, lo in (("num_strings", num_strings, 8), ("length", length, 1),
                            ("num_classes", num_classes, 2), ("feature_dim", feature_dim, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < lo:
            raise ConfigError(f"make_lm_bandit: {name}={value!r} must be an integer >= {lo}")
    if model is None:
        model, tokenizer = build_model(model_size, seed=model_seed)
    prompts = [e["prompt"] for e in get_task("reversal", length=length).make_dataset(num_strings, seed=data_seed)]
    features = pca_features(lm_features(prompts, model, tokenizer), feature_dim)
    labels = torch.tensor([odd_digit_class(p, num_classes) for p in prompts])
    return StringClassificationBandit(features=features, labels=labels, strings=prompts,
                                      num_actions=num_classes, noise_std=noise_std, reward=reward)
