"""Checks on the numbers a caller hands the formulas: one helper per kind of value, one message form.

The formulas in :mod:`attnroof.ops` take ints, floats, fractions, numpy arrays or sympy symbols.
Plain numbers are checked here (a size is a positive whole number, an item size is positive and
finite, a per-element count is finite and not negative); arrays are checked for the same sign in
one vectorised comparison; symbols pass through, since they stand for any value.

>>> size("s", 8192)
8192
>>> size("s", -1)
Traceback (most recent call last):
    ...
attnroof.errors.InputError: s must be a positive whole number, got -1
>>> kv_heads(32, 8)
4
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Any

from attnroof.errors import InputError

MAX_SIZE = 2**40
"""No tensor dimension or token count of a real model comes near 2⁴⁰ (10¹²); beyond it a size is
a typo, and its FLOP counts would outrun a float's exact range. The command line's sizes and the
shapes a results file records are held to it alike."""


def _plain(value: Any) -> bool:
    """A single real number (int, float, Fraction, numpy or sympy number), not a symbol or array."""
    return isinstance(value, numbers.Real)


def _array_ok(value: Any, *, strict: bool) -> bool:
    """Every element finite and > 0 (``strict``) or ≥ 0; True for anything that is not an array."""
    if not (hasattr(value, "dtype") and hasattr(value, "shape")):
        return True
    low = value > 0 if strict else value >= 0
    return bool((low & (value < math.inf)).all())


def _check(name: str, value: Any, *, whole: bool, strict: bool, expected: str) -> Any:
    kind = type(value)
    if kind is int:  # the common case, by far: a plain Python int (bool is its own type)
        if value > 0 or (value == 0 and not strict):
            return value
        raise InputError(f"{name} must be {expected}, got {value!r}")
    if kind is float:  # the next: a plain float (NaN fails every comparison)
        if (
            (value > 0 or (value == 0 and not strict))
            and value < math.inf
            and (not whole or value.is_integer())
        ):
            return value
        raise InputError(f"{name} must be {expected}, got {value!r}")
    if isinstance(value, (bool, str, bytes)):
        raise InputError(f"{name} must be {expected}, got {value!r}")
    if _plain(value):
        v = float(value)  # sympy and Fraction numbers convert exactly enough for a sign test
        if not math.isfinite(v) or (v <= 0 if strict else v < 0) or (whole and value != int(value)):
            raise InputError(f"{name} must be {expected}, got {value!r}")
        return value
    if not _array_ok(value, strict=strict):
        raise InputError(f"{name} must be {expected} in every element")
    return value


def size(name: str, value: Any) -> Any:
    """A count of elements, tokens, heads or a dimension: a positive whole number (8192, not 0,
    −1, 2.5, NaN or ∞). Returns ``value`` unchanged."""
    return _check(name, value, whole=True, strict=True, expected="a positive whole number")


def positive(name: str, value: Any) -> Any:
    """A positive finite figure that may be fractional, such as an item size (fp4: 0.5 bytes)."""
    return _check(name, value, whole=False, strict=True, expected="a positive finite number")


def nonnegative(name: str, value: Any) -> Any:
    """A finite figure ≥ 0, such as a per-element FLOP count (0 is a valid convention)."""
    return _check(name, value, whole=False, strict=False, expected="a finite number ≥ 0")


def sizes(**values: Any) -> None:
    """:func:`size` on each keyword: ``sizes(s=s, d=d)``."""
    for name, value in values.items():
        size(name, value)


def kv_heads(heads: int, group: int, *, heads_name: str = "heads", group_name: str = "group") -> int:
    """KV heads when ``group`` query heads share each one: ``heads / group``, which must be whole.

    The CLI passes ``heads_name="--heads"`` so that the message names the flags the user typed.

    >>> kv_heads(6, 4, heads_name="--heads", group_name="--group")
    Traceback (most recent call last):
        ...
    attnroof.errors.InputError: --heads 6 is not a multiple of --group 4 (the group divides the query heads)
    """
    size(heads_name, heads)
    size(group_name, group)
    if heads % group:
        raise InputError(
            f"{heads_name} {heads} is not a multiple of {group_name} {group} (the group divides the query heads)"
        )
    return heads // group


MIN_TIME_S = 1e-9
"""The shortest time a measured or forecast kernel may take, s: a nanosecond. No kernel runs in
less (a CUDA launch costs microseconds, a CPU call some 100 ns) and no timer resolves it (CUDA
events: 0.5 µs); a time below it is a typo or a subnormal (5e-324), whose FLOP/s would be
infinite. Results files and calibration files are read by it alike."""


@dataclass(frozen=True, slots=True)
class Range:
    """A physical quantity's plausible values, ``low`` to ``high`` in ``unit``, each end with its
    reason: the one place a flag's type and the library that takes the value read the range from.

    >>> RATE = Range(1e-3, 1e9, "requests a second", "slower is no traffic", "faster is no deployment's")
    >>> RATE.problem(5.0) is None, RATE.problem(1e-14), RATE.problem(2e9)
    (True, 'is below 0.001 requests a second: slower is no traffic', "is above 1e9 requests a second: faster is no deployment's")
    """

    low: float
    high: float
    unit: str
    why_low: str
    why_high: str

    def problem(self, value: float) -> str | None:
        """What is wrong with ``value`` (a phrase to follow the value), or None inside the range."""
        unit = f" {self.unit}" if self.unit else ""
        if not value >= self.low:  # NaN too
            return f"is below {_figure(self.low)}{unit}: {self.why_low}"
        if not value <= self.high:
            return f"is above {_figure(self.high)}{unit}: {self.why_high}"
        return None

    def check(self, name: str, value: float) -> float:
        """``value``, or :class:`InputError` naming ``name``, the value and the range's reason."""
        bad = self.problem(value)
        if bad is not None:
            raise InputError(f"{name} {value!r} {bad}", param=name)
        return value


def _figure(x: float) -> str:
    """A range's end as a person writes it: ``18,446,744,073,709,551,615``, ``0.001``, ``1e9``."""
    if isinstance(x, int):
        return f"{x:,}"
    return re.sub(r"e([+-])0*(\d)", lambda m: f"e{'-' if m[1] == '-' else ''}{m[2]}", f"{x:g}")
