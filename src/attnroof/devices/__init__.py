"""Devices: peak FLOP/s per dtype, memory bandwidth and capacity, the last-level cache, board power,
each with its source.

A device comes from the packaged catalog (``catalog.toml``) by name or alias, from a TOML file
of the user's (one device, or a ``[[device]]`` list), or from command-line overrides on top
of either. All figures are SI: FLOP/s, bytes/s, bytes, watts. Peaks are dense: a vendor's
"with sparsity" headline is halved before it enters the catalog, and ``sparse_headline`` says so.

A device file::

    name = "R"
    aliases = ["device-r"]
    bandwidth_bytes_per_s = 4.0e12
    capacity_bytes = 192e9
    source = "attnroof spec, Solution 2"
    # optional: the last-level cache, its size and bandwidth (both, or the bound is single-level)
    # onchip_bytes = 50e6
    # cache_bandwidth_bytes_per_s = 12e12

    [peak_flops_per_s]
    bf16 = 1200e12

Length: the record, its construction from a TOML table (every field checked, a misspelt one
named) and the lookup by name are what a device is; the figure checks live in
:mod:`attnroof.devices.checks`.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from attnroof.devices.checks import (
    MAX_PLAUSIBLE_BANDWIDTH,
    MAX_PLAUSIBLE_CAPACITY,
    MAX_PLAUSIBLE_FLOPS,
    MAX_PLAUSIBLE_POWER,
    MIN_MEASURED_RATE,
    MIN_PLAUSIBLE_CAPACITY,  # noqa: F401 (re-exported: the measure and plot extras check figures too)
    MIN_PLAUSIBLE_RATE,
    check_cache_bandwidth,
    check_capacity,
    check_onchip,
    check_power,
    check_rate,
)
from attnroof.devices.links import Links, links_from_record
from attnroof.dtypes import DTYPES, DType, dtype
from attnroof.errors import DeviceFileError, InputError, MissingPeak, UnknownDevice, read_json, read_text

CATALOG_FILE = Path(__file__).with_name("catalog.toml")
"""The packaged catalog, read beside this module (a plain path: importlib.resources' import costs
more than the read, and attnroof is never run from a zip)."""
CATALOG_CACHE = CATALOG_FILE.with_name("catalog.json")
"""The catalog already parsed, as JSON: reading it takes a twentieth of the time parsing the TOML
does (some 5 ms, most of a command's run after its imports). ``scripts/catalog_table.py --write``
writes it; it is read only while the CRC-32 it records matches the TOML's text, so an edited
catalog is never read stale (the TOML is parsed instead), and a test keeps it current."""
ENV_VAR = "ATTNROOF_DEVICES"
"""A TOML file, or a folder of them, whose devices add to or replace the catalog's."""

_REQUIRED = ("name", "peak_flops_per_s", "bandwidth_bytes_per_s")
_OPTIONAL = {
    "aliases",
    "capacity_bytes",
    "source",
    "onchip_bytes",
    "interconnect_bytes_per_s",
    "links",
    "capacity_marketed",
    "capacity_source",
    "sparse_headline",
    "notes",
    "vendor",
    "kind",
    "board_power_w",
    "board_power_source",
    "board_power_note",
    "cache_bandwidth_bytes_per_s",
    "cache_source",
    "cache_note",
}


@dataclass(frozen=True, slots=True)
class Device:
    """An accelerator (or CPU) as the roofline sees it. SI units throughout."""

    name: str
    peak_flops_per_s: Mapping[str, float]
    bandwidth_bytes_per_s: float
    capacity_bytes: float | None = None
    """The memory the device really has, as its driver reports the total (an H100 "80 GB" holds
    80 GiB); ``capacity_marketed`` keeps the vendor's figure beside it."""
    aliases: tuple[str, ...] = ()
    source: str = ""
    onchip_bytes: float | None = None
    links: Links = field(default_factory=Links)
    capacity_marketed: str = ""
    capacity_source: str = ""
    sparse_headline: str = ""
    notes: str = ""
    vendor: str = ""
    kind: str = ""
    board_power_w: float | None = None
    """The vendor's board power in watts (maximum TDP, maximum board power, TBP/TGP), or None
    where no source gives one: what :func:`attnroof.devices.energy.energy_per_token` charges."""
    board_power_source: str = ""
    board_power_note: str = ""
    """Which figure ``board_power_w`` is (TDP of the SXM module, a card's maximum power), or why
    there is none."""
    cache_bandwidth_bytes_per_s: float | None = None
    """The last-level cache's bandwidth (its size is ``onchip_bytes``), reads and writes together,
    or None where no source gives one: then the roof is single-level (every byte at
    ``bandwidth_bytes_per_s``). For a lower bound a figure too high is the safe side, so where
    sources disagree the highest credible one is taken (``cache_note`` says so)."""
    cache_source: str = ""
    cache_note: str = ""
    """Which figure ``cache_bandwidth_bytes_per_s`` is (a datasheet's, a paper's, a measurement's,
    one of the same die's), or why there is none."""
    origin: str = field(default="", compare=False)
    """Where this record was read from (the catalog, a file path)."""
    overridden: tuple[str, ...] = ()
    """Fields replaced on the command line (``peak_flops_per_s.bf16``, ``bandwidth_bytes_per_s``, ...)."""

    def peak(self, dt: str | DType) -> float:
        """Dense peak FLOP/s for ``dt``; :class:`MissingPeak` when the device has no such figure."""
        name = dtype(dt).name
        try:
            return self.peak_flops_per_s[name]
        except KeyError:
            have = ", ".join(self.peak_flops_per_s) or "none"
            raise MissingPeak(
                f"{self.name} has no {name} peak in the catalog (it has: {have}); set peak_flops_per_s",
                param="peak_flops_per_s",
            ) from None

    def ridge(self, dt: str | DType) -> float:
        """FLOP per byte at which the compute roof meets the bandwidth roof for ``dt``."""
        return self.peak(dt) / self.bandwidth_bytes_per_s

    def with_overrides(
        self,
        dt: str | DType,
        *,
        peak_flops_per_s: float | None = None,
        bandwidth_bytes_per_s: float | None = None,
        capacity_bytes: float | None = None,
        board_power_w: float | None = None,
    ) -> Device:
        """A copy with the figures given replaced; ``peak_flops_per_s`` applies to ``dt``."""
        changes: dict[str, Any] = {}
        if peak_flops_per_s is not None:
            _override_check(check_rate, "peak_flops_per_s", peak_flops_per_s, "FLOP/s", "1200e12 or 1200T")
            peaks = dict(self.peak_flops_per_s)
            peaks[dtype(dt).name] = float(peak_flops_per_s)
            changes["peak_flops_per_s"] = MappingProxyType(peaks)
        if bandwidth_bytes_per_s is not None:
            _override_check(
                check_rate, "bandwidth_bytes_per_s", bandwidth_bytes_per_s, "bytes/s", "4e12 or 4T"
            )
            changes["bandwidth_bytes_per_s"] = float(bandwidth_bytes_per_s)
        if capacity_bytes is not None:
            _override_check(check_capacity, "capacity_bytes", capacity_bytes)
            changes["capacity_bytes"] = float(capacity_bytes)
        if board_power_w is not None:
            _override_check(check_power, "board_power_w", board_power_w)
            changes["board_power_w"] = float(board_power_w)
        if not changes:
            return self
        labels = [f"peak_flops_per_s.{dtype(dt).name}" if k == "peak_flops_per_s" else k for k in changes]
        return replace(self, **changes, overridden=(*self.overridden, *labels))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "aliases": list(self.aliases),
            "vendor": self.vendor,
            "kind": self.kind,
            "peak_flops_per_s": dict(self.peak_flops_per_s),
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "capacity_bytes": self.capacity_bytes,
            "onchip_bytes": self.onchip_bytes,
            "cache_bandwidth_bytes_per_s": self.cache_bandwidth_bytes_per_s,
            "cache_source": self.cache_source,
            "cache_note": self.cache_note,
            "board_power_w": self.board_power_w,
            "board_power_source": self.board_power_source,
            "board_power_note": self.board_power_note,
            "capacity_marketed": self.capacity_marketed,
            "capacity_source": self.capacity_source,
            "links": self.links.to_json(),
            "sparse_headline": self.sparse_headline,
            "notes": self.notes,
            "source": self.source,
            "overridden": list(self.overridden),
        }


# ---------------------------------------------------------------- validation


def _override_check(check: Any, param: str, *args: Any) -> None:
    """A figure given as a parameter: the check's error, naming ``param`` (a flag, to the CLI)."""
    try:
        check(param, *args)
    except DeviceFileError as e:
        raise InputError(str(e), param=param) from None


def device_from_record(record: Mapping[str, Any], origin: str = "") -> Device:
    """Build and validate a :class:`Device` from one TOML table. Errors name the field."""
    where = f"{origin}: " if origin else ""
    label = record.get("name", "<unnamed>")
    at = f"{where}device {label!r}: "
    unknown = sorted(set(record) - set(_REQUIRED) - _OPTIONAL)
    if unknown:  # before the required fields, so that a misspelt one is named as such
        close = difflib.get_close_matches(unknown[0], [*_REQUIRED, *sorted(_OPTIONAL)], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise DeviceFileError(f"{at}unknown field {unknown[0]!r}{hint}")
    for key in _REQUIRED:
        if key not in record:
            raise DeviceFileError(f"{at}missing required field {key!r}")
    name = record["name"]
    if not isinstance(name, str) or not name.strip():
        raise DeviceFileError(f"{where}field 'name' must be a non-empty string, got {name!r}")
    peaks_raw = record["peak_flops_per_s"]
    if not isinstance(peaks_raw, Mapping) or not peaks_raw:
        raise DeviceFileError(f"{at}'peak_flops_per_s' must be a table of dtype = FLOP/s")
    peaks: dict[str, float] = {}
    floor = MIN_MEASURED_RATE if record.get("kind") == "measured" else MIN_PLAUSIBLE_RATE
    for key, value in peaks_raw.items():
        try:
            dt_name = dtype(key).name  # aliases (bfloat16, float16) are accepted, stored by name
        except InputError:
            raise DeviceFileError(
                f"{at}peak_flops_per_s.{key}: unknown dtype; known: {', '.join(DTYPES)}"
            ) from None
        if dt_name in peaks:
            raise DeviceFileError(f"{at}peak_flops_per_s.{key}: {dt_name} is given twice")
        _wrap(at, check_rate, f"peak_flops_per_s.{key}", value, "FLOP/s", "989e12", floor)
        peaks[dt_name] = float(value)
    _wrap(
        at, check_rate, "bandwidth_bytes_per_s", record["bandwidth_bytes_per_s"], "bytes/s", "3.35e12", floor
    )
    links = links_from_record(record, at)
    if "capacity_bytes" in record:
        _wrap(at, check_capacity, "capacity_bytes", record["capacity_bytes"])
    if "onchip_bytes" in record:
        _wrap(at, check_onchip, "onchip_bytes", record["onchip_bytes"])
        if "capacity_bytes" in record and record["onchip_bytes"] > record["capacity_bytes"]:
            raise DeviceFileError(
                f"{at}onchip_bytes = {record['onchip_bytes']:g} is more than capacity_bytes = "
                f"{record['capacity_bytes']:g}: on-chip memory (caches, SRAM) is part of a device's "
                "memory, not more than all of it (both are bytes)"
            )
    if "cache_bandwidth_bytes_per_s" in record:
        _wrap(at, check_cache_bandwidth, record)
    if "board_power_w" in record:
        _wrap(at, check_power, "board_power_w", record["board_power_w"])
    aliases = record.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise DeviceFileError(f"{at}'aliases' must be a list of strings")
    for key in (
        "source",
        "sparse_headline",
        "notes",
        "vendor",
        "kind",
        "capacity_marketed",
        "capacity_source",
        "board_power_source",
        "board_power_note",
        "cache_source",
        "cache_note",
    ):
        if key in record and not isinstance(record[key], str):
            raise DeviceFileError(f"{at}{key!r} must be a string")
    return Device(
        name=name,
        peak_flops_per_s=MappingProxyType(peaks),
        bandwidth_bytes_per_s=float(record["bandwidth_bytes_per_s"]),
        capacity_bytes=_opt_float(record.get("capacity_bytes")),
        aliases=tuple(aliases),
        source=record.get("source", ""),
        onchip_bytes=_opt_float(record.get("onchip_bytes")),
        links=links,
        capacity_marketed=record.get("capacity_marketed", ""),
        capacity_source=record.get("capacity_source", ""),
        sparse_headline=record.get("sparse_headline", ""),
        notes=record.get("notes", ""),
        vendor=record.get("vendor", ""),
        kind=record.get("kind", ""),
        board_power_w=_opt_float(record.get("board_power_w")),
        board_power_source=record.get("board_power_source", ""),
        board_power_note=record.get("board_power_note", ""),
        cache_bandwidth_bytes_per_s=_opt_float(record.get("cache_bandwidth_bytes_per_s")),
        cache_source=record.get("cache_source", ""),
        cache_note=record.get("cache_note", ""),
        origin=origin,
    )


def _wrap(at: str, check: Any, *args: Any) -> None:
    try:
        check(*args)
    except DeviceFileError as e:
        raise DeviceFileError(at + str(e)) from None


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


# ---------------------------------------------------------------- loading


def parse_devices(text: str, origin: str) -> list[Device]:
    """Devices in a TOML document: a top-level device, or a ``[[device]]`` list."""
    return devices_in(_toml(text, origin), origin)


def _toml(text: str, origin: str) -> dict[str, Any]:
    import tomllib  # a device file's, or the catalog's when its parsed copy is not current

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise DeviceFileError(f"{origin}: not valid TOML: {e}") from None
    except RecursionError:
        raise DeviceFileError(f"{origin}: not valid TOML data: nested too deeply to read") from None
    except ValueError as e:  # int('9' * 5000): Python's limit on integer string conversion
        why = "an integer has more digits than any figure could (over 4300)" if "digits" in str(e) else e
        raise DeviceFileError(f"{origin}: not valid TOML data: {why}") from None


def devices_in(doc: dict[str, Any], origin: str) -> list[Device]:
    """Devices in a parsed document: a top-level device, or a ``device`` list of tables."""
    if "device" in doc:
        records = doc["device"]
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise DeviceFileError(f"{origin}: 'device' must be an array of tables ([[device]])")
        extra = sorted(set(doc) - {"device"})
        if extra:
            raise DeviceFileError(f"{origin}: unexpected top-level field {extra[0]!r} beside [[device]]")
    else:
        records = [doc]
    devices = [device_from_record(r, origin) for r in records]
    _check_duplicates(devices)
    return devices


def load_device_file(path: str | os.PathLike[str]) -> list[Device]:
    """Read a device TOML file; :class:`DeviceFileError` if unreadable or malformed."""
    return parse_devices(read_text(path, "device file", DeviceFileError), str(path))


def load_ceilings_file(path: str | os.PathLike[str]) -> Device:
    """The device in a ceilings file written by ``attnroof measure ceilings -o FILE.json``: its
    ``"device"`` object holds the same fields as a catalog record (measured figures, SI units)."""
    return ceilings_device(read_json(path, "ceilings file", DeviceFileError), str(path))


def ceilings_device(doc: Any, origin: str) -> Device:
    """The device of a parsed ceilings file, checked as a device file's is (every reader of a
    ceilings file, ``--device`` and ``plot --ceilings`` alike, goes through here)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("device"), dict):
        raise DeviceFileError(
            f"{origin}: no 'device' object (write one: attnroof measure ceilings -o FILE.json)"
        )
    return device_from_record(doc["device"], origin)


def _key(name: str) -> str:
    """Lookup key: case-insensitive, blind to spaces, dashes, underscores and dots."""
    return re.sub(r"[\s_\-.]+", "", name.lower())


def _check_duplicates(devices: Iterable[Device]) -> None:
    seen: dict[str, Device] = {}
    for dev in devices:
        for label in (dev.name, *dev.aliases):
            k = _key(label)
            other = seen.get(k)
            if other is not None and other is not dev:
                raise DeviceFileError(
                    f"duplicate device name {label!r}: {other.name} ({other.origin}) "
                    f"and {dev.name} ({dev.origin})"
                )
            seen[k] = dev


def builtin_devices() -> list[Device]:
    """The packaged catalog, in file order."""
    text = CATALOG_FILE.read_text(encoding="utf-8")
    doc = _parsed_catalog(text)
    if doc is not None:
        try:
            return devices_in(doc, "catalog.toml")
        except DeviceFileError:  # a parsed copy that does not hold up is not used: the TOML is read
            pass
    return parse_devices(text, "catalog.toml")


def catalog_cache(text: str) -> str:
    """What :data:`CATALOG_CACHE` holds for the catalog ``text``: its document as JSON, with the
    text's CRC-32."""
    import json
    import zlib

    cache = {
        "generated": "from catalog.toml by scripts/catalog_table.py --write: edit the TOML, not this",
        "toml_crc32": zlib.crc32(text.encode("utf-8")),
        "document": _toml(text, "catalog.toml"),
    }
    return json.dumps(cache, ensure_ascii=False, indent=1) + "\n"


def _parsed_catalog(text: str) -> dict[str, Any] | None:
    """The catalog's document from :data:`CATALOG_CACHE`, or None when that is missing,
    unreadable or made from another text."""
    import json
    import zlib

    try:
        cache = json.loads(CATALOG_CACHE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(cache, dict) or cache.get("toml_crc32") != zlib.crc32(text.encode("utf-8")):
        return None
    doc = cache.get("document")
    return doc if isinstance(doc, dict) else None


def user_devices(env: Mapping[str, str] | None = None) -> list[Device]:
    """Devices from ``$ATTNROOF_DEVICES`` (a TOML file or a folder of ``*.toml``), if set."""
    value = (os.environ if env is None else env).get(ENV_VAR, "").strip()
    if not value:
        return []
    path = Path(value)
    try:
        folder = path.is_dir()
    except OSError as e:  # a name the system cannot look up (over 255 bytes a part)
        raise DeviceFileError(f"{ENV_VAR}={value!r}: cannot read it: {e.strerror}") from None
    if folder:
        devices: list[Device] = []
        for file in sorted(path.glob("*.toml")):
            devices.extend(load_device_file(file))
        _check_duplicates(devices)
        return devices
    if not path.exists():
        raise DeviceFileError(f"{ENV_VAR}={value!r}: no such file or folder")
    return load_device_file(path)


def catalog(env: Mapping[str, str] | None = None) -> list[Device]:
    """Built-in devices, with the user's devices added; a user device replaces a built-in one of
    the same name or alias, and takes over the built-in's other names (so a user's "H100 SXM"
    is also what ``h100`` finds)."""
    users = user_devices(env)
    owner = {_key(label): i for i, dev in enumerate(users) for label in (dev.name, *dev.aliases)}
    inherited: dict[int, list[str]] = {}
    kept = []
    for d in builtin_devices():
        labels = (d.name, *d.aliases)
        heirs = [owner[_key(x)] for x in labels if _key(x) in owner]
        if not heirs:
            kept.append(d)
            continue
        free = [x for x in labels if _key(x) not in owner]
        inherited.setdefault(heirs[0], []).extend(free)
        owner.update({_key(x): heirs[0] for x in free})
    users = [replace(u, aliases=(*u.aliases, *inherited.get(i, ()))) for i, u in enumerate(users)]
    return kept + users


def is_file_path(text: str) -> bool:
    """Whether a ``--device`` (or ``attnroof devices NAME``) is a device file's path rather
    than a name: it ends in ``.toml``, holds a folder separator, or is a file. A name the system
    cannot look up (a part over 255 bytes) is not a file: it is looked up as a name, and one line
    says there is no such device (``os.path.isfile`` answers False where ``Path.is_file`` raises)."""
    return text.endswith(".toml") or os.sep in text or os.path.isfile(text)


def get_device(name_or_path: str, env: Mapping[str, str] | None = None) -> Device:
    """A device by catalog name or alias, the single device in a TOML file at that path, or the
    measured device of a ceilings file (``*.json``)."""
    text = name_or_path.strip()
    if text.endswith(".json"):
        return load_ceilings_file(text)
    if is_file_path(text):
        devices = load_device_file(text)
        if len(devices) != 1:
            names = ", ".join(d.name for d in devices)
            raise DeviceFileError(
                f"{text!r} holds {len(devices)} devices ({names}); device takes a file of one device, "
                f"or put this file in ${ENV_VAR} and name the device",
                param="device",
            )
        return devices[0]
    devices = catalog(env)
    wanted = _key(text)
    for dev in devices:
        if wanted in {_key(x) for x in (dev.name, *dev.aliases)}:
            return dev
    labels = {_key(x): x for dev in devices for x in (dev.name, *dev.aliases)}
    close = difflib.get_close_matches(wanted, list(labels), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(labels[c] for c in close)}?" if close else ""
    raise UnknownDevice(f"unknown device {name_or_path!r}{hint} (list them with 'attnroof devices')")


DEFAULT_DEVICE = "R"

__all__ = [
    "DEFAULT_DEVICE",
    "ENV_VAR",
    "MAX_PLAUSIBLE_BANDWIDTH",
    "MAX_PLAUSIBLE_CAPACITY",
    "MAX_PLAUSIBLE_FLOPS",
    "MAX_PLAUSIBLE_POWER",
    "Device",
    "builtin_devices",
    "catalog",
    "ceilings_device",
    "check_capacity",
    "check_power",
    "check_rate",
    "device_from_record",
    "get_device",
    "is_file_path",
    "load_ceilings_file",
    "load_device_file",
    "parse_devices",
    "user_devices",
]
