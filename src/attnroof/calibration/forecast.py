"""Forecasts from a calibration: one operator at one shape, or a whole model's step.

A forecast is the fitted model's time with a band from the fit's own held-out errors: if the
largest held-out miss of this implementation was a factor 1.2 (either way), a forecast ``t``
gives a measured time between ``t/1.2`` and ``1.2·t``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from attnroof.calibration import Calibration, ImplFit
from attnroof.calibration.fit import LAUNCH_VISIBLE_S
from attnroof.calibration.physics import (
    ATTENTION,
    DECODE,
    LINEAR,
    UNFUSED,
    Features,
    Kernel,
    call_features,
    decode_kernels,
    diagonal_factor,
    predict,
    stage_role,
)
from attnroof.cost import Cost
from attnroof.devices import Device
from attnroof.errors import InputError
from attnroof.operators import MEMORY_PASS, operator


@dataclass(frozen=True)
class Forecast:
    """Expected time (s) of one implementation, with the band its held-out errors give."""

    impl: str
    time_s: float
    low_s: float
    high_s: float

    def to_json(self) -> dict[str, Any]:
        return {"impl": self.impl, "time_s": self.time_s, "low_s": self.low_s, "high_s": self.high_s}


def select(cals: Sequence[Calibration], device: Device, dt: str) -> Calibration:
    """The calibration fitted on ``device`` at ``dt``; :class:`InputError` (one line) otherwise."""
    for c in cals:
        if c.dtype == dt and device.name in (c.catalog_device, c.device):
            return c
    have = (
        "; ".join(f"{c.catalog_device or c.device or 'an unnamed device'} {c.dtype}" for c in cals)
        or "nothing"
    )
    raise InputError(
        f"the calibration was fitted on {have}, not on {device.name} {dt}: it cannot forecast here",
        param="calibration",
    )


def _band(fit: ImplFit, t: float) -> Forecast:
    lo, hi = fit.band
    return Forecast(fit.impl, t, t / (1 + hi), t / (1 + lo))


def forecast(
    cal: Calibration, kind: str, shape: Mapping[str, Any], impl: str | None = None
) -> list[Forecast]:
    """The forecast of ``impl`` (or of every calibrated implementation of ``kind``, fastest
    first) at ``shape`` (a results record's shape: ``s, d, batch, heads, group, causal`` or
    ``n, k, m``)."""
    names = cal.impls(kind)
    if impl is not None:
        if impl not in names:
            known = ", ".join(names) or "none"
            raise InputError(
                f"implementation {impl!r} is not calibrated for {kind} (calibrated: {known})", param="impl"
            )
        names = [impl]
    if not names:
        raise InputError(f"the calibration has no {kind} implementation", param="calibration")
    ran = [n for n in names if _ran_grouped(cal.fits[(kind, n)], shape)]
    if not ran:
        raise InputError(
            f"{', '.join(names)} never ran with group > 1 in the calibration's data: no forecast",
            param="impl",
        )
    out = []
    for name in ran:
        fit = cal.fits[(kind, name)]
        f = call_features(kind, name, shape, cal.dtype, cal.roofs, fit.fit.params)
        out.append(_band(fit, predict(f, fit.fit.params, cal.roofs)))
    return sorted(out, key=lambda fc: fc.time_s)


def _ran_grouped(fit: ImplFit, shape: Mapping[str, Any]) -> bool:
    """False for a grouped shape when the implementation was measured on group 1 only (SDPA's
    efficient backend has no kernel for grouped queries): no forecast for what cannot run."""
    if shape.get("group", 1) == 1:
        return True
    seen = [p.shape for p in fit.points] or [h.point.shape for h in fit.held]
    return any(sh.get("group", 1) > 1 for sh in seen)


# ---------------------------------------------------------------- a whole step


@dataclass(frozen=True)
class OpForecast:
    """One operator of a step: expected time of one run, how it was forecast, runs per step."""

    name: str
    count: int
    time_s: float
    low_s: float
    high_s: float
    by: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "count": self.count,
            "time_s": self.time_s,
            "low_s": self.low_s,
            "high_s": self.high_s,
            "by": self.by,
            "total_time_s": self.count * self.time_s,
        }


def step_forecast(
    cal: Calibration,
    ops: Sequence[Any],
    *,
    phase: str,
    context: int,
    head_dim: int,
    impl: str | None,
    decode_shape: Mapping[str, int] | None = None,
) -> list[OpForecast]:
    """Expected time of each operator of a step (``model_ops``' list): GEMMs by the linear fit,
    attention by the implementation's fit (``impl``, or the fastest calibrated), memory-bound
    passes at the calibrated pass bandwidth with a per-kernel launch cost. ``decode_shape``
    (``batch``, ``heads``, ``group``) lets fused decode be planned as it was fitted: whole query
    tiles and the split-KV plan (:mod:`attnroof.calibration.splitkv`)."""
    kind = ATTENTION if phase == "prefill" else DECODE
    shape = {"s": context, "d": head_dim, **decode_shape} if decode_shape else None
    out = []
    for op in ops:
        entry = operator(op.operator)
        if entry.kind == MEMORY_PASS:
            t = _memory_pass_time(cal, op.cost)
            out.append(OpForecast(op.name, op.count, t, t, t, "memory pass"))
        elif entry.measured_as == "attention":
            fit = _attention_fit(cal, kind, impl, op.cost, shape or {"s": context, "d": head_dim})
            f = _op_features(cal, fit, op.cost, shape or {"s": context, "d": head_dim})
            fc = _band(fit, predict(f, fit.fit.params, cal.roofs))
            out.append(OpForecast(op.name, op.count, fc.time_s, fc.low_s, fc.high_s, f"{kind} {fit.impl}"))
        elif entry.measured_as == "linear" and (LINEAR, "linear") in cal.fits:
            # a GEMM of another operator (grouped experts) is forecast by the dense GEMM's fit, on
            # its own FLOPs and bytes
            fit = cal.fits[(LINEAR, "linear")]
            fc = _band(fit, predict(_cost_features(op.cost, 0), fit.fit.params, cal.roofs))
            how = "gemm linear" if entry.gemm is not None else f"{op.operator}, by the linear fit"
            out.append(OpForecast(op.name, op.count, fc.time_s, fc.low_s, fc.high_s, how))
        else:
            raise InputError(
                f"the calibration has no kernel for {op.operator} ({op.name}): measure one, or leave out --calibration",
                param="calibration",
            )
    return out


def _attention_fit(
    cal: Calibration, kind: str, impl: str | None, cost: Cost, shape: Mapping[str, int]
) -> ImplFit:
    names = cal.impls(kind)
    if impl is not None and impl not in names:
        raise InputError(
            f"implementation {impl!r} is not calibrated for {kind} (calibrated: {', '.join(names) or 'none'})",
            param="impl",
        )
    if not names:
        raise InputError(f"the calibration has no {kind} implementation", param="calibration")
    if impl is not None:
        return cal.fits[(kind, impl)]
    return min(
        (cal.fits[(kind, n)] for n in names),
        key=lambda fit: predict(_op_features(cal, fit, cost, shape), fit.fit.params, cal.roofs),
    )


def _op_features(cal: Calibration, fit: ImplFit, cost: Cost, shape: Mapping[str, int]) -> Features:
    """A model operator's kernels as ``fit`` models them: whole causal diagonal tiles for fused
    prefill; for fused decode with its batch, heads and group known, whole query tiles and the
    split-KV plan."""
    p, d = fit.fit.params, shape["d"]
    f = _cost_features(cost, d, shape["s"])
    if fit.impl in UNFUSED:
        return f
    if fit.kind == ATTENTION:
        factor = diagonal_factor(shape["s"], p.causal_block)
        return Features(tuple(Kernel(k.flops * factor, k.bytes, k.role, k.row) for k in f.kernels), d, False)
    if "batch" in shape and len(cost.stages) == 1:
        return Features(decode_kernels(fit.impl, shape, cost, cal.roofs, p.split_kv), d, False)
    return f


def _cost_features(cost: Cost, d: int, row: int = 0) -> Features:
    """The kernels of a model operator's cost; ``row``: its softmax rows' length (the keys)."""
    return Features(
        tuple(Kernel(float(s.flops), float(s.bytes), stage_role(s.name), row) for s in cost.stages), d, False
    )


def memory_pass_params(cal: Calibration) -> tuple[float, float]:
    """(launch cost in s, bandwidth in B/s) of an element-wise pass: the eager softmax's pass
    efficiency where eager attention was calibrated (its best over the row lengths fitted: an
    element-wise pass has no row reduction to slow it), else the measured bandwidth; the smallest
    fixed cost per kernel among the fits that could see one (short calls: decode, small GEMMs),
    as a kernel's launch cost."""
    seen = [f.fit.params.t0_s for f in cal.fits.values() if f.fit.params.t0_s >= LAUNCH_VISIBLE_S]
    t0 = min(seen, default=0.0)
    eager = cal.fits.get((ATTENTION, "eager"))
    eta = max(eager.fit.params.eta_pass.values()) if eager is not None else 1.0
    return t0, eta * cal.roofs.bandwidth_bytes_per_s


def _memory_pass_time(cal: Calibration, cost: Cost) -> float:
    t0, bw = memory_pass_params(cal)
    return sum(t0 + float(s.bytes) / bw for s in cost.stages)
