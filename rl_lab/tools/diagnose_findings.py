"""What the parts of `rl-lab diagnose` share: the diagnosis it returns (findings, advice), the exit
codes, the rules' constants, the step windows and the mismatch series (rl_lab.tools.diagnose's
docstring says what each verdict, cause and constant means)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from rl_lab.toolkits.collapse import WINDOW
from rl_lab.tools.diagnose_readers import finite
from rl_lab.tools.metric_names import K3, LOGP_ABS, MISMATCH_KL, k3_from_logp_abs

EXIT_CODES = {"healthy": 0, "collapsed": 1, "unreadable": 2, "warning": 3, "too-short": 4, "internal error": 70}
"""Exit code of each verdict, of unreadable input (2) and of a bug of the tool (70, never 1)."""


@dataclass
class Finding:
    rule: str            # which rule fired
    observed: str        # what the run showed, with step numbers
    evidence: str        # where the rule comes from
    confidence: str      # high / medium / low, and why
    fix: str = ""        # a source finding's fix: rl_lab, verl 0.9.1 and TRL 1.16 options


@dataclass
class Override:
    lines: str           # the framework's settings (key=value ...)
    why: str
    evidence: str
    settings: dict = field(default_factory=dict)    # key -> value, to skip what the run already has


@dataclass
class Diagnosis:
    verdict: str                         # healthy | warning | collapsed | too-short
    cause: str | None                    # suspect-bug | mismatch-level | mismatch-led | learning-rate |
                                         # not-the-mismatch | blind
    steps: int                           # the last logged step
    source: str
    records: int = 0
    mismatch_evidence: str = ""          # measured (...) | on-policy (...) | not logged
    framework: str = "unknown"           # trl | verl | rl_lab | unknown: the advice's language
    timeline: dict = field(default_factory=dict)    # event -> step
    levels: dict = field(default_factory=dict)      # monitor -> early level
    findings: list = field(default_factory=list)
    overrides: list = field(default_factory=list)
    already_set: list = field(default_factory=list)  # advice the run's settings already follow
    missing: list = field(default_factory=list)     # expected columns the input lacks
    warnings: list = field(default_factory=list)    # what the reader dropped or assumed
    setup: dict = field(default_factory=dict)       # the run's settings, when read
    sources: list = field(default_factory=list)     # probable sources of the mismatch: {source, fix}
                                                    # (rl_lab.tools.diagnose_signatures)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_json(self) -> dict:
        out = asdict(self)
        out["exit_code"] = self.exit_code
        return out


K3_BUG = 5e-2
"""k3 per token at the first logged step at or above which the engines must disagree on more than precision."""
K3_WARN = 1e-2
"""k3 per token (early level) from which a run is off-policy from the start (the post's warning sign)."""
RISE = 3.0
"""A monitor rises when its smoothed value reaches RISE x its early level."""
EARLY = (1, 20)
"""Steps after the first logged one, [start, stop), whose median is a monitor's early level."""
LR_WARMUP_GAP = 2 * WINDOW
"""A warmup 'ends at the fall' when the learning rate's peak is at most this many steps before the
fall step (the fall step lags the drop by up to a WINDOW-step moving average)."""

MONITORS = {            # rl_lab name: what it is (shown in the timeline)
    K3: "mismatch KL (k3, per token)",
    MISMATCH_KL: "mismatch KL (the library's estimator)",
    LOGP_ABS: "mean |log-ratio| per token",
    "rollout_corr/log_ppl_abs_diff": "|log-perplexity gap|",
    "rollout_corr/training_ppl": "trainer perplexity of the sampled text",
    "rollout_corr/chi2_token": "chi^2 per token",
    "rollout_corr/rollout_is_eff_sample_size": "effective sample size",
    "training/rollout_probs_diff_mean": "mean |p_trainer - p_sampler| (verl; probability space)",
    "grad_norm": "gradient norm",
    "entropy": "entropy",
    "completions/mean_length": "mean completion length",
}


def spacing(steps: np.ndarray) -> int:
    """Steps between logged records (the median gap; 1 for a run logged every step)."""
    return max(1, int(np.median(np.diff(steps)))) if len(steps) > 1 else 1


def records_for(n_steps: int, spacing: int) -> int:
    """Records that cover n_steps steps (at least one)."""
    return max(1, int(round(n_steps / spacing)))


def mismatch_series(df):
    """(per-token k3 series, how it was obtained) from the best mismatch metric logged, or None."""
    k3 = finite(df, K3)
    if k3 is not None:
        return k3, "k3 logged (rollout_corr/k3_kl)"
    kl = finite(df, MISMATCH_KL)
    if kl is not None:
        return kl, "a per-token mismatch KL logged by the library, read as k3"
    logp = finite(df, LOGP_ABS)
    if logp is not None:
        return k3_from_logp_abs(logp), ("k3 from the mean |log-ratio| (e.g. TRL's sampling/sampling_logp_difference/"
                                        "mean) by k3 ~ (pi/4) E|d|^2, a normal approximation")
    return None
