"""Row-wise softmax FLOPs."""

from __future__ import annotations

from attnroof import validate
from attnroof.cost import Access, Cost, Num, Stage
from attnroof.dtypes import BF16_BYTES

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


def softmax(
    elements: Num,
    *,
    itemsize: Num = BF16_BYTES,
    per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    name: str = "softmax",
) -> Cost:
    """A softmax kernel on its own: reads ``elements`` scores S, writes as many probabilities P
    (the middle stage of unfused attention).

    >>> c = softmax(8192 * 8192)
    >>> c.flops, c.bytes                    # 5 s², 2 · 2 s²  (parts A1, B1)
    (335544320, 268435456)
    """
    return Cost(
        (
            Stage(
                name,
                softmax_flops(elements, per_element),
                (Access("S", elements * itemsize),),
                (Access("P", elements * itemsize),),
            ),
        )
    )
