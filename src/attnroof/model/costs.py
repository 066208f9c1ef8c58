"""A step's operators: each row of the layer table costed at the step by its entry in the
operator table (:mod:`attnroof.operators`: the binder turns the row's shape and the step's phase,
tokens and dtypes into the formula's arguments). :func:`model_ops` runs them over the table, in
execution order, each told what the kernel before it wrote and what weights the device holds:
what of its bytes may be in the last-level cache (:func:`attnroof.roofline.step_resident`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from attnroof.cost import Cost, Num
from attnroof.model.layers import LAYER, Precision, Step, layer_table, weight_bytes
from attnroof.model.spec import ModelConfig
from attnroof.operators import is_attention, rule
from attnroof.ops.experts import UNIFORM, Routing
from attnroof.ops.latent import ABSORBED
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT
from attnroof.roofline import Roof, step_resident

if TYPE_CHECKING:
    from attnroof.model.parallel import Shard


@dataclass(frozen=True, slots=True)
class Op:
    """One operator of a step: its cost per run and how many times the step runs it."""

    name: str
    cost: Cost
    count: int = 1
    attention: bool = False
    layer_kind: str = LAYER
    operator: str = ""
    kernel: Mapping[str, Any] = field(default_factory=dict)
    """What a forecast needs beside the cost (:meth:`attnroof.operators.Operator.kernel_shape`)."""
    written_before: Num = 0
    """Bytes the kernel before this operator's first one wrote (the last kernel of the operator
    before it in the step; none for the step's first)."""
    weights_held: Num = math.inf
    """Bytes of every weight the device holds (:func:`attnroof.model.layers.weight_bytes`): the
    weights it reads may be in the cache only where they all fit."""

    def resident(self, roof: Roof) -> list[Num]:
        """Each kernel's bytes at the cache's bandwidth on ``roof``, by the model step's rule."""
        return step_resident(self.cost.stages, roof, self.written_before, self.weights_held)


def in_order(ops: Sequence[Op], weights_held: Num) -> list[Op]:
    """``ops`` (a step's, in execution order) each told what the kernel before it wrote — the
    previous operator's last kernel in the layer table's order (a repeated layer's first operator
    follows its last in all but one of its runs, which writes the same residual stream) — and the
    weights the device holds."""
    out: list[Op] = []
    before: Num = 0
    for op in ops:
        out.append(replace(op, written_before=before, weights_held=weights_held))
        before = op.cost.stages[-1].bytes_written
    return out


def model_ops(
    model: ModelConfig,
    phase: str,
    batch: Num,
    context: Num,
    prec: Precision | None = None,
    *,
    fused: bool = True,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    routing: Routing | str = UNIFORM,
    latent_form: str = ABSORBED,
    shard: Shard | None = None,
) -> list[Op]:
    """Every operator of one step, in execution order, costed from the layer table.

    >>> from attnroof.model.config import builtin
    >>> ops = model_ops(builtin("llama-3.1-8b"), "decode", 1, 8192)
    >>> [(o.name, o.count) for o in ops][:3]
    [('embedding', 1), ('attention norm', 32), ('QKV projection', 32)]
    """
    p = prec or Precision()
    step = Step(phase, batch, context, p, fused, softmax_flops_per_element, routing, latent_form)
    ops = [
        Op(
            i.name,
            rule(i).cost(i, step),
            i.count,
            is_attention(i),
            i.layer_kind,
            i.operator,
            rule(i).kernel_shape(i, step),
        )
        for i in layer_table(model, shard)
    ]
    return in_order(ops, weight_bytes(model, p, shard))
