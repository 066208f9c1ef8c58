"""What each ATen operator costs: its kind, its FLOPs, the bytes it reads.

The FLOPs of the matrix products (mm, addmm, bmm, baddbmm, convolutions, the fused attention
kernels and their backwards) are PyTorch's own, from ``torch.utils.flop_counter``'s registry, so
a trace and ``FlopCounterMode`` agree on them by construction. Everything else is a rule of this
table, per element of the output (a reduction's: of its input), with attnroof's own constants
where an operator is one of its operators (norms, softmax, activations, their backwards). An
operator in neither is *uncosted*: the trace names it and leaves it out of the totals, which say so.

Kinds: ``view`` (no kernel: a new header on the same bytes), ``free`` (allocation without a
write), ``matmul`` (its own kernel, never fused), ``pointwise`` and ``reduction`` (fusible),
``gather`` (an embedding lookup or an index: it reads the rows it gathers, not the whole table),
``scatter`` (an indexed write in place: it writes as many bytes as its source holds, not the
whole target; out of place it copies the target, as a pointwise operator would).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from attnroof.ops.attention import SOFTMAX_FLOPS_PER_ELEMENT
from attnroof.ops.backward import (
    ADD_BACKWARD_FLOPS_PER_ELEMENT,
    GELU_BACKWARD_FLOPS_PER_ELEMENT,
    LAYERNORM_BACKWARD_FLOPS_PER_ELEMENT,
    RMSNORM_BACKWARD_FLOPS_PER_ELEMENT,
    SCATTER_ADD_FLOPS_PER_ELEMENT,
)
from attnroof.ops.elementwise import (
    ACTIVATION_FLOPS_PER_ELEMENT,
    LAYERNORM_FLOPS_PER_ELEMENT,
    RMSNORM_FLOPS_PER_ELEMENT,
)

VIEW, FREE, MATMUL, POINTWISE, REDUCTION, GATHER, SCATTER, UNCOSTED = (
    "view", "free", "matmul", "pointwise", "reduction", "gather", "scatter", "uncosted",
)  # fmt: skip
FUSIBLE = frozenset({POINTWISE, REDUCTION})
"""The kinds the fusion rule chains into one kernel (:mod:`attnroof.trace.kernels`)."""

VIEWS = frozenset(
    [
        "view",
        "_unsafe_view",
        "reshape",
        "t",
        "transpose",
        "permute",
        "expand",
        "unsqueeze",
        "squeeze",
        "slice",
        "select",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "as_strided",
        "alias",
        "detach",
        "lift_fresh",
        "_reshape_alias",
        "unfold",
        "view_as_real",
        "view_as_complex",
        "diagonal",
        "narrow",
        "movedim",
    ]
)
"""Operators that return a view (PyTorch marks most as ``is_view``; these are named too)."""

FREE_OPS = frozenset(["empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"])
"""Allocation only: nothing is read or written."""

SOFTMAX_BACKWARD_FLOPS_PER_ELEMENT = 4
"""dX = Y·(dY − Σ dY·Y): the product, its row sum, the difference and the product again."""

SILU_BACKWARD_FLOPS_PER_ELEMENT = 7
"""σ(x) again (3), 1 + x·(1 − σ) (3), times σ and dY counted as one more (1)."""

SIMPLE_BACKWARD_FLOPS_PER_ELEMENT = 2
"""threshold/sigmoid/tanh backward: the derivative from the saved output and its product with dY."""

POINTWISE_FLOPS: dict[str, float] = {
    **dict.fromkeys(
        [
            "add",
            "sub",
            "mul",
            "div",
            "neg",
            "abs",
            "relu",
            "clamp",
            "clamp_min",
            "clamp_max",
            "maximum",
            "minimum",
            "where",
            "masked_fill",
            "pow",
            "sqrt",
            "rsqrt",
            "exp",
            "log",
            "sin",
            "cos",
            "reciprocal",
            "sign",
            "floor",
            "ceil",
            "round",
            "fmod",
            "remainder",
            "eq",
            "ne",
            "lt",
            "le",
            "gt",
            "ge",
            "logical_and",
            "logical_or",
            "logical_not",
            "bitwise_and",
            "bitwise_or",
            "bitwise_not",
            "threshold",
            "erf",
            "tril",
            "triu",
            "square",
            "lerp",
            "addcmul",
            "addcdiv",
            "exp2",
            "log2",
            "log1p",
            "expm1",
            "hardtanh",
            "floor_divide",
            "bernoulli",
            "native_dropout",
            "native_dropout_backward",
            "leaky_relu",
            "mish",
            "softplus",
        ],
        1.0,
    ),
    "sigmoid": 3.0,
    "tanh": 3.0,
    "silu": float(ACTIVATION_FLOPS_PER_ELEMENT["silu"]),
    "gelu": float(ACTIVATION_FLOPS_PER_ELEMENT["gelu"]),
    **dict.fromkeys(
        [
            "copy",
            "_to_copy",
            "clone",
            "contiguous",
            "fill",
            "zero",
            "zeros",
            "zeros_like",
            "ones",
            "ones_like",
            "full",
            "full_like",
            "scalar_tensor",
            "arange",
            "_unsafe_index",
            "lift",
            "stack",
            "cat",
            "constant_pad_nd",
            "new_ones",
            "new_zeros",
            "new_full",
        ],
        0.0,
    ),
    "threshold_backward": SIMPLE_BACKWARD_FLOPS_PER_ELEMENT,
    "sigmoid_backward": SIMPLE_BACKWARD_FLOPS_PER_ELEMENT,
    "tanh_backward": SIMPLE_BACKWARD_FLOPS_PER_ELEMENT,
    "silu_backward": SILU_BACKWARD_FLOPS_PER_ELEMENT,
    "gelu_backward": float(GELU_BACKWARD_FLOPS_PER_ELEMENT),
    "_softmax_backward_data": SOFTMAX_BACKWARD_FLOPS_PER_ELEMENT,
    "_log_softmax_backward_data": SOFTMAX_BACKWARD_FLOPS_PER_ELEMENT,
    "add_backward": float(ADD_BACKWARD_FLOPS_PER_ELEMENT),
}
"""FLOPs per output element of each element-wise operator (a comparison or a copy: 0 or 1)."""

REDUCTION_FLOPS: dict[str, float] = {
    **dict.fromkeys(
        [
            "sum",
            "mean",
            "amax",
            "amin",
            "max",
            "min",
            "argmax",
            "argmin",
            "prod",
            "norm",
            "linalg_vector_norm",
            "any",
            "all",
            "topk",
            "histc",
            "bincount",
        ],
        1.0,
    ),
    **dict.fromkeys(["var", "std", "var_mean", "std_mean"], 3.0),
    **dict.fromkeys(
        ["_softmax", "softmax", "_safe_softmax", "_log_softmax", "log_softmax"],
        float(SOFTMAX_FLOPS_PER_ELEMENT),
    ),
    "native_layer_norm": float(LAYERNORM_FLOPS_PER_ELEMENT),
    "_fused_rms_norm": float(RMSNORM_FLOPS_PER_ELEMENT),
    "rms_norm": float(RMSNORM_FLOPS_PER_ELEMENT),
    "cumsum": 1.0,
    "embedding_dense_backward": float(SCATTER_ADD_FLOPS_PER_ELEMENT),
    "native_layer_norm_backward": float(LAYERNORM_BACKWARD_FLOPS_PER_ELEMENT),
    "_fused_rms_norm_backward": float(RMSNORM_BACKWARD_FLOPS_PER_ELEMENT),
}
"""FLOPs per *input* element of each reduction (a norm or a softmax: its whole pass)."""


def _sort_flops(args: tuple, kwargs: dict, numel_in: int) -> float:
    """Comparisons: ⌈log2⌉ of the sorted dimension's length, an element."""
    dim = kwargs.get("dim", args[1] if len(args) > 1 and isinstance(args[1], int) else -1)
    size = args[0].shape[dim] if args[0].dim() else 1
    return float(numel_in * max(1, math.ceil(math.log2(max(size, 1)))))


REDUCTION_FLOP_RULES: dict[str, Callable[[tuple, dict, int], float]] = {"sort": _sort_flops}
"""Reductions whose FLOPs are not a constant an input element: (args, kwargs, input elements) → FLOPs."""

GATHERS = frozenset(["embedding", "index", "index_select", "gather", "take"])
SCATTERS = frozenset(
    ["scatter", "scatter_add", "scatter_reduce", "index_put", "index_add", "index_copy", "masked_scatter"]
)
"""Their FLOPs: one an element written where they combine (``scatter_add``, ``index_add``), else none."""
SCATTER_FLOPS = frozenset(["scatter_add", "scatter_reduce", "index_add"])

GROUPED_GEMMS = frozenset(["_grouped_mm", "_scaled_grouped_mm"])
"""Grouped products (one GEMM a group of rows, MoE experts' kernels), which PyTorch's registry does
not count: 2 FLOPs a multiply-add, each output element a dot product over A's last dimension (for
two 2-D operands, groups along that dimension: the whole of it once)."""


def kind_of(func: Any) -> str:
    """The kind of an ATen ``OpOverload`` (see the module's list)."""
    name = func.overloadpacket.__name__.rstrip("_")
    from torch.utils.flop_counter import flop_registry

    if func.overloadpacket in flop_registry or name in GROUPED_GEMMS:
        return MATMUL
    if name in VIEWS or getattr(func, "is_view", False):
        return VIEW
    if name in FREE_OPS:
        return FREE
    if name in GATHERS:
        return GATHER
    if name in SCATTERS:
        return SCATTER
    if name in REDUCTION_FLOPS or name in REDUCTION_FLOP_RULES:
        return REDUCTION
    if name in POINTWISE_FLOPS:
        return POINTWISE
    return UNCOSTED


def flops_of(
    func: Any, kind: str, args: tuple, kwargs: dict, out: Any, numel_in: int, numel_out: int
) -> float:
    """The operator's FLOPs: PyTorch's registry for the matrix products, else the table's."""
    name = func.overloadpacket.__name__.rstrip("_")
    if kind == MATMUL and name in GROUPED_GEMMS:
        a, b = args[0], args[1]
        if a.dim() == 2 and b.dim() == 2:  # groups along the depth: M × N outputs over all of it
            return 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
        return 2.0 * out.numel() * a.shape[-1]
    if kind == MATMUL:
        from torch.utils.flop_counter import flop_registry

        return float(flop_registry[func.overloadpacket](*args, **kwargs, out_val=out))
    if name in REDUCTION_FLOP_RULES:
        return REDUCTION_FLOP_RULES[name](args, kwargs, numel_in)
    if kind == SCATTER:  # one a source element combined: the source is its last tensor argument
        sources = [a for a in args[1:] if hasattr(a, "numel")]
        return float(sources[-1].numel()) if name in SCATTER_FLOPS and sources else 0.0
    if kind == REDUCTION:
        return REDUCTION_FLOPS[name] * numel_in
    if kind == POINTWISE:
        return POINTWISE_FLOPS[name] * numel_out
    return 0.0
