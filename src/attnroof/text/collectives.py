"""Measured collectives in words: nccl-tests' table (size, count, type, time, algbw, busbw), one
block per operation, with the link roof beside it when a device is given. No torch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from attnroof.dtypes import dtype
from attnroof.measure.records import OK
from attnroof.units import GIGA, MICROSECOND, duration, si

FACTOR_TEXT = {
    "all-reduce": "2(n−1)/n",
    "reduce-scatter": "(n−1)/n",
    "all-gather": "(n−1)/n",
    "all-to-all": "(n−1)/n",
    "send/recv": "1",
}
"""nccl-tests' bus factor of each operation, as written in its doc/PERFORMANCE.md."""


def link_line(name: str, bandwidth: float, latency: float, base_latency: float = 0.0) -> str:
    return (
        f"link roof: {name}, {si(bandwidth, 'B/s')} one way per device, "
        f"{duration(base_latency)} a call + {duration(latency)} a step"
    )


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """Right-aligned columns, nccl-tests' way (the first row's header lines start with '#')."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _row(rec: Mapping[str, Any], link: bool) -> list[str]:
    sh = rec["shape"]
    count = str(round(sh["bytes"] / dtype(rec["dtype"]).itemsize))
    cells = [str(sh["bytes"]), count, rec["dtype"]]
    if rec["status"] != OK or rec.get("time_s") is None:
        return cells + [rec["status"], "—", "—"] + (["—", "—", "—"] if link else [])
    cells += [
        f"{rec['time_s'] / MICROSECOND:.2f}",
        f"{rec['algbw_bytes_per_s'] / GIGA:.2f}",
        f"{rec['busbw_bytes_per_s'] / GIGA:.2f}",
    ]
    if link and not rec.get("link_bytes_per_s"):  # measured earlier without --device
        cells += ["—", "—", "—"]
    elif link:
        frac = rec["busbw_bytes_per_s"] / rec["link_bytes_per_s"]
        eff = rec.get("efficiency")
        cells += [
            f"{rec['bound_time_s'] / MICROSECOND:.2f}",
            f"{100 * frac:.1f}%",
            "—" if eff is None else f"{100 * eff:.1f}%",
        ]
    return cells


def collectives_table(records: Iterable[Mapping[str, Any]]) -> str:
    """One block per operation, in the order the records come; the reasons of skips and failures
    under it."""
    by_op: dict[str, list[Mapping[str, Any]]] = {}
    for rec in records:
        by_op.setdefault(rec["shape"]["op"], []).append(rec)
    out: list[str] = []
    for op, recs in by_op.items():
        link = any(r.get("link_bytes_per_s") for r in recs)
        world = recs[0]["shape"]["world"]
        head = [["#", "size", "count", "type", "time", "algbw", "busbw"]]
        units = [["#", "(B)", "(elements)", "", "(µs)", "(GB/s)", "(GB/s)"]]
        if link:
            head[0] += ["bound", "busbw", "eff"]
            units[0] += ["(µs)", "/link", ""]
        lines = _columns([*head, *units, *[["", *_row(r, link)] for r in recs]])
        if out:
            out.append("")
        out.append(
            f"# {op}, {world} ranks, {recs[0]['impl']}: busbw = algbw × {FACTOR_TEXT[op]}"
            + (", eff = link bound / time" if link else "")
        )
        out += [ln if ln.lstrip().startswith("#") else ln[1:] for ln in lines]
        reasons = {
            f"{r['status']}: {r.get('reason') or 'no reason given'}" for r in recs if r["status"] != OK
        }
        out += [f"#   {why}" for why in sorted(reasons)]
    return "\n".join(out)
