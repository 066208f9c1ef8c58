"""Files the charts read: measured results (JSON lines) and measured ceilings (JSON).

Both are written by ``attnroof measure``. Everything is in SI units: seconds, FLOPs, bytes,
FLOP/byte, FLOP/s. A malformed file raises :class:`attnroof.errors.InputError` with one line
that names the file, the line and the bad value.

A results line::

    {"kind": "attention", "impl": "sdpa-flash", "dtype": "bf16", "status": "ok",
     "shape": {"s": 4096, "d": 128, "batch": 1, "heads": 8, "group": 1, "causal": false},
     "time_s": 1.2e-4, "flops": 1.1e11, "bytes": 3.4e7, "intensity": 3.24e3,
     "achieved_flops_per_s": 9.17e14}

A point's intensity and rate are computed from its ``flops``, ``bytes`` and ``time_s``
(:func:`attnroof.measure.schema.rates`); a stored figure that disagrees is refused when the file
is read. Measured points go under the roof of the device they ran on: its measured ceilings (a
ceilings file from the same device, or the ceiling probes the results file holds itself), else
the catalog device's roof, with a note (:func:`read_measured_file`).

A ceilings file holds ``{"device": {"name": ..., "peak_flops_per_s": {"bf16": ...},
"bandwidth_bytes_per_s": ...}}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnroof.devices import Device, ceilings_device
from attnroof.dtypes import dtype
from attnroof.errors import InputError, MissingPeak, read_json
from attnroof.measure.reading import read_results
from attnroof.measure.schema import rates, validate_record
from attnroof.roofline import Roof

OK = "ok"
"""The status of a measurement that ran and whose output was correct: the only ones plotted."""

NUMERIC_KEYS = ("time_s", "flops", "bytes", "intensity", "achieved_flops_per_s")
REQUIRED_KEYS = ("kind", "impl", "shape", "dtype", "status", "time_s", "flops", "bytes")

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
    derived = rates(record["time_s"], record["flops"], record["bytes"])
    figures = {
        **record,
        "intensity": derived["intensity"],
        "achieved_flops_per_s": derived["achieved_flops_per_s"],
    }
    nums = {k: _positive(figures[k], where, k) for k in NUMERIC_KEYS}
    return Measured(
        kind=record["kind"],
        impl=record["impl"],
        shape=dict(record["shape"]),
        dtype=record["dtype"],
        fused=fused,
        **nums,
    )


@dataclass(frozen=True)
class MeasuredFile:
    """What a chart takes from a results file: its ``ok`` operator points, the device they ran on
    (``None`` when no record names one), the roofs of its own ceiling probes (one per dtype; none
    when it holds none) and the reader's note on repeated measurements."""

    path: str
    points: list[Measured]
    device: str | None = None
    roofs: list[Roof] = field(default_factory=list)
    note: str | None = None


def read_measured_file(path: str | Path) -> MeasuredFile:
    """The results file at ``path`` for a chart, read by :func:`attnroof.measure.reading.read_results`
    (streamed; each measurement once, the fastest kept; one device). A file with no ``ok``
    operator measurement is an error, rather than an empty chart."""
    held = read_results(path)
    out: list[Measured] = []
    for lineno, record in zip(held.lines, held.records, strict=True):
        m = parse_measured_line(record, f"{path}:{lineno}")
        if m is not None:
            out.append(m)
    if not out:
        n = len(held.records)
        what = (
            "it is empty"
            if not n
            else f"none of its {n} record{'s' if n != 1 else ''} is an ok "
            "operator measurement (failed runs, ceiling probes and collectives are not drawn)"
        )
        raise InputError(f"{path}: no measurements to draw: {what}")
    return MeasuredFile(str(path), out, held.device, _own_roofs(held.records, held.device), held.note)


def _own_roofs(records: Sequence[Mapping[str, Any]], device: str | None) -> list[Roof]:
    """The roofs the ceiling probes of a results file make, by the rule of a ceilings file
    (:func:`attnroof.measure.ceilings.device_record`); none without both a bandwidth and a matmul."""
    from attnroof.measure.ceilings import device_record

    probes = [
        {**r, **rates(r["time_s"], r["flops"], r["bytes"])}  # a hand-written probe may leave them out
        for r in records
        if r.get("kind") == CEILING_KIND and r["status"] == OK
    ]
    if not probes:
        return []
    try:
        doc = {"device": device_record(probes, device or "this results file", None)}
    except InputError:
        return []
    return parse_ceilings(doc, "the ceiling probes")


def read_measured(path: str | Path) -> list[Measured]:
    """The ``ok`` operator measurements of a results file (:func:`read_measured_file`)."""
    return read_measured_file(path).points


def parse_ceilings(doc: Any, where: str) -> list[Roof]:
    """Measured roofs, one per dtype, from a ceilings document: its device checked as a device
    file's is (:func:`attnroof.devices.ceilings_device`)."""
    dev = ceilings_device(doc, where)
    return [Roof(peak, dev.bandwidth_bytes_per_s, dev.name, dt) for dt, peak in dev.peak_flops_per_s.items()]


def read_ceilings(path: str | Path) -> list[Roof]:
    """The measured ceilings in ``path``, as one :class:`Roof` per dtype."""
    return read_ceilings_file(path)[0]


def read_ceilings_file(path: str | Path) -> tuple[list[Roof], str | None]:
    """The measured ceilings in ``path`` and the device they were measured on, as its records
    name it (``"cpu (AMD EPYC, 2 threads)"``; ``None`` when the file does not say)."""
    doc = read_json(path, "ceilings file", InputError)
    roofs = parse_ceilings(doc, str(path))
    probes = doc.get("ceilings")
    named = (
        [r["device"] for r in probes if isinstance(r, dict) and isinstance(r.get("device"), str)]
        if isinstance(probes, list)
        else []
    )
    name = doc["device"].get("name")
    device = named[0] if named else name.removeprefix("measured ") if isinstance(name, str) else None
    return roofs, device


@dataclass(frozen=True)
class MeasuredInputs:
    """The measured side of a chart: points, the measured roofs they ran under (drawn dashed, and
    what each point is linked against) and the notes to print."""

    points: list[Measured] = field(default_factory=list)
    ceilings: list[Roof] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def measured_inputs(
    measured: Sequence[Measured] | str | Path | None,
    ceilings: Sequence[Roof] | str | Path | None,
    device: Device,
) -> MeasuredInputs:
    """Points and roofs from a results file and a ceilings file (or lists of them). The roofs are
    the ceilings file's, else the results file's own ceiling probes; a ceilings file measured on
    another device than the results is refused, naming both. Points without measured roofs are
    linked to ``device``'s catalog roof, and a note says so."""
    notes = []
    own: list[Roof] = []
    points_device = None
    if isinstance(measured, str | Path):
        held = read_measured_file(measured)
        points, own, points_device = held.points, held.roofs, held.device
        notes += [held.note] if held.note else []
    else:
        points = list(measured or ())
    ceil = list(ceilings or ()) if not isinstance(ceilings, str | Path) else []
    if isinstance(ceilings, str | Path):
        ceil, ceil_device = read_ceilings_file(ceilings)
        if points_device and ceil_device and ceil_device != points_device:
            raise InputError(
                f"{ceilings}: measured on {ceil_device!r}, but {measured} on {points_device!r}: measured "
                "points go under the roofs of the device they ran on (give that device's ceilings)"
            )
    ceil = ceil or own
    if points and not ceil:
        notes.append(
            f"measured points are linked to {device.name}'s catalog roof; pass --ceilings FILE.json "
            "(attnroof measure ceilings -o) for the roof they ran under"
        )
    return MeasuredInputs(points, ceil, notes)


def _int(shape: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = shape.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"shape {dict(shape)}: {key} = {value!r} must be a positive integer")
    return value


def model_point(m: Measured, device: Device, measured: Sequence[Roof] = ()) -> tuple[float, float] | None:
    """The model's point for the shape ``m`` ran: (intensity FLOP/byte, attainable FLOP/s on the
    roof it ran under for ``m.dtype``: the ``measured`` roofs when there are any, else the
    device's catalog roof); ``None`` when the model cannot place it (an unknown dtype, or no roof
    for that dtype)."""
    try:
        dt = dtype(m.dtype)
        roof = next((r for r in measured if r.dtype == dt.name), None) if measured else Roof.of(device, dt)
    except (InputError, MissingPeak):
        return None
    if roof is None:
        return None
    # The record's intensity is the model's, computed by attnroof measure from the core formulas
    # for the implementation that ran (fused, unfused, or masked unfused): never re-derived here.
    return m.intensity, float(roof.attainable(m.intensity))
