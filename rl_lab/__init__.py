"""rl_lab: the package behind *Stable RL for Language Models*.

Layout (what a newcomer reads first, and what belongs to one chapter):
  core          config, errors, models, tokenizer, tasks, demonstrations, trainer, runs (run
                folders and checkpoints), corrections (rollout correction), monitors, schedules,
                utils, reference_step (a plain GRPO step in ~50 lines: read it first)
  algos/        losses, advantages, the two off-policy modes, and the methods the trainer's step
                plugs in (method, methods)
  engines/      samplers that return their own log-probs: the HF loop (rollout), its static-cache
                decoder (fast_decode), the shared-prefix forward (shared_prefix), vLLM
                (vllm_engine) and the mismatch injectors (injectors)
  agents/       tools and multi-turn episodes (the calculator, the Python sandbox)
  exact/        enumerable ground truth for small sequence spaces (chapters 2-6, 9)
  toolkits/     one chapter's tools each: collapse (When speed kills), compare (5), pruning (6),
                lr_mismatch (7), routing (8), information and lora (10), bandits (11)
  integrations/ verl: export a config as a verl run, import its metrics (chapter 13)
  tools/        cli (`rl-lab`), warmstart, sweep, doctor, diagnose, plots, stats, kernel
  book_ext/     the book's Sphinx extensions (repository, solutions)
Which layer may import which: tests/test_import_graph.py (the core imports no toolkit, tool,
integration or book extension).

Tiny causal LMs built from a Hugging Face config, synthetic verifiable tasks, rollout
engines that return the sampler's own log-probs, and an RL trainer with a hook for
off-policy corrections.  CPU by default; a GPU is used when present.
"""

__version__ = "0.1.0"

# The thread policy (issue 33; BENCHMARKS.md, section 9): OpenMP's threads sleep when idle instead
# of spinning, so a lab kernel does not stall the kernels beside it (two torch processes on the
# same cores took 6-14x longer per step with torch's spinning default, 1.4-3.4x with this one; it
# costs about 1.5x on an idle machine).  Set before torch loads OpenMP, so only when nothing has
# imported torch yet: the labs' Jupyter kernel (`python -m rl_lab.tools.kernel`, registered by `make
# setup`) imports rl_lab first for that reason.  OMP_WAIT_POLICY=ACTIVE (or RL_LAB_THREAD_POLICY=off)
# keeps torch's default: what the book build does, one kernel at a time on idle cores.
import os as _os
import sys as _sys

if "torch" not in _sys.modules and _os.environ.get("RL_LAB_THREAD_POLICY", "").lower() != "off":
    _os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from rl_lab.config import RLConfig, SamplingConfig, WarmStartConfig, get_preset
from rl_lab.models import build_model, load_model, load_warm_start, MODEL_SIZES
from rl_lab.engines.rollout import HFEngine, RolloutBatch
from rl_lab.tasks import get_task, TASKS
from rl_lab.tokenizer import build_tokenizer, load_tokenizer
from rl_lab.trainer import Trainer

__all__ = [
    "__version__", "RLConfig", "SamplingConfig", "WarmStartConfig", "get_preset",
    "build_model", "load_model", "load_warm_start", "MODEL_SIZES",
    "HFEngine", "RolloutBatch", "get_task", "TASKS",
    "build_tokenizer", "load_tokenizer", "Trainer",
]
