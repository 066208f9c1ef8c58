"""Part G of the worked analysis: the backward pass of attention, as data.

G1, the fused backward (FlashAttention-2) at the sheet's shape: its intensity and where it
crosses the ridge, beside the forward's crossover; G2, the unfused backward's traffic, stage by
stage, and the ceiling it can never pass; G3, what recomputation costs: the fused backward does
Q·Kᵀ (and the softmax's element-wise work) again instead of reading back a kept P, against the
bytes of the P matrices it does not keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnroof.analysis import Comparison, stage_json
from attnroof.cost import Cost
from attnroof.devices import Device
from attnroof.dtypes import DType
from attnroof.footprint import score_matrix_bytes
from attnroof.ops.matmul import matmul_flops
from attnroof.passes import BWD, FWD, pass_crossover, pass_formula
from attnroof.roofline import Roof
from attnroof.solve import Crossover


@dataclass(frozen=True)
class BackwardPart:
    """The backward pass at one shape (one head, per layer: × batch × heads)."""

    s: int
    d: int
    batch: int
    heads: int
    layers: int
    roof: Roof
    backward: Comparison
    crossover: dict[str, Crossover]
    forward_crossover: dict[str, Crossover]
    recompute_flops: float
    """FLOPs the fused backward spends recomputing S and P, per head."""
    recompute_time_s: float
    """Those FLOPs at the peak, for batch × heads × layers."""
    kept_p_bytes: float
    """The P matrices an unfused backward reads back, for batch × heads × layers."""

    def to_json(self) -> dict[str, Any]:
        return {
            "backward": self.backward.to_json(),
            "crossover": {k: c.to_json() for k, c in self.crossover.items()},
            "forward_crossover": {k: c.to_json() for k, c in self.forward_crossover.items()},
            "recompute_flops_per_head": self.recompute_flops,
            "recompute_time_s": self.recompute_time_s,
            "kept_p_bytes": self.kept_p_bytes,
            "unfused_stages": [stage_json(st) for st in self.backward.unfused.cost],
        }


def backward_part(
    device: Device,
    dtype: DType,
    *,
    s: int,
    d: int,
    batch: int,
    heads: int,
    layers: int,
    softmax_flops_per_element: float,
    **_: Any,
) -> BackwardPart:
    """Part G at the sheet's shape (the sheet's other keywords are accepted and unused).

    >>> from attnroof.devices import get_device
    >>> from attnroof.dtypes import dtype
    >>> g = backward_part(get_device("R"), dtype("bf16"), s=8192, d=128, batch=8, heads=32, layers=80,
    ...                   softmax_flops_per_element=5)
    >>> g.crossover["fused"].s_min, g.forward_crossover["fused"].s_min
    (541, 595)
    """
    roof = Roof.of(device, dtype)
    kw: dict[str, Any] = {"itemsize": dtype.itemsize, "softmax_flops_per_element": softmax_flops_per_element}
    bwd = pass_formula("attention", BWD)

    def cost(fused: bool) -> Cost:
        return bwd(s, d, fused=fused, **kw)

    cmp = Comparison.of(cost(False), cost(True), roof)
    cross = {
        label: pass_crossover("attention", BWD, d, roof, fused=f, **kw)
        for label, f in (("unfused", False), ("fused", True))
    }
    fwd = {
        label: pass_crossover("attention", FWD, d, roof, fused=f, **kw)
        for label, f in (("unfused", False), ("fused", True))
    }
    again = s * s * (matmul_flops(1, d, 1) + softmax_flops_per_element)
    n = batch * heads * layers
    return BackwardPart(
        s,
        d,
        batch,
        heads,
        layers,
        roof,
        cmp,
        cross,
        fwd,
        recompute_flops=float(again),
        recompute_time_s=float(again * n / roof.peak_flops_per_s),
        kept_p_bytes=float(score_matrix_bytes(s, dtype.itemsize) * n),
    )
