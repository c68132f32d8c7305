"""rl_lab: the package behind *Stable RL for Language Models*.

Layout (what a newcomer reads first, and what belongs to one chapter):
  core          config, errors, models, tokenizer, tasks, demonstrations, trainer, runs (run
                folders and checkpoints), method_specs (one row per method: its class, config field,
                verl/TRL mapping), corrections and correction_options (the rollout correction's
                modes and config), monitors, schedules, utils, reference_step (a plain GRPO step in
                ~50 lines: read it first)
  algos/        losses, advantages, the rollout correction as one component (correction: verl's
                two modes), and the methods the trainer's step plugs in (method, methods)
  engines/      samplers that return their own log-probs: the HF loop (rollout), its static-cache
                decoder (fast_decode), the shared-prefix forward (shared_prefix), vLLM
                (vllm_engine), the mismatch injectors (injectors), the scripted engine (scripted)
                and DVP's safe vocabulary (vocabulary)
  agents/       tools and multi-turn episodes (the calculator, the Python sandbox)
  exact/        enumerable ground truth for small sequence spaces (chapters 2-6, 9)
  toolkits/     one chapter's tools each: collapse (When speed kills), compare (5), pruning (6),
                lr_mismatch (7), routing (8), information and lora (10), bandits (11)
  integrations/ verl: export a config as a verl run, import its metrics (chapter 13)
  tools/        cli (`rl-lab`), warmstart, sweep, doctor, diagnose, plots, stats, kernel
  book_ext/     the book's Sphinx extensions (repository, solutions)
Which layer may import which: tests/repo/test_import_graph.py (the core imports no toolkit, tool,
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

# The public names load on first use (PEP 562): `import rl_lab` costs nothing, so a page or a
# command that needs only the statistics or a toolkit does not pay for torch and transformers
# (importing the models' module takes 5-10 s on a 2-core laptop; the book executes ~30 pages).
_EXPORTS = {
    "RLConfig": "rl_lab.config", "SamplingConfig": "rl_lab.config",
    "WarmStartConfig": "rl_lab.config", "get_preset": "rl_lab.presets",
    "build_model": "rl_lab.models", "load_model": "rl_lab.models",
    "load_warm_start": "rl_lab.models", "MODEL_SIZES": "rl_lab.models",
    "HFEngine": "rl_lab.engines.rollout", "RolloutBatch": "rl_lab.engines.rollout",
    "get_task": "rl_lab.tasks", "TASKS": "rl_lab.tasks",
    "build_tokenizer": "rl_lab.tokenizer", "load_tokenizer": "rl_lab.tokenizer",
    "Trainer": "rl_lab.trainer",
}

__all__ = ["__version__", *_EXPORTS]

from rl_lab._lazy import lazy_exports  # noqa: E402 - after the thread policy above

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
