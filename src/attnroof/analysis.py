"""Unfused against fused: the results the commands print and the sheet narrates, as plain data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnroof.cost import Cost, Num, Stage
from attnroof.ops import attention
from attnroof.ops.attention import SOFTMAX
from attnroof.roofline import Placement, Roof, place

if TYPE_CHECKING:
    import numpy as np

    from attnroof.solve import Crossover


DEFAULT_SWEEP_S = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
"""Sequence lengths a sweep (and a chart) covers by default: powers of two from 512 to 128k."""


def stage_json(stage: Stage) -> dict[str, Any]:
    return {
        "name": stage.name,
        "flops": stage.flops,
        "bytes_read": stage.bytes_read,
        "bytes_written": stage.bytes_written,
        "reads": {a.tensor: a.bytes for a in stage.reads},
        "writes": {a.tensor: a.bytes for a in stage.writes},
    }


def softmax_flops(cost: Cost) -> Num:
    """FLOPs of the softmax stages of an unfused cost (a fused cost folds them into one stage)."""
    total: Num = 0
    for st in cost:
        if st.name == SOFTMAX:
            total = total + st.flops
    return total


def softmax_share(cost: Cost) -> Num:
    """The fraction of an unfused cost's FLOPs spent in softmax: 5/(4d + 5) by default; an
    expression for symbols."""
    return softmax_flops(cost) / cost.flops


@dataclass(frozen=True, slots=True)
class Variant:
    """One implementation (unfused or fused) of an operator, placed on a roof."""

    cost: Cost
    placement: Placement

    def to_json(self) -> dict[str, Any]:
        out = self.placement.to_json()
        out["stages"] = [stage_json(s) for s in self.cost]
        return out


@dataclass(frozen=True, slots=True)
class Comparison:
    """Unfused and fused side by side: same FLOPs, different traffic."""

    unfused: Variant
    fused: Variant
    roof: Roof

    @classmethod
    def of(cls, unfused: Cost, fused: Cost, roof: Roof) -> Comparison:
        return cls(Variant(unfused, place(unfused, roof)), Variant(fused, place(fused, roof)), roof)

    @property
    def flops(self) -> float:
        return self.unfused.placement.flops

    @property
    def traffic_ratio(self) -> float:
        """Unfused bytes over fused bytes: 1 + s/d for multi-head attention in one dtype (part B3);
        with GQA the fused side shares K and V, and the ratio is larger."""
        return self.unfused.placement.bytes / self.fused.placement.bytes

    @property
    def speedup_ceiling(self) -> float:
        """Unfused time bound over fused time bound: what fusion alone can buy (part D4)."""
        return self.unfused.placement.time_s / self.fused.placement.time_s

    def to_json(self, labels: tuple[str, str] = ("unfused", "fused")) -> dict[str, Any]:
        """Both variants under ``labels`` (latent attention: "naive", "absorbed")."""
        return {
            "flops": self.flops,
            "softmax_share": float(softmax_share(self.unfused.cost)),
            "ridge": self.roof.ridge,
            "peak_flops_per_s": self.roof.peak_flops_per_s,
            "bandwidth_bytes_per_s": self.roof.bandwidth_bytes_per_s,
            **self.roof.cache_json(),
            "traffic_ratio": self.traffic_ratio,
            "speedup_ceiling": self.speedup_ceiling,
            labels[0]: self.unfused.to_json(),
            labels[1]: self.fused.to_json(),
        }


def sweep(
    s_values: Sequence[int] | np.ndarray,
    d: int | np.ndarray,
    roof: Roof,
    **attention_kwargs: Any,
) -> dict[str, Placement]:
    """Unfused and fused attention placed on ``roof`` for every s (and d, broadcast) at once:
    one :class:`Placement` of arrays per variant. A million points is one call.

    >>> p = sweep([512, 8192], 128, Roof(1200e12, 4.0e12))
    >>> p["unfused"].intensity.round(1).tolist(), p["fused"].verdict.tolist()   # part C4
    ([51.7, 63.6], ['near ridge', 'compute-bound'])
    """
    import numpy as np

    s = np.asarray(s_values, dtype=np.float64)
    return {
        label: place(attention(s, d, fused=fused, **attention_kwargs), roof)
        for label, fused in (("unfused", False), ("fused", True))
    }


def attention_crossover(d: int, roof: Roof, **attention_kwargs: Any) -> Crossover:
    """Where attention with head dimension ``d`` reaches ``roof``'s ridge, solved exactly over s.

    ``attention_kwargs`` go to :func:`attnroof.ops.attention` (fused, causal, itemsize, ...).
    sympy is imported here, on first use.
    """
    from attnroof.solve import crossover

    def intensity(s: Any) -> Any:
        return attention(s, d, **attention_kwargs).intensity

    return crossover(intensity, roof.peak_flops_per_s, roof.bandwidth_bytes_per_s)
