"""Plausibility checks for device figures: each one a finite number in its SI unit, neither so
small that it was typed in the wrong unit (TFLOP/s for FLOP/s) nor so large that it cannot be one
device's. Errors name the field and say what was probably meant."""

from __future__ import annotations

import math
from typing import Any

from attnroof.errors import DeviceFileError

MIN_PLAUSIBLE_RATE = 1e9
"""Below 1e9 FLOP/s or bytes/s a typed figure was almost surely typed in TFLOP/s, TB/s or GB/s."""
MIN_MEASURED_RATE = 1e6
"""The floor of a rate attnroof measured itself (a ``kind = "measured"`` record): no unit was typed,
and one core of a loaded CPU runs a bf16 or fp16 matmul it has no half-precision path for at well
under 1e9 FLOP/s — a true figure, kept. Below 1e6 (a 256³ matmul taking over 30 s) it is not a
working kernel."""
MIN_PLAUSIBLE_CAPACITY = 1e6
"""Below 1 MB of device memory the figure was almost surely typed in GB."""
MAX_PLAUSIBLE_FLOPS = 1e20
"""Above 1e20 FLOP/s (100 EFLOP/s) a peak is not one device's: the fastest single chips publish
~1e16 dense (B200 fp4 ~9e15; Cerebras WSE-3 1.25e17 for a whole wafer), so this leaves ~1000×
headroom and catches a figure typed with the wrong prefix, a cluster's total, or garbage."""
MAX_PLAUSIBLE_BANDWIDTH = 1e17
"""Above 1e17 bytes/s (100 PB/s) a bandwidth is not one device's: HBM stacks give ~1e13 (H200
4.8e12, B200 8e12) and the largest published on-device figure is Cerebras WSE-3's on-wafer SRAM
at 2.1e16, which this bound still admits (a 1e16 bound would not)."""
MAX_PLAUSIBLE_CAPACITY = 1e16
"""Above 1e16 bytes (10 PB) of memory is not one device's: GPUs hold ~1e11 and the largest
single hosts ~3e13 (24 TB), so this leaves ~300× headroom."""
MIN_PLAUSIBLE_POWER = 1.0
"""Below 1 W a board power was almost surely typed in kW (0.7 for a 700 W part): the smallest
accelerator cards draw tens of watts (a T4 70 W, an L4 72 W)."""
MAX_PLAUSIBLE_POWER = 1e5
"""Above 1e5 W (100 kW) a power is not one device's: the largest boards are ~1.4e3 W (an MI355X, a
GB300 GPU) and a whole wafer-scale system some 2.3e4 W, so this leaves ~70× headroom and catches a
rack's or a cluster's total, or a figure typed in mW."""


def _show(value: Any) -> str:
    """A figure for an error line; a huge integer (a 300-digit TOML value) is not printed whole."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 100:
        try:
            text = str(value)
        except ValueError:  # beyond Python's int-to-str limit
            return f"an integer of about {int(value.bit_length() * math.log10(2))} digits"
        return f"{text[:3]}…{text[-3:]} (a {len(text)}-digit integer)"
    return repr(value)


def _power(x: float) -> str:
    """``1e20`` for 1e20."""
    return f"1e{round(math.log10(x))}"


def _check_figure(what: str, value: Any, unit: str) -> None:
    """A positive, finite number: an int of any size or a finite float (no ``float()`` of an
    int too large for one)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DeviceFileError(f"{what} = {value!r} is not a number ({unit})")
    if (isinstance(value, float) and not math.isfinite(value)) or value <= 0:
        raise DeviceFileError(f"{what} = {_show(value)} must be a positive, finite number ({unit})")


def check_rate(what: str, value: Any, unit: str, example: str, floor: float = MIN_PLAUSIBLE_RATE) -> None:
    """:class:`DeviceFileError` unless ``value`` is a plausible rate of one device in ``unit``
    (FLOP/s or bytes/s): between ``floor`` (:data:`MIN_PLAUSIBLE_RATE` for a typed figure) and
    :data:`MAX_PLAUSIBLE_FLOPS` or :data:`MAX_PLAUSIBLE_BANDWIDTH`. The error names ``what`` (a
    field or a flag) and the value."""
    _check_figure(what, value, unit)
    if value < floor:
        raise DeviceFileError(
            f"{what} = {value!r} {unit} is implausibly small: figures are in {unit}, "
            f"not T{unit} or G{unit} (write e.g. {example})"
        )
    top = MAX_PLAUSIBLE_FLOPS if unit.startswith("FLOP") else MAX_PLAUSIBLE_BANDWIDTH
    if value > top:
        raise DeviceFileError(
            f"{what} = {_show(value)} {unit} is implausibly large for one device (above {_power(top)} "
            f"{unit}): figures are plain {unit} of a single device (write e.g. {example})"
        )


def check_capacity(what: str, value: Any) -> None:
    """:class:`DeviceFileError` unless ``value`` is a plausible memory size of one device in
    bytes: between :data:`MIN_PLAUSIBLE_CAPACITY` and :data:`MAX_PLAUSIBLE_CAPACITY`."""
    _check_figure(what, value, "bytes")
    if value < MIN_PLAUSIBLE_CAPACITY:
        raise DeviceFileError(
            f"{what} = {value!r} bytes is implausibly small: capacity is in bytes, not GB "
            "(write e.g. 80e9 or 80G)"
        )
    if value > MAX_PLAUSIBLE_CAPACITY:
        raise DeviceFileError(
            f"{what} = {_show(value)} bytes is implausibly large for one device (above "
            f"{_power(MAX_PLAUSIBLE_CAPACITY)} bytes): capacity is plain bytes of a single device "
            "(write e.g. 80e9 or 80G)"
        )


def check_onchip(what: str, value: Any) -> None:
    """On-chip memory (caches, SRAM): no lower bound (a few MB is real), the same upper one."""
    _check_figure(what, value, "bytes")
    if value > MAX_PLAUSIBLE_CAPACITY:
        raise DeviceFileError(
            f"{what} = {_show(value)} bytes is implausibly large for one device "
            f"(above {_power(MAX_PLAUSIBLE_CAPACITY)} bytes)"
        )


def check_cache_bandwidth(record: Any) -> None:
    """A device record's ``cache_bandwidth_bytes_per_s``: a plausible rate in bytes/s, with the
    cache's size beside it (``onchip_bytes``), and no slower than the main memory (a cache slower
    than the memory behind it would make the two-level bound longer than the single-level one)."""
    what = "cache_bandwidth_bytes_per_s"
    value = record[what]
    check_rate(what, value, "bytes/s", "12e12")
    if "onchip_bytes" not in record:
        raise DeviceFileError(
            f"{what} = {_show(value)} needs onchip_bytes beside it: the cache's size, in bytes (e.g. 50e6)"
        )
    main = record.get("bandwidth_bytes_per_s")
    if isinstance(main, int | float) and not isinstance(main, bool) and value < main:
        raise DeviceFileError(
            f"{what} = {_show(value)} bytes/s is below bandwidth_bytes_per_s = {_show(main)}: a "
            "last-level cache is faster than the memory behind it (leave it out for a single-level bound)"
        )


def check_power(what: str, value: Any) -> None:
    """:class:`DeviceFileError` unless ``value`` is a plausible board power of one device in
    watts: between :data:`MIN_PLAUSIBLE_POWER` and :data:`MAX_PLAUSIBLE_POWER`."""
    _check_figure(what, value, "W")
    if value < MIN_PLAUSIBLE_POWER:
        raise DeviceFileError(
            f"{what} = {value!r} W is implausibly small: board power is in watts, not kW (write e.g. 700)"
        )
    if value > MAX_PLAUSIBLE_POWER:
        raise DeviceFileError(
            f"{what} = {_show(value)} W is implausibly large for one device (above "
            f"{_power(MAX_PLAUSIBLE_POWER)} W): board power is the watts of a single device (write e.g. 700)"
        )
