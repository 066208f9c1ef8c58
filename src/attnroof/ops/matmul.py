"""Matrix product FLOPs."""

from __future__ import annotations

from attnroof import validate
from attnroof.cost import Num

FLOPS_PER_MAC = 2
"""One multiply and one add per multiply-accumulate (the count every vendor peak assumes)."""


def matmul_flops(m: Num, k: Num, n: Num) -> Num:
    """FLOPs of an (m × k) · (k × n) product: 2mnk.

    >>> matmul_flops(8192, 128, 8192)   # Q·Kᵀ at s = 8192, d = 128
    17179869184
    """
    validate.sizes(m=m, k=k, n=n)
    return FLOPS_PER_MAC * m * n * k


def expected_matmul_flops(rows: Num, k: Num, n: Num) -> Num:
    """FLOPs of an (rows × k) · (k × n) product whose row count is an expectation — one device's
    share of the tokens an expert-parallel group pools, which need not be whole (half a token a
    device, on average, when four TP ranks split one decoding token): 2·rows·k·n.

    >>> expected_matmul_flops(0.5, 7168, 2048)
    14680064.0
    """
    validate.positive("rows", rows)
    validate.sizes(k=k, n=n)
    return FLOPS_PER_MAC * rows * n * k
