"""A linear layer (a GEMM against a weight matrix): the batching argument of part F3."""

from __future__ import annotations

from attnroof import validate
from attnroof.cost import Access, Cost, Num, Stage
from attnroof.dtypes import BF16_BYTES
from attnroof.ops.matmul import matmul_flops

BIAS_FLOPS_PER_ELEMENT = 1
"""A bias add in the GEMM epilogue: one addition per output element."""


def linear(
    n: Num,
    k: Num,
    m: Num,
    *,
    itemsize: Num = BF16_BYTES,
    weight_itemsize: Num | None = None,
    bias: bool = False,
    name: str = "linear",
) -> Cost:
    """``n`` tokens (n × k activations) through a k × m weight: Y = X·W (+ b, with ``bias``: the
    bias vector read and one addition per output element, in the GEMM's epilogue).

    The weight is read once however many tokens share it, so intensity grows with ``n`` until
    the activations dominate: I = 2nkm / (bytes·(nk + km + nm)) ≈ n for n ≪ k, m in 16-bit.

    >>> c = linear(1, 8192, 8192)
    >>> c.flops, c.bytes
    (134217728, 134250496)
    """
    validate.sizes(n=n, k=k, m=m)
    validate.positive("itemsize", itemsize)
    w_itemsize = (
        itemsize if weight_itemsize is None else validate.positive("weight_itemsize", weight_itemsize)
    )
    reads = (Access("X", n * k * itemsize), Access("W", k * m * w_itemsize, weight=True))
    flops = matmul_flops(n, k, m)
    if bias:
        reads += (Access("bias", m * w_itemsize, weight=True),)
        flops = flops + BIAS_FLOPS_PER_ELEMENT * n * m
    return Cost((Stage(name, flops, reads, (Access("Y", n * m * itemsize),)),))
