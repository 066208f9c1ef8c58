"""Row-wise softmax FLOPs."""

from __future__ import annotations

from attnroof import validate
from attnroof.cost import Num

SOFTMAX_FLOPS_PER_ELEMENT = 5
"""Per element: the row max, the subtraction, exp, the row sum, the division.

0 gives the FlashAttention papers' convention, which counts the two matrix products only.
The count says nothing about time: exp runs on a slower unit than the FMAs, and the row
reductions synchronise; attnroof's roofline does not model either."""


def softmax_flops(elements: Num, per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT) -> Num:
    """FLOPs of a softmax over ``elements`` scores.

    >>> softmax_flops(8192 * 8192)
    335544320
    """
    validate.nonnegative("elements", elements)
    validate.nonnegative("per_element", per_element)
    return per_element * elements
