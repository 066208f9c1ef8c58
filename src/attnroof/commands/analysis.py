"""attention, decode, linear: one operator at one shape, placed on a device (sweep, crossover and
footprint, the questions over a range of sizes, are in :mod:`attnroof.commands.sizes`)."""

from __future__ import annotations

import argparse
from typing import Any

from attnroof.analysis import (
    Comparison,
    stage_json,
)
from attnroof.commands import _calibration
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
from attnroof.cost import Cost
from attnroof.operators import operator
from attnroof.roofline import place
from attnroof.text import render
from attnroof.text.operators import comparison_text, linear_text

# the formulas, as the operator table registers them
attention, decode, linear = (operator(n).forward for n in ("attention", "decode", "linear"))


def _shape_args(p: argparse.ArgumentParser, *, s_required: bool = True) -> None:
    p.add_argument(
        "-s",
        "--seq",
        dest="s",
        type=positive_int,
        required=s_required,
        metavar="S",
        help="sequence length (8192 or 8k)",
    )
    add_head_dim_arg(p)


def _heads_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=positive_int, default=1, help="sequences in the batch (default 1)")
    p.add_argument(
        "--heads", type=positive_int, default=None, help="query heads (default: --group, one KV head)"
    )
    p.add_argument(
        "--group", type=positive_int, default=1, metavar="G", help="query heads per KV head, GQA (default 1)"
    )


# ---------------------------------------------------------------- attention


def _attention_setup(p: argparse.ArgumentParser) -> None:
    _shape_args(p)
    _heads_args(p)
    p.add_argument("--causal", action="store_true", help="causal mask: tiles above the diagonal skipped")
    add_softmax_arg(p)
    add_device_args(p)
    _calibration.add_calibration_args(p)
    add_json_arg(p)


def _compare(args: argparse.Namespace, formula: Any, title: str, **extra: Any) -> int:
    """Unfused against fused for ``formula`` (the operator table's attention or decode) at the
    shape and heads the flags give, as JSON or as text under ``title``."""
    dev, dt, roof = roof_from_args(args)
    kw = dict(
        group=args.group,
        itemsize=dt.itemsize,
        softmax_flops_per_element=args.softmax_flops,
        batch=args.batch,
        kv_heads=resolve_heads(args),
        **extra,
    )
    cmp = Comparison.of(formula(args.s, args.d, **kw), formula(args.s, args.d, fused=True, **kw), roof)
    cal = _calibration.load(args, dev, dt)
    fc = None
    if cal is not None:
        kind = "attention" if formula is attention else "decode"
        shape = {k: getattr(args, k) for k in ("s", "d", "batch", "heads", "group")}
        fc = _calibration.predicted(args, cal, kind, {**shape, "causal": bool(extra.get("causal"))})
    if args.json:
        pred = {} if fc is None else {"predicted": _calibration.predicted_json(args, fc)}
        emit_json({"device": dev.name, "dtype": dt.name, **_shape_json(args), **cmp.to_json(), **pred})
    else:
        heads = f"batch={args.batch} heads={args.heads} group={args.group}"
        print(comparison_text(f"{title} {heads}", cmp, render.device_line(dev, roof)))
        if fc is not None:
            print("\n" + _calibration.predicted_text(fc, cmp.fused.placement.time_s, cal))
    return 0


def _attention_run(args: argparse.Namespace) -> int:
    mask = " causal" if args.causal else ""
    title = f"attention forward{mask}: s={args.s} d={args.d}"
    return _compare(args, attention, title, causal=args.causal)


def _shape_json(args: argparse.Namespace) -> dict[str, object]:
    keys = ("s", "d", "batch", "heads", "group", "causal", "softmax_flops")
    return {k: getattr(args, k) for k in keys if hasattr(args, k)}


# ---------------------------------------------------------------- decode


def _decode_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-s", "--context", dest="s", type=positive_int, required=True, metavar="S", help="KV cache length"
    )
    add_head_dim_arg(p)
    _heads_args(p)
    add_softmax_arg(p)
    add_device_args(p)
    _calibration.add_calibration_args(p)
    add_json_arg(p)


def _decode_run(args: argparse.Namespace) -> int:
    title = f"decode: one token against a KV cache of {args.s}, d={args.d}"
    return _compare(args, decode, title)


# ---------------------------------------------------------------- linear


def _linear_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-n",
        "--tokens",
        dest="n",
        type=positive_int,
        required=True,
        help="tokens (batch × sequence) through the layer",
    )
    p.add_argument("-k", dest="k", type=positive_int, required=True, help="input features")
    p.add_argument("-m", dest="m", type=positive_int, required=True, help="output features")
    p.add_argument("--weight-dtype", default=None, help="dtype of the weight if it differs (e.g. fp8)")
    add_device_args(p)
    _calibration.add_calibration_args(p)
    add_json_arg(p)


def _linear_run(args: argparse.Namespace) -> int:
    from attnroof.dtypes import dtype
    from attnroof.solve import affine_crossover

    dev, dt, roof = roof_from_args(args)
    w_itemsize = dtype(args.weight_dtype).itemsize if args.weight_dtype else dt.itemsize

    def gemm(n: Any) -> Cost:
        return linear(n, args.k, args.m, itemsize=dt.itemsize, weight_itemsize=w_itemsize)

    cost = gemm(args.n)
    p = place(cost, roof)
    cross = affine_crossover(gemm, roof.peak_flops_per_s, roof.bandwidth_bytes_per_s, variable="n")
    cal = _calibration.load(args, dev, dt)
    fc = (
        None
        if cal is None
        else _calibration.predicted(args, cal, "linear", {"n": args.n, "k": args.k, "m": args.m})
    )
    if args.json:
        emit_json(
            {
                "device": dev.name,
                "dtype": dt.name,
                "n": args.n,
                "k": args.k,
                "m": args.m,
                "ridge": roof.ridge,
                **p.to_json(),
                "stages": [stage_json(s) for s in cost],
                "crossover": {"n_min": cross.s_min, **cross.to_json()},
                **({} if fc is None else {"predicted": _calibration.predicted_json(args, fc)}),
            }
        )
        return 0
    print(linear_text(args.n, args.k, args.m, dev, roof, p, cross))
    if fc is not None:
        print("\n" + _calibration.predicted_text(fc, p.time_s, cal))
    return 0


COMMANDS = (
    Command(
        "attention", "attention forward, unfused vs fused, on a device", _attention_setup, _attention_run, 10
    ),
    Command(
        "decode", "one token against a KV cache, with grouped-query attention", _decode_setup, _decode_run, 40
    ),
    Command("linear", "a linear layer over n tokens: the batching argument", _linear_setup, _linear_run, 50),
)
