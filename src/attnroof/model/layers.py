"""The layer table: a model config becomes, once, the list of operator instances one forward
step runs, each with its shape and how many times a step runs it.

    instance           operator    shape (fixed by the config)           runs
    embedding          embedding   hidden (+ learned positions)          1
    attention norm     norm        hidden                                layers
    QKV projection     linear      hidden → q + 2·kv width               layers
    KV-cache write     copy        2·kv width per token                  layers
    attention          attention   head_dim, group, kv_heads, window     layers
    output projection  linear      q width → hidden                      layers
    residual add       add         hidden                                layers
    MLP norm           norm        hidden                                layers
    gate/up, up        linear      hidden → 2·intermediate (gated) or intermediate
    activation         activation  intermediate                          layers
    down projection    linear      intermediate → hidden                 layers
    residual add       add         hidden                                layers
    final norm         norm        hidden                                1
    LM head            linear      hidden → vocab, last position only    1

Everything that needs a model's shapes reads this table: the cost of each operator at a step
(:func:`model_ops`, through the operator table), parameters and weight bytes, the KV cache each
attention instance keeps, the widest activation, the GEMM shapes of the batching argument. An
architecture with other layer kinds adds rows here, not a path through the code.

A step runs ``batch × context`` tokens through every layer at prefill (causal attention over
the prompt) or ``batch`` tokens at decode, each against its own KV cache of ``context`` tokens
(``min(context, window)`` with a sliding window). A projection with a bias (GPT-2, Qwen2's QKV)
reads the bias with its weight and adds it in the GEMM's epilogue: one more read and one FLOP per
output element on the same kernel. Not counted (well under 1% of a layer's bytes and FLOPs):
rotary position embedding and sampling.

Length: the table and the binding of each row kind to the operator table are read together (a
row's shape and the arguments its operator is called with); split, they would drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from attnroof import arrays
from attnroof.cost import Access, Cost, Num, Stage
from attnroof.dtypes import BF16_BYTES
from attnroof.model.config import ModelConfig
from attnroof.operators import operator
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT

PREFILL, DECODE = "prefill", "decode"
PHASES = (PREFILL, DECODE)

EMBEDDING, DENSE, HEAD = "embedding", "dense", "head"
"""Layer kinds: the input tables, a dense transformer block, the output head (and final norm)."""

ALL_TOKENS, LAST_TOKEN = "all", "last"
"""Which tokens an instance runs on: every token of the step, or the last position of each
sequence (the LM head: only the next token's logits are wanted)."""

KV_TENSORS = 2
"""A KV cache keeps two tensors per token and layer: K and V."""

BIAS_FLOPS_PER_ELEMENT = 1
"""A bias add in the GEMM epilogue: one addition per output element."""


@dataclass(frozen=True, slots=True)
class Precision:
    """Bytes per element of activations (the compute dtype), weights and the KV cache."""

    itemsize: float = BF16_BYTES
    weight_itemsize: float = BF16_BYTES
    kv_itemsize: float = BF16_BYTES


@dataclass(frozen=True, slots=True)
class Step:
    """One forward step: the phase, sequences and context, dtypes and the attention variant.
    ``batch`` and ``context`` may be numpy arrays: the whole table is then costed on a grid."""

    phase: str
    batch: Num
    context: Num
    prec: Precision = field(default_factory=Precision)
    fused: bool = True
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"unknown phase {self.phase!r}; known: {', '.join(PHASES)}")

    def tokens(self, which: str = ALL_TOKENS) -> Num:
        """Tokens through an instance: ``batch × context`` at prefill, ``batch`` at decode; the
        last position of each sequence (``batch``) for a ``LAST_TOKEN`` instance."""
        if which == LAST_TOKEN or self.phase == DECODE:
            return self.batch
        return self.batch * self.context


@dataclass(frozen=True, slots=True)
class OpInstance:
    """One row of the layer table: a registered operator with the shape the config fixes."""

    name: str
    operator: str
    """Key in :data:`attnroof.operators.OPERATORS`."""
    count: int
    """Runs per step: ``layers`` for a per-layer operator, 1 for the embedding and the head."""
    layer_kind: str
    shape: Mapping[str, Any]
    params: int = 0
    """Parameters this instance owns (0 for one that shares another's, like a tied LM head)."""
    params_read: int = 0
    """Parameters one run reads whole (an embedding gathers rows: 0; a tied LM head: the table)."""
    tokens: str = ALL_TOKENS
    kernel: str = ""
    """The stage name its cost carries, when it differs from ``name``."""

    @property
    def is_attention(self) -> bool:
        return self.operator == "attention"

    def cost(self, step: Step) -> Cost:
        """The cost of one run of this instance at ``step``, from the operator table."""
        return _COST[self.operator](self, step)

    def cached_tokens(self, context: Num) -> Num:
        """Tokens of KV cache an attention instance keeps per sequence: the context, or the last
        ``window`` of it (a rolling buffer).

        >>> from attnroof.model.config import builtin
        >>> attn = next(i for i in layer_table(builtin("mistral-7b")) if i.is_attention)
        >>> attn.cached_tokens(32768)                   # sliding window 4096
        4096
        """
        window = self.shape.get("window")
        return context if window is None else arrays.minimum(context, window)

    @property
    def kv_elements_per_token(self) -> int:
        """Elements one token adds to this instance's KV cache (per run)."""
        return self.shape.get("kv_elements_per_token", 0)


# ---------------------------------------------------------------- the table


def layer_table(model: ModelConfig) -> list[OpInstance]:
    """The operator instances of one forward step of ``model``, in execution order.

    >>> from attnroof.model.config import builtin
    >>> [(i.name, i.operator, i.count) for i in layer_table(builtin("llama-3.1-8b"))][:3]
    [('embedding', 'embedding', 1), ('attention norm', 'norm', 32), ('QKV projection', 'linear', 32)]
    """
    m, L = model, model.layers
    h = m.hidden
    norm_params = h * (2 if m.norm == "layer" else 1)  # LayerNorm has a shift beside its scale

    def lin(name: str, k: int, out: int, bias: bool, count: int = L, kind: str = DENSE) -> OpInstance:
        params = k * out + out * bias
        shape = {"k": k, "m": out, "bias": bias}
        return OpInstance(name, "linear", count, kind, shape, params, params)

    def nrm(name: str, count: int = L, kind: str = DENSE) -> OpInstance:
        return OpInstance(name, "norm", count, kind, {"width": h, "kind": m.norm}, norm_params, norm_params)

    mlp_in = 2 * m.intermediate if m.gated else m.intermediate
    table = [
        OpInstance(
            "embedding",
            "embedding",
            1,
            EMBEDDING,
            {"width": h, "learned_positions": m.learned_positions},
            params=(m.vocab + m.learned_positions) * h,
        ),
        nrm("attention norm"),
        lin("QKV projection", h, m.q_width + 2 * m.kv_width, m.qkv_bias),
        OpInstance(
            "KV-cache write",
            "copy",
            L,
            DENSE,
            {"elements_per_token": KV_TENSORS * m.kv_width, "tensor": "new K,V"},
        ),
        OpInstance(
            "attention",
            "attention",
            L,
            DENSE,
            {
                "head_dim": m.head_dim,
                "group": m.group,
                "kv_heads": m.kv_heads,
                "window": m.sliding_window,
                "kv_elements_per_token": KV_TENSORS * m.kv_width,
            },
        ),
        lin("output projection", m.q_width, h, m.o_bias),
        OpInstance("residual add (attention)", "add", L, DENSE, {"width": h}, kernel="residual add"),
        nrm("MLP norm"),
        lin("gate/up projection" if m.gated else "up projection", h, mlp_in, m.mlp_bias),
        OpInstance(
            "activation (SiLU·up)" if m.gated else "activation (GELU)",
            "activation",
            L,
            DENSE,
            {"width": m.intermediate, "gated": m.gated},
            kernel="activation",
        ),
        lin("down projection", m.intermediate, h, m.mlp_bias),
        OpInstance("residual add (MLP)", "add", L, DENSE, {"width": h}, kernel="residual add"),
        nrm("final norm", 1, HEAD),
        OpInstance(
            "LM head",
            "linear",
            1,
            HEAD,
            {"k": h, "m": m.vocab, "bias": False},
            params=0 if m.tied else h * m.vocab,
            params_read=h * m.vocab,  # tied: the embedding table, read whole here
            tokens=LAST_TOKEN,
        ),
    ]
    return table


def params(model: ModelConfig) -> int:
    """Every parameter of ``model``, summed over its layer table."""
    return sum(i.count * i.params for i in layer_table(model))


def params_read(model: ModelConfig) -> int:
    """Parameters one step reads whole: all but the tables it only gathers rows of."""
    return sum(i.count * i.params_read for i in layer_table(model))


def gemm_shapes(model: ModelConfig) -> list[tuple[str, int, int]]:
    """(name, k, m) of each weight GEMM of ``model``: the linear rows of its layer table."""
    return [(i.name, i.shape["k"], i.shape["m"]) for i in layer_table(model) if i.operator == "linear"]


# ---------------------------------------------------------------- costs, through the operator table


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


def _norm(i: OpInstance, st: Step) -> Cost:
    p = st.prec
    return operator("norm").forward(
        st.tokens(),
        i.shape["width"],
        itemsize=p.itemsize,
        weight_itemsize=p.weight_itemsize,
        kind=i.shape["kind"],
        name=i.kernel or i.name,
    )


def _add(i: OpInstance, st: Step) -> Cost:
    return operator("add").forward(
        st.tokens(), i.shape["width"], itemsize=st.prec.itemsize, name=i.kernel or i.name
    )


def _activation(i: OpInstance, st: Step) -> Cost:
    return operator("activation").forward(
        st.tokens(), i.shape["width"], gated=i.shape["gated"], itemsize=st.prec.itemsize
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


def _attention(i: OpInstance, st: Step) -> Cost:
    """Prefill: causal attention over the prompt. Decode: one token per sequence against its
    cache (``decode``), ``group = heads / kv_heads`` query heads on each KV head."""
    p = st.prec
    kw: dict[str, Any] = dict(
        fused=st.fused,
        group=i.shape["group"],
        itemsize=p.itemsize,
        kv_itemsize=p.kv_itemsize,
        softmax_flops_per_element=st.softmax_flops_per_element,
        batch=st.batch,
        kv_heads=i.shape["kv_heads"],
    )
    d = i.shape["head_dim"]
    if st.phase == PREFILL:
        return operator("attention").forward(st.context, d, causal=True, **kw)
    return operator("decode").forward(i.cached_tokens(st.context), d, **kw)


_COST: dict[str, Callable[[OpInstance, Step], Cost]] = {
    "linear": _linear,
    "norm": _norm,
    "add": _add,
    "activation": _activation,
    "embedding": _embedding,
    "copy": _copy,
    "attention": _attention,
}
"""How a layer-table row's shape and a step become the registered operator's arguments."""


# ---------------------------------------------------------------- one step


@dataclass(frozen=True, slots=True)
class Op:
    """One operator of a step: its cost per run and how many times the step runs it."""

    name: str
    cost: Cost
    count: int = 1
    attention: bool = False
    layer_kind: str = DENSE
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
) -> list[Op]:
    """Every operator of one step, in execution order, costed from the layer table.

    >>> from attnroof.model.config import builtin
    >>> ops = model_ops(builtin("llama-3.1-8b"), "decode", 1, 8192)
    >>> [(o.name, o.count) for o in ops][:3]
    [('embedding', 1), ('attention norm', 32), ('QKV projection', 32)]
    """
    step = Step(phase, batch, context, prec or Precision(), fused, softmax_flops_per_element)
    return [
        Op(i.name, i.cost(step), i.count, i.is_attention, i.layer_kind, i.operator)
        for i in layer_table(model)
    ]
