"""A trace's kernels on the device's roofline: one point per kernel at its intensity and the
rate its bound allows, unfused and fused apart, sized by their share of the time."""

from __future__ import annotations

from typing import Any

from attnroof.plot.chart import draw_roofline
from attnroof.roofline import Roof

FORMS = {"unfused": ("tab:red", "x"), "fused": ("tab:blue", "o")}


def trace_figure(roof: Roof, points: dict[str, list[tuple[float, float, float]]], title: str) -> Any:
    """``points``: per form, (FLOP/byte, attainable FLOP/s, share of the form's time) per kernel."""
    kept_points = [(x, y) for pts in points.values() for x, y, _ in pts if x > 0 and y > 0]
    fig = draw_roofline([roof], title=title, extent=kept_points)
    ax = fig.axes[0]
    legend = fig.legends.pop()  # the roof's entries, with the kernels' added below
    handles, labels = list(legend.legend_handles), [t.get_text() for t in legend.texts]
    for form, pts in points.items():
        colour, marker = FORMS[form]
        kept = [(x, y, w) for x, y, w in pts if x > 0 and y > 0]
        if kept:
            ax.scatter(
                [x for x, _, _ in kept], [y for _, y, _ in kept], s=[12 + 300 * w for _, _, w in kept],
                c=colour, marker=marker, alpha=0.6, label=f"{form} kernels", gid=f"trace-{form}",
            )  # fmt: skip
            handles.append(ax.collections[-1])
            labels.append(f"{form} kernels (size: share of the time)")
    fig.legend(handles, labels, loc="outside right upper", fontsize=8.5, frameon=False)
    return fig
