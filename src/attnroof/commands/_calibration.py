"""``--calibration FILE`` and ``--impl NAME``: the forecast beside the bound (attention, decode,
linear, model)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from attnroof.devices import Device
from attnroof.dtypes import DType


def add_calibration_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("forecast")
    g.add_argument(
        "--calibration",
        metavar="FILE",
        help="a calibration (attnroof calibrate -o): forecast beside the bound",
    )
    g.add_argument(
        "--impl", metavar="NAME", help="forecast this implementation only (default: every calibrated one)"
    )


def load(args: argparse.Namespace, dev: Device, dt: DType) -> Any:
    """The calibration of ``--calibration`` for this device and dtype, or ``None`` without one."""
    if getattr(args, "calibration", None) is None:
        if getattr(args, "impl", None) is not None:
            from attnroof.errors import InputError

            raise InputError("--impl needs --calibration FILE (attnroof calibrate -o FILE)")
        return None
    from attnroof import calibration
    from attnroof.calibration.forecast import select

    return select(calibration.read(args.calibration), dev, dt.name)


def predicted(args: argparse.Namespace, cal: Any, kind: str, shape: Mapping[str, Any]) -> Any:
    """The forecasts: one :class:`Forecast` with ``--impl``, else the list, fastest first."""
    from attnroof.calibration.forecast import forecast

    return forecast(cal, kind, shape, args.impl)


def predicted_json(args: argparse.Namespace, forecasts: Any) -> Any:
    out = [f.to_json() for f in forecasts]
    return out[0] if args.impl else out


def predicted_text(forecasts: Any, bound_s: float, cal: Any) -> str:
    from attnroof.text.calibration import forecast_lines

    return forecast_lines(forecasts, bound_s, cal)
