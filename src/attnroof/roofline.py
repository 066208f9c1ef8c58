"""The roofline: a cost placed on a device.

    ridge       = P / B                      FLOP/byte where the two roofs meet
    intensity   = F / bytes                  FLOP/byte of the operator
    attainable  = min(P, intensity · B)      FLOP/s
    time bound  = max(F / P, bytes / B)      seconds
    limiter     = compute if intensity ≥ ridge, else memory
    verdict     = "near ridge" within a factor NEAR_RIDGE_FACTOR of the ridge, else the limiter

The functions take Python numbers or numpy arrays alike, so a sweep of a million shapes is one
call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from attnroof.cost import Cost, Num
from attnroof.devices import Device
from attnroof.dtypes import DType, dtype

NEAR_RIDGE_FACTOR = 2
"""Within 2× of the ridge either roof can win in practice (overlap, clocks, cache effects), so
the verdict there is "near ridge" rather than a confident memory- or compute-bound."""

MEMORY, COMPUTE = "memory", "compute"
MEMORY_BOUND, NEAR_RIDGE, COMPUTE_BOUND = "memory-bound", "near ridge", "compute-bound"


@dataclass(frozen=True, slots=True)
class Roof:
    """The two roofs for one dtype on one device: P (FLOP/s) and B (bytes/s)."""

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    device: str = ""
    dtype: str = ""

    @classmethod
    def of(cls, device: Device, dt: str | DType) -> Roof:
        d = dtype(dt)
        return cls(device.peak(d), device.bandwidth_bytes_per_s, device.name, d.name)

    @property
    def ridge(self) -> float:
        """FLOP/byte: P / B."""
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s

    def attainable(self, intensity: Num) -> Num:
        """FLOP/s: min(P, I·B)."""
        return np.minimum(self.peak_flops_per_s, intensity * self.bandwidth_bytes_per_s)

    def time(self, flops: Num, nbytes: Num) -> Num:
        """Seconds: max(F/P, bytes/B), the lower bound on the kernel's run time."""
        return np.maximum(flops / self.peak_flops_per_s, nbytes / self.bandwidth_bytes_per_s)

    def compute_bound(self, intensity: Num) -> Num:
        """True where the compute roof is the lower one (I ≥ ridge)."""
        return intensity >= self.ridge

    def verdict(self, intensity: Num) -> Num:
        """ "memory-bound", "near ridge" or "compute-bound" (an array of them for arrays)."""
        ridge = self.ridge
        out = np.where(
            intensity < ridge / NEAR_RIDGE_FACTOR,
            MEMORY_BOUND,
            np.where(intensity > ridge * NEAR_RIDGE_FACTOR, COMPUTE_BOUND, NEAR_RIDGE),
        )
        return str(out) if out.ndim == 0 else out


@dataclass(frozen=True, slots=True)
class Placement:
    """A cost on a roof: every number of a roofline row, in SI units."""

    flops: float
    bytes: float
    intensity: float
    ridge: float
    attainable_flops_per_s: float
    time_s: float
    compute_time_s: float
    memory_time_s: float
    limiter: str
    verdict: str

    def to_json(self) -> dict[str, Any]:
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
        }


def place(cost: Cost | tuple[float, float], roof: Roof) -> Placement:
    """Place one cost (or a ``(flops, bytes)`` pair) on ``roof``.

    >>> from attnroof.ops import attention
    >>> p = place(attention(8192, 128), Roof(1200e12, 4.0e12))
    >>> round(p.intensity, 1), p.limiter, round(p.time_s * 1e6)      # part D4
    (63.6, 'memory', 136)
    """
    flops, nbytes = (cost.flops, cost.bytes) if isinstance(cost, Cost) else cost
    flops, nbytes = float(flops), float(nbytes)
    if nbytes <= 0:
        raise ValueError("a cost with no bytes has no intensity")
    intensity = flops / nbytes
    return Placement(
        flops=flops,
        bytes=nbytes,
        intensity=intensity,
        ridge=roof.ridge,
        attainable_flops_per_s=float(roof.attainable(intensity)),
        time_s=float(roof.time(flops, nbytes)),
        compute_time_s=flops / roof.peak_flops_per_s,
        memory_time_s=nbytes / roof.bandwidth_bytes_per_s,
        limiter=COMPUTE if roof.compute_bound(intensity) else MEMORY,
        verdict=roof.verdict(intensity),
    )
