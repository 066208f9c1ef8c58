"""The roofline chart: log–log intensity (FLOP/byte) against attainable rate (FLOP/s).

Data stay in SI units on the artists (a line's ``get_xydata()`` is FLOP/byte and FLOP/s, the
same numbers :meth:`Roof.attainable` returns); only the tick labels show TFLOP/s. Every artist
that carries data has a ``gid`` (``roof-bf16``, ``ceiling-bf16``, ``band-bf16``, ``traj-attention-fused``,
``measured-<impl>``, ``model-<impl>``, ``link-<impl>``) so code, tests and the SVG can find it.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from attnroof.devices import Device, get_device
from attnroof.dtypes import DType, dtype, rate_unit
from attnroof.errors import InputError
from attnroof.ops import SOFTMAX_FLOPS_PER_ELEMENT
from attnroof.plot.inputs import Measured, model_point, read_ceilings, read_measured
from attnroof.plot.series import DEFAULT_N, DEFAULT_S, Trajectory, roof_polyline, size_label, trajectories
from attnroof.roofline import NEAR_RIDGE_FACTOR, Roof
from attnroof.units import TFLOP_PER_S

NOTEBOOK_DPI = 100
FIGSIZE = (11.0, 6.5)
"""Inches: wide enough for the legend beside the axes."""

MARGIN = 3.0
"""Axis limits reach this factor beyond the outermost point, so labels stay inside."""

TOP_MARGIN = 1.6
"""Headroom above the highest roof, for the labels of points on it."""

LABEL_MERGE_DISTANCE = 0.035
"""Points of one trajectory closer than this (fraction of the axes, in log space) share a label
("8k–128k"): a saturated trajectory reads as one cluster instead of a smudge of numbers."""

ROOF_COLOURS = ("black", "#6b6b6b", "#9a9a9a", "#c0c0c0")
TRAJECTORY_COLOURS = {
    "attention-unfused": "tab:red",
    "attention-fused": "tab:blue",
    "attention-causal-unfused": "tab:orange",
    "attention-causal-fused": "tab:cyan",
    "linear": "tab:green",
}
MARKERS = {"attention": "o", "decode": "^", "linear": "s"}
DECODE_COLOURS = ("tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:gray")
MEASURED_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666")
BELOW, ABOVE, FAR_BELOW, FAR_ABOVE = 0, 1, 2, 3
LABEL_SIDES = (BELOW, ABOVE, ABOVE, BELOW, FAR_BELOW, FAR_ABOVE)
"""Which side of its line each trajectory's size labels go, cycled: two trajectories through the
same spot (unfused and causal unfused; fused at s and causal fused at 2s) label on opposite sides,
and a fifth or sixth one (a linear layer) a line further out."""
LABEL_OFFSETS = {
    # side: (on the bandwidth slope, on the flat compute roof); (dx, dy) points and alignment
    BELOW: ((7, -11, "left"), (0, -13, "center")),
    ABOVE: ((-7, 3, "right"), (0, 6, "center")),
    FAR_BELOW: ((9, -21, "left"), (0, -23, "center")),
    FAR_ABOVE: ((-9, 12, "right"), (0, 15, "center")),
}


class RooflineFigure(Figure):
    """A matplotlib Figure that shows itself in a notebook even when pyplot was never imported."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=NOTEBOOK_DPI)
        return buf.getvalue()


def mark_shape(fig: Figure, trajs: Sequence[Trajectory], size: int, text: str) -> None:
    """Ring the point at sequence length ``size`` of every trajectory over s (the shape a report
    is about), and add ``text`` to the legend."""
    ax = fig.axes[0]
    pts = [
        (t.intensity[i], t.attainable[i])
        for t in trajs
        if t.variable == "s"
        for i, n in enumerate(t.sizes)
        if n == size
    ]
    if pts:
        xy = np.array(pts)
        ax.scatter(
            xy[:, 0],
            xy[:, 1],
            s=160,
            facecolor="none",
            edgecolor="black",
            lw=1.2,
            zorder=8,
            gid=f"shape-{size}",
            label=text,
        )
        handles, labels = ax.get_legend_handles_labels()
        if fig.legends:
            legend = fig.legends[0]
            handles = [h for h in legend.legend_handles if h is not None] + [handles[-1]]
            labels = [*(t.get_text() for t in legend.get_texts()), text]
            legend.remove()
        fig.legend(handles, labels, loc="outside right upper", fontsize=8.5, frameon=False)


def _colour(traj: Trajectory, i_decode: int) -> str:
    if traj.key.startswith("decode"):
        return DECODE_COLOURS[i_decode % len(DECODE_COLOURS)]
    return TRAJECTORY_COLOURS.get(traj.key, f"C{i_decode % 10}")


def _tflops(value: float, _pos: Any = None) -> str:
    """Tick label of a FLOP/s value in TFLOP/s."""
    return f"{value / TFLOP_PER_S:g}"


def _plain(value: float, _pos: Any = None) -> str:
    """Tick label of a FLOP/byte value without exponents (0.1, 1, 10, 1,000, 100,000)."""
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


def _limits(values: Sequence[float], top: float = MARGIN) -> tuple[float, float]:
    return min(values) / MARGIN, max(values) * top


def _groups(
    xs: np.ndarray, ys: np.ndarray, xlim: tuple[float, float], ylim: tuple[float, float]
) -> list[list[int]]:
    """Runs of consecutive points each within LABEL_MERGE_DISTANCE of the one before: they sit on
    one spot of the chart and share a label."""
    fx = (np.log10(xs) - math.log10(xlim[0])) / (math.log10(xlim[1]) - math.log10(xlim[0]))
    fy = (np.log10(ys) - math.log10(ylim[0])) / (math.log10(ylim[1]) - math.log10(ylim[0]))
    groups: list[list[int]] = []
    for i in range(len(xs)):
        if groups and math.hypot(fx[i] - fx[i - 1], fy[i] - fy[i - 1]) < LABEL_MERGE_DISTANCE:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _label_points(
    ax: Any, traj: Trajectory, colour: str, slot: int, peak: float, xlim: Any, ylim: Any
) -> None:
    """Label each point (or each run of points on one spot) of ``traj`` with its size."""
    side = LABEL_OFFSETS[LABEL_SIDES[slot % len(LABEL_SIDES)]]
    for j, group in enumerate(_groups(traj.intensity, traj.attainable, xlim, ylim)):
        first, last = traj.sizes[group[0]], traj.sizes[group[-1]]
        text = size_label(first) if len(group) == 1 else f"{size_label(first)}–{size_label(last)}"
        if j == 0:
            text = f"{traj.variable}={text}"
        at = group[-1]
        dx, dy, ha = side[1] if traj.attainable[at] >= peak else side[0]
        ax.annotate(
            text,
            (traj.intensity[at], traj.attainable[at]),
            xytext=(dx, dy),
            textcoords="offset points",
            ha=ha,
            fontsize=7.5,
            color=colour,
            gid=f"label-{traj.key}-{j}",
        )


def draw_roofline(
    roofs: Sequence[Roof],
    trajs: Sequence[Trajectory] = (),
    *,
    measured: Sequence[Measured] = (),
    model_device: Device | None = None,
    ceilings: Sequence[Roof] = (),
    title: str = "",
    figsize: tuple[float, float] = FIGSIZE,
) -> Figure:
    """Draw ``roofs`` (catalog), ``ceilings`` (measured roofs), ``trajs`` and ``measured`` points,
    each measured point linked to the model's point for its shape on ``model_device``."""
    if not roofs:
        raise InputError("a roofline chart needs at least one roof (a dtype)")
    fig = RooflineFigure(figsize=figsize, layout="constrained")
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")

    links = [(m, model_point(m, model_device) if model_device else None) for m in measured]
    xs = [r.ridge for r in (*roofs, *ceilings)]
    ys = [r.peak_flops_per_s for r in (*roofs, *ceilings)]
    for t in trajs:
        xs += t.intensity.tolist()
        ys += t.attainable.tolist()
    for m, mp in links:
        xs.append(m.intensity)
        ys.append(m.achieved_flops_per_s)
        if mp:
            xs.append(mp[0])
            ys.append(mp[1])
    xlim, ylim = _limits(xs), _limits(ys, TOP_MARGIN)

    band_handle = None
    for i, roof in enumerate(roofs):
        colour = ROOF_COLOURS[i % len(ROOF_COLOURS)]
        x, y = roof_polyline(roof, *xlim)
        ax.plot(
            x,
            y,
            color=colour,
            lw=2.2,
            label=f"{roof.dtype} roof: {_tflops(roof.peak_flops_per_s)} T{rate_unit(roof.dtype)}, "
            f"{roof.bandwidth_bytes_per_s / 1e12:g} TB/s",
            gid=f"roof-{roof.dtype}",
            zorder=3,
        )
        band = ax.axvspan(
            roof.ridge / NEAR_RIDGE_FACTOR,
            roof.ridge * NEAR_RIDGE_FACTOR,
            color=colour,
            alpha=0.08,
            lw=0,
            gid=f"band-{roof.dtype}",
            zorder=0,
        )
        band_handle = band_handle or band
        ax.axvline(roof.ridge, color=colour, lw=0.8, ls=":", zorder=1)
        ax.plot(
            [roof.ridge],
            [roof.peak_flops_per_s],
            "o",
            color=colour,
            ms=5,
            gid=f"ridge-{roof.dtype}",
            zorder=4,
        )
        ax.annotate(
            f"ridge {roof.ridge:,.0f} FLOP/byte ({roof.dtype})",
            (roof.ridge, ylim[0]),
            xytext=(-3, 6),
            textcoords="offset points",
            rotation=90,
            ha="right",
            va="bottom",
            fontsize=8,
            color=colour,
        )
    for roof in ceilings:
        same = [i for i, r in enumerate(roofs) if r.dtype == roof.dtype]
        colour = ROOF_COLOURS[same[0] % len(ROOF_COLOURS)] if same else "tab:gray"
        x, y = roof_polyline(roof, *xlim)
        ax.plot(
            x,
            y,
            color=colour,
            lw=1.4,
            ls="--",
            gid=f"ceiling-{roof.dtype}",
            zorder=3,
            label=f"{roof.dtype} measured: {_tflops(roof.peak_flops_per_s)} T{rate_unit(roof.dtype)}, "
            f"{roof.bandwidth_bytes_per_s / 1e12:.3g} TB/s",
        )

    n_decode = 0
    for slot, t in enumerate(trajs):
        colour = _colour(t, n_decode)
        n_decode += t.key.startswith("decode")
        hollow = "causal" in t.key or t.key == "linear"
        ax.plot(
            t.intensity,
            t.attainable,
            "--" if "causal" in t.key else "-",
            marker=MARKERS[t.key.split("-")[0]],
            ms=6 if hollow else 4.5,
            lw=1.2,
            color=colour,
            label=t.label,
            gid=f"traj-{t.key}",
            fillstyle="none" if hollow else "full",
            zorder=4.5 if hollow else 5,
        )
        _label_points(ax, t, colour, slot, roofs[0].peak_flops_per_s, xlim, ylim)

    impls = list(dict.fromkeys(m.impl for m, _ in links))
    for i, impl in enumerate(impls):
        colour = MEASURED_COLOURS[i % len(MEASURED_COLOURS)]
        mine = [(m, mp) for m, mp in links if m.impl == impl]
        pts = np.array([(m.intensity, m.achieved_flops_per_s) for m, _ in mine])
        ax.scatter(
            pts[:, 0],
            pts[:, 1],
            marker="D",
            s=30,
            color=colour,
            edgecolor="white",
            lw=0.6,
            label=f"measured: {impl}",
            gid=f"measured-{impl}",
            zorder=7,
        )
        pairs = [((m.intensity, m.achieved_flops_per_s), mp) for m, mp in mine if mp]
        if pairs:
            ax.add_collection(
                LineCollection(
                    [list(p) for p in pairs], colors=colour, lw=0.8, alpha=0.7, gid=f"link-{impl}", zorder=6
                )
            )
            model = np.array([mp for _, mp in pairs])
            ax.scatter(
                model[:, 0],
                model[:, 1],
                marker="o",
                s=26,
                facecolor="none",
                edgecolor=colour,
                lw=1.0,
                gid=f"model-{impl}",
                zorder=6,
            )
    handles, labels = ax.get_legend_handles_labels()
    if band_handle is not None:
        handles.insert(len(roofs), Patch(color="black", alpha=0.12))
        labels.insert(len(roofs), f"within {NEAR_RIDGE_FACTOR}× of the ridge")
    if any(mp for _, mp in links):
        handles.append(ax.scatter([], [], marker="o", s=26, facecolor="none", edgecolor="black"))
        labels.append("model, same shape (linked)")

    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.xaxis.set_major_locator(LogLocator(base=10))
    ax.xaxis.set_major_formatter(FuncFormatter(_plain))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(_tflops))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable rate (TFLOP/s)")
    ax.grid(True, which="major", lw=0.5, alpha=0.35)
    fig.legend(handles, labels, loc="outside right upper", fontsize=8.5, frameon=False)
    if title:
        ax.set_title(title, fontsize=11)
    return fig


def _as_dtypes(dtypes: str | DType | Sequence[str | DType]) -> list[DType]:
    items = [dtypes] if isinstance(dtypes, str | DType) else list(dtypes)
    out = [dtype(x) for part in items for x in (part.split(",") if isinstance(part, str) else [part])]
    if not out:
        raise InputError("no dtype given")
    return out


@dataclass(frozen=True, slots=True)
class ChartInputs:
    """Everything a roofline chart draws, before drawing: the numbers behind ``--json``."""

    device: Device
    roofs: list[Roof]
    trajectories: list[Trajectory]
    measured: list[Measured]
    ceilings: list[Roof]
    title: str

    def draw(self) -> Figure:
        return draw_roofline(
            self.roofs,
            self.trajectories,
            measured=self.measured,
            model_device=self.device,
            ceilings=self.ceilings,
            title=self.title,
        )


def chart_inputs(
    device: Device | str = "R",
    dtypes: str | DType | Sequence[str | DType] = "bf16",
    *,
    d: int = 128,
    s_values: Sequence[int] = DEFAULT_S,
    attention: bool = True,
    causal: bool = False,
    decode: bool = False,
    groups: Sequence[int] = (),
    linear: tuple[int, int] | None = None,
    n_values: Sequence[int] = DEFAULT_N,
    measured: Sequence[Measured] | str | Path | None = None,
    ceilings: Sequence[Roof] | str | Path | None = None,
    softmax_flops_per_element: float = SOFTMAX_FLOPS_PER_ELEMENT,
    title: str | None = None,
) -> ChartInputs:
    """The roofs, trajectories, measured points and ceilings of :func:`roofline_figure`."""
    dev = get_device(device) if isinstance(device, str) else device
    dts = _as_dtypes(dtypes)
    roofs = [Roof.of(dev, dt) for dt in dts]
    trajs = trajectories(
        roofs[0],
        d=d,
        s_values=s_values,
        attention=attention,
        causal=causal,
        decode=decode,
        groups=groups,
        linear=linear,
        n_values=n_values,
        itemsize=dts[0].itemsize,
        softmax_flops_per_element=softmax_flops_per_element,
    )
    meas = read_measured(measured) if isinstance(measured, str | Path) else list(measured or ())
    ceil = read_ceilings(ceilings) if isinstance(ceilings, str | Path) else list(ceilings or ())
    wanted = {dt.name for dt in dts}
    ceil = [r for r in ceil if r.dtype in wanted]
    if title is None:
        names = ", ".join(dt.name for dt in dts)
        what = [f"attention d={d}"] if attention else []
        what += ["decode"] if decode or groups else []
        what += [f"linear {linear[0]}×{linear[1]}"] if linear else []
        extra = f"; operators in {dts[0].name}" if len(dts) > 1 else ""
        title = f"{dev.name} roofline ({names}): {', '.join(what) or 'roofs'}{extra}"
    return ChartInputs(dev, roofs, trajs, meas, ceil, title)


def roofline_figure(
    device: Device | str = "R",
    dtypes: str | DType | Sequence[str | DType] = "bf16",
    **kwargs: Any,
) -> Figure:
    """A roofline chart of ``device``: one roof per dtype in ``dtypes`` (a list, or ``"bf16,fp8"``),
    with the trajectories of unfused and fused attention over ``s_values`` at head dimension ``d``,
    and on request ``causal`` attention, ``decode`` (``groups=[1, 8]`` for GQA), a batched
    ``linear=(k, m)`` layer over ``n_values`` tokens, ``measured`` points (a results file or a list
    of :class:`Measured`) each linked to the model's point for its shape, and measured
    ``ceilings`` (a ceilings file or a list of :class:`Roof`). Operators use the first dtype.
    Keyword arguments are those of :func:`chart_inputs`.

    Example (device R, bf16)::

        fig = roofline_figure("R", "bf16", d=128)
        line = next(ln for ln in fig.axes[0].lines if ln.get_gid() == "traj-attention-fused")
        line.get_xydata()[0]   # s = 512: I = 517·512/1024 = 258.5 FLOP/byte, 258.5 · 4 TB/s = 1.034e15 FLOP/s
    """
    return chart_inputs(device, dtypes, **kwargs).draw()
