"""SI units: attnroof computes in FLOPs, bytes, seconds, FLOP/s and bytes/s.

Multiply by a unit to enter it, divide to leave it, and only at the edges (parsing a flag,
printing a table)::

    >>> 4.0 * TB / SECOND          # Device R's bandwidth, in bytes/s
    4000000000000.0
    >>> round(28.9e-6 / MICROSECOND, 9)   # to µs (round off the binary fraction)
    28.9
"""

from __future__ import annotations

import math

# Decimal prefixes, as every datasheet uses them for FLOP/s, B/s and HBM capacity.
KILO = 1e3
MEGA = 1e6
GIGA = 1e9
TERA = 1e12
PETA = 1e15
EXA = 1e18
ZETTA = 1e21
YOTTA = 1e24

KB, MB, GB, TB = KILO, MEGA, GIGA, TERA
KiB, MiB, GiB = 2**10, 2**20, 2**30

SECOND = 1.0
MILLISECOND = 1e-3
MICROSECOND = 1e-6
NANOSECOND = 1e-9
PICOSECOND = 1e-12

FLOP = 1
TFLOP_PER_S = TERA  # FLOP/s
TB_PER_S = TERA  # bytes/s

_PREFIXES = (
    (YOTTA, "Y"),
    (ZETTA, "Z"),
    (EXA, "E"),
    (PETA, "P"),
    (TERA, "T"),
    (GIGA, "G"),
    (MEGA, "M"),
    (KILO, "k"),
    (1.0, ""),
)
_SUFFIX_VALUE = {"k": KILO, "K": KILO, "M": MEGA, "G": GIGA, "T": TERA, "P": PETA}


def si(value: float, unit: str, digits: int = 3) -> str:
    """Format ``value`` with a decimal prefix and ``digits`` significant figures.

    >>> si(3.47e10, "FLOP")
    '34.7 GFLOP'
    >>> si(4.0e12, "B/s")
    '4 TB/s'
    >>> si(1.884e18, "FLOP")          # a 70B model's training step on 4M tokens
    '1.88 EFLOP'
    """
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return f"{value} {unit}".strip()
    magnitude = abs(value)
    for scale, prefix in _PREFIXES:
        if magnitude >= scale:
            return f"{_sig(value / scale, digits)} {prefix}{unit}"
    return f"{_sig(value, digits)} {unit}"


def duration(seconds: float, digits: int = 3) -> str:
    """Format a time in s, ms, µs or ns.

    >>> duration(28.9e-6)
    '28.9 µs'
    """
    if not math.isfinite(seconds) or seconds == 0:
        return f"{seconds:g} s"
    for scale, name in ((SECOND, "s"), (MILLISECOND, "ms"), (MICROSECOND, "µs"), (NANOSECOND, "ns")):
        if abs(seconds) >= scale:
            return f"{_sig(seconds / scale, digits)} {name}"
    return f"{_sig(seconds / PICOSECOND, digits)} ps"


def _sig(x: float, digits: int) -> str:
    """``x`` to ``digits`` significant figures, without an exponent for ordinary sizes."""
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    text = f"{x:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def parse_quantity(text: str) -> float:
    """Read a positive quantity such as ``4e12``, ``4T`` or ``1200T`` (decimal prefixes).

    >>> parse_quantity("4T")
    4000000000000.0
    """
    raw = text.strip()
    scale = 1.0
    if raw and raw[-1] in _SUFFIX_VALUE:
        scale = _SUFFIX_VALUE[raw[-1]]
        raw = raw[:-1]
    value = float(raw) * scale  # ValueError for junk; callers turn it into a one-line message
    if not math.isfinite(value):
        raise ValueError(text)
    return value
