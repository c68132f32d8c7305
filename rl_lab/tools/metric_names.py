"""One table: the metric names of RL libraries, mapped to this book's quantities.

`rl-lab diagnose` renames a run's columns with it, and the book's glossary page
(book/glossary_metrics.md) renders it, so the two cannot disagree.  Each row is one name as a
library logs it, the rl_lab column it becomes (None: shown in the glossary, not read), how the
value converts, and where the name was read.  Names are matched exactly, then without a W&B
"<run> - " prefix, then without HF's WandbCallback "train/" prefix (TRL's metrics in W&B).

Where the library's code was read (TRL 1.16 and verl 0.9.1 wheels; the others' repositories, found
with a code search in December 2026), the source says "code"; names taken from a library's own
docs or CI scripts say so.  SkyRL, NeMo-RL, slime, prime-rl and open-instruct change their names
between versions: a name missing here can be mapped with `rl-lab diagnose --map reward=COLUMN`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# the book's quantities (rl_lab's column names)
REWARD, K3, LOGP_ABS, MISMATCH_KL = "reward", "rollout_corr/k3_kl", "mismatch/logp_abs_diff", "mismatch/kl"
PROBS_DIFF = "training/rollout_probs_diff_mean"     # verl's name kept: rl_lab has no column of its own
QUANTITIES = {
    REWARD: "mean reward of the step's completions",
    K3: "mismatch KL per token, k3 estimator: E[r - 1 - log r], r = p_trainer / p_sampler",
    LOGP_ABS: "mean |log p_trainer - log p_sampler| per token",
    MISMATCH_KL: "a per-token KL between sampler and trainer (the library's estimator)",
    "grad_norm": "gradient norm before clipping",
    "learning_rate": "the optimizer's learning rate at the step",
    "entropy": "mean per-token entropy of the policy",
    "is_ratio/mean": "mean sampler-to-trainer importance ratio as logged",
    PROBS_DIFF: "mean |p_trainer - p_sampler| in probability space (at most 1)",
}


@dataclass(frozen=True)
class MetricName:
    library: str
    name: str              # as the library logs it
    column: str | None     # the rl_lab column it is read as (None: glossary only)
    meaning: str
    source: str


def _rows() -> list[MetricName]:
    R = MetricName
    return [
        # TRL 1.16 (trl/trainer/grpo_trainer.py; HF Trainer adds learning_rate, grad_norm, step)
        R("TRL", "reward", REWARD, "mean total reward (sum of the reward functions)", "code"),
        R("TRL", "learning_rate", "learning_rate", "the scheduler's rate at the logged step", "code (HF Trainer)"),
        R("TRL", "grad_norm", "grad_norm", "before clipping to max_grad_norm", "code (HF Trainer)"),
        R("TRL", "entropy", "entropy", "mean token entropy of the completions", "code"),
        R("TRL", "kl", None, "KL to the reference model (beta != 0), not the mismatch", "code"),
        R("TRL", "sampling/sampling_logp_difference/mean", LOGP_ABS,
          "mean |log p_trainer - log p_vLLM| over completion tokens; logged only with use_vllm and "
          "vllm_importance_sampling_correction", "code"),
        R("TRL", "sampling/sampling_logp_difference/max", None, "its maximum over tokens", "code"),
        R("TRL", "sampling/importance_sampling_ratio/mean", "is_ratio/mean",
          "the IS ratio AFTER truncation or masking (clip_max 3.0 by default): it cannot show a ratio "
          "above the cap", "code"),
        R("TRL", "sampling/importance_sampling_ratio/min", None, "after truncation, as /mean", "code"),
        R("TRL", "sampling/importance_sampling_ratio/max", None, "after truncation: at most the cap", "code"),
        # verl 0.9.1 (rl_lab.integrations.verl.VERL_TO_RL_LAB_METRICS holds the rest)
        R("verl", "critic/score/mean", REWARD, "mean sequence score", "code"),
        R("verl", "rollout_corr/k3_kl", K3, "k3 per token, as rl_lab", "code"),
        R("verl", "training/rollout_probs_diff_mean", PROBS_DIFF,
          "|p_actor - p_rollout| in PROBABILITY space despite its name, so at most 1; not a log-ratio",
          "code"),
        R("verl", "actor/lr", "learning_rate", "the actor's learning rate", "code"),
        # slime (slime/backends/megatron_utils/loss.py; CI gates)
        R("slime", "train/train_rollout_logprob_abs_diff", LOGP_ABS,
          "mean |old_log_prob - rollout_log_prob| per sample, then averaged", "code"),
        R("slime", "rollout/raw_reward", REWARD, "mean raw reward of the rollout", "CI gate names"),
        R("slime", "train/grad_norm", "grad_norm", "gradient norm", "CI gate names"),
        # prime-rl (its docs' metric table)
        R("prime-rl", "mismatch_kl/mean", MISMATCH_KL, "KL between trainer and inference policy per token",
          "docs"),
        R("prime-rl", "optim/grad_norm", "grad_norm", "gradient norm", "docs"),
        R("prime-rl", "entropy/mean", "entropy", "policy entropy", "docs"),
        # SkyRL (skyrl-train trainer)
        R("SkyRL", "policy/rollout_train_logprobs_abs_diff_mean", LOGP_ABS,
          "mean |log p_rollout - log p_trainer| per token", "code"),
        R("SkyRL", "policy/grad_norm", "grad_norm", "gradient norm", "CI script names"),
        R("SkyRL", "policy/policy_entropy", "entropy", "policy entropy", "CI script names"),
        R("SkyRL", "policy/policy_lr", "learning_rate", "learning rate", "CI script names"),
        R("SkyRL", "loss/avg_final_rewards", REWARD, "mean final reward", "CI script names"),
        # NeMo-RL (nemo_rl/algorithms/grpo.py; its functional tests)
        R("NeMo-RL", "train/gen_kl_error", MISMATCH_KL,
          "KL between generation and training log-probs, token-normalised", "code"),
        R("NeMo-RL", "train/reward", REWARD, "mean reward", "code"),
        R("NeMo-RL", "train/grad_norm", "grad_norm", "gradient norm", "code"),
        R("NeMo-RL", "train/lr", "learning_rate", "learning rate", "code"),
        R("NeMo-RL", "train/token_mult_prob_error", None, "mean multiplicative probability error", "code"),
        # open-instruct (open_instruct/grpo_fast.py)
        R("open-instruct", "debug/vllm_vs_local_logprob_diff_mean", LOGP_ABS,
          "mean |log p_local - log p_vLLM| over response tokens", "code"),
        R("open-instruct", "debug/vllm_local_reverse_kl", None, "a reverse-KL estimate of the same gap", "code"),
        R("open-instruct", "objective/verifiable_correct_rate", REWARD, "fraction of verifiably correct answers",
          "code"),
        R("open-instruct", "policy/entropy_avg", "entropy", "policy entropy", "code"),
        R("open-instruct", "lr", "learning_rate", "learning rate", "code"),
        # rl_lab's own trainer (rl_lab/trainer.py, rl_lab/monitors.py): TRL's names where the quantity is
        # the same, and one where it is not (a run's own metrics.jsonl is read as it is, without this table)
        R("rl_lab", "sampling/importance_sampling_ratio/max", None,
          "the largest per-token ratio pi/mu BEFORE any truncation: TRL's same name is after it", "code"),
        R("rl_lab", "sampling/sampling_logp_difference/max", None,
          "max |log pi - log mu| over tokens, as TRL's", "code"),
        R("rl_lab", "rollout_corr/tokens_differ", None,
          "share of tokens whose two log-probs are not bitwise equal (0 only under exact zero)", "code"),
    ]


METRIC_NAMES: list[MetricName] = _rows()
BY_NAME: dict[str, str] = {}
for _row in METRIC_NAMES:
    if _row.column is not None:
        BY_NAME.setdefault(_row.name, _row.column)


def k3_from_logp_abs(mean_abs: float) -> float:
    """The k3 a mean |log-ratio| corresponds to if the log-ratio is a zero-mean normal (the
    mismatch's shape in the post's histograms): sigma^2 = (pi/2) E|d|^2 and k3 ~ sigma^2 / 2 for a
    small sigma, so k3 ~ (pi/4) E|d|^2.  An approximation, said with every finding that uses it."""
    return math.pi / 4 * mean_abs ** 2


def as_rows() -> list[dict]:
    """The table as records, for the glossary page."""
    return [{"library": r.library, "name": r.name, "read as": r.column or "-",
             "meaning": r.meaning, "source": r.source} for r in METRIC_NAMES]


def glossary_markdown() -> str:
    """The table as a Markdown pipe table (the glossary page renders it): names in code font, `|`
    escaped."""
    rows = as_rows()
    header = list(rows[0])

    def cell(key: str, value) -> str:
        text = str(value).replace("|", "\\|")
        return f"`{text}`" if key in ("name", "read as") and text != "-" else text
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(h, r[h]) for h in header) + " |" for r in rows]
    return "\n".join(lines)
