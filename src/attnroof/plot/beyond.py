"""The chart of attention beyond softmax (issue 23): every variant of :mod:`attnroof.beyond` on
one device's roofline, prefill over the prompt length (circles) and one decode token over the
context (triangles), from the same formulas as ``attnroof sheet --variant all``."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from attnroof.beyond import DECODE_CONTEXTS, MAKERS, SWEEP, variant
from attnroof.devices import get_device
from attnroof.roofline import NEAR_RIDGE_FACTOR, Roof
from attnroof.units import TFLOP_PER_S

COLOURS = {
    "softmax": "tab:blue",
    "softmax-unfused": "tab:red",
    "chunked": "tab:cyan",
    "sparse": "tab:purple",
    "linear": "tab:green",
    "mamba2": "tab:orange",
    "mamba": "tab:brown",
}


def beyond_figure(device: str = "h200", dtype: str = "bf16") -> Figure:
    """Intensity (FLOP/byte) against attainable rate (FLOP/s, shown in TFLOP/s), log–log."""
    roof = Roof.of(get_device(device), dtype)
    fig = Figure(figsize=(11.0, 6.5), layout="constrained")
    ax = fig.add_subplot()
    xs = np.logspace(-1, 6, 200)
    ax.plot(xs, np.minimum(roof.peak_flops_per_s, xs * roof.bandwidth_bytes_per_s), color="black", lw=1.5,
            label=f"{roof.device} {roof.dtype} roof (ridge {roof.ridge:.0f} FLOP/byte)")  # fmt: skip
    ax.axvspan(roof.ridge / NEAR_RIDGE_FACTOR, roof.ridge * NEAR_RIDGE_FACTOR, color="0.9", zorder=0)
    for key, v in ((k, variant(k)) for k in MAKERS):
        colour = COLOURS[key]
        pre = [v.prefill(s) for s in SWEEP]
        i = np.array([c.flops / c.bytes for c in pre], dtype=float)
        ax.plot(i, np.minimum(roof.peak_flops_per_s, i * roof.bandwidth_bytes_per_s), "o-", color=colour,
                label=f"{v.name}, prefill s = {SWEEP[0]:,}…{SWEEP[-1]:,}")  # fmt: skip
        dec = [v.decode(n) for n in DECODE_CONTEXTS]
        j = np.array([c.flops / c.bytes for c in dec], dtype=float)
        ax.plot(j, j * roof.bandwidth_bytes_per_s, "^--", color=colour, alpha=0.7, label=f"{v.name}, decode")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable (TFLOP/s)")
    ax.yaxis.set_major_formatter(lambda y, _pos: f"{y / TFLOP_PER_S:g}")
    ax.set_title("Attention beyond softmax: one layer of each, prefill and decode")
    fig.legend(loc="outside right upper", fontsize=8, frameon=False)
    return fig
