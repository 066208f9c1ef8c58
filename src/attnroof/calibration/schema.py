"""What a calibration file may hold, checked when it is read: every field's type, range and
meaning, in one table per object. A file ``attnroof calibrate -o`` wrote passes; any other
value is refused before a forecast uses it, with one line naming the file, the field (by its
path in the document) and the value::

    cal.json: calibrations[0].fits[2].params.sharpness = 0 must be a number from 1 to 50: p of
    the smooth maximum of compute and memory time

The ranges of the fitted parameters are the fit's own bounds (:data:`attnroof.calibration.fit.BOUNDS`,
a parameter held rather than fitted sits at a value inside them: an efficiency of 1.0, ``t0``
of 0), the causal block one of :data:`attnroof.calibration.physics.CAUSAL_BLOCKS`, and the
roofs the device checks' plausible ranges (:mod:`attnroof.devices.checks`), a time the results
files' floor (:data:`attnroof.validate.MIN_TIME_S`). A misspelt field is
named as unknown rather than ignored (``split_KV`` would otherwise read as no split).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from attnroof.calibration.fit import BOUNDS
from attnroof.calibration.physics import CAUSAL_BLOCKS, KINDS, OPERATOR_CLASS
from attnroof.devices.checks import (
    MAX_PLAUSIBLE_BANDWIDTH,
    MAX_PLAUSIBLE_CAPACITY,
    MAX_PLAUSIBLE_FLOPS,
    MIN_MEASURED_RATE,
)
from attnroof.dtypes import DTYPES
from attnroof.errors import InputError
from attnroof.validate import MIN_TIME_S

FORMAT = "attnroof-calibration/1"

ROUNDING = 1e-9
"""Relative slack at a fitted bound: the fit works in log space, so a parameter pinned at its
bound comes back as ``exp(log(bound))``, a rounding off the bound itself."""
MAX_SMS = 1 << 16
"""Streaming multiprocessors of one device: today's largest GPUs have ~150; more than 65,536 is
not a device's count."""

Check = Callable[[Any, str], None]
"""Checks one value found at a path (``calibrations[0].roofs.sms``); :class:`Bad` if it is not
what the field holds."""


class Bad(Exception):
    """A value that is not what its field holds: where it is, what it is, what it must be
    (``value`` is :data:`MISSING` for a required field that is not there, ``must`` then what the
    field means); ``unknown``: a field no calibration has."""

    def __init__(self, where: str, value: Any, must: str, *, unknown: bool = False) -> None:
        super().__init__(where, value, must)
        self.where, self.value, self.must, self.unknown = where, value, must, unknown
        self.explained = False

    def line(self, path: str) -> str:
        """The error as one line, naming ``path``."""
        if self.unknown:
            return f"{path}: {self.where} is not a field of a calibration{self.must}"
        if self.value is MISSING:
            return f"{path}: {self.where} is missing ({self.must})"
        return f"{path}: {self.where} = {_show(self.value)} must be {self.must}"


MISSING = object()


class Field:
    """One field of an object: its check, whether it must be there, and what it means."""

    def __init__(self, check: Check, meaning: str, *, required: bool = True) -> None:
        self.check, self.meaning, self.required = check, meaning, required


# ---------------------------------------------------------------- the checks


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def number(lo: float, hi: float, *, above_lo: bool = False) -> Check:
    """A finite number from ``lo`` to ``hi`` (above ``lo`` with ``above_lo``)."""
    must = f"a number {'above' if above_lo else 'from'} {lo:g}"
    if hi < math.inf:
        must += f" {'and at most' if above_lo else 'to'} {hi:g}"

    def check(v: Any, where: str) -> None:
        if not _is_number(v) or v < lo or (above_lo and v == lo) or v > hi:
            raise Bad(where, v, must)

    return check


def bounded(name: str, *, held: float | None = None) -> Check:
    """A fitted parameter: inside the fit's :data:`BOUNDS` for ``name`` (up to
    :data:`ROUNDING`), or exactly ``held``, the value a parameter not fitted is held at."""
    _, lo, hi = BOUNDS[name]
    inside = number(lo * (1 - ROUNDING), hi * (1 + ROUNDING))
    must = f"a number from {lo:g} to {hi:g}" + (f", or {held:g}" if held is not None else "")

    def check(v: Any, where: str) -> None:
        if _is_number(v) and v == held:
            return
        try:
            inside(v, where)
        except Bad:
            raise Bad(where, v, must) from None

    return check


def integer(lo: int, hi: int) -> Check:
    def check(v: Any, where: str) -> None:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise Bad(where, v, f"a whole number from {lo:,} to {hi:,}")

    return check


def one_of(*values: Any) -> Check:
    def check(v: Any, where: str) -> None:
        if isinstance(v, bool) or v not in values:  # True == 1: a bool is no block size
            raise Bad(where, v, f"one of {', '.join(map(str, values))}")

    return check


def boolean(v: Any, where: str) -> None:
    if not isinstance(v, bool):
        raise Bad(where, v, "true or false")


def text(v: Any, where: str) -> None:
    if not isinstance(v, str) or not v.strip():
        raise Bad(where, v, "a non-empty string")


def or_null(check: Check) -> Check:
    def either(v: Any, where: str) -> None:
        if v is not None:
            try:
                check(v, where)
            except Bad as e:
                raise Bad(where, v, f"{e.must}, or null") from None

    return either


def list_of(check: Check, *, non_empty: bool = False) -> Check:
    def each(v: Any, where: str) -> None:
        if not isinstance(v, list) or (non_empty and not v):
            raise Bad(where, v, f"a {'non-empty ' if non_empty else ''}list")
        for i, item in enumerate(v):
            check(item, f"{where}[{i}]")

    return each


def keyed(key_name: str, value: Check) -> Check:
    """A table by head dimension or row length: keys ``"any"`` (one value for all) or positive
    whole numbers; the older single number is accepted as ``{"any": number}``."""

    def check(v: Any, where: str) -> None:
        if _is_number(v):
            value(v, where)
            return
        if not isinstance(v, dict) or not v:
            raise Bad(where, v, f'a number, or a non-empty object {{"any" or a {key_name}: number}}')
        for k, x in v.items():
            if k != "any" and not (k.isascii() and k.isdigit() and int(k) > 0):
                raise Bad(f"{where} key", k, f'"any" or a {key_name} (a whole number above 0)')
            value(x, f"{where}.{k}")

    return check


def obj(table: Mapping[str, Field]) -> Check:
    """An object with the fields of ``table``: each required one present, none unknown. An
    error about a field's own value says what the field means."""

    def check(v: Any, where: str) -> None:
        if not isinstance(v, dict):
            raise Bad(where, v, "an object")
        for key in v:  # first, so that a misspelt required field is named as such
            if key not in table:
                close = difflib.get_close_matches(key, list(table), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise Bad(f"{where}.{key}" if where else key, v[key], hint, unknown=True)
        for key, f in table.items():
            at = f"{where}.{key}" if where else key
            if key not in v:
                if f.required:
                    raise Bad(at, MISSING, f.meaning)
                continue
            try:
                f.check(v[key], at)
            except Bad as e:
                if not e.explained and e.value is not MISSING and not e.unknown:
                    e.must, e.explained = f"{e.must}: {f.meaning}", True
                raise

    return check


# ---------------------------------------------------------------- the tables

RATE = "FLOP/s"
FRACTION = "a fraction of the measured roof"

PARAMS = {
    "t0_s": Field(bounded("t0_s", held=0.0), "the fixed cost of one kernel call, s"),
    "eta_compute": Field(
        keyed("head dimension", bounded("eta_compute", held=1.0)), f"compute efficiency, {FRACTION}"
    ),
    "eta_memory": Field(bounded("eta_memory", held=1.0), f"memory efficiency, {FRACTION}"),
    "eta_pass": Field(
        keyed("softmax row length", bounded("eta_pass", held=1.0)), f"softmax pass efficiency, {FRACTION}"
    ),
    "eta_mask": Field(or_null(bounded("eta_mask")), f"mask pass efficiency, {FRACTION}", required=False),
    "sharpness": Field(bounded("sharpness"), "p of the smooth maximum of compute and memory time"),
    "l2_speedup": Field(bounded("l2_speedup"), "how much faster a call that fits in L2 reads"),
    "causal_block": Field(one_of(*CAUSAL_BLOCKS), "the causal kernel's diagonal tile, rows"),
    "split_kv": Field(boolean, "fused decode splits the KV cache over thread blocks", required=False),
}
ERRORS = {
    "median": Field(or_null(number(0, math.inf)), "median |relative error|"),
    "p90": Field(or_null(number(0, math.inf)), "90th percentile |relative error|"),
    "n": Field(integer(0, 1 << 62), "errors summarised"),
}


def shape(v: Any, where: str) -> None:
    if not isinstance(v, dict) or not v:
        raise Bad(where, v, "a non-empty object (the shape's sizes, as in the results file)")


SECONDS = number(MIN_TIME_S, math.inf)
"""A kernel's time, measured or forecast: at least :data:`attnroof.validate.MIN_TIME_S`, as a
results file's (the same figure read the same way in both files)."""
HELD = {
    "shape": Field(shape, "the shape left out"),
    "time_s": Field(SECONDS, "its measured time, s"),
    "predicted_s": Field(SECONDS, "its time forecast by a fit without it, s"),
}
BAND = {
    "low": Field(number(-1, 0, above_lo=True), "the forecast's low end, relative"),
    "high": Field(number(0, math.inf), "the forecast's high end, relative"),
}
FIT = {
    "kind": Field(one_of(*KINDS), "the kind measured"),
    "operator_class": Field(one_of(*sorted(set(OPERATOR_CLASS.values()))), "the operator table's kind"),
    "impl": Field(text, "the implementation"),
    "points": Field(integer(0, 1 << 62), "measured calls fitted"),
    "params": Field(obj(PARAMS), "the fitted parameters"),
    "fitted": Field(list_of(text), "parameters fitted"),
    "not_fitted": Field(list_of(text), "why the others were not"),
    "in_sample_error": Field(obj(ERRORS), "errors on the points fitted"),
    "held_out_error": Field(obj(ERRORS), "errors on shapes left out"),
    "band": Field(obj(BAND), "the forecast's band"),
    "held_out": Field(list_of(obj(HELD)), "each shape forecast by a fit without it"),
}
SKIPPED = {
    "kind": Field(text, "the kind measured"),
    "impl": Field(text, "the implementation"),
    "reason": Field(text, "why it was not fitted"),
}
ROOFS = {
    "peak_flops_per_s": Field(
        number(MIN_MEASURED_RATE, MAX_PLAUSIBLE_FLOPS), "the measured matmul peak, FLOP/s"
    ),
    "bandwidth_bytes_per_s": Field(
        number(MIN_MEASURED_RATE, MAX_PLAUSIBLE_BANDWIDTH), "the measured copy bandwidth, bytes/s"
    ),
    "sms": Field(or_null(integer(1, MAX_SMS)), "the device's streaming multiprocessors"),
    "l2_bytes": Field(
        or_null(number(0, MAX_PLAUSIBLE_CAPACITY, above_lo=True)), "the device's L2 cache, bytes"
    ),
}
CALIBRATION = {
    "device": Field(or_null(text), "the device string of the results"),
    "catalog_device": Field(or_null(text), "the catalog device it is"),
    "dtype": Field(one_of(*DTYPES), "the dtype measured"),
    "roofs": Field(obj(ROOFS), "the roofs the efficiencies are fractions of"),
    "fits": Field(list_of(obj(FIT)), "one per kind and implementation"),
    "skipped": Field(list_of(obj(SKIPPED)), "implementations not fitted, and why", required=False),
}
FILE = {
    "format": Field(one_of(FORMAT), "what the file is"),
    "calibrations": Field(list_of(obj(CALIBRATION), non_empty=True), "one per device and dtype"),
}


def check_file(doc: Any, path: str) -> None:
    """:class:`InputError` naming ``path``, the field and the value unless ``doc`` (a parsed
    calibration file) holds what :data:`FILE` says, each (device, dtype) once and each (kind,
    implementation) once in it, and each fit's ``operator_class`` its kind's."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(f"{path!r} is not an attnroof calibration file (format {FORMAT})")
    try:
        obj(FILE)(doc, "")
    except Bad as e:
        raise InputError(e.line(path)) from None
    seen: dict[tuple[Any, str], int] = {}
    for i, c in enumerate(doc["calibrations"]):
        key = (c["device"], c["dtype"])
        if key in seen:
            raise InputError(
                f"{path}: calibrations[{i}] is calibrations[{seen[key]}] again ({c['device']!r}, {c['dtype']}): "
                "one calibration per device and dtype"
            )
        seen[key] = i
        fits: dict[tuple[str, str], int] = {}
        for j, f in enumerate(c["fits"]):
            at = f"calibrations[{i}].fits[{j}]"
            if f["operator_class"] != OPERATOR_CLASS[f["kind"]]:
                raise InputError(
                    f"{path}: {at}.operator_class = {f['operator_class']!r} must be "
                    f"{OPERATOR_CLASS[f['kind']]!r} (the class of kind {f['kind']!r})"
                )
            if (f["kind"], f["impl"]) in fits:
                raise InputError(
                    f"{path}: {at} fits {f['kind']} {f['impl']!r} again (calibrations[{i}].fits"
                    f"[{fits[(f['kind'], f['impl'])]}]): one fit per kind and implementation"
                )
            fits[(f["kind"], f["impl"])] = j


def _show(value: Any) -> str:
    """A value as the file wrote it (JSON: ``null``, ``true``, ``"abc"``), cut at 60 characters."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:59] + "…"
