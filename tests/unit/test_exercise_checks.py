"""rl_lab.exercises: every check accepts the answer its solution dropdown gives and refuses at least
one wrong answer with a message that says what is wrong (and not the answer); every check is
called from a cell of the right lab, every `check(...)` cell of a lab names a check, and every
such cell, as shipped (`...` in place of the answers), runs and prints "no answer yet".

The right answers below are transcribed from the Solutions dropdowns of the labs and chapters
(the exercise's name says where); where a solution says how to compute the answer rather than
giving it, the test computes it that way."""
import ast
import builtins
import io
import math
import re
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import torch

from rl_lab.exercises import check, evaluate, names
from rl_lab.exercises.checking import Wrong, compare

REPO = Path(__file__).resolve().parents[2]
LABS = sorted((REPO / "labs").glob("*.md"))
CHAPTER_LAB = {"ch_when_speed_kills": "lab_when_speed_kills", "ch_mismatch_sources": "lab_break_it_fix_it"}


def h(p):
    return -p * math.log2(p) - (1 - p) * math.log2(1 - p)


def _lab02_context():
    from rl_lab.exact import SequenceSpace, feedback_policy, make_reward
    space = SequenceSpace(2, 6)
    return dict(space=space, policy=feedback_policy(space, bias=0.0, feedback=1.0), reward=make_reward(space, "mean"))


def _lab02_1_cosines():
    """Exercise 1's solution: the naive estimator's cosine for the three baselines, from the
    lab's own tools (exact_moments), as the exercise says to compute them."""
    from rl_lab.exact import Estimator, ExactProblem, behaviour_logits, exact_moments
    c = _lab02_context()
    problem = ExactProblem(c["space"], c["policy"], behaviour_logits(c["space"], c["policy"], "shift", +1.0), c["reward"])
    b_mu = float((problem.p_mu * problem.reward).sum())
    return tuple(exact_moments(problem, Estimator("naive", baseline=b)).cosine for b in (0.0, b_mu, 1.0))


def _lab03_context():
    from rl_lab.exact import ExactProblem, SequenceSpace, behaviour_logits, feedback_policy, make_reward
    space = SequenceSpace(2, 5)
    reward = make_reward(space, "majority")
    policy = feedback_policy(space, bias=0.0, feedback=1.0)
    return dict(problem=ExactProblem(space, policy, behaviour_logits(space, policy, "shift", -0.7, reward=reward),
                                     reward), k=2)


def _lab04_5_batch():
    g = torch.Generator().manual_seed(0)
    log_ratio = 0.3 * torch.randn(64, 8, generator=g, dtype=torch.float64)
    mask = torch.ones(64, 8, dtype=torch.bool)
    mask[::3, 5:] = False
    return log_ratio, mask


def _lab04_5_thresholds():
    """Exercise 5's solution: the 70% quantiles of max_t k2 and of mean_t k3 over the batch."""
    log_ratio, mask = _lab04_5_batch()
    k2 = (0.5 * log_ratio ** 2).masked_fill(~mask, 0)
    k3 = (log_ratio.exp() - 1 - log_ratio).masked_fill(~mask, 0)
    return (torch.quantile(k2.max(-1).values, 0.7).item(),
            torch.quantile(k3.sum(-1) / mask.sum(-1), 0.7).item())


def _ch12_2_angle():
    """Chapter 12, exercise 2, computed as the exercise describes (TRLOO's expected update)."""
    from rl_lab.algos.trloo import turn_self_included
    from rl_lab.exact.turns import TwoTurnToy, angle_degrees, expected_update, true_gradient
    toy = TwoTurnToy(n1=3, n2=3, stops=(0,), seed=0)
    with torch.no_grad():
        toy.theta1[0] = -5
    angle = angle_degrees(expected_update(toy, 4, turn_self_included), true_gradient(toy))
    assert angle < 0.1                                     # the solution: "below 0.1 degree"
    return angle


def _ch04_2_lengths():
    """Chapter 4, exercise 2: the chapter's hidden cell's bisection, and the m = 0 closed form."""
    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))   # noqa: E731
    share = lambda T, m: phi((-math.log(5) - T * m) / (0.05 * math.sqrt(T))) + 1 - phi((math.log(5) - T * m) / (0.05 * math.sqrt(T)))  # noqa: E731,E501
    lo, hi = 1.0, 1e7
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if share(mid, -0.001) < 0.5 else (lo, mid)
    return hi, (math.log(5) / (0.674 * 0.05)) ** 2


NAT = math.log(2)
# name: (the solution's answer, [(a wrong answer, what the message must say)], context or None)
CASES = {
    "lab01.1": (lambda p, G: p ** G + (1 - p) ** G,
                [(lambda p, G: p ** G, "factor"), (lambda p, G: 1 / 0, "failed on the case")], None),
    "lab02.1": (_lab02_1_cosines, [(lambda: tuple(abs(c) for c in _lab02_1_cosines()), "wrong sign"),
                                   ((0.5, 0.5), "should be 3 values")], _lab02_context),
    "lab02.2": (lambda inner, second, L: (inner / (L * second), inner ** 2 / (2 * L * second)) if inner > 0 else (0.0, 0.0),
                [(lambda inner, second, L: (inner / (L * second), inner ** 2 / (2 * L * second)), "(-0.3, 1, 2)")], None),
    "lab02.3": ((1e-8, 1e-3), [((1e-6, 1e-3), "factor of 100"), ((1e-8, "0.001"), "not the text")], None),
    "lab02.4": (lambda var_seq, var_on, grad_norm: var_seq / var_on,
                [(lambda var_seq, var_on, grad_norm: var_on / var_seq, "factor of 0.01")], None),
    "lab03.2": (lambda: [2], [([2, 3], "biased"), ([], "left out")], _lab03_context),
    "lab04.4": (lambda p: (p, 1.0), [(lambda p: (1.0, p), "wrong"), (lambda p: p, "shape")], None),
    "lab04.5": (_lab04_5_thresholds, [((1e-9, 1e-9), "aim for about 30%")],
                lambda: dict(zip(("log_ratio", "mask"), _lab04_5_batch()))),
    "lab05.4": ((-1e-3, 1e-3), [((0.999, 1.001), "factor of -1000"), ((1e-3, -1e-3), "wrong sign")], None),
    "lab06.1": (lambda p, eps: -math.log(p + (1 - p) * math.exp(-2 * eps)),
                [(lambda p, eps: math.log(p + (1 - p) * math.exp(-2 * eps)), "wrong sign")], None),
    "lab07.1": (lambda g, b, n, L: max(0.0, float(g @ (g + b))) / (L * (n + float((g + b) @ (g + b)))),
                [(lambda g, b, n, L: float(g @ (g + b)) / (L * float((g + b) @ (g + b))), "too large")], None),
    "lab07.3": (0.5, [(1.0, "factor of 2"), (float("nan"), "not finite")], None),
    "lab08.1": (0.0, [(0.25, "too large")], None),
    "lab09.1": (lambda pi: 1 - (pi ** 2).sum(), [(lambda pi: 1 - pi.max(), "wrong")], None),
    "lab09.3": (lambda R: R.mean(0), [(lambda R: R.mean(1), "shape")], None),
    "lab10.1": (lambda G, p: G * h(p), [(lambda G, p: G, "too large"), (lambda G, p: G * h(p) * NAT, "nats")], None),
    "lab10.2": (math.log2(5), [(math.log(5), "nats instead of bits")], None),
    "lab10.3": (2 * 2_621_440, [(2_621_440, "factor of 0.5")], None),
    "lab12.1": ("ok", [("error", "does not come back as"), (0, "as a string")], None),
    "lab_break_it_fix_it.1": (0.0, [(1e-9, "not just small")], None),
    "lab_break_it_fix_it.4": (True, [(False, "sync_check"), ("yes", "True")], None),
    "lab_measure_your_mismatch.2": (lambda c: float(np.prod(1 + np.asarray(c)) - 1),
                                    [(lambda c: float(np.sum(c)), "too small")], None),
    "lab_when_speed_kills.1": ((math.sqrt(2), [1e-9, 1 - 1e-9], 0),
                               [((math.sqrt(2), [0.5, 0.5], 0), "not within 1%"), ((2.0, [1e-9, 1 - 1e-9], 0), "factor of 1.414")],
                               None),
    "ch01.2": (([0.75, -0.25, -0.25, -0.25], [1.499997, -0.499999, -0.499999, -0.499999], [1, -1 / 3, -1 / 3, -1 / 3]),
               [(([1, -1 / 3, -1 / 3, -1 / 3], [1.5, -0.5, -0.5, -0.5], [0.75, -0.25, -0.25, -0.25]), "(a)")], None),
    "ch01.3": ({"token-mean": (1 / 8, 1 / 8), "seq-mean-token-mean": (1 / 4, 1 / 12), "seq-mean-token-sum-norm": (1 / 16, 1 / 16)},
               [({"token-mean": (1 / 4, 3 / 4), "seq-mean-token-mean": (1 / 4, 1 / 12),
                  "seq-mean-token-sum-norm": (1 / 16, 1 / 16)}, "token-mean"), ({"token-mean": 1}, "keys")], None),
    "ch01.5": ((2 / 256, 0.9 ** 8 + 0.1 ** 8), [((1 / 256, 0.43), "factor of 0.5")], None),
    "ch02.4": ((1e-2, 99), [((1e-2, 1e4), "too large")], None),
    "ch02.5": (lambda v1, v2: v1 / v2, [(lambda v1, v2: v2 / v1, "factor of 0.01")], None),
    "ch03.2": ((7.3, 1.7e4), [((3.0, 11.0), "too small")], None),
    "ch03.4": (lambda B, c: (B / 8) ** (1 / 3) * (1 + c) ** (2 / 3),
               [(lambda B, c: (2 * B) ** (1 / 3) * (1 + c) ** (2 / 3), "too large")], None),
    "ch04.2": (_ch04_2_lengths, [((1609, 2277), "too large")], None),
    "ch04.3": (1677.3, [(2 * 1677.3, "factor of 2")], None),
    "ch05.3": ({"mu": [2 / 3, 1 / 3, 0], "rho": [0.9, 0.9], "chi2_token": -0.19, "kl": -math.log(0.9),
                "k3_kl": 0.9 - 1 - math.log(0.9)},
               [({"mu": [2 / 3, 1 / 3, 0], "rho": [0.9, 0.9], "chi2_token": 0.19, "kl": -math.log(0.9),
                  "k3_kl": 0.9 - 1 - math.log(0.9)}, "wrong sign")], None),
    "ch05.4": (1.0202, [(0.02, "too small")], None),
    "ch06.2": ((6e-4, 0.05, 0.2), [((1e-3, 0.05, 0.2), "threshold")], None),
    "ch06.3": (lambda m: math.log(1 - m), [(lambda m: -math.log(1 - m), "wrong sign")], None),
    "ch07.2": (([198, 396, 594, 792], 0.25), [(([198, 396, 594], 0.25), "shape"), (([198, 396, 594, 792], 0.5), "factor of 2")],
               None),
    "ch08.2": (0.076, [(0.76, "too large")], None),
    "ch09.4": (((1, 1), (0, 0)), [(((0, 0), (1, 1)), "with the zero tail")], None),
    "ch10.1": ((8, 8 * h(0.9), 0.9 ** 8 + 0.1 ** 8), [((8, h(0.9), 0.43), "factor of 0.125")], None),
    "ch10.3": (6.74, [(6.74 * NAT, "nats instead of bits")], None),
    "ch10.4": ((5.2e6, 8192), [((5.2e6, 4096), "factor of 0.5")], None),
    "ch10.6": ((6.64, 0.081), [((math.log(100), 0.081), "nats instead of bits")], None),
    "ch11.5": ((62, 0.25, 2.25), [((62, 0.5, 1.5), "lower edge")], None),
    "ch12.2": (_ch12_2_angle, [(2.8, "too large")], None),
    "ch12.3": (0.0, [(1.0, "too large")], None),
    "ch12.4": ((8, 13), [((16, 26), "too large")], None),
    "ch_mismatch_sources.1": (lambda pi, kept: float(pi[kept].sum()), [(lambda pi, kept: 1.0, "wrong")], None),
    "ch_when_speed_kills.1": (([0.9, 0.1], [0.95, 0.05]),
                              [(([0.5, 0.5], [0.5, 0.5]), "equal"), (([0.9, 0.1], [0.8, 0.2]), "not positive")], None),
    "ch_when_speed_kills.4": ((False, True), [((True, True), "first series"), ((0, 1), "True or False")], None),
}
# answers given as a function of nothing are computed when the test runs (they need the package)
LAZY = {"lab02.1", "lab03.2", "lab04.5", "ch04.2", "ch12.2"}


def _value(name, x):
    return x() if name in LAZY and callable(x) and x.__code__.co_argcount == 0 else x


def test_every_check_has_cases_and_every_case_a_check():
    assert sorted(CASES) == names()


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_solution_is_right_and_a_wrong_answer_is_told_what_is_wrong(name):
    right, wrongs, context = CASES[name]
    ctx = context() if context else {}
    result = evaluate(name, _value(name, right), **ctx)
    assert result.status == "right", result.message
    for wrong, says in wrongs:
        result = evaluate(name, _value(name, wrong), **ctx)
        assert result.status == "wrong", f"{name} accepted a wrong answer: {result.message}"
        assert says in result.message, f"{name}: expected {says!r} in {result.message!r}"
    assert evaluate(name, ..., **ctx).status == "unanswered"


def test_the_messages_never_print_the_expected_value():
    """A wrong single number is told 'too large' or 'too small' (or a simple factor), never the value."""
    for wrong, expected in ((0.31, 0.25), (7.0, 6.64)):
        with pytest.raises(Wrong) as err:
            compare(wrong, expected, "x", rtol=1e-6)
        assert str(expected) not in str(err.value) and "too large" in str(err.value)
    with pytest.raises(Wrong, match="shape"):
        compare([1.0, 2.0], [1.0, 2.0, 3.0], "x")
    with pytest.raises(Wrong, match="not finite"):
        compare([1.0, float("inf")], [1.0, 2.0], "x")


def test_check_prints_one_verdict_and_refuses_unknown_names():
    out = io.StringIO()
    with redirect_stdout(out):
        check("lab01.1", lambda p, G: p ** G + (1 - p) ** G)
    assert out.getvalue().strip().endswith("right.")
    with pytest.raises(KeyError, match="lab01"):
        evaluate("lab01.9", 1.0)


# ---------------------------------------------------------------------------------- the labs' cells


def code_cells(text: str) -> list[str]:
    return re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```$", text, re.S | re.M)


def check_calls(source: str) -> list[str]:
    """The exercise names of the `check("...", ...)` calls of a cell."""
    return [node.args[0].value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check"
            and node.args and isinstance(node.args[0], ast.Constant)]


def lab_of(name: str) -> str:
    """The lab whose cells check exercise `name`: its own lab, or a chapter's lab."""
    page = name.rsplit(".", 1)[0]
    if page.startswith("lab"):
        return next(p.stem for p in LABS if p.stem == page or p.stem.startswith(page + "_"))
    if page in CHAPTER_LAB:
        return CHAPTER_LAB[page]
    return next(p.stem for p in LABS if p.stem.startswith("lab" + page[2:] + "_"))


def test_every_check_is_called_once_in_the_exercises_of_its_lab():
    called = {}
    for lab in LABS:
        text = lab.read_text(encoding="utf-8")
        exercises = text[text.index("\n## Exercises\n"):]
        for cell in code_cells(text):
            for name in check_calls(cell):
                assert cell in exercises, f"{lab.name}: check({name!r}) outside the Exercises section"
                called.setdefault(name, []).append(lab.stem)
    assert sorted(called) == names(), f"checks without a cell: {set(names()) - set(called)}; " \
                                      f"cells without a check: {set(called) - set(names())}"
    for name, labs in called.items():
        assert labs == [lab_of(name)], f"check({name!r}) is called in {labs}, expected once in {lab_of(name)}"


def test_every_lab_exercise_with_a_check_has_its_cell_right_after_it():
    """A lab exercise's check cell follows its item (before the next item), so the reader meets it there."""
    for lab in LABS:
        text = lab.read_text(encoding="utf-8")
        section = text[text.index("\n## Exercises\n"):text.index("```{admonition} Solutions")]
        items = [(int(m.group(1)), m.start()) for m in re.finditer(r"^(\d+)\. ", section, re.M)]
        for cell in re.finditer(r"^```\{code-cell\}[^\n]*\n(.*?)^```$", section, re.S | re.M):
            for name in check_calls(cell.group(1)):
                if not name.startswith("lab"):
                    continue
                before = [n for n, pos in items if pos < cell.start()]
                assert before and before[-1] == int(name.rsplit(".", 1)[1]), \
                    f"{lab.name}: check({name!r}) is not right after exercise {name.rsplit('.', 1)[1]}"


class _Missing(dict):
    """Cell locals: a lab variable the cell passes as context (space, problem, ...) reads as `...`."""

    def __missing__(self, key):
        if hasattr(builtins, key):
            raise KeyError(key)
        return ...


@pytest.mark.parametrize("lab", [p for p in LABS if "check(" in p.read_text(encoding="utf-8")], ids=lambda p: p.stem)
def test_the_shipped_cells_run_and_say_no_answer_yet(lab):
    text = lab.read_text(encoding="utf-8")
    namespace = _Missing()                           # the check cells run in order, as in the lab
    for cell in code_cells(text):
        if not check_calls(cell):
            continue
        out = io.StringIO()
        with redirect_stdout(out):
            exec(compile(cell, lab.name, "exec"), {"__builtins__": builtins}, namespace)
        lines = out.getvalue().strip().splitlines()
        assert len(lines) == len(check_calls(cell)) and all("no answer yet" in ln for ln in lines), \
            f"{lab.name}: a check cell as shipped should print 'no answer yet' for each check: {lines}"
