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
from attnroof.model.layers import DECODE, Precision, layer_table
from attnroof.model.spec import ModelConfig
from attnroof.operators import operator, rule
from attnroof.ops.experts import UNIFORM, Routing
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
    dense_batch: int | None = None
    """For an expert GEMM: the batch a dense GEMM of the same k × m needs (the E/k comparison)."""

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "k": self.k, "m": self.m, "batch": self.batch, "exact": self.exact}
        if self.dense_batch is not None:
            out["dense_batch"] = self.dense_batch
        return out


def gemm_crossovers(
    model: ModelConfig, roof: Roof, prec: Precision, routing: Routing | str = UNIFORM
) -> list[GemmCrossover]:
    """Per GEMM, the batch (tokens through it in decode) from which it is compute-bound, solved
    exactly on the operator table's ``linear`` formula; then each expert GEMM's (by bisection)."""
    out = [
        _dense(i.name, *gemm(i.shape), roof, prec.itemsize, prec.weight_bytes(i))
        for i in layer_table(model)
        if (gemm := rule(i).gemm) is not None
    ]
    return out + expert_crossovers(model, roof, prec, routing)


def _dense(name: str, k: int, m: int, roof: Roof, itemsize: float, weight_itemsize: float) -> GemmCrossover:
    """One weight GEMM's crossover, its weights at ``weight_itemsize`` bytes each."""
    from attnroof.solve import affine_crossover

    gemm = operator("linear").forward

    def cost(n: Any) -> Any:
        return gemm(n, k, m, itemsize=itemsize, weight_itemsize=weight_itemsize)

    c = affine_crossover(cost, roof.peak_flops_per_s, roof.bandwidth_bytes_per_s, variable="n")
    return GemmCrossover(name, k, m, None if c.s_min is None else int(c.s_min), c.exact)


def expert_crossovers(
    model: ModelConfig, roof: Roof, prec: Precision, routing: Routing | str = UNIFORM
) -> list[GemmCrossover]:
    """Per expert GEMM, the smallest decode batch at which it reaches the ridge. Its intensity,
    2·n·k·K·M / (E_touched(n)·K·M·w + n·k·(K + M)·a), rises with n (E_touched is concave), so the
    answer is found by bisection over whole batches; there is no closed form to print."""
    out = []
    experts = operator("experts").forward
    for row in layer_table(model):
        if not rule(row).routed:
            continue
        shape = row.shape

        size = prec.weight_bytes(row)

        def intensity(n: int, shape: Any = shape, size: float = size) -> float:
            c = experts(
                n, shape["k"], shape["m"], experts=shape["experts"], top_k=shape["top_k"], routing=routing,
                itemsize=prec.itemsize, weight_itemsize=size, bias=shape["bias"],
            )  # fmt: skip
            return float(c.intensity)

        batch = _smallest(lambda n: intensity(n) >= roof.ridge)
        dense = _dense(row.name, shape["k"], shape["m"], roof, prec.itemsize, size).batch
        out.append(GemmCrossover(row.name, shape["k"], shape["m"], batch, None, dense))
    return out


def _smallest(ok: Any, limit: int = MAX_BATCH_SEARCHED) -> int | None:
    """The smallest n in 1..limit with ``ok(n)``, for ``ok`` false then true; None if never."""
    if not ok(limit):
        return None
    lo, hi = 0, limit  # ok(hi); not ok(lo) (n = 0 is never ok)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def compute_bound_batch(
    model: ModelConfig, context: int, roof: Roof, prec: Precision, *, fused: bool = True, **options: Any
) -> tuple[int | None, float]:
    """The smallest decode batch at which less than half of the step's time bound is spent in
    memory-limited kernels, or None; with the memory-bound share at the largest batch tried."""

    def share(b: int) -> float:
        return step(model, b, context, roof, prec, fused=fused, **options).totals.memory_bound_share

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
    model: ModelConfig,
    batch: int,
    context: int,
    roof: Roof,
    prec: Precision,
    *,
    fused: bool = True,
    **options: Any,
) -> ModelAnalysis:
    """The decode step at ``batch``; ``options`` are :func:`analyse`'s (routing, latent_form)."""
    return analyse(model, DECODE, batch, context, roof, prec, fused=fused, **options)
