"""Countdown reward (d1's rule, arXiv 2504.12216; DARE ``dllm_rm`` countdown branch).

No ``<answer>`` tag -> 0. If the numbers used differ from the given multiset, or the expression is
not a valid arithmetic expression -> 0.1 (format credit). Otherwise 1.0 if it evaluates to the target
within 1e-5, else 0.1.
"""

from __future__ import annotations

import ast
import operator
import re

from dare.rewards.extract import last_answer_tag

__all__ = ["countdown_score", "safe_arith"]

_ALLOWED = re.compile(r"^[\d+\-*/().\s]+$")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def safe_arith(expr: str) -> float:
    """Evaluate ``+ - * /`` arithmetic on numbers by walking the AST (no ``eval``).

    :raises ValueError: anything but numbers, the four operators, unary minus and parentheses.
    :raises ZeroDivisionError: division by zero.
    """
    if not _ALLOWED.match(expr):
        raise ValueError(f"characters outside the arithmetic charset in {expr!r}")

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        raise ValueError(f"unsupported syntax in {expr!r}")

    return ev(ast.parse(expr, mode="eval"))


def countdown_score(completion: str, numbers: list[int], target: float, format_score: float = 0.1) -> float:
    """Score one completion; see the module docstring."""
    expr = last_answer_tag(completion)
    if expr is None:
        return 0.0
    used = sorted(int(n) for n in re.findall(r"\d+", expr))
    if used != sorted(int(n) for n in numbers):
        return format_score
    try:
        value = safe_arith(expr)
    except (ValueError, SyntaxError, ZeroDivisionError, RecursionError):
        return format_score
    return 1.0 if abs(value - float(target)) < 1e-5 else format_score
