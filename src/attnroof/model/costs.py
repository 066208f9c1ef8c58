"""A step's operators: each row of the layer table costed at the step by its entry in the
operator table (:mod:`attnroof.operators`: the binder turns the row's shape and the step's phase,
tokens and dtypes into the formula's arguments). :func:`model_ops` runs them over the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attnroof.cost import Cost, Num
from attnroof.model.layers import LAYER, Precision, Step, layer_table
from attnroof.model.spec import ModelConfig
from attnroof.operators import is_attention, rule
from attnroof.ops.experts import UNIFORM, Routing
from attnroof.ops.latent import ABSORBED
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT

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
    step = Step(
        phase, batch, context, prec or Precision(), fused, softmax_flops_per_element, routing, latent_form
    )
    return [
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
