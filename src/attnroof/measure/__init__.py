"""Measured kernels on the local torch device, placed on the same roofline as the model.

This is the optional ``attnroof[measure]`` extra. Nothing here imports torch at import time:
:func:`require_torch` does, on first use, and says which extra to install when it is missing.

- :mod:`~attnroof.measure.env`: which torch device, its memory limit, cache flushing.
- :mod:`~attnroof.measure.timing`: median time of a kernel (do_bench, CUDA events, perf_counter).
- :mod:`~attnroof.measure.ceilings`: read, write and copy bandwidth, best matmul rate per dtype.
- :mod:`~attnroof.measure.kernels`: the implementations (eager, SDPA backends, GQA decode, linear).
- :mod:`~attnroof.measure.records`: one JSON record per measurement, its roofline placement.
- :mod:`~attnroof.measure.suite`: the campaign, written line by line to a JSON-lines file.
- :mod:`~attnroof.measure.ncu`: DRAM bytes from Nsight Compute, and its CSV parser.
- :mod:`~attnroof.measure.processes`: a process tree that dies with its caller (ncu and its child).
"""

from __future__ import annotations

from types import ModuleType

from attnroof.errors import MissingExtra

INSTALL_HINT = "pip install 'attnroof[measure]'"


def require_torch() -> ModuleType:
    """Import and return torch, or raise :class:`MissingExtra` naming the extra to install."""
    try:
        import torch
    except ImportError:
        raise MissingExtra(f"measuring kernels needs torch, which is not installed: {INSTALL_HINT}") from None
    return torch
