"""What a roofline chart shows, gathered before it is drawn: the device's roofs per dtype, the
operators' trajectories, measured points and ceilings (:class:`ChartInputs`, the numbers behind
``plot --json``), and :func:`roofline_figure`, which gathers and draws in one call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from attnroof.devices import Device, get_device
from attnroof.dtypes import DType, dtype
from attnroof.errors import InputError
from attnroof.plot.chart import draw_roofline
from attnroof.plot.inputs import Measured, measured_inputs
from attnroof.plot.series import TRAJECTORY_DEFAULTS, Trajectory, trajectories
from attnroof.roofline import Roof


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
    notes: list[str] = field(default_factory=list)
    """What the reader of the chart should know (printed by ``plot`` on stderr): measurements
    repeated in the results file, points with no measured roof."""

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
    measured: Sequence[Measured] | str | Path | None = None,
    ceilings: Sequence[Roof] | str | Path | None = None,
    title: str | None = None,
    **operators: Any,
) -> ChartInputs:
    """The roofs, trajectories, measured points and ceilings of :func:`roofline_figure`.
    ``operators`` are :func:`attnroof.plot.series.trajectories`' keywords (d, s_values,
    attention, causal, decode, groups, linear, n_values, softmax_flops_per_element), with its
    defaults; the operators run in the first dtype."""
    dev = get_device(device) if isinstance(device, str) else device
    dts = _as_dtypes(dtypes)
    roofs = [Roof.of(dev, dt) for dt in dts]
    if "itemsize" in operators:
        raise InputError("the operators' element size is the first dtype's; pass dtypes, not itemsize")
    trajs = trajectories(roofs[0], itemsize=dts[0].itemsize, **operators)
    side = measured_inputs(measured, ceilings, dev)
    wanted = {dt.name for dt in dts}
    ceil = [r for r in side.ceilings if r.dtype in wanted]
    if title is None:
        opts = {**TRAJECTORY_DEFAULTS, **operators}
        names = ", ".join(dt.name for dt in dts)
        what = [f"attention d={opts['d']}"] if opts["attention"] else []
        what += ["decode"] if opts["decode"] or opts["groups"] else []
        what += [f"linear {opts['linear'][0]}×{opts['linear'][1]}"] if opts["linear"] else []
        extra = f"; operators in {dts[0].name}" if len(dts) > 1 else ""
        title = f"{dev.name} roofline ({names}): {', '.join(what) or 'roofs'}{extra}"
    return ChartInputs(dev, roofs, trajs, side.points, ceil, title, side.notes)


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
