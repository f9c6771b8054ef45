"""τ²'s ``calculate`` tool, evaluated without ``eval``.

τ² checks that the expression uses only ``0123456789+-*/(). `` and then runs
``str(round(float(eval(expression, {"__builtins__": None}, {})), 2))``. Those characters still allow far more than
arithmetic on prices: ``**`` and ``//``, float literals (``1.``, ``.5``), ``...`` (Ellipsis), ``()`` (an empty
tuple), and calls (``2 (3)`` calls the int ``2``). :func:`calculate` gives the same answers and the same errors:

* the character check and its message are τ²'s;
* the expression is parsed and compiled by Python's own compiler (never run), with ``eval``'s handling of a string
  source (leading spaces and tabs are dropped, so `` 273 + 17`` works), so a syntax error is τ²'s ``SyntaxError``
  text, e.g. ``invalid syntax (<string>, line 1)``;
* the syntax tree is walked by a small interpreter that applies Python's own operators (``operator.add``...) and
  call forms to the same values, so results (``22 ** 2`` -> ``484.0``, ``813 // 57`` -> ``14.0``) and runtime
  errors (``division by zero``, ``'int' object is not callable``, ``int too large to convert to float``) are the
  ones ``eval`` produces. The values that can occur are ints, floats, complex numbers, ``Ellipsis`` and the empty
  tuple, none of which can run code.

**Bounds** (agentgym's, where τ² would hang or crash): an expression is refused with
``expression refused: ...`` (a :class:`CalculationRefused`) when

* an integer it computes would have more than :data:`MAX_INT_BITS` (14,300) bits, about 4,300 decimal digits, the
  length at which Python itself stops converting integers to text. ``9**9**9**9`` is refused at once; τ² would
  compute it for ever;
* its syntax tree is deeper than :data:`MAX_DEPTH` (1,000) levels, or Python's parser runs out of recursion or
  memory on it (τ² reports ``maximum recursion depth exceeded during compilation`` or an empty ``MemoryError``).

Within the bounds the answer is τ²'s, byte for byte (the conformance tests compare them on thousands of
expressions).
"""

from __future__ import annotations

import ast
import operator
import warnings
from typing import Any

__all__ = ["calculate", "CalculationRefused", "ALLOWED_CHARS", "MAX_INT_BITS", "MAX_DEPTH"]

ALLOWED_CHARS = "0123456789+-*/(). "
MAX_INT_BITS = 14_300
MAX_DEPTH = 1_000

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}
_UNOPS = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculationRefused(ValueError):
    """The expression exceeds one of agentgym's documented bounds (see the module docstring)."""


def _too_big() -> CalculationRefused:
    return CalculationRefused(f"expression refused: an integer in it would have more than {MAX_INT_BITS} bits "
                              "(agentgym's bound on calculate)")


def _is_int(v: Any) -> bool:
    return type(v) is int  # no bools can occur; exact type keeps subclasses out


def _check(v: Any) -> Any:
    if _is_int(v) and v.bit_length() > MAX_INT_BITS:
        raise _too_big()
    return v


def _binop(op: type, a: Any, b: Any) -> Any:
    if _is_int(a) and _is_int(b):
        if op is ast.Mult and a.bit_length() + b.bit_length() - 1 > MAX_INT_BITS:
            raise _too_big()  # the product has at least that many bits
        if op is ast.Pow and b > 0 and abs(a) > 1 and b * (a.bit_length() - 1) + 1 > MAX_INT_BITS:
            raise _too_big()  # |a| >= 2**(bits-1), so |a**b| has at least b*(bits-1)+1 bits
    return _check(_BINOPS[op](a, b))


def _call(func: Any, node: ast.Call, arg: Any) -> Any:
    # Without commas a call has at most one argument: f(), f(x), f(*x) or f(**x). Each form is written out so that
    # Python raises exactly the error eval's call would (e.g. "1 argument after * must be an iterable, not int").
    if node.keywords:
        return func(**arg)
    if not node.args:
        return func()
    if isinstance(node.args[0], ast.Starred):
        return func(*arg)
    return func(arg)


def _children(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Constant):
        return []
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNOPS:
        return [node.operand]
    if isinstance(node, ast.Call) and len(node.args) + len(node.keywords) <= 1 and \
            all(k.arg is None for k in node.keywords):
        inner = [a.value if isinstance(a, ast.Starred) else a for a in node.args] + [k.value for k in node.keywords]
        return [node.func, *inner]
    if isinstance(node, ast.Tuple) and not node.elts:
        return []
    # Unreachable with the allowed characters (no names, commas, brackets or comparisons); refused, never run.
    raise CalculationRefused(f"expression refused: unsupported syntax {type(node).__name__}")


def _evaluate(root: ast.AST) -> Any:
    """Post-order evaluation with an explicit stack (deep but legal trees must not hit Python's recursion limit)."""
    stack: list[tuple[ast.AST, bool]] = [(root, False)]
    values: list[Any] = []
    while stack:
        node, expanded = stack.pop()
        kids = _children(node)
        if kids and not expanded:
            stack.append((node, True))
            stack.extend((k, False) for k in reversed(kids))
            continue
        args = [values.pop() for _ in kids][::-1]
        if isinstance(node, ast.Constant):
            values.append(_check(node.value))
        elif isinstance(node, ast.Tuple):
            values.append(())
        elif isinstance(node, ast.BinOp):
            values.append(_binop(type(node.op), args[0], args[1]))
        elif isinstance(node, ast.UnaryOp):
            values.append(_UNOPS[type(node.op)](args[0]))
        else:
            values.append(_check(_call(args[0], node, args[1] if len(args) > 1 else None)))
    return values[0]


def _depth(root: ast.AST) -> int:
    deepest, stack = 0, [(root, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((k, depth + 1) for k in ast.iter_child_nodes(node))
    return deepest


def _parse(expression: str) -> ast.AST:
    # eval() drops the leading spaces and tabs of a string source before compiling it as "<string>".
    source = expression.lstrip(" \t")
    try:
        tree = ast.parse(source, "<string>", "eval")
        if _depth(tree.body) > MAX_DEPTH:
            raise CalculationRefused(f"expression refused: nested deeper than {MAX_DEPTH} levels "
                                     "(agentgym's bound on calculate)")
        # The full compile finds the errors the parser leaves to the compiler (same text as eval's); nothing runs.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "'int' object is not callable; perhaps you missed a comma?"
            compile(source, "<string>", "eval", dont_inherit=True)
    except (RecursionError, MemoryError):
        raise CalculationRefused("expression refused: nested too deeply for Python's parser "
                                 "(agentgym's bound on calculate)") from None
    return tree.body


def calculate(expression: str) -> str:
    """τ²'s answer for ``expression``; raises what τ²'s ``eval`` would raise (its message is the tool error), or
    :class:`CalculationRefused` beyond the bounds."""
    if not all(char in ALLOWED_CHARS for char in expression):
        raise ValueError("Invalid characters in expression")
    return str(round(float(_evaluate(_parse(expression))), 2))
