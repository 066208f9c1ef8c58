"""What the commands share: argument types, device flags, output."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnroof import validate
from attnroof.commands._run import LATER_NOTES
from attnroof.devices import (
    DEFAULT_DEVICE,
    MAX_PLAUSIBLE_BANDWIDTH,
    MAX_PLAUSIBLE_CAPACITY,
    MAX_PLAUSIBLE_FLOPS,
    MAX_PLAUSIBLE_POWER,
    Device,
    get_device,
)
from attnroof.devices.checks import check_capacity, check_power, check_rate
from attnroof.dtypes import DType, dtype
from attnroof.errors import DeviceFileError, InputError
from attnroof.jsonable import to_jsonable
from attnroof.roofline import Roof
from attnroof.units import parse_quantity

Handler = Callable[[argparse.Namespace], int | None]


@dataclass(frozen=True)
class Command:
    """One subcommand: ``setup`` adds its arguments; ``handler`` runs it. Its one-line summary
    and its place in ``attnroof --help`` are the command index's
    (:data:`attnroof.commands.COMMAND_INDEX`), which lists every command without importing it."""

    name: str
    setup: Callable[[argparse.ArgumentParser], None]
    handler: Handler
    description: str = ""

    @property
    def help(self) -> str:
        from attnroof.commands import COMMAND_INDEX

        return next(summary for name, _, summary in COMMAND_INDEX if name == self.name)

    def fill(self, p: argparse.ArgumentParser) -> None:
        """Make ``p`` (made from the command index with the name alone) this command's parser:
        its description, its arguments and its handler."""
        p.description = self.description or self.help
        self.setup(p)
        p.set_defaults(handler=self.handler)


# ---------------------------------------------------------------- argument types

_SIZE_SUFFIX = {"k": 1024, "K": 1024, "m": 1024**2, "M": 1024**2}
MAX_SIZE = validate.MAX_SIZE
"""The largest size a flag takes (2⁴⁰): :data:`attnroof.validate.MAX_SIZE`, with its reason."""
MAX_SOFTMAX_FLOPS = 1000
"""FLOPs per score: the usual counts are 0 to about 10; beyond 1000 the figure is a typo."""
MAX_RATE = {
    "FLOP/s": MAX_PLAUSIBLE_FLOPS,
    "B/s": MAX_PLAUSIBLE_BANDWIDTH,
    "B": MAX_PLAUSIBLE_CAPACITY,
    "W": MAX_PLAUSIBLE_POWER,
}
"""The largest figure a single device can plausibly have, per unit: the device module's limits
(:data:`attnroof.devices.MAX_PLAUSIBLE_FLOPS` and the others, with their reasons), so a flag and a
device file refuse the same figures."""
_INT_FORMS = "expected a positive integer such as 8192 or 8k"
_NUMBER_FORMS = "expected a number such as 3.35e12 or 3.35T"


def positive_int(text: str) -> int:
    """A size: a positive integer, optionally with k (×1024) or M (×1024²): ``8192``, ``8k``."""
    raw = text.strip()
    scale = 1
    if raw and raw[-1] in _SIZE_SUFFIX:
        scale, raw = _SIZE_SUFFIX[raw[-1]], raw[:-1]
    try:
        if raw != raw.strip():  # int() would take "8 " of "8 k"
            raise ValueError(text)
        value = int(raw) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer ({_INT_FORMS})") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer ({_INT_FORMS})")
    if value > MAX_SIZE:
        raise argparse.ArgumentTypeError(f"{text!r} is implausibly large (at most 2^40)")
    return value


def path_arg(text: str) -> str:
    """A file's path: any text but an empty one (``--output=`` is a slip, not "no file", and is
    refused rather than read as the flag left out)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is an empty path (name a file, or leave the flag out)")
    return text


def doubling_list(text: str, one: Callable[[str], int], what: str) -> list[int]:
    """A comma-separated list of values parsed by ``one``, or ``lo..hi``: doubling from ``lo``
    while at most ``hi``. ``what`` names the values in the error for an empty list."""
    text = text.strip()
    if ".." in text:
        lo_text, hi_text = text.split("..", 1)
        lo, hi = one(lo_text), one(hi_text)
        if hi < lo:
            raise argparse.ArgumentTypeError(f"{text!r}: the range ends before it starts")
        out = []
        while lo <= hi:
            out.append(lo)
            lo *= 2
        return out
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of {what}")
    return [one(p) for p in parts]


def int_list(text: str) -> list[int]:
    """A comma-separated list of sizes: ``512,1024,2048`` (or ``512..32768`` for powers of two)."""
    return doubling_list(text, positive_int, "positive integers")


def add_head_dim_arg(
    p: argparse.ArgumentParser, *, default: int | None = None, required: bool = True
) -> None:
    """``-d/--head-dim D``: required (unless a default is given, or ``required=False`` for a
    command that checks it itself)."""
    p.add_argument(
        "-d",
        "--head-dim",
        dest="d",
        type=positive_int,
        required=required and default is None,
        default=default,
        metavar="D",
        help="head dimension" + (f" (default {default})" if default is not None else ""),
    )


def positive_quantity(text: str) -> float:
    """A positive figure with an optional decimal prefix: ``4e12``, ``4T``, ``192G``."""
    try:
        value = parse_quantity(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number ({_NUMBER_FORMS})") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


_FLOOR: dict[str, Callable[[str, float, str], None]] = {
    "FLOP/s": lambda what, v, example: check_rate(what, v, "FLOP/s", example),
    "B/s": lambda what, v, example: check_rate(what, v, "B/s", example),
    "B": lambda what, v, example: check_capacity(what, v),
    "W": lambda what, v, example: check_power(what, v),
}
"""The device checks' lower end of each unit (:data:`attnroof.devices.checks.MIN_PLAUSIBLE_RATE`
and the others, with their reasons): a figure typed in the wrong unit, or a subnormal that would
turn a time into NaN, is refused by the flag as by a device file."""
_EXAMPLE = {"FLOP/s": "989T", "B/s": "3.35T", "B": "80G", "W": "700"}


def device_figure(flag: str, unit: str, example: str | None = None) -> Callable[[str], float]:
    """The type of ``--peak-flops`` (``unit`` FLOP/s), ``--bandwidth`` (B/s), ``--capacity`` (B),
    ``--board-power`` (W), the link bandwidths (B/s):
    a :func:`positive_quantity` no larger than :data:`MAX_RATE` allows for the unit, and no smaller
    than the device checks allow (``example``: the figure the error suggests)."""
    limit = MAX_RATE[unit]

    def parse(text: str) -> float:
        value = positive_quantity(text)
        if value > limit:
            raise argparse.ArgumentTypeError(
                f"{text!r} is implausibly large for {flag} (at most {limit:.0e} {unit})".replace("e+", "e")
            )
        try:
            _FLOOR[unit](flag, value, example or _EXAMPLE[unit])
        except DeviceFileError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return value

    parse.__name__ = flag.lstrip("-").replace("-", "_")  # argparse names the type in some messages
    return parse


def nonnegative_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a non-negative number")
    if value > MAX_SOFTMAX_FLOPS:
        raise argparse.ArgumentTypeError(f"{text!r} is implausibly large (at most {MAX_SOFTMAX_FLOPS})")
    return int(value) if value.is_integer() else value


# ---------------------------------------------------------------- device flags


def add_device_args(
    p: argparse.ArgumentParser, *, dtype_default: str = "bf16", dtype_help: str | None = None
) -> None:
    g = p.add_argument_group("device")
    g.add_argument(
        "--device",
        help=f"catalog name or alias, or a device TOML file (default: {DEFAULT_DEVICE}, the worked example's "
        "hypothetical device, said on stderr; 'attnroof devices' lists the catalog)",
    )
    g.add_argument(
        "--dtype", default=dtype_default, help=dtype_help or f"element type (default: {dtype_default})"
    )
    g.add_argument(
        "--peak-flops",
        type=device_figure("--peak-flops", "FLOP/s"),
        metavar="FLOP/s",
        help="override the peak, e.g. 989e12 or 989T",
    )
    g.add_argument(
        "--bandwidth",
        type=device_figure("--bandwidth", "B/s"),
        metavar="B/s",
        help="override memory bandwidth, e.g. 3.35e12 or 3.35T",
    )
    g.add_argument(
        "--capacity",
        type=device_figure("--capacity", "B"),
        metavar="BYTES",
        help="override memory capacity, e.g. 80e9 or 80G",
    )
    g.add_argument(
        "--board-power",
        type=device_figure("--board-power", "W"),
        metavar="W",
        help="override board power in watts (energy per token charges it), e.g. 700",
    )
    g.add_argument(
        "--memory-levels", type=int, choices=(1, 2), default=2,
        help="2 (default): bytes that may be in the device's last-level cache at its bandwidth, where the "
        "catalog has one (docs/devices.md); 1: the single-level bound, every byte at the memory's",
    )  # fmt: skip


def add_softmax_arg(p: argparse.ArgumentParser) -> None:
    """``--softmax-flops X``: the softmax counting convention (FLOPs per score element)."""
    from attnroof.ops import SOFTMAX_FLOPS_PER_ELEMENT

    p.add_argument(
        "--softmax-flops",
        type=nonnegative_number,
        default=SOFTMAX_FLOPS_PER_ELEMENT,
        metavar="X",
        help=f"FLOPs per score element in softmax (default {SOFTMAX_FLOPS_PER_ELEMENT}; "
        "0 = the FlashAttention papers' convention)",
    )


def add_force_arg(p: argparse.ArgumentParser) -> None:
    """``--force``: overwrite an output file that holds measurements (the same flag for every writer)."""
    from attnroof.outfile import FORCE_HELP

    p.add_argument("--force", action="store_true", help=FORCE_HELP)


def add_json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object (SI units) instead of text")


def device_name(args: argparse.Namespace) -> str:
    """``--device``, or :data:`~attnroof.devices.DEFAULT_DEVICE` when it was left out: then the
    command line says so on stderr after the answer (:data:`attnroof.commands._run.LATER_NOTES`)."""
    if args.device is None:
        args.device = DEFAULT_DEVICE
        setattr(args, LATER_NOTES, [*getattr(args, LATER_NOTES, []), default_device_note()])
    return str(args.device)


def default_device_note() -> str:
    """The line a run without ``--device`` ends with on stderr: the hypothetical device it ran on,
    and how to name a real one."""
    return (
        f"attnroof: note: no --device given: this ran on device {DEFAULT_DEVICE}, the worked example's "
        "hypothetical accelerator; --device NAME runs on a real one ('attnroof devices' lists them)"
    )


def device_from_args(args: argparse.Namespace) -> Device:
    """The device named by ``--device`` (:func:`device_name`), with
    ``--peak-flops/--bandwidth/--capacity/--board-power`` applied."""
    dev = get_device(device_name(args))
    return dev.with_overrides(
        dtype_from_args(args),
        peak_flops_per_s=args.peak_flops,
        bandwidth_bytes_per_s=args.bandwidth,
        capacity_bytes=args.capacity,
        board_power_w=args.board_power,
    )


def dtype_from_args(args: argparse.Namespace) -> DType:
    return dtype(args.dtype)


def roof_from_args(args: argparse.Namespace) -> tuple[Device, DType, Roof]:
    dev = device_from_args(args)
    dt = dtype_from_args(args)
    return dev, dt, Roof.of(dev, dt, levels=getattr(args, "memory_levels", 2))


def resolve_heads(args: argparse.Namespace, *, default: int | None = None) -> int:
    """KV heads from ``--heads`` and ``--group``, which must divide it; sets ``args.heads``.

    ``--heads`` omitted means ``default`` when the command has one (the sheet's 32), else one KV
    head: ``--heads`` = ``--group``, so ``decode --group 8`` is 8 query heads on one KV head.
    """
    group = getattr(args, "group", None) or 1
    given = args.heads is not None
    heads = args.heads if given else (default if default is not None else group)
    name = "--heads" if given or default is None else "the default --heads"
    kv = validate.kv_heads(heads, group, heads_name=name, group_name="--group")
    args.heads = heads
    return kv


def require(condition: bool, message: str) -> None:
    if not condition:
        raise InputError(message)


# ---------------------------------------------------------------- output


def emit_json(data: dict[str, Any], *, row_per_line: str | None = None) -> None:
    """``data`` as JSON, indented, written whole or not at all; the list under ``row_per_line``
    (a table of many rows: a plan search's every plan) one row to a line."""
    rows = data.get(row_per_line) if row_per_line else None
    mark = f"\0{row_per_line}\0"  # where the rows go, in the key's own place
    plain = to_jsonable({k: mark if rows is not None and k == row_per_line else v for k, v in data.items()})
    text = json.dumps(plain, indent=2, ensure_ascii=False)
    if rows is not None:
        lines = ",\n    ".join(_row(r) for r in rows)
        text = text.replace(json.dumps(mark), f"[\n    {lines}\n  ]" if rows else "[]")
    sys.stdout.write(text + "\n")


def _row(row: Any) -> str:
    """One row on one line: as it is when it holds plain, finite values, else made so."""
    try:
        return json.dumps(row, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return json.dumps(to_jsonable(row), ensure_ascii=False)
