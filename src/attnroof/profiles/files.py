"""Reading a profile file (:mod:`attnroof.profiles`' format): every figure a table with its
value and its source, checked — a fraction of a roof in (0, 1], a share hidden from 0 to 1, a cost
or count not negative, a source the file names — and a bare number refused, so that no figure
arrives without its origin."""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from attnroof.errors import InputError
from attnroof.profiles import (
    Attention,
    Error,
    Figure,
    Gemm,
    Host,
    Link,
    Memory,
    Overlap,
    Profile,
    Source,
)

_SECTIONS: dict[str, tuple[type, dict[str, type]]] = {
    "gemm": (
        Gemm,
        {"ceiling": float, "k_half": float, "tile_t": int, "tile_m": int, "memory": float, "launch_s": float},
    ),
    "attention": (
        Attention,
        {
            "s_half": float,
            "block": int,
            "memory": float,
            "decode": float,
            "backward": float,
            "launch_s": float,
        },
    ),
    "memory": (Memory, {"fraction": float, "cache": float, "launch_s": float}),
    "scaleup": (Link, {"fraction": float, "latency": float}),
    "scaleout": (Link, {"fraction": float, "latency": float}),
    "overlap": (Overlap, {"tensor": float, "data": float, "pipeline": float, "context": float}),
}
_FRACTIONS = {
    "ceiling",
    "memory",
    "decode",
    "backward",
    "fraction",
    "cache",
    "tensor",
    "data",
    "pipeline",
    "context",
}
"""Figures that are a share of a roof: in (0, 1]; a forecast is never below its bound."""
_SHARES = {"tensor", "data", "pipeline", "context"}
"""Shares of communication hidden: from 0 (none) to 1 (all, as the bound assumes)."""


def _bad(path: str, what: str) -> InputError:
    return InputError(f"{path}: {what}", param="profile")


def _figure(
    where: str, key: str, raw: Any, sources: Mapping[str, Source], kind: type, *, plain: bool = False
) -> Figure:
    """``raw`` = ``{ value = ..., source = "id" }``, checked: a number with a known source, a
    fraction in (0, 1], a cost or size ≥ 0 (a multiplier on latency ≥ 1)."""
    path = f"{where}.{key}"
    if not isinstance(raw, dict) or "value" not in raw or "source" not in raw:
        raise _bad(
            path, "must be a table { value = ..., source = ... }: a number without its origin is refused"
        )
    value, src = raw["value"], raw["source"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(path, f"value {value!r} is not a number")
    if src not in sources:
        raise _bad(path, f"source {src!r} is not one of the file's [sources]")
    value = float(value)
    if not value == value or value in (float("inf"), float("-inf")):
        raise _bad(path, f"value {value} is not finite")
    if plain:  # an error: any size, not negative
        key = ""
    if key in _SHARES and not 0 <= value <= 1:
        raise _bad(path, f"value {value} must be a share from 0 to 1 (of the communication hidden)")
    if key in _FRACTIONS and key not in _SHARES and not 0 < value <= 1:
        raise _bad(path, f"value {value} must be a fraction in (0, 1]: a real kernel does not beat its roof")
    if key == "latency" and value < 1:
        raise _bad(path, f"value {value} must be at least 1 (a factor on the bound's latency)")
    if value < 0:
        raise _bad(path, f"value {value} must not be negative")
    if kind is int and value != int(value):
        raise _bad(path, f"value {value} must be a whole number")
    return Figure(value, src, str(raw.get("note", "")))


def parse(text: str, origin: str) -> Profile:
    """A profile from its TOML text; :class:`InputError` naming the file and field otherwise."""
    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as e:  # ValueError: an integer of 4,300 digits or more
        raise _bad(origin, f"not TOML ({e})") from None
    known = {
        *_SECTIONS,
        "sources",
        "devices",
        "host",
        "step",
        "error",
        "name",
        "dtype",
        "vendor",
        "nearest",
        "vendor_default",
    }
    unknown = sorted(set(doc) - known)
    if unknown:
        raise _bad(f"{origin}: {unknown[0]}", f"unknown field (known: {', '.join(sorted(known))})")
    raw_sources = doc.get("sources", {})
    if not isinstance(raw_sources, dict):
        raise _bad(origin, "[sources] must be a table of sources")
    sources = {}
    for sid, s in raw_sources.items():
        if not isinstance(s, dict) or not s.get("title"):
            raise _bad(f"{origin}: sources.{sid}", "needs a title")
        sources[sid] = Source(
            sid,
            str(s["title"]),
            str(s.get("url", "")),
            str(s.get("date", "")),
            str(s.get("where", "")),
            str(s.get("notes", "")),
        )
    figures: dict[str, Figure] = {}
    built: dict[str, Any] = {}
    for section, (cls, keys) in _SECTIONS.items():
        table = doc.get(section, {})
        unknown = sorted(set(table) - set(keys) - ({"ceiling"} if section == "attention" else set()))
        if unknown:
            raise _bad(f"{origin}: {section}.{unknown[0]}", f"unknown field (known: {', '.join(keys)})")
        values: dict[str, Any] = {}
        for key, kind in keys.items():
            if key in table:
                fig = _figure(f"{origin}: {section}", key, table[key], sources, kind)
                figures[f"{section}.{key}"] = fig
                values[key] = kind(fig.value)
        if section == "attention" and "ceiling" in table:
            per_d = table["ceiling"]
            if not isinstance(per_d, dict) or not per_d:
                raise _bad(f"{origin}: attention.ceiling", "must be a table of head dimension = figure")
            ceil = {}
            for d, raw in per_d.items():
                if not str(d).isdigit() or int(d) <= 0:
                    raise _bad(
                        f"{origin}: attention.ceiling.{d}", "a head dimension must be a positive whole number"
                    )
                fig = _figure(f"{origin}: attention.ceiling", str(d), raw, sources, float)
                if not 0 < fig.value <= 1:
                    raise _bad(
                        f"{origin}: attention.ceiling.{d}", f"value {fig.value} must be a fraction in (0, 1]"
                    )
                figures[f"attention.ceiling.{d}"] = fig
                ceil[int(d)] = fig.value
            values["ceiling"] = ceil
        built[section] = cls(**values)
    devices = {}
    for name, raw in doc.get("devices", {}).items():
        fig = _figure(f"{origin}: devices", name, raw, sources, int)
        figures[f"devices.{name}"] = fig
        devices[name] = int(fig.value)
    host = doc.get("host", {})
    steps = {}
    for engine, raw in host.get("step_s", {}).items():
        fig = _figure(f"{origin}: host.step_s", engine, raw, sources, float)
        figures[f"host.step_s.{engine}"] = fig
        steps[engine] = fig.value
    default = (
        _figure(f"{origin}: host", "default_s", host["default_s"], sources, float).value
        if "default_s" in host
        else 0.0
    )
    step = doc.get("step", {})
    step_launch = None
    if "launch_s" in step:
        fig = _figure(f"{origin}: step", "launch_s", step["launch_s"], sources, float)
        figures["step.launch_s"] = fig
        step_launch = fig.value
    err: dict[str, dict[str, float]] = {"median": {}, "p90": {}}
    for which in err:
        for level, raw in doc.get("error", {}).get(which, {}).items():
            fig = _figure(f"{origin}: error.{which}", level, raw, sources, float, plain=True)
            figures[f"error.{which}.{level}"] = fig
            err[which][level] = fig.value
    error = Error(err["median"], err["p90"])
    name, dt = doc.get("name"), doc.get("dtype")
    if not isinstance(name, str) or not isinstance(dt, str):
        raise _bad(origin, 'needs name = "..." and dtype = "..."')
    return Profile(
        name,
        dt,
        str(doc.get("vendor", "")),
        tuple(doc.get("nearest", ())),
        bool(doc.get("vendor_default", False)),
        devices,
        built["gemm"],
        built["attention"],
        built["memory"],
        built["scaleup"],
        built["scaleout"],
        built["overlap"],
        Host(steps, default),
        step_launch,
        error,
        sources,
        figures,
    )


def read(path: str | Path) -> Profile:
    """A profile file (a user's own, or one of the package's)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{p}: cannot read the profile ({e.strerror})", param="profile") from None
    return parse(text, str(p))


@functools.cache
def _shipped() -> tuple[Profile, ...]:
    files = sorted(
        (
            f
            for f in resources.files("attnroof.profiles").joinpath("data").iterdir()
            if f.name.endswith(".toml")
        ),
        key=lambda f: f.name,
    )
    return tuple(parse(f.read_text(encoding="utf-8"), f"profiles/data/{f.name}") for f in files)


def shipped() -> list[Profile]:
    """The profiles shipped in the package, in file order (read once a process)."""
    return list(_shipped())


def choose(device: str, vendor: str, dt: str, profiles: list[Profile] | None = None) -> Profile | None:
    """The profile that forecasts ``device`` (a catalog name) at ``dt``, its ``basis`` saying how
    it was chosen: the family the device belongs to; else the family that names it as its
    nearest; else its vendor's default family — both said so; the dtype's own file, else the
    family's bf16 file, said so (its efficiencies are then fractions of this dtype's roofs).
    ``None`` where none applies (another vendor's families are not borrowed)."""
    profiles = shipped() if profiles is None else profiles
    ways = (
        ("", [p for p in profiles if device in p.devices]),
        ("nearest family: ", [p for p in profiles if device in p.nearest]),
        (
            f"no {vendor} family of its own: ",
            [p for p in profiles if vendor and p.vendor == vendor and p.vendor_default],
        ),
    )
    how, mine = next(((h, m) for h, m in ways if m), ("", []))
    if not mine:
        return None
    same = [p for p in profiles if p.name == mine[0].name]
    exact = [p for p in same if p.dtype == dt]
    chosen = (exact or [p for p in same if p.dtype == "bf16"] or same)[0]
    basis = f"{how}profile {chosen.name} {chosen.dtype}"
    if chosen.dtype != dt:
        basis += f" (no {dt} profile: its fractions of the {dt} roofs)"
    return replace(chosen, basis=basis)
