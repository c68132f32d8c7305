"""The diagnosis `rl-lab diagnose` returns, its findings and its advice, and the exit codes
(rl_lab.tools.diagnose's docstring says what each verdict and cause means)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

EXIT_CODES = {"healthy": 0, "collapsed": 1, "unreadable": 2, "warning": 3, "too-short": 4, "internal error": 70}
"""Exit code of each verdict, of unreadable input (2) and of a bug of the tool (70, never 1)."""


@dataclass
class Finding:
    rule: str            # which rule fired
    observed: str        # what the run showed, with step numbers
    evidence: str        # where the rule comes from
    confidence: str      # high / medium / low, and why


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

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_json(self) -> dict:
        out = asdict(self)
        out["exit_code"] = self.exit_code
        return out
