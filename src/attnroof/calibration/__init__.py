"""Calibration: from measured kernels to a forecast of shapes never run.

The roofline bound stays the exact answer; a calibration adds, beside it, the time a given
implementation is expected to take, fitted from a results file with a few physical parameters
(:mod:`attnroof.calibration.physics`) and an error band taken from the fit's own held-out errors
(leave one shape out). A calibration names the device and dtype it was fitted on and refuses
to forecast for another.

    records ──> calibrate() ──> Calibration (per device and dtype: roofs, one fit per kind and
                                 implementation, in-sample and held-out errors) ──> JSON file
    Calibration + shape ──> forecast() ──> Forecast(impl, time_s, low_s, high_s)
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from attnroof import outfile
from attnroof.calibration.fit import (
    PRIOR_SHAPES,
    Fit,
    Held,
    Point,
    fit_points,
    leave_one_shape_out,
    summary,
    t0_prior,
)
from attnroof.calibration.physics import (
    KINDS,
    L2_BYTES,
    NOT_MODELLED,
    OPERATOR_CLASS,
    SM_COUNT,
    Params,
    Roofs,
    call_features,
    predict,
)
from attnroof.calibration.schema import FORMAT, check_file
from attnroof.devices import Device, catalog
from attnroof.errors import InputError, read_json

MIN_POINTS = 2
"""An implementation with fewer measured shapes than this is not calibrated."""


@dataclass
class ImplFit:
    """One kind and implementation: the fit, its errors and its band."""

    kind: str
    impl: str
    fit: Fit
    points: list[Point]
    in_sample: list[float]
    held: list[Held]

    @property
    def band(self) -> tuple[float, float]:
        """(low, high) relative error of a forecast, predicted/measured − 1: symmetric in log time
        at the largest held-out miss, ``e^±r − 1`` for ``r = max |log(predicted/measured)|``; (0, 0)
        without held-out forecasts. For exchangeable errors, the next shape's error lies inside
        the largest of ``n`` with probability n/(n + 1): 92% for 12 shapes, 75% for 3."""
        r = max((abs(math.log(h.predicted_s / h.point.time_s)) for h in self.held), default=0.0)
        return (math.exp(-r) - 1, math.exp(r) - 1)

    def to_json(self) -> dict[str, Any]:
        p = self.fit.params
        return {
            "kind": self.kind,
            "operator_class": OPERATOR_CLASS[self.kind],
            "impl": self.impl,
            "points": len(self.points) or len(self.held),
            "params": {
                "t0_s": p.t0_s,
                "eta_compute": _keyed(p.eta_compute),
                "eta_memory": p.eta_memory,
                "eta_pass": _keyed(p.eta_pass),
                "eta_mask": p.eta_mask,
                "sharpness": p.sharpness,
                "l2_speedup": p.l2_speedup,
                "causal_block": p.causal_block,
                "split_kv": p.split_kv,
            },
            "fitted": self.fit.fitted,
            "not_fitted": self.fit.notes,
            "in_sample_error": summary(self.in_sample),
            "held_out_error": summary([h.error for h in self.held]),
            "band": {"low": self.band[0], "high": self.band[1]},
            "held_out": [
                {"shape": dict(h.point.shape), "time_s": h.point.time_s, "predicted_s": h.predicted_s}
                for h in self.held
            ],
        }


def _keyed(table: Mapping[int, float]) -> dict[str, float]:
    """A table by head dimension or row length for JSON: key 0 (one value for all) as "any"."""
    return {str(k) if k else "any": v for k, v in table.items()}


def _unkeyed(table: Any) -> dict[int, float]:
    """:func:`_keyed` read back; a plain number (an older file's single η_pass) is key 0."""
    if not isinstance(table, Mapping):
        return {0: float(table)}
    return {0 if k == "any" else int(k): float(v) for k, v in table.items()}


@dataclass
class Calibration:
    """The fits of one device and dtype, on the roofs measured with them."""

    device: str | None
    """The device string of the results (``None``: the records named none)."""
    catalog_device: str | None
    dtype: str
    roofs: Roofs
    fits: dict[tuple[str, str], ImplFit] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "catalog_device": self.catalog_device,
            "dtype": self.dtype,
            "roofs": {
                "peak_flops_per_s": self.roofs.peak_flops_per_s,
                "bandwidth_bytes_per_s": self.roofs.bandwidth_bytes_per_s,
                "sms": self.roofs.sms,
                "l2_bytes": self.roofs.l2_bytes,
            },
            "fits": [f.to_json() for f in self.fits.values()],
            "skipped": self.skipped,
        }

    def impls(self, kind: str) -> list[str]:
        return [impl for (k, impl) in self.fits if k == kind]

    def pooled(self) -> dict[str, float | None]:
        return summary([h.error for f in self.fits.values() for h in f.held])


# ---------------------------------------------------------------- fitting


def calibrate(
    records: Iterable[Mapping[str, Any]], *, device: Device | None = None, source: str = "the records"
) -> list[Calibration]:
    """One :class:`Calibration` per (device, dtype) found in ``records`` (a results file's
    records). ``device`` names the catalog device the measurements were made on (default: the
    catalog device whose name or alias appears in the records' device string); ``source`` names
    where the records came from (the results files), for an error."""
    records = [r for r in records if r.get("status") == "ok" and r.get("time_s")]
    out = []
    # A record need not name its device (a hand-written line, or "device": null): such records
    # are one device of no name, matched to no catalog device (pass ``device``).
    for dev_name in sorted({r.get("device") for r in records}, key=lambda n: (n is not None, n or "")):
        mine = [r for r in records if r.get("device") == dev_name]
        cat = device.name if device is not None else match_catalog(dev_name) if dev_name else None
        for dt in sorted({r["dtype"] for r in mine if r["kind"] in KINDS}):
            out.append(_calibrate_one(mine, dev_name, cat, dt, device, source))
    if not out:
        raise InputError(f"{source}: no timed attention, decode or linear measurement to calibrate on")
    return out


def _calibrate_one(
    records: Sequence[Mapping[str, Any]],
    dev_name: str | None,
    cat: str | None,
    dt: str,
    device: Device | None,
    source: str,
) -> Calibration:
    cal = Calibration(dev_name, cat, dt, roofs_of(records, dt, cat, device, source))
    groups: dict[tuple[str, str], list[Point]] = {}
    for r in records:
        if r["kind"] in KINDS and r["dtype"] == dt:
            groups.setdefault((r["kind"], r["impl"]), []).append(
                Point(r["kind"], r["impl"], r["shape"], dt, float(r["time_s"]))
            )
    todo = []
    for (kind, impl), pts in sorted(groups.items()):
        shapes = len({p.shape_key for p in pts})
        if impl in NOT_MODELLED:
            cal.skipped.append(
                {"kind": kind, "impl": impl, "reason": "not modelled (its stage table differs)"}
            )
        elif shapes < MIN_POINTS:
            cal.skipped.append({"kind": kind, "impl": impl, "reason": f"{shapes} shape(s): too few to fit"})
        else:
            todo.append((kind, impl, pts, shapes >= PRIOR_SHAPES))
    fits = {(k, i): _impl_fit(k, i, pts, cal.roofs, None) for k, i, pts, thick in todo if thick}
    for kind, impl, pts, thick in todo:
        if not thick:
            prior = t0_prior([f.fit for (k, _), f in fits.items() if k == kind])
            fits[(kind, impl)] = _impl_fit(kind, impl, pts, cal.roofs, prior)
    cal.fits = {key: fits[key] for key in sorted(fits)}
    return cal


def _impl_fit(kind: str, impl: str, pts: list[Point], roofs: Roofs, prior: float | None) -> ImplFit:
    fit = fit_points(pts, roofs, prior)
    feats = [call_features(kind, impl, p.shape, p.dtype, roofs, fit.params) for p in pts]
    ins = [predict(f, fit.params, roofs) / p.time_s - 1 for f, p in zip(feats, pts, strict=True)]
    return ImplFit(kind, impl, fit, pts, ins, leave_one_shape_out(pts, roofs, prior))


def match_catalog(device_string: str) -> str | None:
    """The catalog device whose name or an alias appears in a measured device string (the
    longest such match), e.g. ``"H200 SXM"`` for ``"NVIDIA H200 (SXM, 141 GB), torch …"``."""
    text = device_string.lower()
    best: tuple[int, str] | None = None
    for dev in catalog():
        for word in (dev.name, *dev.aliases):
            w = word.lower()
            if len(w) >= 3 and w in text and (best is None or len(w) > best[0]):
                best = (len(w), dev.name)
    return best[1] if best else None


def roofs_of(
    records: Sequence[Mapping[str, Any]],
    dt: str,
    cat: str | None,
    device: Device | None,
    source: str = "the records",
) -> Roofs:
    """The roofs of the efficiencies: the best matmul of ``dt`` and the best bandwidth measured
    in the same run; the catalog device's figures where none was measured (``source``, where the
    records came from, is named when neither is there)."""
    peak = max(
        (
            r["achieved_flops_per_s"]
            for r in records
            if _ceiling(r, "matmul", "achieved_flops_per_s") and r["dtype"] == dt
        ),
        default=None,
    )
    bw = max(
        (r["achieved_bytes_per_s"] for r in records if _ceiling(r, None, "achieved_bytes_per_s")),
        default=None,
    )
    if peak is None or bw is None:
        dev = device or (_catalog_device(cat) if cat else None)
        if dev is None:
            raise InputError(
                f"{source} hold no ceilings and name no catalog entry: pass the device they ran on",
                param="device",
            )
        peak = peak or dev.peak_flops_per_s.get(dt)
        bw = bw or dev.bandwidth_bytes_per_s
        if peak is None:
            raise InputError(f"device {dev.name} has no {dt} peak and {source} hold no {dt} matmul ceiling")
    return Roofs(float(peak), float(bw), SM_COUNT.get(cat or ""), L2_BYTES.get(cat or ""))


def _ceiling(r: Mapping[str, Any], impl: str | None, figure: str) -> bool:
    """A ceiling probe of ``impl`` (``None``: any bandwidth probe) that holds its ``figure`` (a
    valid record may leave it out, or null)."""
    if r["kind"] != "ceiling" or r.get(figure) is None:
        return False
    return r["impl"] == impl if impl else r["impl"] != "matmul"


def _catalog_device(name: str) -> Device | None:
    return next((d for d in catalog() if d.name == name), None)


# ---------------------------------------------------------------- the file


def to_json(cals: Sequence[Calibration]) -> dict[str, Any]:
    return {"format": FORMAT, "calibrations": [c.to_json() for c in cals]}


def write(path: str | os.PathLike[str], cals: Sequence[Calibration]) -> None:
    import json

    from attnroof.jsonable import to_jsonable

    outfile.write_text(path, json.dumps(to_jsonable(to_json(cals)), indent=1) + "\n")


def read(path: str | os.PathLike[str]) -> list[Calibration]:
    """The calibrations of a file :func:`write` made; :class:`InputError` naming the file, and
    for a value that is not what its field holds the field and the value
    (:mod:`attnroof.calibration.schema`), for anything else."""
    doc = read_json(path, "calibration file", InputError)
    check_file(doc, str(path))
    return [_from_json(c) for c in doc["calibrations"]]


def _from_json(c: Mapping[str, Any]) -> Calibration:
    """One calibration of a file :func:`check_file` passed."""
    r = c["roofs"]
    roofs = Roofs(
        float(r["peak_flops_per_s"]), float(r["bandwidth_bytes_per_s"]), r.get("sms"), r.get("l2_bytes")
    )
    cal = Calibration(c["device"], c["catalog_device"], c["dtype"], roofs, skipped=list(c.get("skipped", [])))
    for f in c["fits"]:
        p = f["params"]
        params = Params(
            t0_s=float(p["t0_s"]),
            eta_compute=_unkeyed(p["eta_compute"]),
            eta_memory=float(p["eta_memory"]),
            eta_pass=_unkeyed(p["eta_pass"]),
            sharpness=float(p["sharpness"]),
            l2_speedup=float(p["l2_speedup"]),
            causal_block=p["causal_block"],
            split_kv=p.get("split_kv", False),
            eta_mask=None if p.get("eta_mask") is None else float(p["eta_mask"]),
        )
        held = [
            Held(
                Point(f["kind"], f["impl"], h["shape"], cal.dtype, float(h["time_s"])),
                float(h["predicted_s"]),
            )
            for h in f["held_out"]
        ]
        fit = Fit(params, list(f["fitted"]), list(f["not_fitted"]))
        cal.fits[(f["kind"], f["impl"])] = ImplFit(f["kind"], f["impl"], fit, [], [], held)
    return cal
