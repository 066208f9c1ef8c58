"""trace: any PyTorch module on the roofline — its ATen operators recorded on meta tensors,
costed, grouped into kernels unfused and fused, placed on the device (:mod:`attnroof.trace`)."""

from __future__ import annotations

import argparse

from attnroof.commands._common import (
    Command,
    add_device_args,
    add_json_arg,
    emit_json,
    positive_int,
    require,
    roof_from_args,
)

DEPTH, TOP = 1, 12


def _setup(p: argparse.ArgumentParser) -> None:
    from attnroof.trace.load import FACTORY_HELP

    p.add_argument("source", metavar="SOURCE", help=FACTORY_HELP)
    p.add_argument("--phase", choices=("forward", "train"), default="forward",
                   help="forward, or train: the forward and the autograd backward of its loss (default forward)")  # fmt: skip
    p.add_argument(
        "--batch",
        type=positive_int,
        default=1,
        help="a config.json's batch (and NAME(batch=) if it takes one)",
    )
    p.add_argument(
        "--seq", type=positive_int, default=512, help="a config.json's sequence length (and NAME(seq=))"
    )
    p.add_argument("--depth", type=int, default=DEPTH, metavar="N",
                   help=f"module rows N levels below the root (default {DEPTH}; 0: one row)")  # fmt: skip
    p.add_argument(
        "--top", type=positive_int, default=TOP, help=f"the slowest fused kernels listed (default {TOP})"
    )
    p.add_argument("--chart", metavar="FILE", help="the kernels on the roofline, as PNG, SVG or PDF")
    add_device_args(p)
    from attnroof.commands._forecast import add_profile_args

    add_profile_args(p)
    add_json_arg(p)


def _run(args: argparse.Namespace) -> int:
    require(args.depth >= 0, f"--depth {args.depth} must be ≥ 0")
    try:
        import torch  # noqa: F401
    except ImportError:
        from attnroof.errors import InputError

        raise InputError("attnroof trace needs torch: pip install 'attnroof[trace]'") from None
    from attnroof.text.trace import Placed, kernels_json, modules, trace_text
    from attnroof.trace import FUSED, UNFUSED, trace
    from attnroof.trace.kernels import placed
    from attnroof.trace.load import load

    dev, dt, roof = roof_from_args(args)
    fn, fargs, fkwargs, label = load(args.source, args.batch, args.seq)
    try:
        t = trace(fn, fargs, fkwargs, phase=args.phase)
    except Exception as e:  # the user's module failing on meta tensors: its error, one line
        from attnroof.errors import InputError

        raise InputError(
            f"trace {label}: running it on meta tensors raised {type(e).__name__}: {e}"
        ) from None
    from attnroof.commands._forecast import forecast_roof, missing_line
    from attnroof.trace.kernels import forecast

    fr = forecast_roof(args, dev, dt, roof)
    forecasts = (
        None
        if fr is None
        else {form: forecast(t.kernels[form], fr, t.weights_bytes) for form in (UNFUSED, FUSED)}
    )
    p = Placed(
        t, {form: placed(t.kernels[form], roof, t.weights_bytes) for form in (UNFUSED, FUSED)}, forecasts,
        "" if fr is None else fr.profile.basis,
    )  # fmt: skip
    if args.chart:
        _chart(args.chart, p, roof, f"{label} ({args.phase}) on {dev.name}, {dt.name}")
    if args.json:
        emit_json({
            "source": label, "phase": t.phase, "device": dev.name, "dtype": dt.name, "operators": len(t.records),
            "flops": t.flops, "weights_bytes": t.weights_bytes, "uncosted": dict(t.uncosted),
            **{form: {"kernels": len(t.kernels[form]), "bytes": t.bytes(form), "time_s": p.time(form),
                      "forecast_time_s": p.forecast(form)}
               for form in (UNFUSED, FUSED)},
            "profile": p.basis or None,
            "modules": modules(p, args.depth),
            "kernels": kernels_json(p.pairs(FUSED), None if forecasts is None else forecasts[FUSED]),
        })  # fmt: skip
        return 0
    print(
        trace_text(p, label, dev.name, dt.name, args.depth, args.top)
        + ("" if fr else missing_line(args, dev))
    )
    return 0


def _chart(path: str, p: object, roof: object, title: str) -> None:
    from attnroof.plot.files import save_figure
    from attnroof.plot.trace import trace_figure
    from attnroof.trace import FUSED, UNFUSED

    points = {}
    for form in (UNFUSED, FUSED):
        total = p.time(form) or 1.0  # type: ignore[attr-defined]
        points[form] = [
            (float(pl.intensity), float(pl.attainable_flops_per_s), float(pl.time_s) / total)
            for _, pl in p.pairs(form)  # type: ignore[attr-defined]
        ]
    save_figure(trace_figure(roof, points, title), path)  # type: ignore[arg-type]


COMMANDS = (Command("trace", _setup, _run),)
