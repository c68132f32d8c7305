"""A calculator tool: arithmetic parsed with Python's `ast`, evaluated node by node.  Never `eval`.

Accepted: int and float literals, + - * / // % **, unary + and -, parentheses (and the
characters × ÷ −, read as * / -).  Everything else (names, calls, attributes, strings,
comparisons, ^, ...) is refused with an error message, which is what the model reads as the
tool's output.  Limits (`CalculatorLimits`) bound the input length, the nesting depth, the
exponent and the size of every intermediate result, so no input can take long or use much
memory: `9**9**9` is refused before anything is computed.
"""
from __future__ import annotations

import ast
import math
import operator
import time
from dataclasses import dataclass

from rl_lab.agents.result import ToolResult

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
            ast.Pow: "**"}
_ALIASES = str.maketrans({"×": "*", "÷": "/", "−": "-"})


@dataclass(frozen=True)
class CalculatorLimits:
    """max_chars: input length; max_depth: nesting of the expression tree; max_exponent: |b| in
    a ** b; max_digits: decimal digits of any integer (literal, intermediate or result);
    float results must be finite."""
    max_chars: int = 200
    max_depth: int = 20
    max_exponent: int = 64
    max_digits: int = 60


class CalculatorError(ValueError):
    """An input the calculator refuses; the message is the tool output."""


def _check_size(value, limits: CalculatorLimits):
    if isinstance(value, int):
        # bit_length bounds the digits without converting to text: 10^d needs > 3.32 d bits
        if value.bit_length() > limits.max_digits * 3.33:
            raise CalculatorError(f"result too large (more than {limits.max_digits} digits)")
    elif not math.isfinite(value):
        raise CalculatorError("result too large (not a finite number)")
    return value


def _power(base, exp, limits: CalculatorLimits):
    """base ** exp after checking that the result fits the limits (estimated from the sizes)."""
    if abs(exp) > limits.max_exponent:
        raise CalculatorError(f"exponent {exp} too large (|exponent| <= {limits.max_exponent})")
    if isinstance(base, int) and isinstance(exp, int) and exp > 0:
        if (base.bit_length() - 1) * exp > limits.max_digits * 3.33:
            raise CalculatorError(f"result too large (more than {limits.max_digits} digits)")
    if base == 0 and exp < 0:
        raise CalculatorError("division by zero (0 to a negative power)")
    if isinstance(exp, float) and base < 0:
        raise CalculatorError("a negative number to a fractional power is not a real number")
    return base ** exp


def _divide(a, b):
    """a / b, an int when both are ints and b divides a (12/4 = 3, not 3.0)."""
    if b == 0:
        raise CalculatorError("division by zero")
    if isinstance(a, int) and isinstance(b, int) and a % b == 0:
        return a // b
    return a / b


def _evaluate(node, limits: CalculatorLimits, depth: int = 0):
    if depth > limits.max_depth:
        raise CalculatorError(f"expression nested too deeply (depth > {limits.max_depth})")
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, limits, depth + 1)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CalculatorError(f"only numbers are allowed, not {node.value!r}")
        return _check_size(node.value, limits)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand, limits, depth + 1))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        a = _evaluate(node.left, limits, depth + 1)
        b = _evaluate(node.right, limits, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(a, b, limits), limits)
        if isinstance(node.op, ast.Div):
            return _check_size(_divide(a, b), limits)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and b == 0:
            raise CalculatorError("division by zero")
        return _check_size(_BINARY[type(node.op)](a, b), limits)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        raise CalculatorError("'^' is not a power here: write a ** b")
    raise CalculatorError(f"unsupported syntax: {type(node).__name__} (use numbers, + - * / // % ** and "
                          f"parentheses)")


def format_number(value) -> str:
    """An int as its digits; a float with up to 12 significant digits ("0.333333333333")."""
    if isinstance(value, int):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return format(value, ".12g")


def evaluate(expression: str, limits: CalculatorLimits = CalculatorLimits()):
    """The value of an arithmetic expression (int or float); CalculatorError when refused."""
    if not isinstance(expression, str):
        raise CalculatorError(f"expected text, got {type(expression).__name__}")
    if len(expression) > limits.max_chars:
        raise CalculatorError(f"expression too long ({len(expression)} characters, at most {limits.max_chars})")
    text = expression.translate(_ALIASES).strip()
    if not text:
        raise CalculatorError("empty expression")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:  # ValueError: NUL bytes
        raise CalculatorError(f"cannot parse {expression!r}: {getattr(exc, 'msg', exc)}") from None
    try:
        return _evaluate(tree, limits)
    except RecursionError:
        raise CalculatorError("expression nested too deeply") from None
    except (OverflowError, ZeroDivisionError) as exc:
        raise CalculatorError(f"{type(exc).__name__}: {exc}") from None


def calculator(expression: str, limits: CalculatorLimits = CalculatorLimits()) -> ToolResult:
    """The calculator tool: ToolResult("42") or ToolResult("error: ...", kind="error")."""
    start = time.perf_counter()
    try:
        output, kind = format_number(evaluate(expression, limits)), "ok"
    except CalculatorError as exc:
        output, kind = f"error: {exc}", "error"
    return ToolResult(output, kind, time.perf_counter() - start)
