"""rl_lab: the package behind *Stable RL for Language Models*.

Tiny causal LMs built from a Hugging Face config, synthetic verifiable tasks, rollout
engines that return the sampler's own log-probs, and an RL trainer with a hook for
off-policy corrections.  CPU by default; a GPU is used when present.
"""

__version__ = "0.1.0"

from rl_lab.config import RLConfig, SamplingConfig, WarmStartConfig, get_preset
from rl_lab.models import build_model, load_model, load_warm_start, MODEL_SIZES
from rl_lab.rollout import HFEngine, RolloutBatch
from rl_lab.tasks import get_task, TASKS
from rl_lab.tokenizer import build_tokenizer, load_tokenizer
from rl_lab.trainer import Trainer

__all__ = [
    "__version__", "RLConfig", "SamplingConfig", "WarmStartConfig", "get_preset",
    "build_model", "load_model", "load_warm_start", "MODEL_SIZES",
    "HFEngine", "RolloutBatch", "get_task", "TASKS",
    "build_tokenizer", "load_tokenizer", "Trainer",
]
from rl_lab import exact  # noqa: E402,F401  (rl_lab.exact: enumerable ground truth)
from rl_lab import bandits  # noqa: E402,F401  (chapter 11: exploration with ensembles)
from rl_lab import compare  # noqa: E402,F401  (chapter 5: methods x seeds, mean +- std)
