"""devices: the device catalog as a table, or one device with every figure and its source.

Both read :func:`attnroof.devices.catalog`, so the user's ``$ATTNROOF_DEVICES`` entries are
listed with (or instead of) the built-in ones.
"""

from __future__ import annotations

import argparse
import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnroof import render
from attnroof.commands._common import Command, add_json_arg, emit_json, table
from attnroof.devices import Device, catalog, get_device, load_device_file
from attnroof.dtypes import DTYPES, dtype, rate_unit
from attnroof.units import GB, MB, TB_PER_S, TERA

HEADLINE_DTYPE = "bf16"
"""The dtype the listing ranks parts by: what attention and training kernels run in."""
FALLBACK_DTYPE = "fp16"
"""Shown (and marked) for a part that has no bf16 figure but an fp16 one."""
MISSING = "—"
WRAP = 100
"""Characters per line for the notes and sources of ``attnroof devices NAME``."""

LIST_HEADERS = ("device", "vendor", "{dt} {unit}", "TB/s", "GB", "ridge FLOP/B", "aliases")


# ---------------------------------------------------------------- figures


def shown_dtype(dev: Device, dt: str = HEADLINE_DTYPE) -> str | None:
    """The dtype whose peak the listing shows for ``dev``: ``dt``, else fp16 in place of bf16, else None.

    >>> from attnroof.devices import get_device
    >>> shown_dtype(get_device("h100"))
    'bf16'
    """
    if dt in dev.peak_flops_per_s:
        return dt
    if dt == HEADLINE_DTYPE and FALLBACK_DTYPE in dev.peak_flops_per_s:
        return FALLBACK_DTYPE
    return None


def ridges(dev: Device) -> dict[str, float]:
    """FLOP per byte where each dtype's compute roof meets the bandwidth roof: P / B."""
    return {dt: dev.ridge(dt) for dt in dev.peak_flops_per_s}


def _fig(value: float | None, unit: float) -> str:
    """``value`` in ``unit`` (divide to leave SI), at the precision the source gave: 2.039, 989.4."""
    return MISSING if value is None else f"{value / unit:g}"


def device_json(dev: Device) -> dict[str, Any]:
    """Every field of ``dev`` in SI units, with the ridge per dtype (FLOP/byte) and where it came from."""
    return {**dev.to_json(), "ridge": ridges(dev), "origin": dev.origin}


# ---------------------------------------------------------------- the listing


def catalog_rows(devices: Sequence[Device], dt: str = HEADLINE_DTYPE) -> list[list[str]]:
    """One row per device: name, vendor, peak (TFLOP/s), bandwidth (TB/s), capacity (GB), ridge, aliases."""
    rows = []
    for dev in devices:
        shown = shown_dtype(dev, dt)
        if shown is None:
            peak = ridge = MISSING
        else:
            peak = _fig(dev.peak(shown), TERA) + ("" if shown == dt else f" ({shown})")
            ridge = f"{dev.ridge(shown):.1f}"
        rows.append(
            [
                dev.name,
                dev.vendor or MISSING,
                peak,
                _fig(dev.bandwidth_bytes_per_s, TB_PER_S),
                _fig(dev.capacity_bytes, GB),
                ridge,
                ", ".join(dev.aliases),
            ]
        )
    return rows


def catalog_table(devices: Sequence[Device], dt: str = HEADLINE_DTYPE) -> str:
    """The Markdown table of ``devices`` that ``attnroof devices`` prints and the README carries."""
    headers = [h.format(dt=dt, unit=_peak_unit(dt)) for h in LIST_HEADERS]
    return table(headers, catalog_rows(devices, dt), "llrrrrl")


# ---------------------------------------------------------------- one device


def _peak_unit(dt: str) -> str:
    return "T" + rate_unit(dt)


def device_text(dev: Device) -> str:
    """Every figure of one device, with its ridge per dtype, notes and source, for people."""
    kind = " ".join(x for x in (dev.vendor, dev.kind) if x)
    memory = [f"bandwidth {_fig(dev.bandwidth_bytes_per_s, TB_PER_S)} TB/s"]
    if dev.capacity_bytes is not None:
        memory.append(f"capacity {_fig(dev.capacity_bytes, GB)} GB")
    if dev.onchip_bytes is not None:
        memory.append(f"on-chip {_fig(dev.onchip_bytes, MB)} MB")
    if dev.interconnect_bytes_per_s is not None:
        memory.append(f"interconnect {_fig(dev.interconnect_bytes_per_s, GB)} GB/s")
    order = [d for d in DTYPES if d in dev.peak_flops_per_s]
    rows = [[d, f"{_fig(dev.peak(d), TERA)} {_peak_unit(d)}", f"{dev.ridge(d):.1f}"] for d in order]
    lines = [
        dev.name + (f" ({kind})" if kind else ""),
        "aliases: " + (", ".join(dev.aliases) or MISSING),
        "memory: " + ", ".join(memory),
        "",
        table(["dtype", "dense peak", "ridge FLOP/B"], rows),
        "",
    ]
    for label, text in (
        ("sparsity", dev.sparse_headline),
        ("notes", dev.notes),
        ("source", dev.source or "(none given)"),
        ("from", dev.origin),
    ):
        if text:
            lines.append(textwrap.fill(text, WRAP, initial_indent=f"{label}: ", subsequent_indent="  "))
    return "\n".join(lines)


# ---------------------------------------------------------------- the command


def named(name: str) -> list[Device]:
    """The device that ``name`` finds in the catalog, or every device in the TOML file ``name``."""
    text = name.strip()
    if text.endswith(".toml") or os.sep in text or Path(text).is_file():
        return load_device_file(text)
    return [get_device(text)]


def _setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="a device name or alias, or a device TOML file: show every field")
    p.add_argument(
        "--dtype",
        default=HEADLINE_DTYPE,
        help=f"dtype of the peak and ridge columns in the listing (default {HEADLINE_DTYPE}, "
        f"{FALLBACK_DTYPE} where a part has no {HEADLINE_DTYPE})",
    )
    add_json_arg(p)


def _run(args: argparse.Namespace) -> int:
    dt = dtype(args.dtype).name
    if args.name is not None:
        found = named(args.name)
        if args.json:
            emit_json({"devices": [device_json(d) for d in found]})
        else:
            print("\n\n".join(device_text(d) for d in found))
        return 0
    devices = catalog()
    if args.json:
        emit_json({"devices": [device_json(d) for d in devices]})
        return 0
    print(catalog_table(devices, dt))
    print()
    print(
        f"{render.plural(len(devices), 'device')}, dense peaks. 'attnroof devices NAME' shows every figure and its source."
    )
    users = [d.name for d in devices if d.origin != "catalog.toml"]
    if users:
        print(f"from $ATTNROOF_DEVICES: {', '.join(users)}")
    return 0


COMMANDS = (
    Command(
        "devices",
        "the device catalog, or one device with every figure and its source",
        _setup,
        _run,
        80,
        description="List the device catalog (dense peak, bandwidth, capacity and ridge per part), or show "
        "one device with every figure, its notes and its source. $ATTNROOF_DEVICES adds or replaces devices.",
    ),
)
