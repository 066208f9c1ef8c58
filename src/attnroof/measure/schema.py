"""What a results file may hold, checked when it is read: the one validation every reader of
measurements applies (``measure ... --resume`` and ``-o``, ``plot --measured``, ``report
--measured``, the ceiling records of a ceilings file). No torch, no numpy.

A results file is JSON lines, one measurement per line, as ``attnroof measure`` writes it. Each
record is checked before any work starts, and the first bad one is refused with one line that
names the file, the line and what is wrong (``r.jsonl:12: time_s = NaN ...``):

- strict JSON (no ``NaN``/``Infinity``, every number finite), one object per line;
- ``kind`` one of :data:`KINDS`, ``status`` one of :data:`STATUSES`, ``impl`` a non-empty
  string, ``dtype`` a dtype attnroof knows;
- ``shape`` an object with exactly the keys the kind has (:data:`SHAPES`): sizes positive
  integers up to 2⁴⁰, ``causal`` true or false, ``heads`` a multiple of ``group``, a collective's ``op``
  one of :data:`COLLECTIVE_OPS` and its ``world`` at least 2;
- a measurement whose status is ``ok`` has a finite ``time_s`` of at least :data:`MIN_TIME_S`
  and finite ``flops`` and ``bytes``, whose rates over the time no device exceeds
  (:data:`MAX_RATE`); every figure present is finite and not negative, or null.

Blank lines are skipped. The last line, when the file does not end with a newline and the line
is not complete JSON, is the record an interrupted run was writing: it is ignored (and
rewritten by the next run).

**Derived figures.** ``intensity``, ``achieved_flops_per_s`` and ``achieved_bytes_per_s`` are
``flops / bytes``, ``flops / time_s`` and ``bytes / time_s`` (:func:`rates`, the one formula the
writer uses too); a record whose stored figure differs from that by more than
:data:`DERIVED_TOLERANCE` is refused, never drawn as given. (A collective's
``achieved_bytes_per_s`` is its bus bandwidth, not bytes / time: it is not checked.)

Reading a whole file (streamed, with limits), measurements given more than once and the one
device a file holds: :mod:`attnroof.measure.reading`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from attnroof.devices.checks import MAX_PLAUSIBLE_BANDWIDTH, MAX_PLAUSIBLE_FLOPS
from attnroof.dtypes import DTYPES, dtype
from attnroof.errors import InputError
from attnroof.validate import MAX_SIZE, MIN_TIME_S

OK, SKIP, WRONG, ERROR = "ok", "skip", "wrong", "error"
STATUSES = (OK, SKIP, WRONG, ERROR)
"""ok: timed and correct; skip: could not run here (no backend, out of memory); wrong: ran, but
the output failed the float32 reference check; error: failed (tried again on ``--resume``)."""

CEILING = "ceiling"
SHAPES: dict[str, tuple[str, ...]] = {
    "attention": ("s", "d", "batch", "heads", "group", "causal"),
    "decode": ("s", "d", "batch", "heads", "group"),
    "linear": ("n", "k", "m"),
    "collective": ("op", "bytes", "world"),
}
"""The shape keys of each operator kind, as :mod:`attnroof.measure.kernels` writes them (a
collective's, :mod:`attnroof.measure.collectives`: the operation, nccl-tests' *size* in bytes and
the number of ranks)."""
COLLECTIVE_OPS = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "send/recv")
"""A collective record's ``shape.op``: the names of :data:`attnroof.ops.collectives.COLLECTIVES`."""
TEXT_SHAPE_KEYS = {"op": COLLECTIVE_OPS}
"""Shape keys whose value is a name, with the names allowed."""
CEILING_SHAPES: dict[str, tuple[str, ...]] = {
    "read": ("bytes",),
    "write": ("bytes",),
    "copy": ("bytes",),
    "matmul": ("n", "k", "m"),
}
"""The shape keys of each ceiling probe (``kind: "ceiling"``), by ``impl``."""
KINDS = (*SHAPES, CEILING)
BOOL_SHAPE_KEYS = frozenset({"causal"})

FIGURES = (
    "flops", "bytes", "intensity", "achieved_flops_per_s", "achieved_bytes_per_s", "bound_time_s",
    "efficiency", "catalog_bound_time_s", "catalog_efficiency", "ncu_bytes", "ncu_ratio", "rel_error",
    "algbw_bytes_per_s", "busbw_bytes_per_s", "link_bytes_per_s",
)  # fmt: skip
"""Figures that are finite and not negative, or null."""
TEXTS = ("device", "reason", "timestamp", "timing", "skipped", "ncu_cache_control", "link", "bound_algorithm")
"""Fields that are strings, or null."""
MODELS = ("fused", "unfused", "unfused, mask pass")
"""The cost a point is placed against; the third is causal eager attention (every score, then a
mask pass), as the GPU runs of the reference data wrote it."""


MAX_RATE = {"flops": (MAX_PLAUSIBLE_FLOPS, "FLOP/s"), "bytes": (MAX_PLAUSIBLE_BANDWIDTH, "B/s")}
"""The most a record's counts over its time may reach: the device checks' plausible peaks of one
device (:mod:`attnroof.devices.checks`), so a point no chart could place is refused as read."""


def _fail(where: str, message: str) -> InputError:
    return InputError(f"{where}: {message}")


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(value: Any) -> bool:
    """A finite int or float (a record built in Python may hold a NaN that JSON could not)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


DERIVED_TOLERANCE = 0.01
"""Largest relative difference between a stored derived figure and :func:`rates` of the record's
counts: a figure rounded to three digits by hand passes, a wrong one does not."""


def rates(time_s: float, flops: float, nbytes: float) -> dict[str, float | None]:
    """The figures derived from a measurement's counts and time (FLOP/byte, FLOP/s, B/s):
    ``intensity`` is ``None`` when no bytes move."""
    return {
        "intensity": flops / nbytes if nbytes else None,
        "achieved_flops_per_s": flops / time_s,
        "achieved_bytes_per_s": nbytes / time_s,
    }


def _check_derived(rec: Mapping[str, Any], where: str) -> None:
    """Refuse a stored derived figure that is not what the record's counts and time make."""
    time_s, flops, nbytes = rec.get("time_s"), rec.get("flops"), rec.get("bytes")
    if time_s is None or flops is None or nbytes is None:
        return
    for name, want in rates(time_s, flops, nbytes).items():
        have = rec.get(name)
        if have is None or want is None or (name == "achieved_bytes_per_s" and rec["kind"] == "collective"):
            continue
        if abs(have - want) > DERIVED_TOLERANCE * abs(want):
            raise _fail(
                where,
                f"{name} = {_show(have)} is not what flops, bytes and time_s make ({want:.4g}): "
                "a derived figure must agree with the counts it comes from",
            )


def _known_dtype(name: str) -> bool:
    try:
        dtype(name)
    except InputError:
        return False
    return True


def validate_record(rec: Any, where: str, *, keyed: bool = False) -> dict[str, Any]:
    """``rec`` if it is a measurement attnroof can use, else :class:`InputError` with one line
    that starts with ``where`` (``FILE:LINE``) and names the field and the value. ``keyed``: the
    record must carry its ``key`` (what ``--resume`` matches on)."""
    if not isinstance(rec, dict):
        raise _fail(where, f"expected a JSON object, got {type(rec).__name__}")
    if keyed or "key" in rec:
        key = rec.get("key")
        if not isinstance(key, str) or not key.strip():
            raise _fail(where, f"key = {_show(key)} must be a non-empty string")
    for field in ("kind", "impl", "dtype", "status", "shape"):
        if field not in rec:
            raise _fail(where, f"missing key {field!r}")
    for field in ("kind", "impl", "dtype", "status"):
        if not isinstance(rec[field], str) or not rec[field].strip():
            raise _fail(where, f"{field} = {_show(rec[field])} must be a non-empty string")
    kind, impl, status = rec["kind"], rec["impl"], rec["status"]
    if kind not in KINDS:
        raise _fail(where, f"kind = {_show(kind)} is not a kind attnroof measures ({', '.join(KINDS)})")
    if status not in STATUSES:
        raise _fail(where, f"status = {_show(status)} is not one of {', '.join(STATUSES)}")
    if kind == CEILING:
        if impl not in CEILING_SHAPES:
            raise _fail(where, f"impl = {_show(impl)} is not a ceiling probe ({', '.join(CEILING_SHAPES)})")
        keys = CEILING_SHAPES[impl]
    else:
        keys = SHAPES[kind]
    _check_shape(rec["shape"], keys, where)
    for field in FIGURES:
        value = rec.get(field)
        if value is not None and (not _number(value) or value < 0):
            raise _fail(where, f"{field} = {_show(value)} must be a finite number ≥ 0, or null")
    if not _known_dtype(rec["dtype"]):
        raise _fail(
            where, f"dtype = {_show(rec['dtype'])} is not a dtype attnroof knows ({', '.join(DTYPES)})"
        )
    time_s = rec.get("time_s")
    if time_s is not None and (not _number(time_s) or time_s < MIN_TIME_S):
        raise _fail(
            where,
            f"time_s = {_show(time_s)} must be a finite number of seconds of at least {MIN_TIME_S:g}, or null",
        )
    for count, (most, unit) in MAX_RATE.items():
        value = rec.get(count)
        if time_s is not None and _number(value) and value / time_s > most:
            raise _fail(
                where,
                f"{count} / time_s = {value / time_s:.3g} {unit} is more than one device runs (at most "
                f"{most:.0e} {unit}): a count or a time is wrong".replace("e+", "e"),
            )
    if status == OK:
        for field in ("time_s", "flops", "bytes"):
            if rec.get(field) is None:
                raise _fail(where, f"status is ok but {field} is {'null' if field in rec else 'missing'}")
    for field in TEXTS:
        if rec.get(field) is not None and not isinstance(rec[field], str):
            raise _fail(where, f"{field} = {_show(rec[field])} must be a string, or null")
    for field in ("impossible", "fused"):
        if rec.get(field) is not None and not isinstance(rec[field], bool):
            raise _fail(where, f"{field} = {_show(rec[field])} must be true or false")
    if rec.get("model") is not None and rec["model"] not in MODELS:
        raise _fail(where, f"model = {_show(rec['model'])} must be one of {', '.join(MODELS)}")
    _check_derived(rec, where)
    return rec


def _check_shape(shape: Any, keys: tuple[str, ...], where: str) -> None:
    if not isinstance(shape, dict):
        raise _fail(where, f"shape = {_show(shape)} must be an object of {', '.join(keys)}")
    for k in shape:
        if k not in keys:
            raise _fail(where, f"shape has {k!r}, which this kind has not (its keys: {', '.join(keys)})")
    for k, v in shape.items():
        if k in BOOL_SHAPE_KEYS:
            if not isinstance(v, bool):
                raise _fail(where, f"shape.{k} = {_show(v)} must be true or false")
        elif k in TEXT_SHAPE_KEYS:
            if v not in TEXT_SHAPE_KEYS[k]:
                raise _fail(where, f"shape.{k} = {_show(v)} must be one of {', '.join(TEXT_SHAPE_KEYS[k])}")
        elif isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise _fail(where, f"shape.{k} = {_show(v)} must be a positive integer")
        elif v > MAX_SIZE:
            raise _fail(where, f"shape.{k} = {_show(v)} is larger than any model's size (at most 2^40)")
    for k in keys:
        if k not in shape:
            raise _fail(where, f"shape has no {k!r} (its keys: {', '.join(keys)})")
    if "world" in shape and shape["world"] < 2:
        raise _fail(where, f"shape.world = {shape['world']} must be at least 2 (a collective joins ranks)")
    if "group" in shape and shape["heads"] % shape["group"]:
        raise _fail(
            where, f"shape.heads = {shape['heads']} is not a multiple of shape.group = {shape['group']}"
        )


def identity(rec: Mapping[str, Any]) -> str:
    """What makes two records the same measurement: the ``key``, or for a line without one its
    kind, implementation, dtype and shape."""
    if isinstance(rec.get("key"), str):
        return rec["key"]
    shape = ",".join(f"{k}={v}" for k, v in sorted(rec["shape"].items()))
    return f"{rec['kind']}/{rec['impl']}/{rec['dtype']}/{shape}"


FOREIGN = "not an attnroof measurement: not a results file, so it is left untouched (choose another -o)"


def ceiling_records(doc: Any, path: str) -> list[dict[str, Any]]:
    """The ceiling probes kept in a ceilings file's ``"ceilings"`` list (none if it has none),
    each validated as a results record (they are copied into a results file), once each."""
    records = doc.get("ceilings", []) if isinstance(doc, dict) else []
    if not isinstance(records, list):
        raise _fail(path, f"ceilings = {_show(records)} must be a list of ceiling records")
    seen: dict[str, int] = {}
    for i, rec in enumerate(records):
        where = f"{path}: ceilings[{i}]"
        validate_record(rec, where, keyed=True)
        if rec["kind"] != CEILING:
            raise _fail(where, f"kind = {_show(rec['kind'])}: only ceiling probes belong in a ceilings file")
        if rec["key"] in seen:
            raise _fail(where, f"{rec['key']} is measured twice (ceilings[{seen[rec['key']]}] and [{i}])")
        seen[rec["key"]] = i
    return records
