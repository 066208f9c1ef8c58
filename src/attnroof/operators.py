"""The operator table: every operator attnroof can cost, registered once.

Like ``torch/utils/flop_counter.py``'s registered formulas or jax's per-primitive roofline rules,
each entry names an operator and points at its formula; nothing else in attnroof decides what an
operator costs. An entry has two slots:

- ``forward``: the forward pass, a function of shapes returning a :class:`~attnroof.cost.Cost`
  (the formulas of :mod:`attnroof.ops`, unchanged);
- ``backward``: the backward pass, a function of the forward's arguments (and the bytes of a
  weight's gradient, ``grad_itemsize``, where there is a weight): :mod:`attnroof.ops.backward`;

How a row is cut across devices depends on the row (a column- or a row-parallel weight), not on
its operator: the layer table says it per row and :mod:`attnroof.model.parallel` cuts it.

``kind`` groups operators the way a calibration fits them and a report sums them: ``gemm``
(weight matrix products), ``attention`` (the score/softmax/value pipeline) and ``memory``
(element-wise passes and copies, always far below any ridge); ``collective`` operators move
bytes between devices and return a :class:`~attnroof.ops.collectives.Comm` placed on the link
roof (:mod:`attnroof.ops.collectives`), not a :class:`~attnroof.cost.Cost`.

    >>> operator("linear").forward(1, 8192, 8192).flops    # 2 · 1 · 8192 · 8192
    134217728
    >>> sorted(o for o in OPERATORS if OPERATORS[o].kind != COLLECTIVE)
    ['activation', 'add', 'attention', 'copy', 'decode', 'embedding', 'experts', 'latent attention', 'linear', 'norm', 'softmax']
    >>> [o for o in OPERATORS if OPERATORS[o].kind == COLLECTIVE]
    ['all-reduce', 'reduce-scatter', 'all-gather', 'all-to-all', 'send/recv']
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnroof.errors import InputError
from attnroof.ops import attention, decode, linear
from attnroof.ops import backward as bwd
from attnroof.ops import collectives as coll
from attnroof.ops.elementwise import activation, add, copy, embedding, norm
from attnroof.ops.experts import expert_gemm
from attnroof.ops.latent import latent_attention
from attnroof.ops.softmax import softmax

GEMM, ATTENTION, MEMORY_PASS, COLLECTIVE = "gemm", "attention", "memory", "collective"
KINDS = (GEMM, ATTENTION, MEMORY_PASS, COLLECTIVE)

CostFn = Callable[..., Any]
"""A formula: returns a :class:`~attnroof.cost.Cost`, or a :class:`~attnroof.ops.collectives.Comm` for a collective."""


@dataclass(frozen=True, slots=True)
class Operator:
    """One registered operator: its name, its kind and the formulas of each pass."""

    name: str
    kind: str
    forward: CostFn
    backward: CostFn | None = None

    @property
    def summary(self) -> str:
        """The first line of the forward formula's docstring."""
        return (self.forward.__doc__ or "").strip().splitlines()[0]


OPERATORS: dict[str, Operator] = {}


def register(
    name: str,
    forward: CostFn,
    *,
    kind: str,
    backward: CostFn | None = None,
) -> Operator:
    """Add ``name`` to the table. A name is registered once: a second registration is a bug."""
    if name in OPERATORS:
        raise ValueError(f"operator {name!r} is already registered")
    if kind not in KINDS:
        raise ValueError(f"operator {name!r}: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    op = Operator(name, kind, forward, backward)
    OPERATORS[name] = op
    return op


def operator(name: str) -> Operator:
    """The registered operator ``name``; :class:`InputError` with a suggestion otherwise."""
    try:
        return OPERATORS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(OPERATORS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InputError(f"unknown operator {name!r}{hint} (known: {', '.join(sorted(OPERATORS))})") from None


register("linear", linear, kind=GEMM, backward=bwd.linear_backward)
register("attention", attention, kind=ATTENTION, backward=bwd.attention_backward)
register("decode", decode, kind=ATTENTION, backward=bwd.decode_backward)
register("softmax", softmax, kind=MEMORY_PASS, backward=bwd.softmax_backward)
register("norm", norm, kind=MEMORY_PASS, backward=bwd.norm_backward)
register("add", add, kind=MEMORY_PASS, backward=bwd.add_backward)
register("activation", activation, kind=MEMORY_PASS, backward=bwd.activation_backward)
register("embedding", embedding, kind=MEMORY_PASS, backward=bwd.embedding_backward)
register("copy", copy, kind=MEMORY_PASS, backward=bwd.copy_backward)
register("experts", expert_gemm, kind=GEMM, backward=bwd.expert_backward)
register("latent attention", latent_attention, kind=ATTENTION, backward=bwd.latent_attention_backward)
for _name in coll.COLLECTIVES:
    register(
        _name, coll.COLLECTIVE_FN[_name], kind=COLLECTIVE, backward=coll.COLLECTIVE_FN[coll.CONJUGATE[_name]]
    )
