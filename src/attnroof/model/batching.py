"""The batching argument at model scale (part F3): where decode stops being memory-bound.

Batching shares each weight read among ``batch`` sequences, so every GEMM's intensity grows
about linearly with the batch until it crosses the ridge. Attention does not move: each
sequence reads its own KV cache, so its intensity stays near ``group`` at any batch. Past the
GEMMs' crossover the step's mix is fixed by the context: KV bytes per sequence against GEMM
FLOPs per sequence. The step as a whole turns compute-bound only if the second outweighs the
first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnroof.model.analysis import ModelAnalysis, analyse
from attnroof.model.config import ModelConfig
from attnroof.model.layers import DECODE, Precision, gemm_shapes
from attnroof.operators import operator
from attnroof.roofline import Roof

MAX_BATCH_SEARCHED = 2**24
"""Batches searched for the step's crossover; past the GEMMs' crossover the memory-bound share
is flat, so a step still memory-bound here stays memory-bound."""


@dataclass(frozen=True, slots=True)
class GemmCrossover:
    """The smallest batch at which one GEMM of a decode step reaches the ridge (exact)."""

    name: str
    k: int
    m: int
    batch: int | None
    exact: str | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "k": self.k, "m": self.m, "batch": self.batch, "exact": self.exact}


def gemm_crossovers(model: ModelConfig, roof: Roof, prec: Precision) -> list[GemmCrossover]:
    """Per GEMM, the batch (tokens through it in decode) from which it is compute-bound, solved
    exactly on the operator table's ``linear`` formula."""
    from attnroof.solve import affine_crossover

    gemm = operator("linear").forward
    out = []
    for name, k, m in gemm_shapes(model):

        def cost(n: Any, k: int = k, m: int = m) -> Any:
            return gemm(n, k, m, itemsize=prec.itemsize, weight_itemsize=prec.weight_itemsize)

        c = affine_crossover(cost, roof.peak_flops_per_s, roof.bandwidth_bytes_per_s, variable="n")
        out.append(GemmCrossover(name, k, m, None if c.s_min is None else int(c.s_min), c.exact))
    return out


def compute_bound_batch(
    model: ModelConfig, context: int, roof: Roof, prec: Precision, *, fused: bool = True
) -> tuple[int | None, float]:
    """The smallest decode batch at which less than half of the step's time bound is spent in
    memory-limited kernels, or None; with the memory-bound share at the largest batch tried."""

    def share(b: int) -> float:
        return step(model, b, context, roof, prec, fused=fused).totals.memory_bound_share

    lo, hi = 0, 1
    while share(hi) >= 0.5:
        if hi >= MAX_BATCH_SEARCHED:
            return None, share(hi)
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # share(lo) ≥ ½ > share(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if share(mid) >= 0.5 else (lo, mid)
    return hi, share(hi)


def step(
    model: ModelConfig, batch: int, context: int, roof: Roof, prec: Precision, *, fused: bool = True
) -> ModelAnalysis:
    return analyse(model, DECODE, batch, context, roof, prec, fused=fused)
