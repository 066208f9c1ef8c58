"""The roofline: a cost placed on a device.

    ridge       = P / B                      FLOP/byte where the two roofs meet
    intensity   = F / bytes                  FLOP/byte of the operator
    attainable  = min(P, intensity · B)      FLOP/s
    time bound  = max(F / P, bytes / B)      seconds
    limiter     = compute if intensity ≥ ridge, else memory
    verdict     = "near ridge" within a factor NEAR_RIDGE_FACTOR of the ridge, else the limiter

One :func:`place` serves Python numbers and numpy arrays alike: a sweep of a million shapes is
one call, and placing one shape never imports numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attnroof import arrays
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

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype,
            "peak_flops_per_s": self.peak_flops_per_s,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "ridge": self.ridge,
        }

    def attainable(self, intensity: Num) -> Num:
        """FLOP/s: min(P, I·B)."""
        return arrays.minimum(self.peak_flops_per_s, intensity * self.bandwidth_bytes_per_s)

    def time(self, flops: Num, nbytes: Num) -> Num:
        """Seconds: max(F/P, bytes/B), the lower bound on the kernel's run time."""
        return arrays.maximum(flops / self.peak_flops_per_s, nbytes / self.bandwidth_bytes_per_s)

    def kernel_time(self, flops: Num, nbytes: Num, kernel: Mapping[str, Any] | None = None) -> Num:
        """Seconds one kernel takes on this roof: here its bound, :meth:`time`. A forecast's roof
        (:class:`attnroof.profiles.kernels.ForecastRoof`) answers with the time a real kernel of
        that ``kernel`` shape takes (:meth:`attnroof.operators.Operator.kernel_shape`)."""
        return self.time(flops, nbytes)

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
        }


def place(cost: Cost | tuple[Num, Num], roof: Roof) -> Placement:
    """Place a cost (or a ``(flops, bytes)`` pair) on ``roof``: floats for one shape, arrays for
    a cost evaluated on arrays of shapes.

    >>> from attnroof.ops import attention
    >>> p = place(attention(8192, 128), Roof(1200e12, 4.0e12))
    >>> round(p.intensity, 1), p.limiter, round(p.time_s * 1e6)      # part D4
    (63.6, 'memory', 136)
    >>> import numpy as np
    >>> sweep = place(attention(np.array([512, 8192]), 128, fused=True), Roof(1200e12, 4.0e12))
    >>> sweep.verdict.tolist()                                        # part C4, fused
    ['near ridge', 'compute-bound']
    """
    flops, nbytes = (cost.flops, cost.bytes) if isinstance(cost, Cost) else cost
    flops, nbytes = arrays.as_float(flops), arrays.as_float(nbytes)
    if arrays.is_scalar(nbytes) and nbytes <= 0:
        raise ValueError("a cost with no bytes has no intensity")
    intensity = flops / nbytes
    return Placement(
        flops=flops,
        bytes=nbytes,
        intensity=intensity,
        ridge=roof.ridge,
        attainable_flops_per_s=arrays.as_float(roof.attainable(intensity)),
        time_s=arrays.as_float(roof.time(flops, nbytes)),
        compute_time_s=flops / roof.peak_flops_per_s,
        memory_time_s=nbytes / roof.bandwidth_bytes_per_s,
        limiter=roof.limiter(intensity),
        verdict=roof.verdict(intensity),
    )
