"""The machinery behind `check(name, answer)`: a registry of checks, and comparisons that say
*what* is wrong with an answer (its shape, its sign, a constant factor, a non-finite value, a
function that fails on a case) without printing the expected value.

A check is a function `(answer, **context) -> None` registered under an exercise's name; it
raises `Wrong(message)` when the answer is wrong and `Unanswered` when the answer (or a context
value the lab passes) is still the `...` placeholder.  The expected values are computed by the
checks from the package (rl_lab.exercises.answers), not stored next to them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

CHECKS: dict[str, "Exercise"] = {}


class Wrong(Exception):
    """The answer is wrong; the message says how, never what the right answer is."""


class Unanswered(Exception):
    """The answer is still the `...` placeholder."""


@dataclass(frozen=True)
class Exercise:
    name: str            # "lab01.1", "ch05.3": the page (lab or chapter) and the exercise's number
    asks: str            # what the answer is, in a few words (printed with every verdict)
    fn: Callable[..., None]


@dataclass(frozen=True)
class Result:
    name: str
    status: str          # "right", "wrong" or "unanswered"
    message: str

    def __bool__(self) -> bool:
        return self.status == "right"

    def __str__(self) -> str:
        return self.message


def exercise(name: str, asks: str):
    """Register `fn` as the check of exercise `name`."""
    def register(fn):
        if name in CHECKS:
            raise ValueError(f"two checks for exercise {name!r}")
        CHECKS[name] = Exercise(name, asks, fn)
        return fn
    return register


# ------------------------------------------------------------------------------- comparisons


def unanswered(x: Any) -> bool:
    """True for `...`, or a tuple, list or dict holding `...` (at any depth)."""
    if x is Ellipsis:
        return True
    if isinstance(x, (tuple, list)):
        return any(unanswered(v) for v in x)
    if isinstance(x, dict):
        return any(unanswered(v) for v in x.values())
    return False


def as_array(x: Any, what: str) -> np.ndarray:
    """`x` (a number, a list, a numpy array or a torch tensor) as a float64 array."""
    if x is Ellipsis:
        raise Unanswered
    if hasattr(x, "detach"):                       # a torch tensor, without importing torch
        x = x.detach().cpu().double().numpy()
    if isinstance(x, (str, bytes)):
        raise Wrong(f"{what} should be a number, not the text {x!r}.")
    if isinstance(x, bool):
        raise Wrong(f"{what} should be a number, not {x}.")
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise Wrong(f"{what} should be a number or an array of numbers, not a {type(x).__name__}.") from None
    return a


# constant factors that usually mean a known slip
_FACTOR_HINTS = ((math.log(2), "nats instead of bits?"), (1 / math.log(2), "bits instead of nats?"),
                 (math.log(10), "log10 instead of the natural log?"), (1 / math.log(10), "log10 instead of the natural log?"))
# factors worth naming for a single number: p/q with small p and q, powers of ten, sqrt(2), 2 pi
_SIMPLE = sorted({p / q for p in range(1, 9) for q in range(1, 9)} | {10.0 ** k for k in range(-6, 7)}
                 | {math.sqrt(2), 1 / math.sqrt(2), 2 * math.pi, 1 / (2 * math.pi)})


def _factor_hint(c: float, rtol: float = 1e-3) -> str:
    for value, hint in _FACTOR_HINTS:
        if math.isclose(c, value, rel_tol=rtol):
            return f" ({hint})"
    return ""


def _simple(c: float, rtol: float) -> bool:
    """A ratio worth naming for a single number (within the comparison's tolerance): a simple
    fraction, a power of ten, sqrt(2), 2 pi, or a known slip.  Any other ratio is not named: for
    one number it would give the answer away."""
    tol = min(max(rtol, 1e-6), 1e-3)
    return bool(_factor_hint(c, tol)) or any(math.isclose(abs(c), v, rel_tol=tol) for v in _SIMPLE)


def compare(got: Any, expected: Any, what: str, rtol: float = 1e-6, atol: float = 1e-12) -> None:
    """Raise Wrong unless `got` equals `expected` within rtol/atol (elementwise), saying how it
    differs: wrong shape, not finite, wrong sign, off by a constant factor, too large or too
    small, or which entries differ."""
    e = np.asarray(expected, dtype=np.float64)
    a = as_array(got, what)
    if e.ndim == 0 and a.size == 1:
        a = a.reshape(())
    if a.shape != e.shape:
        if e.ndim == 0:
            raise Wrong(f"{what} should be a single number; yours has shape {a.shape}.")
        raise Wrong(f"{what} has the wrong shape: it should have shape {e.shape}, yours has {a.shape}.")
    bad = ~np.isfinite(a)
    if bad.any():
        where = "" if a.ndim == 0 else f" (at {np.argwhere(bad).tolist()[:5]})"
        raise Wrong(f"{what} is not finite{where}: look for a division by zero or the log of 0.")
    if np.allclose(a, e, rtol=rtol, atol=atol):
        return
    if np.any(e != 0) and np.allclose(-a, e, rtol=rtol, atol=atol):
        raise Wrong(f"{what} has the right size but the wrong sign.")
    nz = np.abs(e) > atol
    if nz.any() and np.allclose(a[~nz], 0, atol=max(atol, rtol * np.abs(e).max())):
        ratios = a[nz] / e[nz]
        c = float(np.median(ratios))
        if e.size == 1 and c and _simple(c, rtol):      # a rounded answer: name the simple factor
            c = math.copysign(min(_SIMPLE + [v for v, _ in _FACTOR_HINTS],
                                  key=lambda v: abs(math.log(v / abs(c)))), c)
        if c != 0 and np.allclose(ratios, c, rtol=max(rtol, 1e-9)) and not math.isclose(c, 1, rel_tol=rtol) \
                and (e.size > 1 or _simple(c, rtol)):
            raise Wrong(f"{what} is off by a constant factor of {c:.4g} (yours is that times the "
                        f"right value){_factor_hint(c, max(rtol, 1e-3))}.")
    if e.ndim == 0:
        raise Wrong(f"{what} is too {'large' if a > e else 'small'}.")
    wrong = np.argwhere(~np.isclose(a, e, rtol=rtol, atol=atol)).tolist()
    raise Wrong(f"{what}: {len(wrong)} of {e.size} entries are wrong, e.g. at index "
                f"{wrong[0] if len(wrong[0]) > 1 else wrong[0][0]}.")


def _show(args: tuple, kwargs: dict) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        if hasattr(v, "tolist"):
            v = v.tolist()
            return str([round(x, 4) if isinstance(x, float) else x for x in v]) if isinstance(v, list) else str(v)
        return repr(v)
    parts = [fmt(a) for a in args] + [f"{k}={fmt(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def call(f: Any, args: tuple = (), kwargs: dict | None = None, what: str = "your function") -> Any:
    """f(*args, **kwargs), with a failure turned into Wrong (naming the case) and a `...`
    result into Unanswered."""
    kwargs = kwargs or {}
    if f is Ellipsis:
        raise Unanswered
    if not callable(f):
        raise Wrong(f"the answer should be a function (def ...), not a {type(f).__name__}.")
    try:
        out = f(*args, **kwargs)
    except Unanswered:
        raise
    except Exception as err:   # the reader's code: any failure is a finding
        raise Wrong(f"{what} failed on the case ({_show(args, kwargs)}): {type(err).__name__}: {err}") from None
    if unanswered(out):
        raise Unanswered
    return out


def compare_function(f: Any, reference: Callable, cases: list, what: str = "your function",
                     rtol: float = 1e-6, atol: float = 1e-12) -> None:
    """Call the reader's `f` and the package's `reference` on every case (a tuple of positional
    arguments, or a (tuple, dict) pair) and compare, naming the first case that differs."""
    for case in cases:
        args, kwargs = case if (isinstance(case, tuple) and len(case) == 2 and isinstance(case[1], dict)) \
            else (case if isinstance(case, tuple) else (case,), {})
        got = call(f, args, kwargs, what)
        try:
            compare(got, reference(*args, **kwargs), "its value", rtol, atol)
        except Wrong as e:
            raise Wrong(f"{what} is wrong for the case ({_show(args, kwargs)}): {e}") from None


def sequence_of(x: Any, n: int, what: str) -> list:
    """`x` as a list of n items (a tuple, list or array), or Wrong."""
    if isinstance(x, dict) or isinstance(x, (str, bytes)) or not hasattr(x, "__len__"):
        raise Wrong(f"{what} should be {n} values in a tuple, e.g. (a, b{', c' if n > 2 else ''}).")
    items = list(x)
    if len(items) != n:
        raise Wrong(f"{what} should be {n} values; yours has {len(items)}.")
    return items
