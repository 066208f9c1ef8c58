"""Exact answers from the formulas: intensity as a size grows without bound, and the smallest
size at which an operator reaches the ridge, or a proof that it never does.

The formulas are evaluated on a sympy symbol, so nothing here is derived by hand: change the
device, dtype, head dimension or counting convention and the algebra is redone. sympy is
imported on first use (it costs about 0.3 s), never when the module is.

    >>> from attnroof.ops import attention
    >>> c = crossover(lambda s: attention(s, 128, fused=True).intensity, 1200e12, 4.0e12)
    >>> c.s_min, c.exact                              # part D2: s ≥ 307200/517 = 594.2
    (595, '307200/517')
    >>> u = crossover(lambda s: attention(s, 128).intensity, 1200e12, 4.0e12)
    >>> u.never, round(u.limit_intensity, 1)          # part D3: never; supremum 517/8
    (True, 64.6)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sympy as sp


def exact(x: float | int) -> sp.Rational:
    """The exact rational value of a figure as written (1200e12 → 1200000000000000)."""
    import sympy as sp

    if isinstance(x, int):
        return sp.Integer(x)
    return sp.Rational(repr(float(x)))


def fraction_text(x: sp.Expr) -> str:
    """``'307200/517'`` for a rational (always p/q, never a simplified look-alike), ``'inf'`` for
    an unbounded value, ``sympy``'s own text otherwise."""
    import sympy as sp

    if x.is_Rational:
        return str(sp.Rational(x))
    if x in (sp.oo, sp.zoo):
        return "inf"
    return str(x)


def exact_expr(e: Any) -> sp.Expr:
    """A formula's value on symbols, with every float in it (fp4's ½ byte, a softmax count of
    2.5) made the exact rational it was written as, and common factors cancelled."""
    import sympy as sp

    return sp.cancel(sp.nsimplify(sp.sympify(e), rational=True))


@dataclass(frozen=True, slots=True)
class Crossover:
    """Where intensity(x) first reaches the ridge, for integer x ≥ 1.

    ``threshold`` is the real x at which intensity equals the ridge (``exact`` as a fraction);
    ``s_min`` the smallest integer at or above it. ``never`` means no positive x reaches the
    ridge: then ``limit_intensity`` (the supremum as x → ∞) lies at or below the ridge.
    """

    variable: str
    ridge: float
    ridge_exact: str
    s_min: int | None
    threshold: float | None
    exact: str | None
    never: bool
    limit_intensity: float | None
    limit_exact: str
    intensity_expr: str
    inequality: str
    solution: str

    def to_json(self) -> dict[str, Any]:
        return {
            "ridge": self.ridge,
            "s_min": self.s_min,
            "threshold": self.threshold,
            "exact": self.exact,
            "never": self.never,
            "limit_intensity": self.limit_intensity,
            "limit_exact": self.limit_exact,
            "intensity_expr": self.intensity_expr,
            "inequality": self.inequality,
            "solution": self.solution,
        }


def limit(intensity_of: Callable[[sp.Symbol], Any], variable: str = "s") -> sp.Expr:
    """lim intensity(x) as x → ∞, exactly (``sp.oo`` when unbounded)."""
    import sympy as sp

    x = sp.Symbol(variable, positive=True)
    return sp.limit(exact_expr(intensity_of(x)), x, sp.oo)


def crossover(
    intensity_of: Callable[[sp.Symbol], Any],
    peak_flops_per_s: float,
    bandwidth_bytes_per_s: float,
    variable: str = "s",
) -> Crossover:
    """Solve intensity(x) ≥ P/B over the positive reals and round up to an integer size.

    ``intensity_of`` is any formula's intensity as a function of one size; it is called once
    with a positive sympy symbol.
    """
    import sympy as sp

    x = sp.Symbol(variable, positive=True)
    ridge = exact(peak_flops_per_s) / exact(bandwidth_bytes_per_s)
    intensity = exact_expr(intensity_of(x))
    sup = sp.limit(intensity, x, sp.oo)

    # I(x) ≥ ridge  ⇔  numerator(I − ridge) ≥ 0, since the denominator is positive for x > 0.
    numer, denom = sp.fraction(sp.cancel(sp.together(intensity - ridge)))
    if sp.sign(denom.subs(x, 1)) < 0:
        numer, denom = -numer, -denom
    numer = sp.expand(numer)
    # Clear a common positive factor (a power of x, a number) so the inequality reads simply.
    _content, prim = sp.Poly(numer, x).primitive()
    xpow = min((m[0] for m in sp.Poly(prim, x).monoms()), default=0)
    reduced = sp.expand(prim.as_expr() / x**xpow)
    inequality = f"{sp.sstr(reduced)} >= 0"
    real = sp.Symbol(variable, real=True)
    solution_set = sp.solveset(reduced.subs(x, real) >= 0, real, sp.S.Reals)
    positive = sp.Intersection(solution_set, sp.Interval.open(0, sp.oo))

    common: dict[str, Any] = dict(
        variable=variable,
        ridge=float(ridge),
        ridge_exact=fraction_text(ridge),
        limit_intensity=_finite(sup),
        limit_exact=fraction_text(sup),
        intensity_expr=str(intensity),
        inequality=inequality,
        solution=_set_text(solution_set, real),
    )
    s_min = _smallest_integer(positive)
    if s_min is None:
        return Crossover(s_min=None, threshold=None, exact=None, never=True, **common)
    threshold = sp.Min(*[iv.inf for iv in _intervals(positive)])
    return Crossover(
        s_min=s_min, threshold=float(threshold), exact=fraction_text(threshold), never=False, **common
    )


def _intervals(s: sp.Set) -> list[sp.Interval]:
    import sympy as sp

    if isinstance(s, sp.Interval):
        return [s]
    if isinstance(s, sp.Union):
        return [a for a in s.args if isinstance(a, sp.Interval)]
    return []


def _smallest_integer(s: sp.Set) -> int | None:
    """The smallest integer ≥ 1 in a union of intervals, or None."""
    import sympy as sp

    best: int | None = None
    for iv in _intervals(s):
        start = max(1, int(sp.ceiling(iv.inf))) if iv.inf.is_finite else 1
        if iv.left_open and sp.Integer(start) == iv.inf:
            start += 1
        if sp.Integer(start) in iv and (best is None or start < best):
            best = start
    return best


def _finite(value: sp.Expr) -> float | None:
    return float(value) if value.is_finite else None


def _set_text(s: sp.Set, x: sp.Symbol) -> str:
    """A readable form of a solution set: ``s <= -307200/1883``, ``s >= 307200/517``, ``none``."""
    import sympy as sp

    if s is sp.S.EmptySet:
        return "no real solution"
    if isinstance(s, sp.Interval):
        lo, hi = s.inf, s.sup
        if lo == -sp.oo and hi == sp.oo:
            return f"every real {x}"
        if lo == -sp.oo:
            return f"{x} {'<' if s.right_open else '<='} {fraction_text(hi)}"
        if hi == sp.oo:
            return f"{x} {'>' if s.left_open else '>='} {fraction_text(lo)}"
    return str(s)


# ---------------------------------------------------------------- affine intensities, without sympy


def affine_crossover(
    cost_of: Callable[[Any], Any],
    peak_flops_per_s: float,
    bandwidth_bytes_per_s: float,
    variable: str = "n",
) -> Crossover:
    """:func:`crossover` for a cost whose FLOPs grow as a·x and bytes as b·x + c — a GEMM against
    a weight read once, x tokens through it — solved with exact fractions instead of sympy
    (about 0.3 s of import saved; same answer and same text, checked against :func:`crossover`
    in the tests). ``cost_of(x)`` returns a :class:`~attnroof.cost.Cost`; a cost of another shape
    is handed to :func:`crossover`.

        I(x) = a·x / (b·x + c) ≥ R  ⇔  (a − R·b)·x − R·c ≥ 0

    >>> from attnroof.ops import linear
    >>> c = affine_crossover(lambda n: linear(n, 4096, 4096), 1200e12, 4.0e12)
    >>> c.s_min, c.exact, c.intensity_expr, c.inequality                 # part F3
    (352, '153600/437', '2048*n/(n + 2048)', '437*n - 153600 >= 0')
    """
    coeffs = _affine(cost_of)
    if coeffs is None:
        return crossover(lambda x: cost_of(x).intensity, peak_flops_per_s, bandwidth_bytes_per_s, variable)
    a, b, c = coeffs
    ridge = _fraction(peak_flops_per_s) / _fraction(bandwidth_bytes_per_s)
    # the intensity in lowest terms, integer coefficients: A·x/(B·x + C)
    A, B, C = _lowest_terms(a, b, c)
    intensity_expr = f"{_term(A, variable)}/({_poly(B, C, variable)})"
    # (a − R·b)·x − R·c ≥ 0, over integers, divided by their common factor
    alpha, beta = _lowest_terms(a - ridge * b, ridge * c)
    inequality = f"{_poly(alpha, -beta, variable)} >= 0"
    sup = a / b
    base: dict[str, Any] = dict(
        variable=variable,
        ridge=float(ridge),
        ridge_exact=str(ridge),
        limit_intensity=float(sup),
        limit_exact=str(sup),
        intensity_expr=intensity_expr,
        inequality=inequality,
    )
    if alpha <= 0:  # the supremum a/b is at or below the ridge
        solution = f"{variable} <= {Fraction(beta, alpha)}" if alpha else "no real solution"
        return Crossover(s_min=None, threshold=None, exact=None, never=True, solution=solution, **base)
    threshold = Fraction(beta, alpha)
    return Crossover(
        s_min=max(1, math.ceil(threshold)),
        threshold=float(threshold),
        exact=str(threshold),
        never=False,
        solution=f"{variable} >= {threshold}",
        **base,
    )


def _fraction(x: Any) -> Fraction:
    """The exact value of a figure as written (1200e12 → 1200000000000000), as :func:`exact`."""
    return Fraction(x) if isinstance(x, int) else Fraction(repr(float(x)))


def _affine(cost_of: Callable[[Any], Any]) -> tuple[Fraction, Fraction, Fraction] | None:
    """(a, b, c) with FLOPs = a·x and bytes = b·x + c, read off the cost at x = 1, 2 and checked
    at x = 3; None when the cost is not of that shape (or not positive)."""
    try:
        f = [Fraction(cost_of(x).flops) for x in (1, 2, 3)]
        by = [Fraction(cost_of(x).bytes) for x in (1, 2, 3)]
    except (TypeError, ValueError, ArithmeticError):
        return None
    a, b = f[0], by[1] - by[0]
    c = by[0] - b
    if f[1] != 2 * a or f[2] != 3 * a or by[2] != 3 * b + c or a <= 0 or b <= 0 or c <= 0:
        return None
    return a, b, c


def _lowest_terms(*coeffs: Fraction) -> tuple[int, ...]:
    """Integer coefficients proportional to ``coeffs``, with no common factor."""
    scale = math.lcm(*(q.denominator for q in coeffs))
    ints = [int(q * scale) for q in coeffs]
    g = math.gcd(*ints) or 1
    return tuple(i // g for i in ints)


def _term(coeff: int, x: str) -> str:
    return x if coeff == 1 else f"-{x}" if coeff == -1 else f"{coeff}*{x}"


def _poly(coeff: int, const: int, x: str) -> str:
    """``coeff·x + const`` as sympy prints it: ``437*n - 153600``, ``n + 2048``."""
    if coeff == 0:
        return str(const)
    sign = "-" if const < 0 else "+"
    return f"{_term(coeff, x)} {sign} {abs(const)}" if const else _term(coeff, x)
