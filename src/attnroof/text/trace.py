"""``attnroof trace``'s text: the headline unfused against fused, the modules, the kernels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnroof.escaping import escaped
from attnroof.roofline import Placement
from attnroof.text import render
from attnroof.text.render import table
from attnroof.trace import FUSED, UNFUSED, Trace
from attnroof.trace.kernels import Kernel
from attnroof.units import duration


@dataclass(frozen=True)
class Placed:
    """A trace's kernels with their placements, both ways."""

    trace: Trace
    placements: dict[str, list[Placement]]
    forecasts: dict[str, list[float]] | None = None
    """Each kernel's forecast, both ways, where a profile covers the device."""
    basis: str = ""

    def time(self, form: str) -> float:
        return sum(float(p.time_s) for p in self.placements[form])

    def forecast(self, form: str) -> float | None:
        return None if self.forecasts is None else sum(self.forecasts[form])

    def pairs(self, form: str) -> list[tuple[Kernel, Placement]]:
        return list(zip(self.trace.kernels[form], self.placements[form], strict=True))


def module_at(path: str, depth: int) -> str:
    return ".".join(path.split(".")[: depth + 1])


def modules(p: Placed, depth: int) -> list[dict[str, Any]]:
    """Per module (its path cut to ``depth`` below the root), both ways: kernels, FLOPs, bytes, time."""
    out: dict[str, dict[str, Any]] = {}
    for form in (UNFUSED, FUSED):
        for k, pl in p.pairs(form):
            m = out.setdefault(module_at(k.module, depth), {"module": module_at(k.module, depth)})
            m[f"{form}_kernels"] = m.get(f"{form}_kernels", 0) + 1
            m["flops"] = m.get("flops", 0.0) + (float(k.stage.flops) if form == FUSED else 0.0)
            m[f"{form}_bytes"] = m.get(f"{form}_bytes", 0.0) + float(k.stage.bytes)
            m[f"{form}_time_s"] = m.get(f"{form}_time_s", 0.0) + float(pl.time_s)
    return list(out.values())


def headline(p: Placed, label: str, device: str, dtype: str) -> list[str]:
    t = p.trace
    u, f = t.bytes(UNFUSED), t.bytes(FUSED)
    tu, tf = p.time(UNFUSED), p.time(FUSED)
    left = (
        "; not counted: "
        + ", ".join(f"{n} ×{c}" for n, c in sorted(t.uncosted.items()))
        + " (no rule costs them)"
        if t.uncosted
        else ""
    )
    fu, ff = p.forecast(UNFUSED), p.forecast(FUSED)
    out = [
        f"trace of {escaped(label)} ({t.phase}) on {escaped(device)} ({dtype}): {len(t.records):,} operators, "
        f"{render.flops(t.flops)}; weights {render.nbytes(t.weights_bytes)}{left}",
        f"unfused (one kernel per operator): {len(t.kernels[UNFUSED]):,} kernels, {render.nbytes(u)}, "
        f"time ≥ {duration(tu)}{_forecast(fu)}",
        f"fused (element-wise runs into one kernel): {len(t.kernels[FUSED]):,} kernels, {render.nbytes(f)}, "
        f"time ≥ {duration(tf)}{_forecast(ff)}; fusion saves {render.pct(1 - f / u) if u else '0%'} of the bytes, "
        f"{tu / tf:.2f}× the bound" + (f", {fu / ff:.2f}× the forecast" if fu and ff else ""),
    ]
    if p.basis:
        out.append(
            f"forecasts: {p.basis}, each kernel launched back to back (error not measured for traced modules)"
        )
    return out


def _forecast(value: float | None) -> str:
    return "" if value is None else f", forecast {duration(value)}"


def trace_text(p: Placed, label: str, device: str, dtype: str, depth: int, top: int) -> str:
    mods = modules(p, depth)
    mod_rows = [
        [
            escaped(m["module"]), f"{m['unfused_kernels']:,}", f"{m.get('fused_kernels', 0):,}", render.flops(m["flops"]),
            render.nbytes(m["unfused_bytes"]), render.nbytes(m.get("fused_bytes", 0.0)),
            duration(m["unfused_time_s"]), duration(m.get("fused_time_s", 0.0)),
            render.pct(1 - m.get("fused_time_s", 0.0) / m["unfused_time_s"]) if m["unfused_time_s"] else "",
        ]
        for m in mods
    ]  # fmt: skip
    heads = [
        "module",
        "kernels",
        "fused",
        "FLOPs",
        "bytes",
        "fused bytes",
        "time ≥",
        "fused time ≥",
        "fusion saves",
    ]
    order = sorted(range(len(p.placements[FUSED])), key=lambda i: -float(p.placements[FUSED][i].time_s))[:top]
    pairs = p.pairs(FUSED)
    total = p.time(FUSED) or 1.0
    kernel_rows = [_kernel_row(*pairs[i], total) for i in order]
    kernel_heads = ["kernel", "module", "FLOPs", "bytes", "FLOP/byte", "time ≥", "limiter", "of the time"]
    align = "llrrrrlr"
    if p.forecasts is not None:
        for row, i in zip(kernel_rows, order, strict=True):
            row.insert(6, duration(p.forecasts[FUSED][i]))
        kernel_heads.insert(6, "forecast")
        align = "llrrrrrlr"
    return "\n".join(
        [
            *[line for line in headline(p, label, device, dtype) if line],
            "",
            table(heads, mod_rows, "lrrrrrrrr"),
            "",
            f"the {len(order)} slowest fused kernels:",
            "",
            table(kernel_heads, kernel_rows, align),
        ]
    )


def _kernel_row(k: Kernel, pl: Placement, total: float) -> list[str]:
    return [
        escaped(k.name), escaped(k.module), render.flops(float(k.stage.flops)), render.nbytes(float(k.stage.bytes)),
        render.num(float(pl.intensity)), duration(float(pl.time_s)), str(pl.limiter), render.pct(float(pl.time_s) / total),
    ]  # fmt: skip


def kernels_json(
    pairs: Sequence[tuple[Kernel, Placement]], forecasts: Sequence[float] | None
) -> list[dict[str, Any]]:
    rows = [
        {
            "name": k.name,
            "module": k.module,
            "operators": [r.name for r in k.records],
            "backward": k.records[0].backward,
            "flops": float(k.stage.flops),
            "bytes": float(k.stage.bytes),
            "time_s": float(pl.time_s),
            "limiter": str(pl.limiter),
            "resident_bytes": float(pl.resident_bytes),
        }
        for k, pl in pairs
    ]
    for row, f in zip(rows, forecasts or (), strict=False):
        row["forecast_time_s"] = f
    return rows
