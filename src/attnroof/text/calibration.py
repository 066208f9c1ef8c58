"""A calibration in words: the fitted parameters with their units and errors, and forecasts
beside the bound."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attnroof.calibration import Calibration, ImplFit
from attnroof.calibration.forecast import Forecast, OpForecast
from attnroof.escaping import escaped
from attnroof.text import render
from attnroof.text.render import table
from attnroof.units import duration

FIT_HEADERS = [
    "kind", "impl", "points", "t0", "η_c (per d)", "η_m", "η_pass (per s)", "η_mask", "L2×", "p", "block / split",
    "in-sample med/p90", "held-out med/p90",
]  # fmt: skip


def _pair(s: dict[str, Any]) -> str:
    if s["median"] is None:
        return "—"
    return f"{render.pct(s['median'])} / {render.pct(s['p90'])}"


def _fitted(f: ImplFit, name: str, value: str) -> str:
    return value if any(n.startswith(name) for n in f.fit.fitted) else f"({value})"


def _table(table: Mapping[int, float]) -> str:
    """A table by head dimension or row length: "40%@64, 68%@128" (no key for one value)."""
    return ", ".join(f"{render.pct(v)}" + (f"@{k}" if k else "") for k, v in sorted(table.items()))


def _structure(f: ImplFit) -> str:
    """The whole-number choice of a fused kernel: its causal block, or whether decode splits the
    cache (in parentheses when not fitted)."""
    if f.impl.startswith("eager"):
        return "—"
    if f.kind == "attention":
        return _fitted(f, "causal_block", str(f.fit.params.causal_block))
    if f.kind == "decode":
        return _fitted(f, "split_kv", "split-KV" if f.fit.params.split_kv else "one pass")
    return "—"


def _row(f: ImplFit) -> list[Any]:
    j, p = f.to_json(), f.fit.params
    etas = _table(p.eta_compute)
    return [
        f.kind,
        f.impl,
        len(f.points) or j["held_out_error"]["n"],
        _fitted(f, "t0_s", duration(p.t0_s)),
        _fitted(f, "eta_compute", etas),
        _fitted(f, "eta_memory", render.pct(p.eta_memory)),
        _fitted(f, "eta_pass", _table(p.eta_pass)) if f.impl.startswith("eager") else "—",
        _fitted(f, "eta_mask", render.pct(p.eta_mask)) if p.eta_mask is not None else "—",
        _fitted(f, "l2_speedup", f"{p.l2_speedup:.3g}"),
        _fitted(f, "sharpness", f"{p.sharpness:.3g}"),
        _structure(f),
        _pair(j["in_sample_error"]),
        _pair(j["held_out_error"]),
    ]


def fit_text(cals: Sequence[Calibration], out_path: str | None) -> str:
    """Each calibration's parameters (units; a value in parentheses was not fitted), its
    in-sample and leave-one-shape-out errors per implementation and pooled."""
    lines: list[str] = []
    for c in cals:
        lines += [
            f"calibration: {escaped(c.catalog_device or 'no catalog device')} "
            f"({escaped(c.device or 'no device named')}), {c.dtype}",
            f"roofs: {render.rate(c.roofs.peak_flops_per_s)} matmul, {render.bandwidth(c.roofs.bandwidth_bytes_per_s)}"
            + (f", {c.roofs.sms} SMs" if c.roofs.sms else "")
            + (f", L2 {render.nbytes(c.roofs.l2_bytes)}" if c.roofs.l2_bytes else ""),
            "model: t = Σ_kernels [t0 + smax_p(W/(η_c·P), B/(η·BW))]; W with whole causal diagonal tiles"
            " of 'block', full waves over the SMs, and for fused decode whole query tiles and split-KV",
            "",
            table(FIT_HEADERS, [_row(f) for f in c.fits.values()]),
            "",
            f"held-out error pooled over {c.pooled()['n']} forecasts: {_pair(c.pooled())} (median / p90)",
        ]
        notes = [f"  {f.kind} {f.impl}: {n}" for f in c.fits.values() for n in f.fit.notes]
        if notes:
            lines += ["not fitted (value in parentheses):", *notes]
        lines += [f"  skipped {s['kind']} {s['impl']}: {s['reason']}" for s in c.skipped]
        lines.append("")
    if out_path:
        lines.append(f"wrote {escaped(str(out_path))}")
    return "\n".join(lines).rstrip()


def forecast_lines(forecasts: Sequence[Forecast], bound_s: float, cal: Calibration) -> str:
    """Forecasts beside the bound, one line each."""
    where = f"{escaped(cal.catalog_device or cal.device or 'an unnamed device')} {cal.dtype}"
    lines = [f"forecast (calibrated on {where}; band from held-out errors), bound {duration(bound_s)}:"]
    for fc in forecasts:
        ratio = fc.time_s / bound_s if bound_s else float("nan")
        lines.append(
            f"  {fc.impl:<15} {duration(fc.time_s):>10}  ({duration(fc.low_s)} – {duration(fc.high_s)})"
            f"  {ratio:.2f}× the bound"
        )
    return "\n".join(lines)


def forecast_rows(ops: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """Forecast operators (their JSON) as rows: name, runs, one run's time, all runs', how."""
    return [
        [o["name"], o["count"], duration(o["time_s"]), duration(o["count"] * o["time_s"]), o["by"]]
        for o in ops
    ]


def step_forecast_text(ops: Sequence[OpForecast], bound_s: float, batch: int, decode: bool) -> str:
    total = sum(o.count * o.time_s for o in ops)
    rows = forecast_rows([o.to_json() for o in ops])
    speed = f", {batch / total:,.0f} tokens/s" if decode else ""
    return "\n".join(
        [
            "calibrated forecast per operator:",
            table(["operator", "runs", "time", "total", "forecast by"], rows),
            f"step: forecast {duration(total)}{speed} (bound {duration(bound_s)}, {total / bound_s:.2f}× the bound)",
        ]
    )
