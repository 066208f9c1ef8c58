"""attention, decode, linear: one operator at one shape, placed on a device (sweep, crossover and
footprint, the questions over a range of sizes, are in :mod:`attnroof.commands.sizes`)."""

from __future__ import annotations

import argparse
from typing import Any

from attnroof.analysis import (
    Comparison,
    stage_json,
)
from attnroof.commands import _calibration, _forecast
from attnroof.commands._common import (
    Command,
    add_device_args,
    add_head_dim_arg,
    add_json_arg,
    add_softmax_arg,
    emit_json,
    positive_int,
    require,
    resolve_heads,
    roof_from_args,
)
from attnroof.commands._passes import add_pass_arg, pass_json
from attnroof.cost import Cost
from attnroof.operators import operator
from attnroof.passes import WORDS, pass_formula
from attnroof.roofline import place
from attnroof.text import render
from attnroof.text.operators import comparison_text, latent_text, linear_text

LATENT_FLAGS = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
"""Multi-head latent attention's widths, named after the config fields (DeepSeek-V2/V3)."""


def _latent_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("latent attention (DeepSeek's MLA): all four, instead of -d")
    for name in LATENT_FLAGS:
        g.add_argument(f"--{name.replace('_', '-')}", dest=name, type=positive_int, metavar="N", help=name)


def _latent(args: argparse.Namespace) -> dict[str, int] | None:
    """The latent widths when given (all four, and no -d), else None (ordinary attention, -d)."""
    given = {k: getattr(args, k) for k in LATENT_FLAGS if getattr(args, k) is not None}
    if not given:
        require(args.d is not None, "the following arguments are required: -d/--head-dim")
        return None
    missing = [f"--{k.replace('_', '-')}" for k in LATENT_FLAGS if k not in given]
    require(not missing, f"latent attention needs {', '.join(missing)} too")
    require(args.d is None, "-d/--head-dim is for ordinary attention; latent attention takes its four widths")
    require(
        args.group == 1,
        "--group is for ordinary attention: latent attention shares one latent across all heads",
    )
    require(
        getattr(args, "pass_", "fwd") == "fwd",
        "--pass: the latent variant compares its two forward forms; its backward is counted by "
        "'attnroof model --phase train' (the naive form, as training runs it)",
    )
    return given


def _latent_run(args: argparse.Namespace, widths: dict[str, int], *, decode_step: bool) -> int:
    """Naive (decompressed) against absorbed latent attention, and where each turns compute-bound."""
    from attnroof.solve import crossover

    dev, dt, roof = roof_from_args(args)
    heads = args.heads or 1
    latent = operator("latent attention").forward
    kw: dict[str, Any] = dict(
        heads=heads,
        batch=args.batch,
        itemsize=dt.itemsize,
        softmax_flops_per_element=args.softmax_flops,
        **widths,
    )
    s_q = 1 if decode_step else args.s
    causal = False if decode_step else args.causal
    costs = {form: latent(s_q, args.s, form=form, causal=causal, **kw) for form in ("naive", "absorbed")}

    def intensity_of(form: str) -> Any:
        def intensity(s: Any) -> Any:
            return latent(1 if decode_step else s, s, form=form, causal=causal, **kw).intensity

        return intensity

    crosses = {
        form: crossover(intensity_of(form), roof.peak_flops_per_s, roof.bandwidth_bytes_per_s)
        for form in costs
    }
    cmp = Comparison.of(costs["naive"], costs["absorbed"], roof)
    if args.json:
        emit_json(
            {
                "device": dev.name,
                "dtype": dt.name,
                **_shape_json(args),
                **widths,
                "latent": True,
                **cmp.to_json(labels=("naive", "absorbed")),
                "crossover": {form: c.to_json() for form, c in crosses.items()},
            }
        )
        return 0
    what = "decode: one token against a latent cache of" if decode_step else "latent attention over"
    title = (
        f"{what} {args.s}, {heads} heads, r={widths['kv_lora_rank']} ρ={widths['qk_rope_head_dim']} "
        f"nope={widths['qk_nope_head_dim']} v={widths['v_head_dim']} batch={args.batch}"
    )
    print(latent_text(title, cmp, render.device_line(dev, roof), crosses))
    return 0


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
    add_head_dim_arg(p, required=False)


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
    _latent_args(p)
    add_pass_arg(p)
    add_device_args(p)
    _calibration.add_calibration_args(p)
    _forecast.add_profile_args(p)
    add_json_arg(p)


def _compare(args: argparse.Namespace, kind: str, title: str, **extra: Any) -> int:
    """Unfused against fused for operator ``kind`` (attention or decode) in the pass ``--pass``
    asks for, at the shape and heads the flags give, as JSON or as text under ``title``."""
    formula = pass_formula(kind, args.pass_)
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
    ahead = _forecast.comparison_forecast(args, dev, dt, roof, cmp, kind, bool(extra.get("causal")))
    cal = _calibration.load(args, dev, dt)
    fc = None
    if cal is not None:
        require(
            args.pass_ == "fwd", "--calibration forecasts the forward pass (measured kernels); drop --pass"
        )
        shape = {k: getattr(args, k) for k in ("s", "d", "batch", "heads", "group")}
        fc = _calibration.predicted(args, cal, kind, {**shape, "causal": bool(extra.get("causal"))})
    if args.json:
        pred = {} if fc is None else {"predicted": _calibration.predicted_json(args, fc)}
        out = {
            "device": dev.name,
            "dtype": dt.name,
            **_shape_json(args),
            **pass_json(args),
            **cmp.to_json(),
            **pred,
        }
        if ahead is not None:
            ahead.into(out)
        emit_json(out)
    else:
        heads = f"batch={args.batch} heads={args.heads} group={args.group}"
        text = comparison_text(f"{title} {heads}", cmp, render.device_line(dev, roof))
        if args.pass_ != "fwd":
            from attnroof.text.training import recompute_note

            text += "\n\n" + recompute_note(cmp)
        print(text + ("" if ahead is not None else _forecast.missing_line(args, dev)))
        if ahead is not None:
            print("\n" + ahead.text())
        if fc is not None:
            print("\n" + _calibration.predicted_text(fc, cmp.fused.placement.time_s, cal))
    return 0


def _attention_run(args: argparse.Namespace) -> int:
    widths = _latent(args)
    if widths is not None:
        return _latent_run(args, widths, decode_step=False)
    mask = " causal" if args.causal else ""
    title = f"attention {WORDS[args.pass_]}{mask}: s={args.s} d={args.d}"
    return _compare(args, "attention", title, causal=args.causal)


def _shape_json(args: argparse.Namespace) -> dict[str, object]:
    keys = ("s", "d", "batch", "heads", "group", "causal", "softmax_flops")
    return {k: getattr(args, k) for k in keys if hasattr(args, k)}


# ---------------------------------------------------------------- decode and chunks


def _decode_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-s", "--context", dest="s", type=positive_int, required=True, metavar="S", help="KV cache length"
    )
    add_head_dim_arg(p, required=False)
    _heads_args(p)
    p.add_argument(
        "-q", "--queries", type=positive_int, default=1, metavar="Q",
        help="new tokens a sequence runs against its cache, the S tokens counting them: chunked prefill, "
        "a speculative draft verified (default 1: decode)",
    )  # fmt: skip
    add_softmax_arg(p)
    _latent_args(p)
    add_pass_arg(p)
    add_device_args(p)
    _calibration.add_calibration_args(p)
    _forecast.add_profile_args(p)
    add_json_arg(p)


def _decode_run(args: argparse.Namespace) -> int:
    widths = _latent(args)
    if args.queries > 1:
        require(widths is None, "--queries with latent attention: give -d (ordinary attention) for a chunk")
        from attnroof.commands._chunk import chunk_run

        return chunk_run(args)
    if widths is not None:
        return _latent_run(args, widths, decode_step=True)
    what = "" if args.pass_ == "fwd" else f" {WORDS[args.pass_]}"
    title = f"decode{what}: one token against a KV cache of {args.s}, d={args.d}"
    return _compare(args, "decode", title)


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
    p.add_argument(
        "--weight-dtype",
        default=None,
        help="dtype or quantized layout of the weight if it differs (e.g. fp8, int4-g128, mxfp4)",
    )
    add_pass_arg(p)
    add_device_args(p)
    _calibration.add_calibration_args(p)
    _forecast.add_profile_args(p)
    add_json_arg(p)


def _linear_run(args: argparse.Namespace) -> int:
    from attnroof.formats import weight_format
    from attnroof.solve import affine_crossover

    dev, dt, roof = roof_from_args(args)
    fmt = weight_format(args.weight_dtype) if args.weight_dtype else None
    require(
        fmt is None or not fmt.scaled or args.pass_ == "fwd",
        f"--weight-dtype {fmt and fmt.name} is a serving layout: its gradients are not kept in it (--pass fwd)",
    )
    w_itemsize = dt.itemsize if fmt is None else fmt.itemsize

    linear = pass_formula("linear", args.pass_)

    def gemm(n: Any) -> Cost:
        return linear(n, args.k, args.m, itemsize=dt.itemsize, weight_itemsize=w_itemsize)

    cost = gemm(args.n)
    p = place(cost, roof)
    cross = affine_crossover(gemm, roof.peak_flops_per_s, roof.bandwidth_bytes_per_s, variable="n")
    cal = _calibration.load(args, dev, dt)
    require(
        cal is None or args.pass_ == "fwd",
        "--calibration forecasts the forward pass (measured kernels); drop --pass",
    )
    fc = (
        None
        if cal is None
        else _calibration.predicted(args, cal, "linear", {"n": args.n, "k": args.k, "m": args.m})
    )
    ahead = _forecast.gemm_forecast(args, dev, dt, roof, cost, p.time_s)
    if args.json:
        emit_json(
            {
                "device": dev.name,
                "dtype": dt.name,
                "n": args.n,
                "k": args.k,
                "m": args.m,
                **pass_json(args),
                "ridge": roof.ridge,
                **roof.cache_json(),
                **p.to_json(),
                "stages": [stage_json(s) for s in cost],
                "crossover": {"n_min": cross.s_min, **cross.to_json()},
                **({} if fc is None else {"predicted": _calibration.predicted_json(args, fc)}),
                **({} if ahead is None else ahead.json()),
            }
        )  # fmt: skip
        return 0
    text = linear_text(args.n, args.k, args.m, dev, roof, p, cross)
    if args.pass_ != "fwd":
        from attnroof.text.training import linear_pass_text

        text = linear_pass_text(args.pass_, text, cost, roof)
    print(text + ("" if ahead is not None else _forecast.missing_line(args, dev)))
    if ahead is not None:
        print("\n" + ahead.text())
    if fc is not None:
        print("\n" + _calibration.predicted_text(fc, p.time_s, cal))
    return 0


COMMANDS = (
    Command("attention", _attention_setup, _attention_run),
    Command("decode", _decode_setup, _decode_run),
    Command("linear", _linear_setup, _linear_run),
)
