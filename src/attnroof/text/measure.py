"""Measurements in words: the summary table, the notes under it, the roof check and the
ceilings table. No torch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from attnroof.measure.records import IMPOSSIBLE_TEXT, IMPOSSIBLE_TOLERANCE, OK, impossible
from attnroof.text.render import bandwidth, num, pct, plural, rate, table
from attnroof.units import duration, si

HEADERS = [
    "case",
    "impl",
    "dtype",
    "status",
    "time",
    "FLOP/s",
    "B/s",
    "FLOP/B",
    "bound",
    "eff",
    "catalog eff",
    "ncu/model",
]


def case_label(rec: Mapping[str, Any]) -> str:
    """``attn s=512 d=64 b1 h2 causal``, ``decode s=4096 d=64 h4 g4``, ``linear n=32 1024×1024``."""
    sh, kind = rec["shape"], rec["kind"]
    if kind == "attention":
        causal = " causal" if sh.get("causal") else ""
        return f"attn s={sh['s']} d={sh['d']} b{sh['batch']} h{sh['heads']}{causal}"
    if kind == "decode":
        return f"decode s={sh['s']} d={sh['d']} b{sh['batch']} h{sh['heads']} g{sh['group']}"
    if kind == "linear":
        return f"linear n={sh['n']} {sh['k']}×{sh['m']}"
    if kind == "collective":
        return f"{sh['op']} {si(sh['bytes'], 'B')} ×{sh['world']}"
    if "bytes" in sh:
        return f"{rec['impl']} {si(sh['bytes'], 'B')}"
    return f"matmul {sh['n']}³"


def _eff(x: float | None, flag: bool = False) -> str:
    if x is None:
        return "—"
    return f"{pct(x)} IMPOSSIBLE" if flag else pct(x)


def row(rec: Mapping[str, Any]) -> list[str]:
    timed = rec["status"] == OK and rec.get("time_s") is not None
    dash = "—"
    ratio = rec.get("ncu_ratio")
    return [
        case_label(rec),
        rec["impl"],
        rec["dtype"],
        rec["status"],
        duration(rec["time_s"]) if timed else dash,
        rate(rec["achieved_flops_per_s"]) if timed and rec["flops"] else dash,
        bandwidth(rec["achieved_bytes_per_s"]) if timed else dash,
        num(rec["intensity"]) if rec.get("intensity") is not None else dash,
        duration(rec["bound_time_s"]) if rec.get("bound_time_s") is not None else dash,
        _eff(rec.get("efficiency"), bool(rec.get("impossible"))),
        _eff(rec.get("catalog_efficiency")),
        f"{num(ratio)}×" if ratio is not None else dash,
    ]


def summary(records: Iterable[Mapping[str, Any]]) -> str:
    """The table, then one line per distinct reason a case was skipped, wrong or failed."""
    records = list(records)
    out = [table(HEADERS, [row(r) for r in records], "llll" + "r" * (len(HEADERS) - 4))]
    reasons: dict[tuple[str, str], list[str]] = {}
    for r in records:
        if r["status"] != OK:
            reasons.setdefault((r["status"], r.get("reason") or ""), []).append(r["impl"])
    if reasons:
        out.append("")
    for (status, reason), impls in reasons.items():
        names = ", ".join(dict.fromkeys(impls))
        out.append(f"{status} ×{len(impls)} ({names}): {reason}")
    return "\n".join(out)


def ceilings_table(rows: Iterable[Mapping[str, Any]]) -> str:
    """Measured ceilings beside the catalog's figures."""
    body = []
    for r in rows:
        unit = rate if r["what"] == "matmul" else bandwidth
        cat = r.get("catalog")
        body.append(
            [
                r["what"],
                r["dtype"] or "—",
                r["size"],
                unit(r["measured"]),
                unit(cat) if cat else "—",
                pct(r["fraction"]) if r.get("fraction") is not None else "—",
            ]
        )
    return table(["ceiling", "dtype", "size", "measured", "catalog", "fraction"], body, "lllrrr")


def roof_check(records: Iterable[Mapping[str, Any]]) -> str:
    """One line when every timed point is under the measured roof, else a loud line per point."""
    records = list(records)
    bad = impossible(records)
    timed = sum(1 for r in records if r.get("efficiency") is not None)
    if not bad:
        limit = IMPOSSIBLE_TOLERANCE
        if timed == 0:
            return "roof check: no point has an efficiency to check (nothing was timed against a roof)"
        which = "the one placed point lies" if timed == 1 else f"all {timed} placed points lie"
        return f"roof check: {which} under the measured roof (efficiency ≤ {limit:g})"
    lines = [f"roof check: {IMPOSSIBLE_TEXT}: {len(bad)} of {plural(timed, 'point')}"]
    lines += [f"  {IMPOSSIBLE_TEXT}: {r['key']} efficiency {r['efficiency']:.2f}; {why_over(r)}" for r in bad]
    return "\n".join(lines)


COUNT_AGREES = 0.9
"""ncu's DRAM bytes at least this share of the model's: the count is right."""


def why_over(rec: Mapping[str, Any]) -> str:
    """Which is wrong for a point over the roof: the ceiling (the kernel moved the bytes the
    model counts, faster than the ceiling kernels did) or the count (ncu saw fewer bytes)."""
    counted, model = rec.get("ncu_bytes"), rec.get("bytes")
    if counted is None or not model:
        return "ceiling low or bytes over-counted: rerun with --ncu to tell which"
    if counted >= COUNT_AGREES * model:
        return (
            f"ncu counted {counted / model:.2f}× the model's bytes: a kernel beat the ceiling, "
            "so the ceiling is low"
        )
    return f"ncu counted only {counted / model:.2f}× the model's bytes: the byte count is wrong"
