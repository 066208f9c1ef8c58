"""Energy from a device's board power: joules per token of a step that took ``time_s``.

The convention is an upper bound: every device of the deployment draws its rated board power
(:attr:`~attnroof.devices.Device.board_power_w`, the vendor's maximum TDP or board power) for the
whole time, idle or not. Real draw under load is lower (inference often runs well under TDP), so
the figure bounds the energy from above; it counts the devices alone, not the host, the network
or the cooling.
"""

from __future__ import annotations

import math

from attnroof.devices import Device
from attnroof.errors import InputError, MissingBoardPower


def board_power(device: Device) -> float:
    """The device's board power in watts; :class:`MissingBoardPower` (one line naming the device
    and the missing figure) where the catalog or its file has none."""
    if device.board_power_w is None:
        raise MissingBoardPower(
            f"energy needs the board power of {device.name}, which it does not have (no source "
            "gives one): give board_power_w in watts, e.g. 700",
            param="board_power_w",
        )
    return device.board_power_w


def energy_per_token(device: Device, time_s: float, tokens: float, devices: int = 1) -> float:
    """Joules per token: ``devices`` boards at their rated board power for ``time_s`` seconds,
    shared over ``tokens`` tokens, ``P × devices × time_s / tokens``.

    An upper bound by convention: each board is taken to draw its full rated power (maximum TDP
    or board power) the whole time, which no real run does; host, network and cooling are not
    counted. :class:`MissingBoardPower` where the device has no power figure.

    An H100 SXM (700 W) decoding 64 tokens in a 20 ms step, and eight of them at TP 8:

    >>> from attnroof.devices import get_device
    >>> h100 = get_device("h100")
    >>> round(energy_per_token(h100, time_s=0.020, tokens=64), 4)
    0.2188
    >>> round(energy_per_token(h100, time_s=0.020, tokens=64, devices=8), 2)
    1.75
    """
    watts = board_power(device)
    for name, value in (("time_s", time_s), ("tokens", tokens)):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise InputError(f"{name} = {value!r} must be a positive, finite number", param=name)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise InputError(f"devices = {devices!r} must be a positive integer", param="devices")
    return watts * devices * time_s / tokens


__all__ = ["board_power", "energy_per_token"]
