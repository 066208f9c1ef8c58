"""Formulas: FLOPs and off-chip bytes of transformer operators as functions of their shapes.

Each formula is plain arithmetic, so the same function returns an int for ints, an array for
numpy arrays and an expression for sympy symbols. Nothing here imports numpy or sympy.
"""

from attnroof.ops.attention import attention, decode
from attnroof.ops.elementwise import activation, add, copy, norm  # noqa: F401 (re-exported)
from attnroof.ops.linear import linear
from attnroof.ops.matmul import FLOPS_PER_MAC, matmul_flops
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT, softmax_flops

__all__ = [
    "FLOPS_PER_MAC",
    "SOFTMAX_FLOPS_PER_ELEMENT",
    "attention",
    "decode",
    "linear",
    "matmul_flops",
    "softmax_flops",
]
