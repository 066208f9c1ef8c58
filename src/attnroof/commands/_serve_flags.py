"""serve-sim's flag types: durations with units, rates, shares of [0, 1], bounded counts,
prices — each refusing a bad value in one line."""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from attnroof.commands._common import positive_int, positive_quantity
from attnroof.serve.workload import BURSTINESS, RATE, SEED
from attnroof.validate import Range

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*(s|ms|us|µs|ns)?\s*$", re.IGNORECASE)
_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, None: 1.0}


MIN_DURATION_S = 1e-9
"""The shortest duration a flag takes: a nanosecond, below any engine's step or kernel (the
results files' :data:`attnroof.validate.MIN_TIME_S` for the same reason)."""


def duration_arg(text: str) -> float:
    """A positive duration: ``2s``, ``50ms``, ``200us`` or plain seconds (``0.05``)."""
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (2s, 50ms, 200us or seconds)")
    value = float(m.group(1)) * _SCALE[(m.group(2) or "s").lower() if m.group(2) != "µs" else "µs"]
    if not 0 < value < 1e6:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive duration under 10^6 s")
    if value < MIN_DURATION_S:
        raise argparse.ArgumentTypeError(
            f"{text!r} is below 1 ns: no step of an engine, no token, is that short (0 for none, where taken)"
        )
    return value


def nonnegative_duration(text: str) -> float:
    if text.strip() in ("0", "0s", "0.0"):
        return 0.0
    return duration_arg(text)


def at_most(most: int, what: str) -> Any:
    """A positive whole number no larger than ``most``: beyond it a simulation would run for
    minutes or its tables fill the memory, so it is refused in one line."""

    def parse(text: str) -> int:
        value = positive_int(text)
        if value > most:
            raise argparse.ArgumentTypeError(
                f"{text!r} is more {what} than a simulation takes (at most {most:,})"
            )
        return value

    return parse


def in_range(r: Range, text: str, value: float) -> float:
    """``value`` (read from ``text``) if ``r`` holds it, else the range's one-line reason."""
    bad = r.problem(value)
    if bad is not None:
        raise argparse.ArgumentTypeError(f"{text!r} {bad}")
    return value


def rate_arg(text: str) -> float:
    """Requests per second (:data:`attnroof.serve.workload.RATE`), or ``inf`` (every request at once)."""
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    return in_range(RATE, text, positive_quantity(text))


def burstiness_arg(text: str) -> float:
    """The gamma shape of the gaps between arrivals (:data:`attnroof.serve.workload.BURSTINESS`)."""
    return in_range(BURSTINESS, text, positive_quantity(text))


def seed_arg(text: str) -> int:
    """A seed: a whole number from 0 to 2⁶⁴ − 1 (:data:`attnroof.serve.workload.SEED`)."""
    try:
        value = int(text.strip()) if len(text) <= 40 else None
    except ValueError:
        value = None
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (a seed such as 0 or 42)")
    return int(in_range(SEED, text, value))


def share_in(interval: str) -> Any:
    """The type of a flag whose value lies in ``interval`` of [0, 1]: ``(0, 1]``, ``[0, 1)`` or
    ``[0, 1]`` (each end open or closed as written)."""
    low_open, high_open = interval[0] == "(", interval[-1] == ")"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        inside = (value > 0 if low_open else value >= 0) and (value < 1 if high_open else value <= 1)
        if not inside:
            raise argparse.ArgumentTypeError(f"{text!r} must be in {interval}")
        return value

    return parse


share_arg, ratio_arg, acceptance_arg = share_in("(0, 1]"), share_in("[0, 1)"), share_in("[0, 1]")


def price_arg(text: str) -> float:
    value = positive_quantity(text)
    if value > 1e6:
        raise argparse.ArgumentTypeError(f"{text!r} is an implausible price per device-hour")
    return value
