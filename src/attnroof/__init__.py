"""attnroof: is attention (or any transformer operator) bound by arithmetic or by memory traffic
on this device, with this shape, how close can a kernel get, and where does that change?

The core is light: numpy for sweeps, sympy (imported on first use) for exact limits and
crossovers. torch (``attnroof[measure]``) and matplotlib (``attnroof[plot]``) are optional.
"""

from __future__ import annotations

from attnroof.cost import Access, Cost, Stage
from attnroof.devices import Device, get_device
from attnroof.dtypes import DType, dtype
from attnroof.errors import AttnroofError
from attnroof.ops import attention, decode, linear
from attnroof.roofline import Placement, Roof, place

__version__ = "0.1.0"

__all__ = [
    "Access",
    "AttnroofError",
    "Cost",
    "DType",
    "Device",
    "Placement",
    "Roof",
    "Stage",
    "__version__",
    "attention",
    "decode",
    "dtype",
    "get_device",
    "linear",
    "place",
]
