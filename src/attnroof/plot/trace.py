"""A trace's kernels on the device's roofline: one point per kernel at its intensity and the
rate its bound allows, unfused and fused apart, sized by their share of the time."""

from __future__ import annotations

from typing import Any

from attnroof.plot.chart import draw_roofline
from attnroof.roofline import Roof

FORMS = {"unfused": ("tab:red", "x"), "fused": ("tab:blue", "o")}


def trace_figure(roof: Roof, points: dict[str, list[tuple[float, float, float]]], title: str) -> Any:
    """``points``: per form, (FLOP/byte, attainable FLOP/s, share of the form's time) per kernel."""
    fig = draw_roofline([roof], title=title)
    ax = fig.axes[0]
    xs = [x for pts in points.values() for x, _, _ in pts if x > 0]
    ys = [y for pts in points.values() for _, y, _ in pts if y > 0]
    for form, pts in points.items():
        colour, marker = FORMS[form]
        kept = [(x, y, w) for x, y, w in pts if x > 0 and y > 0]
        if kept:
            ax.scatter(
                [x for x, _, _ in kept], [y for _, y, _ in kept], s=[12 + 300 * w for _, _, w in kept],
                c=colour, marker=marker, alpha=0.6, label=f"{form} kernels", gid=f"trace-{form}",
            )  # fmt: skip
    if xs and ys:
        lo_x, hi_x = ax.get_xlim()
        lo_y, hi_y = ax.get_ylim()
        ax.set_xlim(min(lo_x, min(xs) / 2), max(hi_x, max(xs) * 2))
        ax.set_ylim(min(lo_y, min(ys) / 2), hi_y)
    ax.legend(loc="lower right", fontsize=8)
    return fig
