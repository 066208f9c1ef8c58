"""Plain JSON values for everything attnroof writes (stdout, results files)."""

from __future__ import annotations

import math
from typing import Any


def to_jsonable(x: Any) -> Any:
    """Dicts, lists and numbers JSON can hold: numpy scalars become Python numbers, and
    non-finite floats (an unbounded limit, a failed run's time) become null."""
    kind = type(x)
    if kind is float:
        return x if math.isfinite(x) else None
    if kind is int or kind is str or kind is bool or x is None:
        return x
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [to_jsonable(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, str | bytes):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
