"""How each row of the layer table is costed at a step: the row's shape and the step's phase,
tokens and dtypes become the arguments of its registered operator (:mod:`attnroof.operators`).
One binding per kind of row; :func:`model_ops` runs them over the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnroof.cost import Access, Cost, Num, Stage
from attnroof.model.config import ModelConfig
from attnroof.model.layers import (
    LAYER,
    PREFILL,
    OpInstance,
    Precision,
    Step,
    layer_table,
)
from attnroof.operators import operator
from attnroof.ops.experts import UNIFORM
from attnroof.ops.latent import ABSORBED, NAIVE
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT

if TYPE_CHECKING:
    from attnroof.model.parallel import Shard

BIAS_FLOPS_PER_ELEMENT = 1
"""A bias add in the GEMM epilogue: one addition per output element."""


def _linear(i: OpInstance, st: Step) -> Cost:
    n, k, out = st.tokens(i.tokens), i.shape["k"], i.shape["m"]
    p = st.prec
    cost = operator("linear").forward(
        n, k, out, itemsize=p.itemsize, weight_itemsize=p.weight_itemsize, name=i.kernel or i.name
    )
    if not i.shape["bias"]:
        return cost
    (stage,) = cost.stages
    bias = Access("bias", out * p.weight_itemsize)
    flops = stage.flops + BIAS_FLOPS_PER_ELEMENT * n * out
    return Cost((Stage(stage.name, flops, (*stage.reads, bias), stage.writes),))


def row_tokens(i: OpInstance, st: Step) -> Num:
    """Tokens an element-wise row runs on: all of the step's, or 1/t of them where sequence
    parallelism spreads the norms and adds of a tensor-parallel group (``sequence_shards`` = t)."""
    return st.tokens() / i.shape["sequence_shards"] if "sequence_shards" in i.shape else st.tokens()


def _norm(i: OpInstance, st: Step) -> Cost:
    p = st.prec
    return operator("norm").forward(
        row_tokens(i, st),
        i.shape["width"],
        itemsize=p.itemsize,
        weight_itemsize=p.weight_itemsize,
        kind=i.shape["kind"],
        name=i.kernel or i.name,
        scale_width=i.shape.get("scale_width"),
    )


def _add(i: OpInstance, st: Step) -> Cost:
    return operator("add").forward(
        row_tokens(i, st), i.shape["width"], itemsize=st.prec.itemsize, name=i.kernel or i.name
    )


def _activation(i: OpInstance, st: Step) -> Cost:
    """The MLP's activation; for experts, on every routed token (``routed`` = top_k per token)."""
    return operator("activation").forward(
        st.tokens() * i.shape.get("routed", 1),
        i.shape["width"],
        gated=i.shape["gated"],
        itemsize=st.prec.itemsize,
        function=i.shape.get("function", "silu"),
    )


def _embedding(i: OpInstance, st: Step) -> Cost:
    n, h, p = st.tokens(), i.shape["width"], st.prec
    gather = operator("embedding").forward
    rows = dict(weight_itemsize=p.weight_itemsize, itemsize=p.itemsize)
    cost = gather(n, h, name="token rows", tensor="embedding rows", **rows)
    if i.shape["learned_positions"]:
        cost = (
            cost
            + gather(n, h, name="position rows", tensor="position rows", **rows)
            + operator("add").forward(n, h, itemsize=p.itemsize, name="position add")
        )
    return cost


def _copy(i: OpInstance, st: Step) -> Cost:
    p = st.prec
    return operator("copy").forward(
        st.tokens() * i.shape["elements_per_token"],
        read_itemsize=p.itemsize,
        write_itemsize=p.kv_itemsize,
        name=i.kernel or i.name,
        tensor=i.shape["tensor"],
    )


def attention_args(i: OpInstance, st: Step) -> dict[str, Any]:
    """An attention row's keyword arguments at ``st`` (its heads, dtypes, variant), for the
    forward and the backward formulas alike."""
    p = st.prec
    return dict(
        fused=st.fused,
        group=i.shape["group"],
        itemsize=p.itemsize,
        kv_itemsize=p.kv_itemsize,
        softmax_flops_per_element=st.softmax_flops_per_element,
        batch=st.batch,
        kv_heads=i.shape["kv_heads"],
    )


def _attention(i: OpInstance, st: Step) -> Cost:
    """Prefill: causal attention over the prompt. Decode: one token per sequence against its
    cache (``decode``), ``group = heads / kv_heads`` query heads on each KV head."""
    kw = attention_args(i, st)
    d = i.shape["head_dim"]
    if st.phase == PREFILL:  # a windowed layer computes only the band within its window
        return operator("attention").forward(st.context, d, causal=True, window=i.shape.get("window"), **kw)
    return operator("decode").forward(i.cached_tokens(st.context), d, **kw)


def expert_args(i: OpInstance, st: Step) -> tuple[tuple[Num, int, int], dict[str, Any]]:
    """An expert row's arguments at ``st``, for its forward and its backward alike. Under expert
    parallelism (``ep`` in the shape) the tokens are the EP group's — ``ep`` replicas pool theirs —
    and the caller keeps 1/ep of the cost: with balanced routing each device runs as many routed
    tokens as it sends, on E/ep experts, each touched as often as the pooled tokens touch it."""
    p = st.prec
    kw = dict(
        experts=i.shape["experts"],
        top_k=i.shape["top_k"],
        routing=st.routing,
        itemsize=p.itemsize,
        weight_itemsize=p.weight_itemsize,
        bias=i.shape["bias"],
        name=i.kernel or i.name,
    )
    return (st.tokens() * i.shape.get("ep", 1), i.shape["k"], i.shape["m"]), kw


LATENT_WIDTHS = ("heads", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
"""A latent-attention row's shape keys, which are its operator's keyword arguments."""


def _experts(i: OpInstance, st: Step) -> Cost:
    """Routed experts: every token through top_k of them, weights read for those touched."""
    args, kw = expert_args(i, st)
    return expert_share(i, operator("experts").forward(*args, **kw))


def expert_share(i: OpInstance, cost: Cost) -> Cost:
    """Expert parallel: one device's 1/ep of the group's expert work (see :func:`expert_args`)."""
    ep = i.shape.get("ep", 1)
    return cost if ep == 1 else Cost(tuple(s.scaled(1 / ep) for s in cost.stages))


def _latent_attention(i: OpInstance, st: Step) -> Cost:
    """Prefill decompresses the latent (the naive form, compute-bound anyway); decode runs the
    step's ``latent_form``, absorbed by default."""
    p = st.prec
    widths = {k: i.shape[k] for k in LATENT_WIDTHS}
    kw: dict[str, Any] = dict(
        fused=st.fused,
        batch=st.batch,
        itemsize=p.itemsize,
        kv_itemsize=p.kv_itemsize,
        weight_itemsize=p.weight_itemsize,
        softmax_flops_per_element=st.softmax_flops_per_element,
        **widths,
    )
    latent = operator("latent attention").forward
    if st.phase == PREFILL:
        return latent(st.context, st.context, form=NAIVE, causal=True, **kw)
    return latent(1, i.cached_tokens(st.context), form=st.latent_form, **kw)


COST: dict[str, Callable[[OpInstance, Step], Cost]] = {
    "linear": _linear,
    "norm": _norm,
    "add": _add,
    "activation": _activation,
    "embedding": _embedding,
    "copy": _copy,
    "attention": _attention,
    "experts": _experts,
    "latent attention": _latent_attention,
}
"""How a layer-table row's shape and a step become the registered operator's arguments."""


@dataclass(frozen=True, slots=True)
class Op:
    """One operator of a step: its cost per run and how many times the step runs it."""

    name: str
    cost: Cost
    count: int = 1
    attention: bool = False
    layer_kind: str = LAYER
    operator: str = ""


def model_ops(
    model: ModelConfig,
    phase: str,
    batch: Num,
    context: Num,
    prec: Precision | None = None,
    *,
    fused: bool = True,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    routing: str = UNIFORM,
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
        Op(i.name, i.cost(step), i.count, i.is_attention, i.layer_kind, i.operator)
        for i in layer_table(model, shard)
    ]
