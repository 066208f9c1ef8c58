"""A forecast beside its bound, in words: ``forecast 8.9 s, profile h100 bf16 (±18% held out);
bound ≥ 3.7 s``."""

from __future__ import annotations

from typing import Any

from attnroof.units import duration


def error_words(profile: Any, level: str) -> str:
    """``±18% held out`` for ``level`` (kernel, train, serve), or ``error not yet measured``."""
    med = profile.error.median.get(level)
    return "error not measured" if med is None else f"±{med:.0%} held out"


def forecast_line(profile: Any, level: str, time_s: float, bound_s: float, what: str = "") -> str:
    """``forecast 8.9 s, profile h100 bf16 (±18% held out); bound ≥ 3.7 s``."""
    head = f"forecast{(' ' + what) if what else ''} {duration(time_s)}"
    return f"{head}, {profile.basis} ({error_words(profile, level)}); bound ≥ {duration(bound_s)}"
