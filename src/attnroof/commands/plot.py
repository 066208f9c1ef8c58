"""plot, report: the roofline chart as an image, and the visual HTML report.

matplotlib (the ``attnroof[plot]`` extra) is imported inside the handlers only; without it the
commands say which extra to install and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from attnroof.commands._common import (
    Command,
    add_device_args,
    add_force_arg,
    add_head_dim_arg,
    add_json_arg,
    add_softmax_arg,
    device_name,
    emit_json,
    int_list,
    path_arg,
    positive_int,
    require,
)
from attnroof.devices import Device, get_device
from attnroof.dtypes import DType, dtype
from attnroof.errors import InputError
from attnroof.escaping import escaped
from attnroof.sheet import SHAPE_DEFAULTS


def _load_plot() -> Any:
    """The plot package, on the Agg backend (files only, no display needed)."""
    import attnroof.plot as plot  # raises MissingExtra without matplotlib

    plot.use_agg()
    return plot


def _pair(text: str) -> tuple[int, int]:
    """``K,M``: a linear layer's input and output features, e.g. ``8192,8192``."""
    parts = [p for p in text.split(",") if p.strip()]
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not K,M (two sizes, e.g. 8192,28672)")
    k, m = (positive_int(p) for p in parts)
    return k, m


def _output_check(args: argparse.Namespace) -> None:
    """Before anything is drawn: a path that cannot be written, or that holds measurements."""
    from attnroof import outfile

    outfile.target(args.output)
    outfile.check_overwrite(
        args.output, force=args.force, hint=" (pass --force to overwrite it, or choose another -o)"
    )


def _inputs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--measured",
        type=path_arg,
        metavar="FILE.jsonl",
        help="measured results (attnroof measure) to place on the chart",
    )
    p.add_argument(
        "--ceilings",
        type=path_arg,
        metavar="FILE.json",
        help="measured ceilings (attnroof measure) drawn beside the catalog's",
    )


def _device_and_dtypes(args: argparse.Namespace) -> tuple[Device, list[DType]]:
    """The device with its overrides, and the dtypes of ``--dtype bf16,fp8``."""
    names = [x for x in args.dtype.split(",") if x.strip()]
    require(bool(names), f"--dtype {args.dtype!r} names no dtype")
    dts = [dtype(x) for x in names]
    require(
        args.peak_flops is None or len(dts) == 1,
        f"--peak-flops applies to one dtype; --dtype {args.dtype!r} names {len(dts)}",
    )
    dev = get_device(device_name(args)).with_overrides(
        dts[0],
        peak_flops_per_s=args.peak_flops,
        bandwidth_bytes_per_s=args.bandwidth,
        capacity_bytes=args.capacity,
        board_power_w=args.board_power,
    )
    return dev, dts


# ---------------------------------------------------------------- plot


def _plot_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=path_arg,
        metavar="FILE",
        help="image to write: .png, .svg or .pdf",
    )
    add_force_arg(p)
    add_head_dim_arg(p, default=SHAPE_DEFAULTS["d"])
    p.add_argument(
        "-s",
        "--seq",
        dest="s",
        type=int_list,
        metavar="LIST",
        help="sequence lengths: 512,1024 or 512..32k (default 512..128k)",
    )
    p.add_argument("--causal", action="store_true", help="add causal attention (dashed)")
    p.add_argument(
        "--decode", action="store_true", help="add decode: one token against a KV cache of length s"
    )
    p.add_argument(
        "--groups", type=int_list, default=[], metavar="LIST", help="decode with GQA groups, e.g. 1,8"
    )
    p.add_argument(
        "--linear", type=_pair, metavar="K,M", help="add a linear layer with a K×M weight over --tokens"
    )
    p.add_argument(
        "--tokens", type=int_list, metavar="LIST", help="token counts for --linear (default 1,4,16,..,16384)"
    )
    p.add_argument(
        "--no-attention", dest="attention", action="store_false", help="leave out unfused/fused attention"
    )
    _inputs_args(p)
    add_softmax_arg(p)
    add_device_args(p, dtype_help="element types, one roof each: bf16 or bf16,fp8 (default: bf16)")
    add_json_arg(p)


def _plot_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    suffix = Path(args.output).suffix.lower()
    if suffix not in (".png", ".svg", ".pdf"):
        raise InputError(
            f"-o {args.output!r}: unknown image format {suffix or '(no suffix)'!r}; use .png, .svg or .pdf"
        )
    require(args.tokens is None or args.linear is not None, "--tokens needs --linear K,M")
    _output_check(args)
    plot = _load_plot()
    from attnroof.plot.series import DEFAULT_N, DEFAULT_S

    dev, dts = _device_and_dtypes(args)
    inputs = plot.chart_inputs(
        dev,
        dts,
        d=args.d,
        s_values=args.s or DEFAULT_S,
        attention=args.attention,
        causal=args.causal,
        decode=args.decode,
        groups=args.groups,
        linear=args.linear,
        n_values=args.tokens or DEFAULT_N,
        measured=args.measured,
        ceilings=args.ceilings,
        softmax_flops_per_element=args.softmax_flops,
    )
    require(
        bool(inputs.trajectories or inputs.measured), "nothing to plot: --no-attention with no other operator"
    )
    path = plot.save_figure(inputs.draw(), args.output)
    _print_notes(inputs.notes)
    if args.json:
        emit_json(
            {
                "output": str(path),
                "device": dev.name,
                "dtypes": [dt.name for dt in dts],
                "roofs": [r.to_json() for r in inputs.roofs],
                "ceilings": [r.to_json() for r in inputs.ceilings],
                "trajectories": [t.to_json() for t in inputs.trajectories],
                "measured_points": len(inputs.measured),
            }
        )
    else:
        print(f"wrote {escaped(str(path))}")
    return 0


def _print_notes(notes: list[str]) -> None:
    """What the reader of a chart should know about its measured inputs, one line each on stderr:
    repeated measurements (the fastest kept), points without a measured roof."""
    for note in notes:
        print(f"attnroof: note: {note}", file=sys.stderr)


# ---------------------------------------------------------------- report


def _report_setup(p: argparse.ArgumentParser) -> None:
    from attnroof.commands.sheet import add_sheet_args

    p.add_argument(
        "-o", "--output", required=True, type=path_arg, metavar="FILE.html", help="HTML file to write"
    )
    add_force_arg(p)
    add_sheet_args(p)
    _inputs_args(p)
    add_device_args(p)
    add_json_arg(p)


def _report_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from attnroof.commands.sheet import sheet_kwargs

    if Path(args.output).suffix.lower() not in (".html", ".htm"):
        raise InputError(f"-o {args.output!r}: a report is HTML; name it with .html")
    shape = sheet_kwargs(args)  # --heads and --group checked before any work
    _output_check(args)
    plot = _load_plot()
    dev, dts = _device_and_dtypes(args)
    require(len(dts) == 1, f"--dtype {args.dtype!r}: a report is for one dtype")
    notes: list[str] = []
    text = plot.report_html(dev, dts[0], **shape, measured=args.measured, ceilings=args.ceilings, notes=notes)
    path = plot.write_report(args.output, text)
    _print_notes(notes)
    if args.json:
        emit_json(
            {
                "output": str(path),
                "bytes": len(text.encode("utf-8")),
                "device": dev.name,
                "dtype": dts[0].name,
            }
        )
    else:
        print(f"wrote {escaped(str(path))}")
    return 0


COMMANDS = (
    Command("plot", _plot_setup, _plot_run),
    Command("report", _report_setup, _report_run),
)
