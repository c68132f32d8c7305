"""The rollout-correction options a config names, their parsing, and `CorrectionConfig` (RLConfig's
`rollout_correction`, verl's `algorithm.rollout_correction`): what a config checks and the verl
export translates, without torch (rl_lab.corrections, which computes the corrections, imports
torch; it re-exports the option names).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from rl_lab.config_checks import _check_choice, _check_range, _Validated
from rl_lab.errors import ConfigError

IS_LEVELS = ("token", "sequence")
RS_LEVELS = ("token", "seq_sum", "seq_mean", "seq_max")
# verl 0.9.1's SUPPORTED_ROLLOUT_RS_OPTIONS (there is no seq_max_k1), and rl_lab's exact-KL options
VERL_RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
                   "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")
EXACT_RS_OPTIONS = ("token_kl", "seq_sum_kl", "seq_mean_kl", "seq_max_kl")
RS_OPTIONS = VERL_RS_OPTIONS + EXACT_RS_OPTIONS


def parse_is_threshold(spec) -> tuple[float, float | None]:
    """rollout_is_threshold -> (upper C, lower or None).  2.0 or "2.0": truncate at C (TIS);
    "0.5_5.0": keep weights inside [0.5, 5.0] and zero the rest (IcePop)."""
    where = "rollout_is_threshold"
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise ConfigError(f"{where}={spec!r}: use a number C (TIS) or a string 'lo_hi' (IcePop)")
    lower = None
    try:
        if isinstance(spec, str) and "_" in spec:
            lower, upper = (float(x) for x in spec.strip().split("_", 1))
        else:
            upper = float(spec)
    except ValueError:
        raise ConfigError(f"{where}={spec!r}: use a number C (TIS) or a string 'lo_hi' (IcePop)") from None
    if not upper > 0 or (lower is not None and not 0 < lower <= upper):
        raise ConfigError(f"{where}={spec!r} is out of range: need C > 0, or 0 < lo <= hi for 'lo_hi'")
    return upper, lower


def parse_rs(rollout_rs: str, rollout_rs_threshold) -> dict[str, tuple[float | None, float]]:
    """"seq_mean_k3,seq_max_k2" and "0.01,2.5" -> {option: (lower, upper)}, duplicates dropped.

    k1 options take "lo_hi" (a single x means 1/x_x); the others one upper bound U > 0.
    One threshold may be shared by all options."""
    if not isinstance(rollout_rs, str) or not rollout_rs.strip():
        raise ConfigError(f"rollout_rs={rollout_rs!r}: give a comma-separated list from {list(RS_OPTIONS)}")
    options = list(dict.fromkeys(o.strip() for o in rollout_rs.split(",") if o.strip()))
    for o in options:
        if o not in RS_OPTIONS:
            raise ConfigError(f"rollout_rs option {o!r} is unknown; choose from {list(RS_OPTIONS)}")
    if rollout_rs_threshold is None or isinstance(rollout_rs_threshold, bool):
        raise ConfigError(f"rollout_rs={rollout_rs!r} needs rollout_rs_threshold (one per option, "
                          "comma-separated: 'lo_hi' or a number for k1, an upper bound for k2/k3/kl)")
    specs = [s.strip() for s in str(rollout_rs_threshold).split(",") if s.strip()]
    if len(specs) not in (1, len(options)):
        raise ConfigError(f"rollout_rs_threshold={rollout_rs_threshold!r} has {len(specs)} entries; "
                          f"give 1 (shared) or {len(options)} (one per rollout_rs option)")
    specs = specs * len(options) if len(specs) == 1 else specs
    out = {}
    for o, s in zip(options, specs):
        try:
            if o.endswith("k1"):
                lo, hi = (float(x) for x in s.split("_", 1)) if "_" in s else (1 / float(s), float(s))
                ok = lo > 0 and hi > 0 and lo <= hi
            else:
                lo, hi = None, float(s)
                ok = hi > 0 and "_" not in s  # Python's float() would read "0.5_2" as 0.52
        except ValueError:
            ok = False
        if not ok:
            need = "'lo_hi' with 0 < lo <= hi, or a number > 0" if o.endswith("k1") else "one number > 0"
            raise ConfigError(f"rollout_rs_threshold entry {s!r} for option {o!r} is invalid: need {need}")
        out[o] = (lo, hi)
    return out


@dataclass
class CorrectionConfig(_Validated):
    """The rollout correction between the sampler mu and the trainer pi (RLConfig.rollout_correction;
    verl 0.9.1's algorithm.rollout_correction, the same names; chapter 5).  Every option off (the
    default): no weights, no rejection, decoupled PPO; the mismatch monitors still log."""
    rollout_is: str | None = None
    """Importance weights pi/mu between trainer and sampler: None, "token" or "sequence"."""
    rollout_is_threshold: float | str = 2.0
    """Truncation C of the importance weights (TIS), or "lo_hi" (IcePop: zero outside [lo, hi])."""
    rollout_is_batch_normalize: bool = False
    """Divide the weights by their batch mean (self-normalised IS)."""
    rollout_rs: str | None = None
    """Rejection (masking), comma-separated options from rl_lab.corrections.RS_OPTIONS, e.g.
    "seq_mean_k1" (Geo-Mask), "seq_sum_k1" (Seq-MIS), "seq_mean_k3,seq_max_k2" (TRM)."""
    rollout_rs_threshold: float | str | None = None
    """One threshold per rollout_rs option (comma-separated): "lo_hi" for k1, U for k2/k3/kl."""
    rollout_token_veto_threshold: float | None = None
    """Drop a sequence if any token has pi/mu below this (verl's veto before PR #4544)."""
    bypass_mode: bool = False
    """False: decoupled PPO with three policies (mu, pi_old, pi_theta); True: pi_old := mu, and
    weights and masks are recomputed from pi_theta/mu at every iteration (verl's bypass_mode)."""
    extra_modes: dict = field(default_factory=dict)
    """Correction modes registered from outside rl_lab (rl_lab.corrections.register_correction_mode),
    by name: their knobs (a mapping).  {}: none."""

    INERT = ((("rollout_is_threshold", "rollout_is_batch_normalize"), "rollout_is", "rollout_is is None"),
             (("rollout_rs_threshold",), "rollout_rs", "rollout_rs is None"))
    """Knobs that only one option reads: (knobs, that option, why).  Setting one away from its
    default while the option is off is a ConfigWarning, not a silent no-op."""

    def validate(self):
        _check_choice(self, "rollout_is", (None, *IS_LEVELS))
        parse_is_threshold(self.rollout_is_threshold)
        if self.rollout_rs is not None:
            parse_rs(self.rollout_rs, self.rollout_rs_threshold)
        if self.rollout_token_veto_threshold is not None:
            _check_range(self, "rollout_token_veto_threshold", lo=0, hi=1, lo_open=True, hi_open=True)
        self._warn_inert()

    def _warn_inert(self):
        import warnings

        from rl_lab.errors import ConfigWarning
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for names, option, why in self.INERT:
            changed = [n for n in names if getattr(self, n) != defaults[n]]
            if getattr(self, option) is None and changed:
                warnings.warn(f"rollout_correction.{', '.join(f'{n}={getattr(self, n)!r}' for n in changed)} "
                              f"has no effect: {why}", ConfigWarning, stacklevel=6)


CORRECTION_FIELDS = tuple(f.name for f in dataclasses.fields(CorrectionConfig))
"""CorrectionConfig's fields: RLConfig's flat fields of the same names before issue 51, read with a
ConfigWarning into rollout_correction."""
