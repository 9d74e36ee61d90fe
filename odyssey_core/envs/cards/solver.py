"""Exact arithmetic solvers for the card games (Points24, EZPoints).

Everything works on :class:`fractions.Fraction`, so ``8/(3-8/3)`` is found and no float
rounding ever turns a wrong formula into a right one. Results are cached per sorted multiset of
numbers (plus target and operators), so repeated calls during rollouts are dictionary lookups.

Two views of the solutions:

* :func:`solve` gives the *distinct* formulas: commutative and associative rewrites
  (``3*8`` vs ``8*3``, ``(a+b)+c`` vs ``a+(b+c)``) collapse to one canonical string.
* :func:`completions` answers "can this typed prefix still become a correct formula?": it
  searches every written form (every order, optional redundant parentheses), because the
  agent types tokens left to right in whatever order it likes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import lru_cache

__all__ = [
    "ALL_OPERATORS",
    "completions",
    "evaluate_tokens",
    "next_tokens",
    "solvable",
    "solve",
    "solve24",
    "tokenize",
    "uses_numbers",
    "written_solutions",
]

ALL_OPERATORS: tuple[str, ...] = ("+", "-", "*", "/")
_TOKEN_RE = re.compile(r"\d+|[-+*/()=]")
_SUM_OPS = frozenset("+-")


def tokenize(formula: str | Sequence[str]) -> list[str]:
    """Split ``"10+3*(4-2)"`` into tokens; a token list is returned as a list unchanged."""
    if not isinstance(formula, str):
        return [str(t) for t in formula]
    return _TOKEN_RE.findall(formula.replace(" ", ""))


def evaluate_tokens(tokens: Sequence[str] | str) -> Fraction | None:
    """The exact value of a complete formula, or ``None`` (syntax error, division by zero).

    A small recursive-descent parser: no ``eval``, no unary minus (the agent cannot type one).
    """
    toks = tokenize(tokens)
    pos = 0

    def peek() -> str | None:
        return toks[pos] if pos < len(toks) else None

    def expr() -> Fraction:
        nonlocal pos
        value = term()
        while peek() in ("+", "-"):
            op = toks[pos]
            pos += 1
            rhs = term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term() -> Fraction:
        nonlocal pos
        value = atom()
        while peek() in ("*", "/"):
            op = toks[pos]
            pos += 1
            rhs = atom()
            if op == "/" and rhs == 0:
                raise ZeroDivisionError
            value = value * rhs if op == "*" else value / rhs
        return value

    def atom() -> Fraction:
        nonlocal pos
        tok = peek()
        if tok is None:
            raise SyntaxError("unexpected end")
        pos += 1
        if tok == "(":
            value = expr()
            if peek() != ")":
                raise SyntaxError("missing )")
            pos += 1
            return value
        if tok.isdigit():
            return Fraction(int(tok))
        raise SyntaxError(f"unexpected {tok!r}")

    try:
        value = expr()
    except (SyntaxError, ZeroDivisionError, IndexError):
        return None
    return value if pos == len(toks) else None


def uses_numbers(tokens: Sequence[str] | str) -> list[int]:
    """The numbers a formula uses, in order."""
    return [int(t) for t in tokenize(tokens) if t.isdigit()]


# ------------------------------------------------------------------------------ distinct forms
# A canonical expression: a leaf number, a sum (positive terms, negative terms) or a product
# (numerator factors, denominator factors). Flattening both chains removes associativity;
# sorting the terms removes commutativity.


def _leaf(n: int) -> tuple:
    return ("n", n)


def _sum_parts(node: tuple) -> tuple[list[tuple], list[tuple]]:
    return (list(node[1]), list(node[2])) if node[0] == "s" else ([node], [])


def _prod_parts(node: tuple) -> tuple[list[tuple], list[tuple]]:
    return (list(node[1]), list(node[2])) if node[0] == "p" else ([node], [])


def _combine(op: str, a: tuple, b: tuple) -> tuple:
    if op in _SUM_OPS:
        ap, an = _sum_parts(a)
        bp, bn = _sum_parts(b)
        pos, neg = (ap + bp, an + bn) if op == "+" else (ap + bn, an + bp)
        return ("s", tuple(sorted(pos, key=_render)), tuple(sorted(neg, key=_render)))
    ap, ad = _prod_parts(a)
    bp, bd = _prod_parts(b)
    num, den = (ap + bp, ad + bd) if op == "*" else (ap + bd, ad + bp)
    return ("p", tuple(sorted(num, key=_render)), tuple(sorted(den, key=_render)))


def _render(node: tuple) -> str:
    if node[0] == "n":
        return str(node[1])
    if node[0] == "s":
        out = "+".join(_render(t) for t in node[1])
        return out + "".join("-" + _render(t) for t in node[2])

    def factor(t: tuple) -> str:  # sums inside products need parentheses
        return f"({_render(t)})" if t[0] == "s" else _render(t)

    out = "*".join(factor(t) for t in node[1])
    return out + "".join("/" + factor(t) for t in node[2])


def _search(
    items: list[tuple[Fraction, tuple]], target: Fraction, ops: tuple[str, ...], found: set[str]
) -> None:
    if len(items) == 1:
        if items[0][0] == target:
            found.add(_render(items[0][1]))
        return
    for i in range(len(items)):
        for j in range(len(items)):
            if i == j:
                continue
            (va, na), (vb, nb) = items[i], items[j]
            rest = [items[k] for k in range(len(items)) if k not in (i, j)]
            for op in ops:
                if op in "+*" and i > j:  # commutative: one order is enough
                    continue
                if op == "/" and vb == 0:
                    continue
                value = {"+": va + vb, "-": va - vb, "*": va * vb, "/": va / vb if vb else 0}[op]
                _search([*rest, (value, _combine(op, na, nb))], target, ops, found)


@lru_cache(maxsize=4096)
def _solve_cached(numbers: tuple[int, ...], target: Fraction, ops: tuple[str, ...]) -> tuple:
    found: set[str] = set()
    _search([(Fraction(n), _leaf(n)) for n in numbers], target, ops, found)
    return tuple(sorted(found, key=lambda s: (len(s), s)))


def solve(
    numbers: Iterable[int], target: int | Fraction = 24, ops: Sequence[str] = ALL_OPERATORS
) -> tuple[str, ...]:
    """Every distinct formula using each number exactly once that equals ``target``."""
    nums = tuple(sorted(int(n) for n in numbers))
    return _solve_cached(nums, Fraction(target), tuple(sorted(ops)))


def solve24(numbers: Iterable[int]) -> tuple[str, ...]:
    """The distinct formulas that make 24 from four card values."""
    return solve(numbers, 24)


@lru_cache(maxsize=65536)
def _reachable(values: tuple[Fraction, ...], target: Fraction, ops: tuple[str, ...]) -> bool:
    # Values only, early exit, memoized on the sorted multiset: much cheaper than ``solve``.
    if len(values) == 1:
        return values[0] == target
    n = len(values)
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            a, b = values[i], values[j]
            rest = [values[k] for k in range(n) if k not in (i, j)]
            for op in ops:
                if op in "+*" and i > j:
                    continue
                if op == "/" and b == 0:
                    continue
                value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else 0}[op]
                if _reachable(tuple(sorted([*rest, value])), target, ops):
                    return True
    return False


def solvable(
    numbers: Iterable[int], target: int | Fraction = 24, ops: Sequence[str] = ALL_OPERATORS
) -> bool:
    """Whether some formula over all the numbers reaches ``target``."""
    values = tuple(sorted(Fraction(int(n)) for n in numbers))
    return _reachable(values, Fraction(target), tuple(sorted(ops)))


# ------------------------------------------------------------------------------ written forms
_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


Form = tuple[tuple[str, ...], int]  # tokens and the precedence they bind with (3 = atom)


def _placed(forms: tuple[Form, ...], min_prec: int, parens: bool) -> list[tuple[str, ...]]:
    """Ways to write each child form where the parent needs precedence ``min_prec``."""
    out: list[tuple[str, ...]] = []
    for tokens, prec in forms:
        if prec >= min_prec:
            out.append(tokens)
            if parens and prec < 3:  # redundant parentheses are still a correct formula
                out.append(("(", *tokens, ")"))
        elif parens:
            out.append(("(", *tokens, ")"))
    return out


def _written_search(
    items: list[tuple[Fraction, tuple[Form, ...]]],
    target: Fraction,
    ops: tuple[str, ...],
    parens: bool,
    found: set[tuple[str, ...]],
) -> None:
    if len(items) == 1:
        if items[0][0] == target:
            found.update(tokens for tokens, _ in items[0][1])
        return
    for i in range(len(items)):
        for j in range(len(items)):
            if i == j:
                continue
            (va, fa), (vb, fb) = items[i], items[j]
            rest = [items[k] for k in range(len(items)) if k not in (i, j)]
            for op in ops:
                if op == "/" and vb == 0:
                    continue
                value = {"+": va + vb, "-": va - vb, "*": va * vb, "/": va / vb if vb else 0}[op]
                prec = _PREC[op]
                # Left-associative reading: a right operand of - or / must bind tighter.
                left = _placed(fa, prec, parens)
                right = _placed(fb, prec + (1 if op in "-/" else 0), parens)
                forms = tuple(((*lt, op, *rt), prec) for lt in left for rt in right)
                if forms:
                    _written_search([*rest, (value, forms)], target, ops, parens, found)


@lru_cache(maxsize=1024)
def _written_cached(
    numbers: tuple[int, ...], target: Fraction, ops: tuple[str, ...], parens: bool
) -> tuple[tuple[str, ...], ...]:
    found: set[tuple[str, ...]] = set()
    leaves = [(Fraction(n), (((str(n),), 3),)) for n in numbers]
    _written_search(leaves, target, ops, parens, found)
    return tuple(sorted(found, key=lambda t: (len(t), t)))


def written_solutions(
    numbers: Iterable[int],
    target: int | Fraction = 24,
    ops: Sequence[str] = ALL_OPERATORS,
    parens: bool = True,
) -> tuple[tuple[str, ...], ...]:
    """Every token sequence the agent could type that is a correct formula (shortest first)."""
    nums = tuple(sorted(int(n) for n in numbers))
    return _written_cached(nums, Fraction(target), tuple(sorted(ops)), parens)


def completions(
    prefix: Sequence[str] | str,
    numbers: Iterable[int],
    target: int | Fraction = 24,
    ops: Sequence[str] = ALL_OPERATORS,
    parens: bool = True,
) -> list[tuple[str, ...]]:
    """Correct formulas (as tokens, shortest first) that start with the typed ``prefix``."""
    pre = tuple(tokenize(prefix))
    n = len(pre)
    return [t for t in written_solutions(numbers, target, ops, parens) if t[:n] == pre]


def next_tokens(
    prefix: Sequence[str] | str,
    numbers: Iterable[int],
    target: int | Fraction = 24,
    ops: Sequence[str] = ALL_OPERATORS,
    parens: bool = True,
) -> set[str]:
    """Tokens that keep the formula completable; ``{"="}`` when the prefix is already correct."""
    pre = tuple(tokenize(prefix))
    out: set[str] = set()
    for tokens in completions(pre, numbers, target, ops, parens):
        out.add(tokens[len(pre)] if len(tokens) > len(pre) else "=")
    return out
