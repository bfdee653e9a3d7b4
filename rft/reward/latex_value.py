"""A small, safe evaluator for constant LaTeX arithmetic (`\\frac{\\sqrt{3}}{2}`, `2\\pi`, `3^{4}`).

It is a hand-written recursive-descent parser over a fixed grammar: model text is never handed to
`eval`, `sympify` or any other code path. Rational results stay exact (`Fraction`); anything with
`\\pi` or an irrational root becomes a float. Whatever it does not understand (variables, functions,
huge powers, deep nesting) makes it return None so a caller can decide another way.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

Value = Fraction | float

MAX_TOKENS = 400
MAX_DEPTH = 60
MAX_INT_BITS = 4096
MAX_FACTORIAL = 300

_TOKEN = re.compile(r"\d+(?:\.\d*)?|\.\d+|\\[A-Za-z]+|\\.|\S")
_MUL = {"*", "\\cdot", "\\times"}
_DIV = {"/", "\\div"}
_ATOM_START = {"(", "{", "[", "\\frac", "\\sqrt", "\\pi", "\\infty", "\\binom"}


class _Unsupported(Exception):
    """The expression is outside the evaluator's grammar or limits."""


def _check_size(v: Value) -> Value:
    """Reject exact values whose numerator or denominator grew too large."""
    if isinstance(v, Fraction) and (
        v.numerator.bit_length() > MAX_INT_BITS or v.denominator.bit_length() > MAX_INT_BITS
    ):
        raise _Unsupported("value too large")
    if isinstance(v, float) and math.isnan(v):
        raise _Unsupported("nan")
    return v


def _exact_root(v: Fraction, n: int) -> Fraction | None:
    """The exact n-th root of a non-negative fraction, or None if it is irrational."""

    def iroot(k: int) -> int | None:
        r = round(k ** (1.0 / n)) if k.bit_length() < 1000 else None
        if r is None:
            return None
        for c in (r - 1, r, r + 1):
            if c >= 0 and c**n == k:
                return c
        return None

    num, den = iroot(v.numerator), iroot(v.denominator)
    return Fraction(num, den) if num is not None and den is not None else None


def _root(v: Value, n: int) -> Value:
    """n-th root, exact where possible."""
    if n < 1 or n > 64:
        raise _Unsupported("root degree")
    if v < 0:
        if n % 2 == 0:
            raise _Unsupported("even root of a negative number")
        return -_root(-v, n)
    if isinstance(v, Fraction):
        exact = _exact_root(v, n)
        if exact is not None:
            return exact
    return float(v) ** (1.0 / n)


def _power(base: Value, exp: Value) -> Value:
    """base**exp with bounds; exact for rational bases and integer exponents."""
    if isinstance(base, Fraction) and isinstance(exp, Fraction):
        if exp.denominator == 1:
            e = exp.numerator
            if base == 0 and e < 0:
                raise _Unsupported("division by zero")
            bits = max(base.numerator.bit_length(), base.denominator.bit_length())
            if abs(e) * bits > MAX_INT_BITS:
                raise _Unsupported("power too large")
            return base**e
        if base >= 0 and exp.denominator <= 64:
            root = _root(base, exp.denominator)
            return _power(root, Fraction(exp.numerator)) if isinstance(root, Fraction) else _fpow(base, exp)
    return _fpow(base, exp)


def _fpow(base: Value, exp: Value) -> float:
    """Float power that refuses complex results and overflow."""
    b, e = float(base), float(exp)
    if b < 0 and not e.is_integer():
        raise _Unsupported("complex power")
    try:
        r = b**e
    except (OverflowError, ZeroDivisionError) as err:
        raise _Unsupported(str(err)) from None
    if isinstance(r, complex):
        raise _Unsupported("complex power")
    return r


def _binary(op: str, a: Value, b: Value) -> Value:
    """Apply + - * / keeping exactness when both sides are exact."""
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        x, y = a, b
    else:
        x, y = float(a), float(b)
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if y == 0:
        raise _Unsupported("division by zero")
    return x / y


class _Parser:
    """Recursive descent over tokens; raises _Unsupported for anything unknown."""

    def __init__(self, tokens: list[str], variables: dict[str, Value] | None = None):
        self.toks = tokens
        self.i = 0
        self.depth = 0
        self.vars = variables or {}

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise _Unsupported(f"expected {expected!r}")
        self.i += 1
        return tok

    def parse(self) -> Value:
        v = self.expr()
        if self.peek() is not None:
            raise _Unsupported(f"trailing {self.peek()!r}")
        return v

    def expr(self) -> Value:
        v = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            v = _check_size(_binary(op, v, self.term()))
        return v

    def term(self) -> Value:
        v = self.unary()
        while True:
            tok = self.peek()
            if tok in _MUL:
                self.take()
                v = _binary("*", v, self.unary())
            elif tok in _DIV:
                self.take()
                v = _binary("/", v, self.unary())
            elif tok is not None and (tok in _ATOM_START or tok[0].isdigit() or tok in self.vars):
                v = _binary("*", v, self.power())
            else:
                return v
            _check_size(v)

    def unary(self) -> Value:
        tok = self.peek()
        if tok in ("-", "+"):
            self.take()
            self._enter()
            v = self.unary()
            self.depth -= 1
            return -v if tok == "-" else v
        return self.power()

    def power(self) -> Value:
        base = self.postfix(self.atom())
        if self.peek() == "^":
            self.take()
            self._enter()
            exp = self.exponent()
            self.depth -= 1
            return _check_size(_power(base, exp))
        return base

    def exponent(self) -> Value:
        tok = self.peek()
        if tok == "{":
            return self.group()
        if tok in ("-", "+"):
            return self.unary()
        return self.power()

    def postfix(self, v: Value) -> Value:
        while self.peek() == "!":
            self.take()
            if not (isinstance(v, Fraction) and v.denominator == 1 and 0 <= v <= MAX_FACTORIAL):
                raise _Unsupported("factorial")
            v = Fraction(math.factorial(v.numerator))
        return v

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Unsupported("nesting too deep")

    def group(self) -> Value:
        """`{expr}`, or a single digit / token as LaTeX allows (`\\frac12`)."""
        tok = self.peek()
        if tok == "{":
            self.take()
            self._enter()
            v = self.expr()
            self.take("}")
            self.depth -= 1
            return v
        if tok is not None and tok[0].isdigit():
            if len(tok) > 1:
                self.toks[self.i] = tok[1:]
            else:
                self.i += 1
            return Fraction(int(tok[0]))
        return self.atom()

    def atom(self) -> Value:
        tok = self.peek()
        if tok is None:
            raise _Unsupported("unexpected end")
        if tok[0].isdigit() or (tok[0] == "." and len(tok) > 1):
            self.take()
            return _check_size(Fraction(tok.rstrip(".")))
        if tok in ("(", "{", "["):
            close = {"(": ")", "{": "}", "[": "]"}[tok]
            self.take()
            self._enter()
            v = self.expr()
            self.take(close)
            self.depth -= 1
            return v
        if tok == "\\frac":
            self.take()
            num = self.group()
            den = self.group()
            return _check_size(_binary("/", num, den))
        if tok == "\\sqrt":
            self.take()
            n = 2
            if self.peek() == "[":
                self.take()
                deg = self.expr()
                self.take("]")
                if not (isinstance(deg, Fraction) and deg.denominator == 1):
                    raise _Unsupported("root degree")
                n = int(deg)
            return _check_size(_root(self.group(), n))
        if tok == "\\binom":
            self.take()
            n, k = self.group(), self.group()
            if not all(isinstance(x, Fraction) and x.denominator == 1 and 0 <= x <= 10_000 for x in (n, k)):
                raise _Unsupported("binomial")
            return _check_size(Fraction(math.comb(int(n), int(k))))
        if tok in self.vars:
            self.take()
            return self.vars[tok]
        if tok == "\\pi":
            self.take()
            return math.pi
        if tok == "\\infty":
            self.take()
            return math.inf
        raise _Unsupported(f"token {tok!r}")


def tokenize(text: str) -> list[str] | None:
    """Split normalized LaTeX into tokens, or None when it is too long to bother."""
    tokens = _TOKEN.findall(text)
    return tokens if 0 < len(tokens) <= MAX_TOKENS else None


def latex_value(text: str, variables: dict[str, Value] | None = None) -> Value | None:
    """The numeric value of a LaTeX expression (single-letter `variables` substituted), or None
    if it is not one we can evaluate."""
    tokens = tokenize(text)
    if tokens is None:
        return None
    try:
        return _Parser(tokens, variables).parse()
    except (_Unsupported, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None


# Points at which expressions in variables are compared (exact rationals: a polynomial or rational
# function identity holds at all of them iff, barring a constructed coincidence, it holds everywhere).
SAMPLE_POINTS = (Fraction(13, 7), Fraction(29, 11), Fraction(41, 17), Fraction(53, 19))


def letter_variables(text: str) -> set[str] | None:
    """The single-letter variables of an expression, or None if letters form words/commands we
    cannot treat as variables (e.g. `\\sin`, `ab_1`)."""
    if "_" in text:
        return None
    stripped = re.sub(r"\\(?:frac|sqrt|cdot|times|div|pi|infty|binom|left|right)(?![A-Za-z])", " ", text)
    if "\\" in stripped or re.search(r"[A-Za-z]{3}", stripped):
        return None
    return set(re.findall(r"[A-Za-z]", stripped))


def identity_equal(a: str, b: str) -> bool | None:
    """Compare two expressions in the same single-letter variables by substituting sample points;
    None if they cannot be evaluated (different variables, functions, poles at every point)."""
    va, vb = letter_variables(a), letter_variables(b)
    if not va or va != vb or len(va) > 4:
        return None
    names = sorted(va)
    compared = 0
    for k in range(len(SAMPLE_POINTS)):
        env = {n: SAMPLE_POINTS[(k + j) % len(SAMPLE_POINTS)] * (j + 1) for j, n in enumerate(names)}
        x, y = latex_value(a, env), latex_value(b, env)
        if x is None or y is None:
            continue
        if not values_equal(x, y):
            return False
        compared += 1
    return True if compared >= 3 else None


def values_equal(a: Value, b: Value, rel_tol: float = 1e-6) -> bool:
    """Exact equality for two rationals, else a purely relative tolerance (0 only equals 0)."""
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a == b
    try:
        x, y = float(a), float(b)
    except OverflowError:
        return False
    if math.isinf(x) or math.isinf(y):
        return x == y
    return math.isclose(x, y, rel_tol=rel_tol, abs_tol=0.0)
