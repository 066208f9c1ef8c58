"""One JSON record per measurement, its placement on the roofline, and the JSON-lines file.

Every record has every key of :data:`RECORD_KEYS` (``None`` where a figure does not apply), so
that a reader (the charts) needs no special cases. SI units: seconds, FLOPs, bytes, FLOP/s, B/s.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from attnroof import outfile
from attnroof.devices import Device
from attnroof.errors import InputError
from attnroof.jsonable import to_jsonable
from attnroof.measure.reading import MAX_LINE_BYTES, read_results
from attnroof.measure.schema import rates
from attnroof.roofline import Roof, place

OK, SKIP, WRONG, ERROR = "ok", "skip", "wrong", "error"
CEILING = "ceiling"

RECORD_KEYS = (
    "key", "kind", "impl", "shape", "dtype", "device", "status", "reason", "time_s", "flops", "bytes",
    "intensity", "achieved_flops_per_s", "achieved_bytes_per_s", "bound_time_s", "efficiency",
    "impossible", "catalog_bound_time_s", "catalog_efficiency", "ncu_bytes", "ncu_ratio", "timestamp",
)  # fmt: skip
"""The keys every record carries (the chart code reads them). Extra keys: ``model`` (which cost
the point is placed against), ``rel_error`` (against the float32 reference), ``timing``,
``skipped`` (a read ceiling: the read kernels that could not run, and why)."""

IMPOSSIBLE_TOLERANCE = 1.05
"""Efficiency above this (5% over the roof, beyond timer noise) cannot happen if the ceilings and
the counts are right: such a point is flagged."""

IMPOSSIBLE_TEXT = "IMPOSSIBLE: faster than the roof — a ceiling or a count is wrong"


def now() -> str:
    """UTC time stamp, ISO 8601 to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_record(
    key: str,
    kind: str,
    impl: str,
    shape: Mapping[str, Any],
    dt: str,
    device: str,
    status: str = OK,
    reason: str = "",
) -> dict[str, Any]:
    """A record with every key present and no figures yet."""
    rec: dict[str, Any] = dict.fromkeys(RECORD_KEYS)
    rec.update(
        key=key,
        kind=kind,
        impl=impl,
        shape=dict(shape),
        dtype=dt,
        device=device,
        status=status,
        reason=reason,
        impossible=False,
        timestamp=now(),
    )
    return rec


def set_time(rec: dict[str, Any], time_s: float, flops: float, nbytes: float) -> dict[str, Any]:
    """Fill in a timed record's model counts and achieved rates (:func:`~attnroof.measure.schema.rates`,
    the formula every reader checks them against)."""
    rec.update(time_s=float(time_s), flops=float(flops), bytes=float(nbytes))
    rec.update(rates(float(time_s), float(flops), float(nbytes)))
    return rec


def bound_time(device: Device | None, dt: str, flops: float, nbytes: float) -> float | None:
    """Roofline time bound (s) of ``flops`` and ``nbytes`` on ``device`` at dtype ``dt``; ``None``
    when the device has no peak for that dtype and the work has FLOPs."""
    if device is None or not nbytes:
        return None
    peak = device.peak_flops_per_s.get(dt) if flops else math.inf
    if peak is None:
        return None
    return place((flops, nbytes), Roof(peak, device.bandwidth_bytes_per_s)).time_s


NOT_MODELLED = frozenset({"sdpa-math"})
"""Implementations whose stage table is not what runs: torch's math SDPA backend scales Q and K
in separate passes, builds the causal mask in the query dtype (2 B per score) and its safe
softmax adds passes, about 16 B per score where the unfused model counts 8. Their bound is shown,
but no efficiency is claimed for them (``efficiency`` is null)."""


def place_record(
    rec: dict[str, Any], measured: Device | None, catalog: Device | None = None
) -> dict[str, Any]:
    """Bound and efficiency (bound / measured time) on the measured ceilings and on the catalog
    device; ``impossible`` when the point lies above the measured roof. No efficiency for an
    implementation that is :data:`NOT_MODELLED`."""
    if rec["status"] != OK or rec["time_s"] is None:
        return rec
    claim = rec.get("impl") not in NOT_MODELLED
    for prefix, device in (("", measured), ("catalog_", catalog)):
        bound = bound_time(device, rec["dtype"], rec["flops"], rec["bytes"])
        rec[f"{prefix}bound_time_s"] = bound
        rec[f"{prefix}efficiency"] = None if bound is None or not claim else bound / rec["time_s"]
    eff = rec["efficiency"]
    rec["impossible"] = bool(eff is not None and eff > IMPOSSIBLE_TOLERANCE)
    return rec


def impossible(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("impossible")]


# ---------------------------------------------------------------- the JSON-lines file


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Records of an attnroof results file that attnroof is about to write to, by the rules of
    :func:`attnroof.measure.reading.read_results` (``keyed``: a line that is not a keyed record
    means this is someone else's file, and :class:`~attnroof.errors.InputError` says so rather
    than let a writer touch it). A missing file has no records."""
    if not Path(path).exists():
        return []
    return read_results(path, keyed=True).records


class ResultsFile:
    """A JSON-lines file written one record at a time, flushed and fsync'd, so that an
    interrupted run loses nothing. ``resume=True`` keeps what is there (a cut-short last line is
    cut off, nothing else is rewritten); otherwise the file starts empty.

    **One writer.** A regular file is locked for as long as this object is open
    (:class:`attnroof.outfile.Lock`, on a sibling ``.NAME.lock``): a second run given the same
    ``-o`` is refused with one line, before it measures anything, instead of interleaving its
    records with the first's. :meth:`close` (or the end of the process) lets go.

    **Each measurement once.** :meth:`append` refuses a key the file already holds (other than
    a failed attempt, which its retry replaces): a writer never makes a file that its readers
    must resolve. A file read on ``--resume`` that holds repeats (two campaigns pasted) keeps
    them: :meth:`rewrite` writes them back.

    The path follows :mod:`attnroof.outfile`'s rules: a symlink is written through, a missing
    folder is refused, and a device or FIFO (``/dev/null``, a named pipe) is a **stream**: opened
    once, each record written to it as made, never read (there is nothing to resume from) and
    never rewritten (:meth:`rewrite` updates the records in memory only)."""

    def __init__(self, path: str | os.PathLike[str], *, resume: bool = False) -> None:
        self.path = Path(path)
        self._stream: IO[str] | None = None
        self._lock: outfile.Lock | None = None
        self._target = outfile.target(self.path)
        self._superseded: list[dict[str, Any]] = []
        self.device: str | None = None
        """The device the file's records were measured on (``None``: none yet)."""
        self.records: list[dict[str, Any]] = []
        if self._target.stream:
            # no O_CREAT, no O_TRUNC: the device or FIFO stays what it is; held open for the run
            self._stream = os.fdopen(os.open(self.path, os.O_WRONLY), "w", encoding="utf-8")
            return
        self._lock = outfile.Lock(self._target.real, shown=str(self.path))
        try:
            if resume and self._target.real.exists():
                held = read_results(self._target.real, keyed=True, keep_superseded=True)
                self.records, self._superseded, self.device = held.records, held.superseded, held.device
                _end_last_line(self._target.real)
            else:
                self._write_all([])
        except BaseException:
            self.close()
            raise

    @property
    def stream(self) -> bool:
        """Written in place as a stream (a device or FIFO), not a regular file."""
        return self._target.stream

    @property
    def done(self) -> set[str]:
        return {r["key"] for r in self.records}

    def append(self, rec: dict[str, Any]) -> None:
        """Write ``rec`` at the end of the file, on disk before this returns."""
        held = next((r for r in self.records if r["key"] == rec["key"]), None)
        if held is not None and held.get("status") != ERROR:
            raise InputError(
                f"{str(self.path)!r} already holds {rec['key']}: a results file holds each measurement once"
            )
        line = json.dumps(to_jsonable(rec), ensure_ascii=False) + "\n"
        if self._stream is not None:
            self._stream.write(line)
            self._stream.flush()
        else:
            with self._target.real.open("a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        if held is not None:
            self.records.remove(held)  # the failed attempt; its line stays until a rewrite
        self.records.append(rec)
        if self.device is None and isinstance(rec.get("device"), str):
            self.device = rec["device"]

    def rewrite(self, records: list[dict[str, Any]]) -> None:
        """Replace the file's contents at once (write a sibling, then rename over): ``records``,
        after the repeats read on ``--resume`` that were not kept (nothing measured is lost)."""
        if self._stream is None:
            self._write_all([r for r in self._superseded if r.get("status") != ERROR] + list(records))
        self.records = list(records)

    def close(self) -> None:
        """Close a stream; let go of a regular file's lock."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __del__(self) -> None:  # dropped without close(): let go, as a file object does
        self.close()

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_all(self, records: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(to_jsonable(rec), ensure_ascii=False) + "\n" for rec in records)
        outfile.write_text(self._target.real, text)


def _end_last_line(path: Path) -> None:
    """Make the file end with a whole line before records are appended: a last line without its
    newline is given one when it is a record (the reader took it), and cut off when it is the
    part of a record an interrupted run was writing (the reader ignored it)."""
    with path.open("r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        start = max(0, size - MAX_LINE_BYTES - 2)
        f.seek(start)
        tail = f.read()
        if tail.endswith(b"\n"):
            return
        cut = tail.rfind(b"\n") + 1
        try:
            json.loads(tail[cut:])
        except ValueError:
            f.truncate(start + cut)
        else:
            f.write(b"\n")
        f.flush()
        os.fsync(f.fileno())
