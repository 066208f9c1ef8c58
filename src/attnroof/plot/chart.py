"""The roofline chart: log–log intensity (FLOP/byte) against attainable rate (FLOP/s).

Data stay in SI units on the artists (a line's ``get_xydata()`` is FLOP/byte and FLOP/s, the
same numbers :meth:`Roof.attainable` returns); only the tick labels show TFLOP/s. Every artist
that carries data has a ``gid`` (``roof-bf16``, ``ceiling-bf16``, ``band-bf16``, ``traj-attention-fused``,
``measured-<impl>``, ``model-<impl>``, ``link-<impl>``) so code, tests and the SVG can find it.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from attnroof.devices import Device
from attnroof.errors import InputError
from attnroof.plot.inputs import Measured, model_point
from attnroof.plot.labels import label_points
from attnroof.plot.series import Trajectory, roof_polyline
from attnroof.roofline import NEAR_RIDGE_FACTOR, Roof
from attnroof.text import render
from attnroof.units import TFLOP_PER_S

NOTEBOOK_DPI = 100
FIGSIZE = (11.0, 6.5)
"""Inches: wide enough for the legend beside the axes."""

MARGIN = 3.0
"""Axis limits reach this factor beyond the outermost point, so labels stay inside."""

TOP_MARGIN = 1.6
"""Headroom above the highest roof, for the labels of points on it."""

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
CELLS_PER_DECADE = 100
"""Measured points are aggregated before drawing: one marker (and one link) per cell of a log
grid this fine, 2.3% wide, under a marker's width. A results file of thousands of measurements
draws what the eye can tell apart, and an SVG of it stays small."""

MEASURED_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666")


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


def _roof_figures(roof: Roof) -> str:
    """A roof's peak and bandwidth for the legend, three significant digits as all of attnroof's
    text: ``989 TFLOP/s, 4.8 TB/s``, ``488 GFLOP/s, 21.3 GB/s``."""
    return f"{render.peak(roof.peak_flops_per_s, roof.dtype)}, {render.bandwidth(roof.bandwidth_bytes_per_s)}"


def thin(rows: np.ndarray) -> np.ndarray:
    """Indices (in order) of the first row in each cell of a log grid of :data:`CELLS_PER_DECADE`
    cells per decade, over all columns (positive values: FLOP/byte, FLOP/s).

    >>> thin(np.array([[10.0, 1e12], [10.1, 1.001e12], [20.0, 1e12]])).tolist()
    [0, 2]
    """
    if len(rows) == 0:
        return np.arange(0)
    cells = np.floor(np.log10(rows) * CELLS_PER_DECADE).astype(np.int64)
    _, first = np.unique(cells, axis=0, return_index=True)
    return np.sort(first)


def _plain(value: float, _pos: Any = None) -> str:
    """Tick label of a FLOP/byte value without exponents (0.1, 1, 10, 1,000, 100,000)."""
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


def _limits(values: Sequence[float], top: float = MARGIN) -> tuple[float, float]:
    return min(values) / MARGIN, max(values) * top


def draw_roofline(
    roofs: Sequence[Roof],
    trajs: Sequence[Trajectory] = (),
    *,
    measured: Sequence[Measured] = (),
    model_device: Device | None = None,
    ceilings: Sequence[Roof] = (),
    title: str = "",
    figsize: tuple[float, float] = FIGSIZE,
    extent: Sequence[tuple[float, float]] = (),
) -> Figure:
    """Draw ``roofs`` (catalog), ``ceilings`` (measured roofs), ``trajs`` and ``measured`` points,
    each measured point linked to the model's point for its shape on the roof it ran under: the
    ``ceilings`` (measured on the device the points ran on) when given, else ``model_device``'s
    catalog roof. ``extent``: more (FLOP/byte, FLOP/s) points the axes and roofs must span, for a
    caller that draws its own points on the figure."""
    if not roofs:
        raise InputError("a roofline chart needs at least one roof (a dtype)")
    fig = RooflineFigure(figsize=figsize, layout="constrained")
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")

    links = [(m, model_point(m, model_device, ceilings) if model_device else None) for m in measured]
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
    xs += [x for x, _ in extent]
    ys += [y for _, y in extent]
    xlim, ylim = _limits(xs), _limits(ys, TOP_MARGIN)

    _draw_roofs(ax, roofs, ylim, xlim)
    _draw_ceilings(ax, ceilings, roofs, xlim)
    _draw_trajectories(ax, trajs, roofs[0].peak_flops_per_s, xlim, ylim)
    _draw_measured(ax, links)
    _finish(fig, ax, len(roofs), any(mp for _, mp in links), xlim, ylim, title)
    return fig


def _draw_roofs(ax: Any, roofs: Sequence[Roof], ylim: tuple[float, float], xlim: tuple[float, float]) -> None:
    """Each catalog roof with its ridge: the line, the ±2× band, a dotted rule and a label."""
    for i, roof in enumerate(roofs):
        colour = ROOF_COLOURS[i % len(ROOF_COLOURS)]
        x, y = roof_polyline(roof, *xlim)
        ax.plot(
            x,
            y,
            color=colour,
            lw=2.2,
            label=f"{roof.dtype} roof: {_roof_figures(roof)}",
            gid=f"roof-{roof.dtype}",
            zorder=3,
        )
        ax.axvspan(
            roof.ridge / NEAR_RIDGE_FACTOR,
            roof.ridge * NEAR_RIDGE_FACTOR,
            color=colour,
            alpha=0.08,
            lw=0,
            gid=f"band-{roof.dtype}",
            zorder=0,
        )
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


def _draw_ceilings(
    ax: Any, ceilings: Sequence[Roof], roofs: Sequence[Roof], xlim: tuple[float, float]
) -> None:
    """Measured roofs, dashed, in the colour of the catalog roof of the same dtype."""
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
            label=f"{roof.dtype} measured: {_roof_figures(roof)}",
        )


def _draw_trajectories(
    ax: Any, trajs: Sequence[Trajectory], peak: float, xlim: tuple[float, float], ylim: tuple[float, float]
) -> None:
    """Each operator's path over its sizes, every point labelled with its size."""
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
        label_points(ax, t, colour, slot, peak, xlim, ylim)


def _draw_measured(ax: Any, links: Sequence[tuple[Measured, tuple[float, float] | None]]) -> None:
    """Measured points per implementation, each linked to the model's point for its shape."""
    impls = list(dict.fromkeys(m.impl for m, _ in links))
    for i, impl in enumerate(impls):
        colour = MEASURED_COLOURS[i % len(MEASURED_COLOURS)]
        mine = [(m, mp) for m, mp in links if m.impl == impl]
        pts = np.array([(m.intensity, m.achieved_flops_per_s) for m, _ in mine])
        pts = pts[thin(pts)]
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
        if not pairs:
            continue
        flat = np.array([(*a, *b) for a, b in pairs])
        pairs = [((r[0], r[1]), (r[2], r[3])) for r in flat[thin(flat)]]
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


def _finish(
    fig: Figure,
    ax: Any,
    n_roofs: int,
    linked: bool,
    xlim: tuple[float, float],
    ylim: tuple[float, float],
    title: str,
) -> None:
    """Legend (with the ridge band and the linked-model marker), limits, ticks and labels."""
    handles, labels = ax.get_legend_handles_labels()
    handles.insert(n_roofs, Patch(color="black", alpha=0.12))
    labels.insert(n_roofs, f"within {NEAR_RIDGE_FACTOR}× of the ridge")
    if linked:
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
