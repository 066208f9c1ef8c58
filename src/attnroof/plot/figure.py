"""What a roofline chart shows, gathered before it is drawn: the device's roofs per dtype, the
operators' trajectories, measured points and ceilings (:class:`ChartInputs`, the numbers behind
``plot --json``), and :func:`roofline_figure`, which gathers and draws in one call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from attnroof.devices import Device, get_device
from attnroof.dtypes import DType, dtype
from attnroof.errors import InputError
from attnroof.ops import SOFTMAX_FLOPS_PER_ELEMENT
from attnroof.plot.chart import draw_roofline
from attnroof.plot.inputs import Measured, read_ceilings, read_measured
from attnroof.plot.series import DEFAULT_N, DEFAULT_S, Trajectory, trajectories
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
