"""Exercises that check the reader's answer (Spinning Up's "run this to check your work").

    from rl_lab.exercises import check
    check("lab01.1", my_answer)          # prints "right", or what is wrong, never the answer

Every lab exercise whose answer is a number, a formula or a small function has a check, and so
has every such exercise of a chapter (its check cell is in the chapter's lab).  `check` prints its
verdict; `evaluate` returns it (a Result: truthy when right); `names()` lists the exercises that
have one.  A `...` left in the answer (or in a value the cell passes) means "not answered yet".

  checking   the registry and the comparisons (shape, sign, factor, finiteness, a failing case)
  answers    one check per exercise; the expected values are computed from the package
"""
from __future__ import annotations

from typing import Any

from rl_lab.exercises.checking import CHECKS, Result, Unanswered, Wrong, unanswered

__all__ = ["Result", "check", "evaluate", "names"]


def _load() -> None:
    import rl_lab.exercises.answers  # noqa: F401  (registers every check; torch loads here)


def names() -> list[str]:
    """Every exercise that has a check."""
    _load()
    return sorted(CHECKS)


def evaluate(name: str, answer: Any, **context) -> Result:
    """The verdict on `answer` for exercise `name`, as a Result (check() prints it)."""
    _load()
    if name not in CHECKS:
        close = [n for n in CHECKS if n.split(".")[0] == name.split(".")[0]]
        raise KeyError(f"no check named {name!r}" + (f"; this page has {close}" if close else ""))
    ex = CHECKS[name]
    head = f"{name} ({ex.asks})"
    if unanswered(answer) or any(unanswered(v) for v in context.values()):
        return Result(name, "unanswered", f"{head}: no answer yet. Replace each `...` in the cell "
                                          "with your answer and run the cell again.")
    try:
        ex.fn(answer, **context)
    except Unanswered:
        return Result(name, "unanswered", f"{head}: no answer yet. Your function returns `...`: "
                                          "replace it with your formula and run the cell again.")
    except Wrong as e:
        msg = str(e)
        return Result(name, "wrong", f"{head}: not yet. {msg[:1].upper()}{msg[1:]}")
    return Result(name, "right", f"{head}: right.")


def check(name: str, answer: Any, **context) -> None:
    """Check your answer to exercise `name` and print the verdict: right, or what is wrong with
    it (never the answer itself).  Leave `...` in place to skip an exercise."""
    print(evaluate(name, answer, **context).message)
