"""Text for people: numbers with units, stage tables, roofline rows. JSON never goes through here."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from attnroof.cost import Cost
from attnroof.devices import Device
from attnroof.dtypes import rate_unit
from attnroof.escaping import escaped
from attnroof.roofline import Placement, Roof
from attnroof.units import duration, si


def num(x: float | None, digits: int = 3) -> str:
    """A plain number: 3 significant figures below 1000, whole numbers with separators above.

    >>> num(63.6307), num(4136.0), num(0.99423)
    ('63.6', '4,136', '0.994')
    """
    if x is None:
        return "—"
    ax = abs(x)
    if digits <= 3 and ax >= 100:
        return f"{x:,.0f}"
    if ax == 0:
        return "0"
    from attnroof.units import _sig

    return _sig(x, digits)


def plural(n: float, word: str, many: str | None = None) -> str:
    """``n`` and ``word``, the word in the plural unless n is 1 (a fraction such as fp4's half a
    byte takes the plural, as in "0.5 bytes").

    >>> plural(1, "token"), plural(8, "token"), plural(0, "measurement"), plural(2, "batch", "batches")
    ('1 token', '8 tokens', '0 measurements', '2 batches')
    >>> plural(1.0, "byte"), plural(0.5, "byte"), plural(2.0, "byte"), plural(1, "KV head")
    ('1 byte', '0.5 bytes', '2 bytes', '1 KV head')
    """
    return f"{n:g} {word if n == 1 else (many or word + 's')}"


def decimal(q: Fraction | float, digits: int = 3) -> str:
    """A value that is not a whole number, as a decimal that does not look like one: ``digits``
    significant figures (as :func:`num`), and more decimals where those would round it to an
    integer.

    >>> decimal(Fraction(307200, 517), 5), decimal(Fraction(517, 4)), decimal(Fraction(1842176, 3149), 5)
    ('594.2', '129.3', '585.003')
    """
    text = num(float(q), digits)
    q = Fraction(q)
    places = 1
    while "." not in text and places <= 12:  # rounded half up, on the exact value
        scaled = math.floor(abs(q) * 10**places + Fraction(1, 2))
        whole, part = divmod(scaled, 10**places)
        text = f"{'-' if q < 0 else ''}{whole:,}.{part:0{places}d}".rstrip("0").rstrip(".")
        places += 1
    return text


def exact(value: str, digits: int = 3) -> str:
    """An exact value as :mod:`attnroof.solve` writes it (``'307200/517'``, ``'300'``), with its
    decimal beside it when it is not a whole number. Anything else (``'inf'``) is left as it is.

    >>> exact("307200/517", 5), exact("300"), exact("19788/67"), exact("inf")
    ('307200/517 = 594.2', '300', '19788/67 = 295.3', 'inf')
    """
    try:
        q = Fraction(value)
    except (ValueError, ZeroDivisionError):
        return value
    if q.denominator == 1:
        return value
    return f"{value} = {decimal(q, digits)}"


def pct(x: float | None) -> str:
    """``0.97%``, ``13.5%``; a share below 0.01% as ``<0.01%``, above 1000% as a multiple."""
    if x is None:
        return "—"
    if 0 < x < 1e-4:
        return "<0.01%"
    if x > 10:
        return f"{num(x)}×"
    return f"{100 * x:.2g}%" if x < 0.1 else f"{100 * x:.1f}%"


_FRACTION = re.compile(r"(?<![\w/.])-?\d+/\d+(?![\w/.])")


def exact_in(text: str, digits: int = 5) -> str:
    """``text`` (a relation such as ``s >= 307200/517``) with every fraction in it given its
    decimal by :func:`exact`.

    >>> exact_in("s >= 307200/517"), exact_in("s <= -307200/1883"), exact_in("n >= 4096")
    ('s >= 307200/517 = 594.2', 's <= -307200/1883 = -163.14', 'n >= 4096')
    """
    return _FRACTION.sub(lambda m: exact(m.group(0), digits), text)


def flops(x: float) -> str:
    return si(x, "FLOP")


def nbytes(x: float) -> str:
    return si(x, "B")


def rate(x: float, unit: str = "FLOP/s") -> str:
    """A rate; a peak passes its dtype's :attr:`~attnroof.dtypes.DType.rate_unit` (int8: OP/s)."""
    return si(x, unit)


def peak(x: float, dtype_name: str) -> str:
    """A device's peak for a dtype, in that dtype's unit: ``989 TFLOP/s``, int8 ``1.98 POP/s``."""
    return rate(x, rate_unit(dtype_name))


def bandwidth(x: float) -> str:
    return si(x, "B/s")


def device_line(dev: Device, roof: Roof) -> str:
    cap = f", {nbytes(dev.capacity_bytes)} memory" if dev.capacity_bytes else ""
    over = f" [overridden: {', '.join(dev.overridden)}]" if dev.overridden else ""
    return (
        f"{escaped(dev.name)}{over} ({roof.dtype}): peak {peak(roof.peak_flops_per_s, roof.dtype)}, "
        f"bandwidth {bandwidth(roof.bandwidth_bytes_per_s)}{cap}; ridge {num(roof.ridge)} FLOP/byte"
        + cache_clause(dev, roof)
    )


def cache_clause(dev: Device, roof: Roof) -> str:
    """What the bound assumes of ``dev``'s last-level cache, for the device line: nothing for a
    device without a cache figure (its bound is the single-level one it always was)."""
    if roof.levels == 2:
        assert roof.cache_bytes is not None and roof.cache_bandwidth_bytes_per_s is not None
        return (
            f"; cache {nbytes(roof.cache_bytes)} at {bandwidth(roof.cache_bandwidth_bytes_per_s)}"
            " (resident bytes charged there: docs/devices.md)"
        )
    speed = dev.cache_bandwidth_bytes_per_s
    if dev.onchip_bytes is None or speed is None:
        return ""
    if speed <= roof.bandwidth_bytes_per_s:
        return f"; single-level bound (its cache, at {bandwidth(speed)}, is no faster than that bandwidth)"
    return "; single-level bound (--memory-levels 1: its cache not counted)"


def placement_row(label: str, p: Placement) -> list[Any]:
    return [
        label,
        flops(p.flops),
        nbytes(p.bytes),
        num(p.intensity),
        rate(p.attainable_flops_per_s),
        duration(p.time_s),
        p.limiter,
        p.verdict,
    ]


PLACEMENT_HEADERS = ["", "FLOPs", "bytes", "FLOP/byte", "attainable", "time ≥", "limiter", "verdict"]
CACHE_HEADER = "in cache"
"""The column of the bytes charged at the last-level cache's bandwidth, and their share."""


def resident_cell(resident: float, total: float) -> str:
    """``34.6 MB (100%)``: the bytes charged at the cache's bandwidth and their share of all."""
    if not resident:
        return "0"
    return f"{nbytes(resident)} ({pct(resident / total)})"


def placement_table(rows: Sequence[tuple[str, Placement]], roof: Roof | None = None) -> str:
    """Placements as a table: with an "in cache" column where ``roof`` counts a cache (without a
    roof: where a row has bytes resident), else the single-level table it always was."""
    cached = roof.levels == 2 if roof is not None else any(p.resident_bytes for _, p in rows)
    headers = [*PLACEMENT_HEADERS, CACHE_HEADER] if cached else PLACEMENT_HEADERS
    body = [
        placement_row(label, p) + ([resident_cell(p.resident_bytes, p.bytes)] if cached else [])
        for label, p in rows
    ]
    return table(headers, body)


def stage_rows(cost: Cost, symbolic: Cost | None = None, itemsize: float | None = None) -> list[list[Any]]:
    """One row per stage: name, FLOPs, what it reads and writes, bytes.

    With ``symbolic`` (the same formula evaluated on sympy symbols with itemsize 1) the reads and
    writes are shown as element counts such as ``Q (s·d)``.
    """
    rows = []
    sym_stages = list(symbolic) if symbolic is not None else [None] * len(cost.stages)
    for st, sym in zip(cost, sym_stages, strict=True):
        if sym is not None:
            reads = ", ".join(f"{a.tensor} ({expr(a.bytes)})" for a in sym.reads)
            writes = ", ".join(f"{a.tensor} ({expr(a.bytes)})" for a in sym.writes)
            elements = expr(sym.bytes)
            rows.append([st.name, flops(st.flops), reads, writes, elements, nbytes(st.bytes)])
        else:
            reads = ", ".join(f"{a.tensor} {nbytes(a.bytes)}" for a in st.reads)
            writes = ", ".join(f"{a.tensor} {nbytes(a.bytes)}" for a in st.writes)
            rows.append([st.name, flops(st.flops), reads, writes, nbytes(st.bytes)])
    return rows


def expr(e: Any) -> str:
    """A sympy expression as the spec writes algebra: ``4sd + 4s²``, ``s²(4d + 5)``."""
    import sympy as sp

    text = sp.sstr(sp.sympify(e))
    for a, b in (
        ("**2", "²"),
        ("**3", "³"),
        ("**4", "⁴"),
        ("*", "·"),
        ("·s", "s"),
        ("·d", "d"),
        ("·g", "g"),
        ("·n", "n"),
        ("·(", "("),
    ):
        text = text.replace(a, b)
    return text


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "") -> str:
    """A Markdown table, padded so that it reads well in a terminal too.

    ``align`` has one letter per column, ``l`` or ``r`` (default: first left, rest right).
    """
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    align = align or "l" + "r" * (len(headers) - 1)

    def line(r: Sequence[str]) -> str:
        return (
            "| "
            + " | ".join(
                c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align, strict=True)
            )
            + " |"
        )

    rule = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if a == "r" else (":" + "-" * (w + 1))
            for w, a in zip(widths, align, strict=True)
        )
        + "|"
    )
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])
