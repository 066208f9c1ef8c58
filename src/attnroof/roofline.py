"""The roofline: a cost placed on a device, with its last-level cache where the device has one.

    ridge       = P / B                      FLOP/byte where the two roofs meet
    intensity   = F / bytes                  FLOP/byte of the operator
    memory time = (bytes − R) / B + R / B_c  seconds: R resident bytes at the cache's B_c
    attainable  = min(P, F / memory time)    FLOP/s
    time bound  = max(F / P, memory time)    seconds
    limiter     = compute if F / P ≥ memory time, else memory
    verdict     = "near ridge" within a factor NEAR_RIDGE_FACTOR of the ridge, else the limiter

R = min(eligible bytes, C), C the cache's size: which bytes are eligible is the context's rule,
written here once (:func:`loop_resident` for a kernel timed in a loop, :func:`step_resident`
for a kernel of a model step). A roof without a cache figure (``levels`` 1: the device has none,
or ``--memory-levels 1``) has R = 0, and every number is the single-level roofline's, to the
last digit: bytes / B, intensity against the ridge.

One :func:`place` serves Python numbers and numpy arrays alike: a sweep of a million shapes is
one call, and placing one shape never imports numpy.

Length: the roof, the placement and the two residency rules are one argument (what a kernel's
bytes cost), kept beside the one ``place`` that applies them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from attnroof import arrays
from attnroof.cost import Cost, Num, Stage
from attnroof.devices import Device
from attnroof.dtypes import DType, dtype

NEAR_RIDGE_FACTOR = 2
"""Within 2× of the ridge either roof can win in practice (overlap, clocks, cache effects), so
the verdict there is "near ridge" rather than a confident memory- or compute-bound."""

MEMORY, COMPUTE = "memory", "compute"
MEMORY_BOUND, NEAR_RIDGE, COMPUTE_BOUND = "memory-bound", "near ridge", "compute-bound"


@dataclass(frozen=True, slots=True)
class Roof:
    """The roofs for one dtype on one device: P (FLOP/s) and B (bytes/s), and where the device
    has a sourced figure for it, its last-level cache: C bytes read and written at B_c (bytes/s)."""

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    device: str = ""
    dtype: str = ""
    cache_bytes: float | None = None
    """C: the last-level cache's size (the device's ``onchip_bytes``); None: a single-level roof."""
    cache_bandwidth_bytes_per_s: float | None = None
    """B_c: the cache's bandwidth (the device's ``cache_bandwidth_bytes_per_s``)."""

    @classmethod
    def of(cls, device: Device, dt: str | DType, *, levels: int = 2) -> Roof:
        """``device``'s roof for ``dt``: with its cache (``levels`` 2) where it has both figures,
        else (``levels`` 1, a figure missing, or a cache no faster than the memory, as a
        ``--bandwidth`` override can make it) the single-level roof."""
        d = dtype(dt)
        size, speed = device.onchip_bytes, device.cache_bandwidth_bytes_per_s
        if levels == 1 or size is None or speed is None or speed <= device.bandwidth_bytes_per_s:
            size = speed = None
        return cls(device.peak(d), device.bandwidth_bytes_per_s, device.name, d.name, size, speed)

    @property
    def levels(self) -> int:
        """2 where the roof counts a cache, else 1."""
        return 1 if self.cache_bytes is None or self.cache_bandwidth_bytes_per_s is None else 2

    def single_level(self) -> Roof:
        """The same roof without its cache: every byte at B."""
        return replace(self, cache_bytes=None, cache_bandwidth_bytes_per_s=None)

    @property
    def ridge(self) -> float:
        """FLOP/byte: P / B."""
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype,
            "peak_flops_per_s": self.peak_flops_per_s,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "ridge": self.ridge,
            **self.cache_json(),
        }

    def cache_json(self) -> dict[str, Any]:
        """What the bound assumes of the cache, for a command's JSON: ``memory_levels`` (1 or 2),
        and the cache's size and bandwidth it charges resident bytes at (null on one level)."""
        return {
            "memory_levels": self.levels,
            "cache_bytes": self.cache_bytes,
            "cache_bandwidth_bytes_per_s": self.cache_bandwidth_bytes_per_s,
        }

    def resident(self, eligible: Num) -> Num:
        """R, the bytes charged at the cache's bandwidth: min(eligible, C); 0 on a single-level roof."""
        if self.levels == 1:
            return 0
        return arrays.minimum(eligible, self.cache_bytes)

    def hbm_bytes(self, nbytes: Num, resident: Num = 0) -> Num:
        """The bytes that would take as long at B as this traffic does: (bytes − R) + R·B/B_c
        (``nbytes`` itself where nothing is resident)."""
        if self.levels == 1 or (arrays.is_scalar(resident) and resident == 0):
            return nbytes
        assert self.cache_bandwidth_bytes_per_s is not None
        return nbytes - resident + resident * (self.bandwidth_bytes_per_s / self.cache_bandwidth_bytes_per_s)

    def memory_time(self, nbytes: Num, resident: Num = 0) -> Num:
        """Seconds: (bytes − R)/B + R/B_c."""
        return self.hbm_bytes(nbytes, resident) / self.bandwidth_bytes_per_s

    def attainable(self, intensity: Num) -> Num:
        """FLOP/s: min(P, I·B), ``intensity`` per byte at B (:meth:`hbm_bytes`)."""
        return arrays.minimum(self.peak_flops_per_s, intensity * self.bandwidth_bytes_per_s)

    def time(self, flops: Num, nbytes: Num, resident: Num = 0) -> Num:
        """Seconds: max(F/P, (bytes − R)/B + R/B_c), the lower bound on the kernel's run time."""
        return arrays.maximum(flops / self.peak_flops_per_s, self.memory_time(nbytes, resident))

    def kernel_time(
        self, flops: Num, nbytes: Num, kernel: Mapping[str, Any] | None = None, resident: Num = 0
    ) -> Num:
        """Seconds one kernel takes on this roof: here its bound, :meth:`time` (``resident`` bytes
        at the cache's bandwidth). A forecast's roof (:class:`attnroof.profiles.kernels.ForecastRoof`)
        answers with the time a real kernel of that ``kernel`` shape takes
        (:meth:`attnroof.operators.Operator.kernel_shape`)."""
        return self.time(flops, nbytes, resident)

    @property
    def forecasts(self) -> bool:
        """Whether :meth:`kernel_time` is a forecast rather than the bound."""
        return False

    def compute_bound(self, intensity: Num) -> Num:
        """True where the compute roof is the lower one (I ≥ ridge)."""
        return intensity >= self.ridge

    def verdict(self, intensity: Num) -> Num:
        """ "memory-bound", "near ridge" or "compute-bound" (an array of them for arrays)."""
        ridge = self.ridge
        return arrays.where(
            intensity < ridge / NEAR_RIDGE_FACTOR,
            MEMORY_BOUND,
            arrays.where(intensity > ridge * NEAR_RIDGE_FACTOR, COMPUTE_BOUND, NEAR_RIDGE),
        )

    def limiter(self, intensity: Num) -> Num:
        """ "compute" where I ≥ ridge, else "memory" (an array of them for arrays)."""
        return arrays.where(self.compute_bound(intensity), COMPUTE, MEMORY)


@dataclass(frozen=True, slots=True)
class Placement:
    """A cost on a roof: every number of a roofline row, in SI units. Each field is a float for
    one shape, or an array (labels: an array of str) for a sweep; :meth:`at` takes one row."""

    flops: Num
    bytes: Num
    intensity: Num
    ridge: float
    attainable_flops_per_s: Num
    time_s: Num
    compute_time_s: Num
    memory_time_s: Num
    limiter: Num
    verdict: Num
    resident_bytes: Num = 0.0
    """R: the bytes charged at the cache's bandwidth (0 on a single-level roof); the other
    ``bytes − R`` at the main memory's."""

    def __len__(self) -> int:
        return 1 if arrays.is_scalar(self.flops) else len(self.flops)

    def at(self, i: int) -> Placement:
        """Row ``i`` of a swept placement, as a placement of one shape."""
        if arrays.is_scalar(self.flops):
            return self
        return Placement(
            flops=float(self.flops[i]),
            bytes=float(self.bytes[i]),
            intensity=float(self.intensity[i]),
            ridge=self.ridge,
            attainable_flops_per_s=float(self.attainable_flops_per_s[i]),
            time_s=float(self.time_s[i]),
            compute_time_s=float(self.compute_time_s[i]),
            memory_time_s=float(self.memory_time_s[i]),
            limiter=str(self.limiter[i]),
            verdict=str(self.verdict[i]),
            resident_bytes=float(arrays.as_float(self.resident_bytes + 0 * self.flops)[i]),
        )

    def rows(self) -> list[Placement]:
        """Every row of a swept placement (one for a single shape)."""
        return [self.at(i) for i in range(len(self))]

    def to_json(self) -> dict[str, Any]:
        """One shape: its fields. A sweep: a list of rows under ``"rows"``."""
        if not arrays.is_scalar(self.flops):
            return {"rows": [p.to_json() for p in self.rows()]}
        return {
            "flops": self.flops,
            "bytes": self.bytes,
            "intensity": self.intensity,
            "attainable_flops_per_s": self.attainable_flops_per_s,
            "time_s": self.time_s,
            "compute_time_s": self.compute_time_s,
            "memory_time_s": self.memory_time_s,
            "limiter": self.limiter,
            "verdict": self.verdict,
            "resident_bytes": self.resident_bytes,
            "resident_share": self.resident_bytes / self.bytes,
        }


def place(cost: Cost | tuple[Num, Num], roof: Roof, resident: Num | None = None) -> Placement:
    """Place a cost (or a ``(flops, bytes)`` pair) on ``roof``: floats for one shape, arrays for
    a cost evaluated on arrays of shapes. ``resident`` is R, the bytes at the cache's bandwidth;
    left out, a :class:`Cost` is a kernel timed in a loop (:func:`loop_resident`) and a pair has
    none resident.

    >>> from attnroof.ops import attention
    >>> p = place(attention(8192, 128), Roof(1200e12, 4.0e12))
    >>> round(p.intensity, 1), p.limiter, round(p.time_s * 1e6)      # part D4
    (63.6, 'memory', 136)
    >>> import numpy as np
    >>> sweep = place(attention(np.array([512, 8192]), 128, fused=True), Roof(1200e12, 4.0e12))
    >>> sweep.verdict.tolist()                                        # part C4, fused
    ['near ridge', 'compute-bound']
    """
    if resident is None:
        resident = _total(loop_resident(cost, roof)) if isinstance(cost, Cost) else 0
    flops, nbytes = (cost.flops, cost.bytes) if isinstance(cost, Cost) else cost
    flops, nbytes = arrays.as_float(flops), arrays.as_float(nbytes)
    if arrays.is_scalar(nbytes) and nbytes <= 0:
        raise ValueError("a cost with no bytes has no intensity")
    if not (arrays.is_scalar(resident) and resident == 0):
        resident = arrays.as_float(resident)
    intensity = flops / nbytes
    at_hbm = roof.hbm_bytes(nbytes, resident)
    effective = intensity if at_hbm is nbytes else flops / at_hbm  # FLOP per byte at B
    return Placement(
        flops=flops,
        bytes=nbytes,
        intensity=intensity,
        ridge=roof.ridge,
        attainable_flops_per_s=arrays.as_float(roof.attainable(effective)),
        time_s=arrays.as_float(roof.time(flops, nbytes, resident)),
        compute_time_s=flops / roof.peak_flops_per_s,
        memory_time_s=at_hbm / roof.bandwidth_bytes_per_s,
        limiter=roof.limiter(effective),
        verdict=roof.verdict(effective),
        resident_bytes=resident if not arrays.is_scalar(resident) else float(resident),
    )


# ---------------------------------------------------------------- which bytes may be resident
#
# A byte is charged at the cache's bandwidth only where it can be in the cache when the kernel
# asks for it, and never more of them than the cache holds (R = min(eligible, C), Roof.resident).
# Two contexts, one rule each:
#
# * a kernel timed in a loop (the kernel commands: attention, decode, linear, the sheet's rows):
#   benchmarks time kernels repeatedly without flushing the cache, so where the cost's whole
#   traffic fits in the cache every byte is eligible (its operands stay from the last call, its
#   writes land in the cache). Where it does not fit, a sweep over more than the cache evicts each
#   line before its reuse, and only a kernel's reads of what the kernel before it wrote are
#   eligible (unfused attention's softmax reading the S that Q·Kᵀ just wrote); the first kernel
#   then has none. Above the cache's size a one-kernel cost is the single-level bound.
# * a kernel of a model step (prefill, decode, training; serving's mixed step): of its reads,
#   its activations are eligible up to the bytes the kernel before it wrote (an operator's input
#   is the last one's output: min(activation reads, bytes written before)); its weights only
#   where every weight the device holds fits in the cache (then each step finds them where the
#   last step read them). Caches of past tokens (KV, states) are activations here, eligible only
#   within what the kernel before wrote; a step's first kernel has nothing written before it.


def _total(values: list[Num]) -> Num:
    total: Num = 0
    for v in values:
        total = total + v
    return total


def loop_resident(cost: Cost, roof: Roof) -> list[Num]:
    """R of each stage of ``cost`` timed in a loop (the first rule above).

    >>> from attnroof.ops import linear
    >>> h100 = Roof(989e12, 3.35e12, cache_bytes=50e6, cache_bandwidth_bytes_per_s=12e12)
    >>> loop_resident(linear(64, 4096, 4096), h100)        # 34.6 MB fits in 50 MB: all of it
    [34603008]
    >>> loop_resident(linear(4096, 4096, 4096), h100)      # 100.7 MB does not: none
    [0]
    """
    if roof.levels == 1:
        return [0 for _ in cost.stages]
    fits = cost.bytes <= roof.cache_bytes
    out: list[Num] = []
    before: Num = 0
    for stage in cost.stages:
        chained = roof.resident(arrays.minimum(stage.bytes_read, before))
        out.append(arrays.where(fits, stage.bytes, chained))
        before = stage.bytes_written
    return out


def step_resident(stages: tuple[Stage, ...], roof: Roof, written_before: Num, weights_held: Num) -> list[Num]:
    """R of each kernel of an operator in a model step (the second rule above): ``written_before``
    the bytes the kernel before its first one wrote, ``weights_held`` the bytes of every weight
    the device holds.

    >>> from attnroof.ops import add
    >>> h100 = Roof(989e12, 3.35e12, cache_bytes=50e6, cache_bandwidth_bytes_per_s=12e12)
    >>> step_resident(add(880, 4096).stages, h100, 880 * 4096 * 2, 13.5e9)   # the branch's output
    [7208960]
    """
    if roof.levels == 1:
        return [0 for _ in stages]
    fit = weights_fit(roof, weights_held)
    out: list[Num] = []
    for stage in stages:
        weights = stage.weight_bytes_read
        out.append(kernel_resident(roof, stage.bytes_read - weights, weights, written_before, fit))
        written_before = stage.bytes_written
    return out


def weights_fit(roof: Roof, weights_held: Num) -> Num:
    """Whether every weight the device holds fits in ``roof``'s cache (False without one)."""
    return roof.levels == 2 and weights_held <= roof.cache_bytes


def kernel_resident(roof: Roof, activations: Num, weights: Num, written_before: Num, fit: Num) -> Num:
    """R of one kernel of a model step: min(activation reads, bytes written before) + its weight
    reads where the weights fit, at most the cache's size."""
    return roof.resident(arrays.minimum(activations, written_before) + arrays.where(fit, weights, 0))
