"""Files the charts read: measured results (JSON lines) and measured ceilings (JSON).

Both are written by ``attnroof measure``. Everything is in SI units: seconds, FLOPs, bytes,
FLOP/byte, FLOP/s. A malformed file raises :class:`attnroof.errors.InputError` with one line
that names the file, the line and the bad value.

A results line::

    {"kind": "attention", "impl": "sdpa-flash", "dtype": "bf16", "status": "ok",
     "shape": {"s": 4096, "d": 128, "batch": 1, "heads": 8, "group": 1, "causal": false},
     "time_s": 1.2e-4, "flops": 1.1e11, "bytes": 3.4e7, "intensity": 3.2e3,
     "achieved_flops_per_s": 9.1e14}

A ceilings file holds ``{"device": {"name": ..., "peak_flops_per_s": {"bf16": ...},
"bandwidth_bytes_per_s": ...}}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnroof.devices import Device, ceilings_device
from attnroof.dtypes import dtype
from attnroof.errors import InputError, MissingPeak, read_json, read_text
from attnroof.measure.schema import numbered_results, validate_record
from attnroof.roofline import Roof

OK = "ok"
"""The status of a measurement that ran and whose output was correct: the only ones plotted."""

NUMERIC_KEYS = ("time_s", "flops", "bytes", "intensity", "achieved_flops_per_s")
REQUIRED_KEYS = ("kind", "impl", "shape", "dtype", "status", *NUMERIC_KEYS)

CEILING_KIND = "ceiling"
"""Records of the ceiling probes (read, write, copy, matmul) that ``attnroof measure`` keeps in the
results file; their figures are the ceilings file's, not operator points."""
COLLECTIVE_KIND = "collective"
"""Records of ``attnroof measure collectives``: link bandwidth, drawn by no chart here."""

ATTENTION_KINDS = frozenset({"attention", "prefill", "sdpa"})
DECODE_KINDS = frozenset({"decode"})
LINEAR_KINDS = frozenset({"linear", "gemm", "matmul"})

UNFUSED_IMPL_WORDS = ("eager", "unfused", "naive", "manual", "math")
"""An implementation whose name holds one of these materialises the score matrix (the spec's three
kernels; PyTorch's SDPA "math" backend does too). Any other attention implementation is taken as
fused, unless its line says otherwise: ``"model": "unfused"`` (as ``attnroof measure`` writes) or
``"fused": false``."""


@dataclass(frozen=True, slots=True)
class Measured:
    """One measured kernel: what ran, on what shape, and how fast (SI units)."""

    kind: str
    impl: str
    shape: Mapping[str, Any]
    dtype: str
    time_s: float
    flops: float
    bytes: float
    intensity: float
    achieved_flops_per_s: float
    fused: bool | None = None

    @property
    def is_fused(self) -> bool:
        """Fused (scores kept on chip) unless the line or the implementation's name says otherwise."""
        if self.fused is not None:
            return self.fused
        name = self.impl.lower()
        return not any(word in name for word in UNFUSED_IMPL_WORDS)

    def shape_text(self) -> str:
        """``s=4096 d=128 batch=1 heads=8 causal`` — the shape as a short label."""
        return (
            " ".join((k if v else "") if isinstance(v, bool) else f"{k}={v}" for k, v in self.shape.items())
            .strip()
            .replace("  ", " ")
        )


def _read_text(path: str | Path, what: str) -> str:
    return read_text(path, what, InputError)


def _number(value: Any, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{where}: {key} = {value!r} is not a finite number")
    return float(value)


def _positive(value: Any, where: str, key: str) -> float:
    x = _number(value, where, key)
    if x <= 0:
        raise InputError(f"{where}: {key} = {value!r} must be positive")
    return x


def parse_measured_line(record: Any, where: str) -> Measured | None:
    """One results record, validated; ``None`` for a record whose status is not ``ok``, for a
    ceiling measurement (a bandwidth or matmul probe, not an operator) and for a collective
    (bytes over a link, no FLOPs: not a point on the compute roofline)."""
    validate_record(record, where)  # the checks every reader of results applies
    if record.get("kind") in (CEILING_KIND, COLLECTIVE_KIND):
        return None
    for key in REQUIRED_KEYS:
        if key not in record:
            if key != "status" and record.get("status", OK) != OK:
                continue  # a failed run need not carry its numbers
            raise InputError(f"{where}: missing key {key!r}")
    if record["status"] != OK:
        return None
    for key in ("kind", "impl", "dtype"):
        if not isinstance(record[key], str) or not record[key]:
            raise InputError(f"{where}: {key} = {record[key]!r} must be a non-empty string")
    if not isinstance(record["shape"], dict):
        raise InputError(f"{where}: shape = {record['shape']!r} must be an object")
    fused = record.get("fused")
    if fused is not None and not isinstance(fused, bool):
        raise InputError(f"{where}: fused = {fused!r} must be true or false")
    if fused is None and record.get("model") in ("fused", "unfused"):
        fused = record["model"] == "fused"
    nums = {k: _positive(record[k], where, k) for k in NUMERIC_KEYS}
    return Measured(
        kind=record["kind"],
        impl=record["impl"],
        shape=dict(record["shape"]),
        dtype=record["dtype"],
        fused=fused,
        **nums,
    )


def read_measured(path: str | Path) -> list[Measured]:
    """The ``ok`` operator measurements of a results file (JSON lines; blank lines ignored).
    Every record is validated first (:func:`attnroof.measure.schema.parse_results`: a bad record,
    or one measurement given twice, is an error naming its line); a file with no ``ok`` operator
    measurement is an error too, rather than an empty chart."""
    text = _read_text(path, "measured results")
    records = numbered_results(text, str(path))
    out: list[Measured] = []
    for lineno, record in records:
        m = parse_measured_line(record, f"{path}:{lineno}")
        if m is not None:
            out.append(m)
    if not out:
        held = (
            "it is empty"
            if not records
            else f"none of its {len(records)} record{'s' if len(records) != 1 else ''} is an ok "
            "operator measurement (failed runs, ceiling probes and collectives are not drawn)"
        )
        raise InputError(f"{path}: no measurements to draw: {held}")
    return out


def parse_ceilings(doc: Any, where: str) -> list[Roof]:
    """Measured roofs, one per dtype, from a ceilings document: its device checked as a device
    file's is (:func:`attnroof.devices.ceilings_device`)."""
    dev = ceilings_device(doc, where)
    return [Roof(peak, dev.bandwidth_bytes_per_s, dev.name, dt) for dt, peak in dev.peak_flops_per_s.items()]


def read_ceilings(path: str | Path) -> list[Roof]:
    """The measured ceilings in ``path``, as one :class:`Roof` per dtype."""
    return parse_ceilings(read_json(path, "ceilings file", InputError), str(path))


def _int(shape: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = shape.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"shape {dict(shape)}: {key} = {value!r} must be a positive integer")
    return value


def model_point(m: Measured, device: Device) -> tuple[float, float] | None:
    """The model's point for the shape ``m`` ran: (intensity FLOP/byte, attainable FLOP/s on the
    device's catalog roof for ``m.dtype``); ``None`` when the model cannot place it (an unknown
    kind or dtype, or no peak for that dtype)."""
    try:
        dt = dtype(m.dtype)
        roof = Roof.of(device, dt)
    except (InputError, MissingPeak):
        return None
    # The record's intensity is the model's, computed by attnroof measure from the core formulas
    # for the implementation that ran (fused, unfused, or masked unfused): never re-derived here.
    return m.intensity, float(roof.attainable(m.intensity))
