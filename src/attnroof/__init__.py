"""attnroof: is attention (or any transformer operator) bound by arithmetic or by memory traffic
on this device, with this shape, how close can a kernel get, and where does that change?

The core is light: numpy for sweeps, sympy (imported on first use) for exact limits and
crossovers. torch (``attnroof[measure]``) and matplotlib (``attnroof[plot]``) are optional.

The names below are loaded on first use (``attnroof.Roof``, ``from attnroof import attention``),
so that importing a submodule, or starting the command line, loads only what it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnroof.cost import Access, Cost, Stage
    from attnroof.devices import Device, get_device
    from attnroof.dtypes import DType, dtype
    from attnroof.errors import AttnroofError
    from attnroof.ops.attention import attention, decode  # (from attnroof.ops confuses mypy here)
    from attnroof.ops.linear import linear
    from attnroof.roofline import Placement, Roof, place

__version__ = "0.1.0"

_MODULE_OF = {
    "Access": "attnroof.cost",
    "Cost": "attnroof.cost",
    "Stage": "attnroof.cost",
    "Device": "attnroof.devices",
    "get_device": "attnroof.devices",
    "DType": "attnroof.dtypes",
    "dtype": "attnroof.dtypes",
    "AttnroofError": "attnroof.errors",
    "attention": "attnroof.ops",
    "decode": "attnroof.ops",
    "linear": "attnroof.ops",
    "Placement": "attnroof.roofline",
    "Roof": "attnroof.roofline",
    "place": "attnroof.roofline",
}
"""Where each public name lives: imported from there on first use."""

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


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:  # a submodule not imported yet: the import system then imports it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})
