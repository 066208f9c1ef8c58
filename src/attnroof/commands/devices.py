"""devices: the device catalog as a table, or one device with every figure and its source.

Both read :func:`attnroof.devices.catalog`, so the user's ``$ATTNROOF_DEVICES`` entries are
listed with (or instead of) the built-in ones.
"""

from __future__ import annotations

import argparse
from typing import Any

from attnroof.commands._common import Command, add_json_arg, emit_json
from attnroof.devices import Device, catalog, get_device, is_file_path, load_device_file
from attnroof.dtypes import dtype
from attnroof.text import render
from attnroof.text.devices import FALLBACK_DTYPE, HEADLINE_DTYPE, catalog_table, device_text


def ridges(dev: Device) -> dict[str, float]:
    """FLOP per byte where each dtype's compute roof meets the bandwidth roof: P / B."""
    return {dt: dev.ridge(dt) for dt in dev.peak_flops_per_s}


def device_json(dev: Device) -> dict[str, Any]:
    """Every field of ``dev`` in SI units, with the ridge per dtype (FLOP/byte) and where it came from."""
    return {**dev.to_json(), "ridge": ridges(dev), "origin": dev.origin}


# ---------------------------------------------------------------- the command


def named(name: str) -> list[Device]:
    """The device that ``name`` finds in the catalog, or every device in the TOML file ``name``."""
    text = name.strip()
    if is_file_path(text):
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
        _setup,
        _run,
        description="List the device catalog (dense peak, bandwidth, capacity, board power and ridge per part), or show "
        "one device with every figure, its notes and its source. $ATTNROOF_DEVICES adds or replaces devices.",
    ),
)
