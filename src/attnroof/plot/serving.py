"""Latency against arrival rate: the chart of a deployment's serving curve (``serve-sim
--chart``), TTFT and TPOT at p50 and the SLO's percentile, each SLO a dashed line, the highest
rate that meets them marked."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from attnroof.plot.files import save_figure
from attnroof.units import duration


def latency_figure(
    points: Sequence[tuple[float, Any]],
    *,
    title: str,
    percentile: int = 90,
    slo: dict[str, float] | None = None,
    max_rate: float | None = None,
) -> Figure:
    """``points``: (rate, :class:`attnroof.serve.metrics.Summary`) pairs, any order."""
    pts = sorted(points, key=lambda p: p[0])
    rates = [r for r, _ in pts]
    fig = Figure(figsize=(11, 5.5))
    axes = fig.subplots(1, 2)
    for ax, metric, label in zip(
        axes, ("ttft", "tpot"), ("time to first token", "time per output token"), strict=True
    ):
        for q, style in ((50, "-"), (percentile, "--") if percentile != 50 else (99, "--")):
            ax.plot(
                rates, [s.latency[metric][f"p{q}"] for _, s in pts], style, marker="o", ms=3, label=f"p{q}"
            )
        limit = (slo or {}).get(metric)
        if limit is not None:
            ax.axhline(limit, color="grey", lw=1, ls=":", label=f"SLO {duration(limit)}")
        if max_rate is not None:
            ax.axvline(max_rate, color="tab:red", lw=1, label=f"max rate {max_rate:.3g}/s")
        ax.set_yscale("log")
        ax.set_xlabel("arrival rate (requests/s)")
        ax.set_ylabel(f"{label} (s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def write_latency_chart(path: str | Path, points: Sequence[tuple[float, Any]], **kw: Any) -> Path:
    return save_figure(latency_figure(points, **kw), path)
