"""``--pass fwd|bwd|fwd+bwd``: which pass of an operator a command costs (the forward by default,
so that every output without the flag stays as it was)."""

from __future__ import annotations

import argparse
from typing import Any

from attnroof.commands._common import emit_json
from attnroof.devices import Device
from attnroof.dtypes import DType
from attnroof.passes import FWD, PASSES, WORDS
from attnroof.roofline import Roof


def add_pass_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pass",
        dest="pass_",
        choices=PASSES,
        default=FWD,
        help="forward, backward (the gradients), or both: a training step's share (default fwd)",
    )


def pass_json(args: argparse.Namespace) -> dict[str, Any]:
    """``{"pass": ...}`` for a backward or combined pass; nothing for the forward (its JSON is
    unchanged from before the flag existed)."""
    return {} if args.pass_ == FWD else {"pass": args.pass_}


def pass_crossover_run(args: argparse.Namespace, dev: Device, dt: DType, roof: Roof) -> int:
    """``crossover --pass bwd|fwd+bwd``: where each variant of that pass reaches the ridge, with
    the forward's answer beside it (does the backward cross at the same s?)."""
    from attnroof.passes import pass_crossover
    from attnroof.text.operators import crossover_text
    from attnroof.text.training import forward_crossover_line

    kw = dict(causal=args.causal, itemsize=dt.itemsize, softmax_flops_per_element=args.softmax_flops)
    res, forward = {}, {}
    for label, fused in (("unfused", False), ("fused", True)):
        res[label] = pass_crossover("attention", args.pass_, args.d, roof, fused=fused, **kw)
        forward[label] = pass_crossover("attention", FWD, args.d, roof, fused=fused, **kw)
    if args.json:
        emit_json(
            {
                "device": dev.name,
                "dtype": dt.name,
                "d": args.d,
                "causal": args.causal,
                "pass": args.pass_,
                "ridge": roof.ridge,
                **roof.cache_json(),
                **{label: c.to_json() for label, c in res.items()},
                "forward": {label: c.to_json() for label, c in forward.items()},
            }
        )
        return 0
    text = crossover_text(args.d, args.causal, dev, roof, res)
    first, *rest = text.splitlines()
    print("\n".join([f"{first}, {WORDS[args.pass_]} pass", *rest, "", forward_crossover_line(forward)]))
    return 0
