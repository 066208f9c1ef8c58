"""sweep, crossover, footprint: questions over a range of sizes — the intensity table over
sequence lengths, the exact length where attention turns compute-bound, and the longest sequence
whose score matrices fit in memory."""

from __future__ import annotations

import argparse
from typing import Any

from attnroof.analysis import DEFAULT_SWEEP_S, attention_crossover, sweep
from attnroof.commands._common import (
    Command,
    add_device_args,
    add_head_dim_arg,
    add_json_arg,
    add_softmax_arg,
    device_name,
    emit_json,
    int_list,
    positive_int,
    require,
    roof_from_args,
)
from attnroof.footprint import footprint
from attnroof.text.operators import crossover_text, footprint_text, sweep_text

# ---------------------------------------------------------------- sweep

SWEEP_BATCH, SWEEP_HEADS = 1, 1
"""Each row of a sweep is one head of one sequence: its FLOPs, bytes and times are per head (the
intensity and the verdict, ratios, are those of any number of heads that share no K and V)."""


def _sweep_setup(p: argparse.ArgumentParser) -> None:
    add_head_dim_arg(p)
    p.add_argument(
        "-s",
        "--seq",
        dest="s",
        type=int_list,
        default=list(DEFAULT_SWEEP_S),
        metavar="LIST",
        help="sequence lengths: 512,1024 or 512..131072 (powers of two)",
    )
    p.add_argument("--causal", action="store_true", help="causal mask")
    add_softmax_arg(p)
    add_device_args(p)
    add_json_arg(p)


def _sweep_run(args: argparse.Namespace) -> int:
    dev, dt, roof = roof_from_args(args)
    res = sweep(
        args.s,
        args.d,
        roof,
        causal=args.causal,
        itemsize=dt.itemsize,
        softmax_flops_per_element=args.softmax_flops,
        batch=SWEEP_BATCH,
        kv_heads=SWEEP_HEADS,
    )
    unfused, fused = res["unfused"].rows(), res["fused"].rows()
    rows: list[dict[str, Any]] = [
        {"s": s, "unfused": u.to_json(), "fused": f.to_json()}
        for s, u, f in zip(args.s, unfused, fused, strict=True)
    ]
    if args.json:
        emit_json(
            {
                "device": dev.name,
                "dtype": dt.name,
                "d": args.d,
                "causal": args.causal,
                "batch": SWEEP_BATCH,
                "heads": SWEEP_HEADS,
                "ridge": roof.ridge,
                **roof.cache_json(),
                "rows": rows,
            }
        )
        return 0
    print(sweep_text(args.d, args.causal, dev, roof, rows))
    return 0


# ---------------------------------------------------------------- crossover


def _crossover_setup(p: argparse.ArgumentParser) -> None:
    from attnroof.commands._passes import add_pass_arg

    add_head_dim_arg(p)
    p.add_argument("--causal", action="store_true", help="causal mask")
    add_softmax_arg(p)
    add_pass_arg(p)
    add_device_args(p)
    add_json_arg(p)


def _crossover_run(args: argparse.Namespace) -> int:
    dev, dt, roof = roof_from_args(args)
    if args.pass_ != "fwd":
        from attnroof.commands._passes import pass_crossover_run

        return pass_crossover_run(args, dev, dt, roof)
    res = {
        label: attention_crossover(
            args.d,
            roof,
            fused=fused,
            causal=args.causal,
            itemsize=dt.itemsize,
            softmax_flops_per_element=args.softmax_flops,
        )
        for label, fused in (("unfused", False), ("fused", True))
    }
    if args.json:
        emit_json(
            {
                "device": dev.name,
                "dtype": dt.name,
                "d": args.d,
                "causal": args.causal,
                "ridge": roof.ridge,
                "unfused": res["unfused"].to_json(),
                "fused": res["fused"].to_json(),
            }
        )
        return 0
    print(crossover_text(args.d, args.causal, dev, roof, res))
    return 0


# ---------------------------------------------------------------- footprint


def _footprint_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-s", "--seq", dest="s", type=positive_int, required=True, metavar="S", help="sequence length"
    )
    p.add_argument("--batch", type=positive_int, default=1, help="sequences (default 1)")
    p.add_argument("--heads", type=positive_int, default=1, help="heads (default 1)")
    p.add_argument("--layers", type=positive_int, default=1, help="layers whose scores are kept (default 1)")
    add_device_args(p)
    add_json_arg(p)


def _footprint_run(args: argparse.Namespace) -> int:
    from attnroof.devices import get_device
    from attnroof.dtypes import dtype

    unused = [f for f, v in (("--peak-flops", args.peak_flops), ("--bandwidth", args.bandwidth),
                             ("--board-power", args.board_power)) if v is not None]  # fmt: skip
    require(
        not unused,
        f"footprint reads only the device's --capacity: {', '.join(unused)} would change nothing; leave it out",
    )
    dt = dtype(args.dtype)
    dev = get_device(device_name(args)).with_overrides(dt, capacity_bytes=args.capacity)
    fp = footprint(
        args.s,
        itemsize=dt.itemsize,
        batch=args.batch,
        heads=args.heads,
        layers=args.layers,
        capacity_bytes=dev.capacity_bytes,
    )
    if args.json:
        emit_json({"device": dev.name, "dtype": dt.name, **fp.to_json()})
        return 0
    print(footprint_text(args.s, dt.name, dev.name, fp))
    return 0


COMMANDS = (
    Command("sweep", _sweep_setup, _sweep_run),
    Command("crossover", _crossover_setup, _crossover_run),
    Command("footprint", _footprint_setup, _footprint_run),
)
