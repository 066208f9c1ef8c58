"""Size labels on a roofline chart's trajectories: each point (or each run of points that sit on
one spot) labelled with its size, on alternating sides so that crossing trajectories stay legible."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from attnroof.plot.series import Trajectory, size_label

LABEL_MERGE_DISTANCE = 0.035
"""Points of one trajectory closer than this (fraction of the axes, in log space) share a label
("8k–128k"): a saturated trajectory reads as one cluster instead of a smudge of numbers."""

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


def label_points(
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
