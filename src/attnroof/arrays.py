"""Element-wise min, max and choice that serve a Python number and a numpy array alike.

The formulas are plain arithmetic, but a roofline needs min(P, I·B), max(F/P, bytes/B) and a
choice of label. For Python numbers these are the builtins; only an array argument loads numpy,
so a command that places one shape never pays numpy's import (about 0.1 s).
"""

from __future__ import annotations

from numbers import Number
from typing import Any


def is_scalar(x: Any) -> bool:
    """True for a Python (or numpy scalar) number; False for an array."""
    if type(x) in (int, float):  # the common case, without an attribute lookup
        return True
    shape = getattr(x, "shape", None)
    return shape == () if shape is not None else isinstance(x, Number)


def _np() -> Any:
    import numpy

    return numpy


def numpy() -> Any:
    """numpy itself, imported on first use: for the array branch of a formula (an argmin)."""
    return _np()


def minimum(a: Any, b: Any) -> Any:
    """min(a, b) element-wise.

    >>> minimum(3, 2.5)
    2.5
    """
    return min(a, b) if is_scalar(a) and is_scalar(b) else _np().minimum(a, b)


def maximum(a: Any, b: Any) -> Any:
    """max(a, b) element-wise.

    >>> maximum(3, 2.5)
    3
    """
    return max(a, b) if is_scalar(a) and is_scalar(b) else _np().maximum(a, b)


def where(condition: Any, yes: Any, no: Any) -> Any:
    """``yes`` where ``condition`` holds, else ``no``, element-wise.

    >>> where(2 > 1, "compute", "memory")
    'compute'
    """
    if is_scalar(condition) or isinstance(condition, bool):
        return yes if condition else no
    return _np().where(condition, yes, no)


def as_float(x: Any) -> Any:
    """A Python float for a number; a float64 array for an array."""
    return float(x) if is_scalar(x) else _np().asarray(x, dtype="float64")
