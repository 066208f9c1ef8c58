"""attnroof sheet: the whole worked analysis for a device and shape."""

from __future__ import annotations

import argparse
from typing import Any

from attnroof.commands._common import (
    Command,
    add_device_args,
    add_head_dim_arg,
    add_json_arg,
    add_softmax_arg,
    emit_json,
    positive_int,
    resolve_heads,
    roof_from_args,
)
from attnroof.devices import DEFAULT_DEVICE
from attnroof.errors import InputError
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT
from attnroof.passes import FWD
from attnroof.sheet import SHAPE_DEFAULTS

SHEET_HEADS = SHAPE_DEFAULTS["heads"]


def add_sheet_args(p: argparse.ArgumentParser) -> None:
    """The shape of the worked analysis (also the HTML report's): s, d, batch, heads, layers,
    group and the softmax convention."""
    p.add_argument(
        "-s",
        "--seq",
        dest="s",
        type=positive_int,
        default=SHAPE_DEFAULTS["s"],
        metavar="S",
        help=f"sequence length (default {SHAPE_DEFAULTS['s']})",
    )
    add_head_dim_arg(p, default=SHAPE_DEFAULTS["d"])
    p.add_argument(
        "--batch",
        type=positive_int,
        default=SHAPE_DEFAULTS["batch"],
        help=f"batch for footprint and batching (default {SHAPE_DEFAULTS['batch']})",
    )
    p.add_argument(
        "--heads",
        type=positive_int,
        default=None,
        help=f"query heads for footprint, GQA and batching (default {SHEET_HEADS})",
    )
    p.add_argument(
        "--layers",
        type=positive_int,
        default=SHAPE_DEFAULTS["layers"],
        help=f"layers for the footprint (default {SHAPE_DEFAULTS['layers']})",
    )
    p.add_argument(
        "--group",
        type=positive_int,
        default=None,
        help="GQA group to highlight; it divides --heads (default: the largest of 1, 2, 4, 8 that does)",
    )
    add_softmax_arg(p)


def sheet_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of :func:`attnroof.sheet.build_sheet` from ``add_sheet_args``' flags (a flag
    left out, None where the sheet's parser tells given from not: :data:`SHAPE_DEFAULTS`)."""
    if args.group is not None:
        resolve_heads(args, default=SHEET_HEADS)
    elif args.heads is None:
        args.heads = SHEET_HEADS
    return {
        "s": args.s,
        "d": SHAPE_DEFAULTS["d"] if args.d is None else args.d,
        "batch": SHAPE_DEFAULTS["batch"] if args.batch is None else args.batch,
        "heads": args.heads,
        "layers": SHAPE_DEFAULTS["layers"] if args.layers is None else args.layers,
        "group": args.group,
        "softmax_flops_per_element": SOFTMAX_FLOPS_PER_ELEMENT
        if args.softmax_flops is None
        else args.softmax_flops,
    }


VARIANT_NAMES = ("all", "softmax", "softmax-unfused", "chunked", "sparse", "linear", "mamba2", "mamba")
"""``--variant``: part H, attention beyond softmax (:mod:`attnroof.beyond`; issue 23)."""
HYBRID_MODELS = ("qwen3-next-80b-a3b", "nemotron-h-8b", "granite-4.0-h-tiny", "jamba-mini-1.5", "llama-4-scout",
                 "falcon-h1-7b")  # fmt: skip
"""The hybrids part H compares with their all-attention twins."""


def _setup(p: argparse.ArgumentParser) -> None:
    from attnroof.commands._passes import add_pass_arg

    add_sheet_args(p)
    add_pass_arg(p)  # bwd or fwd+bwd: part G, the backward pass
    p.add_argument(
        "--variant",
        choices=VARIANT_NAMES,
        default=None,
        help="part H alone: attention beyond softmax, one variant or all, and the hybrids' caches",
    )
    p.add_argument(
        "--cache-factor",
        type=float,
        default=None,
        metavar="F",
        help="part H: the context from which a hybrid's cache is F times smaller than its all-attention twin's (default 2)",
    )
    add_device_args(p)
    add_json_arg(p)
    # None: left out (the defaults are filled in where used), so a flag one part ignores is told
    p.set_defaults(**dict.fromkeys(SHEET_ONLY, None))


SHEET_ONLY = {
    "d": "-d/--head-dim", "batch": "--batch", "heads": "--heads", "layers": "--layers", "group": "--group",
    "softmax_flops": "--softmax-flops", "pass_": "--pass",
}  # fmt: skip
"""The sheet's shape flags: part H (``--variant``) reads none of them (each variant has its own
head dimension and counts; only ``-s``, the device and ``--dtype`` reach it)."""
CACHE_FACTOR = 2.0


def _refuse_unread(args: argparse.Namespace) -> None:
    """A flag the chosen part does not read is refused, not dropped."""
    if args.variant is not None:
        given = [flag for dest, flag in SHEET_ONLY.items() if getattr(args, dest) is not None]
        if given:
            raise InputError(
                f"--variant (part H) does not read {', '.join(given)}: each variant has its own shape; "
                "leave them out (-s, the device and --dtype apply)"
            )
    elif args.cache_factor is not None:
        raise InputError("--cache-factor is part H's: give it with --variant")


def _beyond(args: argparse.Namespace) -> int:
    from attnroof.beyond import MAKERS, analyse_variant, compare_cache
    from attnroof.text.beyond import beyond_markdown

    factor = CACHE_FACTOR if args.cache_factor is None else args.cache_factor
    if not (1 < factor < float("inf")):
        raise InputError(f"--cache-factor {factor:g}: a factor above 1", param="--cache-factor")
    dev, _, roof = roof_from_args(args)
    names = list(MAKERS) if args.variant == "all" else [args.variant]
    variants = [analyse_variant(n, roof, args.s) for n in names]
    caches = [c for m in HYBRID_MODELS if (c := compare_cache(m, factor)) is not None]
    if args.json:
        emit_json({"device": dev.to_json(), "ridge": roof.ridge, "variants": [v.to_json() for v in variants],
                   "hybrid_caches": [c.to_json() for c in caches]})  # fmt: skip
    else:
        print(beyond_markdown(dev, roof, variants, caches), end="")
    return 0


def _run(args: argparse.Namespace) -> int:
    from attnroof.sheet import build_sheet
    from attnroof.text.sheet import render_sheet

    _refuse_unread(args)
    if args.device is None:  # the worked example itself: its header names device R, so no note is due
        args.device = DEFAULT_DEVICE
    if args.variant is not None:
        return _beyond(args)
    dev, dt, _ = roof_from_args(args)
    sh = build_sheet(dev, dt, **sheet_kwargs(args))
    args.pass_ = args.pass_ or FWD
    if args.pass_ != FWD:
        return _with_backward(args, sh)
    if args.json:
        emit_json(sh.to_json())
    else:
        print(render_sheet(sh), end="")
    return 0


def _with_backward(args: argparse.Namespace, sh: Any) -> int:
    from attnroof.sheet_backward import backward_part
    from attnroof.text.sheet import render_sheet
    from attnroof.text.training import backward_part_markdown

    part = backward_part(sh.device, sh.dtype, **sheet_kwargs(args))
    if args.json:
        emit_json({**sh.to_json(), "pass": args.pass_, "backward_part": part.to_json()})
    else:
        print(render_sheet(sh) + "\n" + backward_part_markdown(part), end="")
    return 0


COMMANDS = (
    Command(
        "sheet",
        _setup,
        _run,
        "The worked analysis of attention on a device: work, traffic, intensity, ridge and crossovers, "
        "footprint, causal, decode, GQA and batching. Device R and s=8192, d=128 by default.",
    ),
)
