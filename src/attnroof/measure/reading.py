"""Reading a results file: the one reader behind ``plot``, ``report``, ``calibrate`` and
``measure ... --resume`` / ``-o``, and the rules every one of them applies. No torch, no numpy.

The file is **streamed**, a line at a time, never read whole: a line longer than
:data:`MAX_LINE_BYTES` is refused (``plot --measured /dev/zero`` stops at the first 64 KiB, not
when memory runs out), and so is a file that holds more than :data:`MAX_MEASUREMENTS` different
measurements (what is kept is one record per measurement). Each line is checked by
:func:`attnroof.measure.schema.validate_record`.

**One device.** A results file holds the measurements of one device: every record's
``device`` (the torch device and its name as the run saw them, ``"cuda:0 (NVIDIA H200)"``,
``"cpu (AMD EPYC, 2 threads)"``; the thread count is part of a CPU's name because it sets its
roof) is the same string. A record naming another device is refused with both names; a record
without one (a hand-written line) is not counted.

**A measurement measured more than once** (the same ``key``; see
:func:`~attnroof.measure.schema.identity`) is normal: a ceiling is probed again by every
campaign, two campaigns' files are pasted together. The rule, for every kind:

- of the records that ran (status ``ok``), the **fastest** is kept: each record's time is
  already the best of its repetitions, and timing noise only ever slows a kernel down, so the
  fastest is the closest to what the kernel can do (STREAM's rule, and the ceilings' best-of);
- a measurement that never ran ``ok`` keeps its **latest** record (an ``error`` and its retry:
  the retry counts).

Nothing is dropped silently: :attr:`Results.note` says how many measurements were repeated and
that the fastest was kept, and the commands print it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from attnroof.errors import InputError, NotStrictJSON, loads_strict
from attnroof.measure.schema import FOREIGN, OK, identity, validate_record

MAX_LINE_BYTES = 64 * 1024
"""Longest line read (bytes, newline excluded): a record is about 1 KB."""

MAX_MEASUREMENTS = 20_000
"""Most different measurements read from one file: the largest campaign writes a few hundred;
each kept record costs about 4 KB of memory, so this bounds a reader at about 80 MB."""


@dataclass
class Results:
    """A results file as read: its records, one per measurement, in the order each measurement
    first appears (``lines``: the line each kept record was read from)."""

    path: str
    records: list[dict[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    device: str | None = None
    """The device every record names (``None``: no record names one)."""
    repeated: list[tuple[str, int, int]] = field(default_factory=list)
    """(measurement, first line, a later line) of each measurement read more than once."""
    superseded: list[dict[str, Any]] = field(default_factory=list)
    """Records not kept (a slower repeat, an earlier failed attempt), for a writer that must not
    lose them (:class:`attnroof.measure.records.ResultsFile`); kept only when asked."""

    @property
    def note(self) -> str | None:
        """One line on the measurements read more than once, or ``None``."""
        if not self.repeated:
            return None
        ident, first, later = self.repeated[0]
        n = len(self.repeated)
        what = f"{n} measurements appear" if n > 1 else "a measurement appears"
        return (
            f"{self.path}: {what} more than once (first: {ident}, lines {first} and {later}); "
            "the fastest ok record of each is kept"
        )


def better(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Whether ``new`` replaces ``old``, an earlier record of the same measurement (the module's
    rule: the fastest ``ok`` record; without one, the latest)."""
    if new["status"] == OK and old["status"] == OK:
        return bool(new["time_s"] < old["time_s"])
    return old["status"] != OK


def read_results(
    path: str | os.PathLike[str], *, keyed: bool = False, keep_superseded: bool = False
) -> Results:
    """The records of the results file at ``path``, validated and streamed, by the module's
    rules. ``keyed`` is for a file attnroof is about to write to: every line must be a keyed
    record, and one that is not is refused as someone else's file (:data:`FOREIGN`). The last
    line, when the file does not end with a newline and it is not complete JSON, is the record
    an interrupted run was writing: it is ignored. Errors are one line, ``PATH:LINE: ...``."""
    shown = str(path)
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed below; errors of the open itself are caught)
    except OSError as e:
        raise InputError(f"cannot read results file {shown!r}: {e.strerror or e}") from None
    with f:

        def lines() -> Iterator[bytes]:
            while True:
                try:
                    raw = f.readline(MAX_LINE_BYTES + 1)
                except OSError as e:
                    raise InputError(f"cannot read results file {shown!r}: {e.strerror or e}") from None
                if not raw:
                    return
                yield raw

        return collect(lines(), shown, keyed=keyed, keep_superseded=keep_superseded)


def parse_results(text: str, path: str, *, keyed: bool = False) -> list[dict[str, Any]]:
    """The kept records of a results file's ``text`` (already read), by the same rules as
    :func:`read_results`."""
    return collect(text.encode("utf-8").splitlines(keepends=True), path, keyed=keyed).records


def collect(
    lines: Iterable[bytes], shown: str, *, keyed: bool = False, keep_superseded: bool = False
) -> Results:
    """:func:`read_results` of the raw lines of the file named ``shown``."""
    out = Results(shown)
    index_of: dict[str, int] = {}  # identity -> index in out.records
    repeated: set[str] = set()
    device_line = 0
    for number, raw in enumerate(lines, 1):
        where = f"{shown}:{number}"
        if len(raw.rstrip(b"\r\n")) > MAX_LINE_BYTES:
            raise InputError(
                f"{where}: a line longer than {MAX_LINE_BYTES // 1024} KiB is not a results record "
                "(a record is about 1 KB)"
            )
        if not raw.strip():
            continue
        rec = _parse(raw, where, keyed=keyed, cut_short=not raw.endswith(b"\n"))
        if rec is None:
            continue
        dev = rec.get("device")
        if isinstance(dev, str):
            if out.device is None:
                out.device, device_line = dev, number
            elif dev != out.device:
                raise InputError(
                    f"{where}: measured on {dev!r}, but line {device_line} on {out.device!r}: a "
                    "results file holds one device's measurements (keep each device's in its own file)"
                )
        ident = identity(rec)
        index = index_of.get(ident)
        if index is None:
            if len(out.records) >= MAX_MEASUREMENTS:
                raise InputError(
                    f"{where}: more than {MAX_MEASUREMENTS:,} different measurements in one file; "
                    "attnroof reads at most that many (a campaign writes a few hundred): split the file"
                )
            index_of[ident] = len(out.records)
            out.records.append(rec)
            out.lines.append(number)
            continue
        if ident not in repeated:
            repeated.add(ident)
            out.repeated.append((ident, out.lines[index], number))
        old = out.records[index]
        kept, dropped = (rec, old) if better(rec, old) else (old, rec)
        if kept is rec:
            out.records[index], out.lines[index] = rec, number
        if keep_superseded:
            if len(out.superseded) >= MAX_MEASUREMENTS:
                raise InputError(f"{where}: more than {MAX_MEASUREMENTS:,} repeated records in one file")
            out.superseded.append(dropped)
    return out


def _parse(raw: bytes, where: str, *, keyed: bool, cut_short: bool) -> dict[str, Any] | None:
    """One line's record, validated; ``None`` for the cut-short last line of an interrupted run."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        if cut_short:
            return None
        raise InputError(f"{where}: not UTF-8 text, so not a results record") from None
    try:
        rec = loads_strict(line)
    except json.JSONDecodeError as e:
        if cut_short:
            return None  # the record an interrupted run was writing
        raise InputError(f"{where}: {FOREIGN if keyed else f'not valid JSON ({e.msg})'}") from None
    except NotStrictJSON as e:
        raise InputError(f"{where}: not valid JSON data: {e}") from None
    if keyed and not (isinstance(rec, dict) and "key" in rec):
        raise InputError(f"{where}: {FOREIGN}")
    return validate_record(rec, where, keyed=keyed)
