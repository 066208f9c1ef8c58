"""A training step: the forward pass over every position, the backward pass of every row of the
layer table (through the operator table's ``backward`` slots), and what recomputation adds;
placed on the roofline and summed, with the memory it must hold (:mod:`.training_memory`).

    forward      the prefill step's rows, the LM head on every position (the loss needs all
                 the logits), no KV-cache write (training keeps no cache)
    backward     each row's backward formula, bound here to the row's shape
    recompute    none; selective: unfused attention recomputes S and P (Q·Kᵀ and softmax
                 again; fused attention recomputes them inside its backward anyway); full:
                 every layer's forward runs again before its backward

FLOPs are reported two ways. **Hardware FLOPs** are what the kernels do: the counted forward,
backward and recomputation, causal attention halved. **Model FLOPs** are the PaLM paper's
(Chowdhery et al. 2022, appendix B): 6·N + 12·L·H·Q·T per token, N the parameters multiplied
per token (the weight GEMMs, LM head included; an embedding table only gathered is not), L
layers, H query heads of width Q, T the context — with the attention term halved, 6·L·H·Q·T,
because every model here is causal and computes half the scores (PaLM's 12 counts them all,
which would put MFU above HFU; the FlashAttention papers and Megatron-LM halve it too).
MFU = model FLOPs / (step time × peak), HFU the same with hardware FLOPs; at the roofline's
time bound they are the ceilings a real run can approach.

Length: the backward binders sit beside the step they cost and the results they fill; split,
a row kind's forward and backward arguments would drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from attnroof.cost import Access, Cost, Num, Stage
from attnroof.errors import InputError
from attnroof.model.analysis import OpResult, place_op
from attnroof.model.config import ModelConfig
from attnroof.model.costs import LATENT_WIDTHS, Op, attention_args, expert_args, expert_share, row_tokens
from attnroof.model.layers import ALL_TOKENS, PREFILL, OpInstance, Precision, Step, layer_table
from attnroof.model.train_options import BACKWARD, FORWARD, PASS_NAMES, RECOMPUTE_PASS
from attnroof.model.training_memory import FULL, NONE, SELECTIVE, TrainMemory, TrainPrecision, train_memory
from attnroof.operators import CostFn, operator
from attnroof.ops.attention import MASK, QK, SOFTMAX
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT
from attnroof.roofline import COMPUTE, MEMORY, Roof

if TYPE_CHECKING:
    from attnroof.model.parallel import Shard

RECOMPUTE = RECOMPUTE_PASS

PALM_PARAM_FACTOR = 6
"""Forward 2 and backward 4 FLOPs per parameter per token (a multiply-add each, for Y, dX, dW)."""
PALM_ATTENTION_FACTOR = 12
"""Q·Kᵀ and P·V, 2 FLOPs per multiply-add, forward and backward (×3): 2·2·3 = 12 per L·H·Q·T."""
CAUSAL_SHARE = 2
"""A causal model computes half the scores: PaLM's attention term divided by 2."""
MODEL_FLOPS_CONVENTION = (
    "PaLM appendix B, 6·N + 12·L·H·Q·T per token, with the attention term halved for a causal "
    "model (6·L·H·Q·T); N = parameters of the weight GEMMs (LM head included, gathered "
    "embedding tables not)"
)

Binder = Callable[[OpInstance, Step, float], Cost]

NO_BACKWARD = frozenset({"copy"})
"""Rows a training step leaves out on purpose: the KV-cache write (training keeps no cache)."""


def _backward(name: str) -> CostFn:
    """The registered backward formula of operator ``name`` (every operator has one)."""
    fn = operator(name).backward
    assert fn is not None, name
    return fn


def _linear(i: OpInstance, st: Step, g: float) -> Cost:
    n, k, out, p = st.tokens(i.tokens), i.shape["k"], i.shape["m"], st.prec
    cost = _backward("linear")(
        n,
        k,
        out,
        itemsize=p.itemsize,
        weight_itemsize=p.weight_itemsize,
        grad_itemsize=g,
        name=i.kernel or i.name,
    )
    if not i.shape["bias"]:
        return cost
    dx, dw = cost.stages  # the bias's gradient: a column sum of dY in dW's epilogue
    bias = Stage(dw.name, dw.flops + n * out, dw.reads, (*dw.writes, Access("d bias", out * g)))
    return Cost((dx, bias))


def _norm(i: OpInstance, st: Step, g: float) -> Cost:
    p = st.prec
    return _backward("norm")(
        row_tokens(i, st),
        i.shape["width"],
        itemsize=p.itemsize,
        weight_itemsize=p.weight_itemsize,
        grad_itemsize=g,
        kind=i.shape["kind"],
        name=i.kernel or i.name,
        scale_width=i.shape.get("scale_width"),
    )


def _add(i: OpInstance, st: Step, g: float) -> Cost:
    return _backward("add")(
        row_tokens(i, st), i.shape["width"], itemsize=st.prec.itemsize, name=i.kernel or i.name
    )


def _activation(i: OpInstance, st: Step, g: float) -> Cost:
    return _backward("activation")(
        st.tokens() * i.shape.get("routed", 1),
        i.shape["width"],
        gated=i.shape["gated"],
        itemsize=st.prec.itemsize,
        function=i.shape.get("function", "silu"),
    )


def _experts(i: OpInstance, st: Step, g: float) -> Cost:
    args, kw = expert_args(i, st)
    return expert_share(i, _backward("experts")(*args, grad_itemsize=g, **kw))


def _embedding(i: OpInstance, st: Step, g: float) -> Cost:
    n, h, p = st.tokens(), i.shape["width"], st.prec
    rows = dict(weight_itemsize=p.weight_itemsize, itemsize=p.itemsize, grad_itemsize=g)
    scatter = _backward("embedding")
    cost = scatter(n, h, name="token rows", tensor="embedding rows", **rows)
    if i.shape["learned_positions"]:  # the position add passes its gradient on unchanged
        cost = cost + scatter(n, h, name="position rows", tensor="position rows", **rows)
    return cost


def _attention(i: OpInstance, st: Step, g: float) -> Cost:
    kw = attention_args(i, st)
    return _backward("attention")(
        st.context, i.shape["head_dim"], causal=True, window=i.shape.get("window"), **kw
    )


def _latent_attention(i: OpInstance, st: Step, g: float) -> Cost:
    """Training runs latent attention decompressed (the naive form), as prefill does."""
    p = st.prec
    widths = {k: i.shape[k] for k in LATENT_WIDTHS}
    return _backward("latent attention")(
        st.context,
        st.context,
        causal=True,
        fused=st.fused,
        batch=st.batch,
        itemsize=p.itemsize,
        kv_itemsize=p.kv_itemsize,
        weight_itemsize=p.weight_itemsize,
        grad_itemsize=g,
        softmax_flops_per_element=st.softmax_flops_per_element,
        **widths,
    )


_BACKWARD: dict[str, Binder] = {
    "latent attention": _latent_attention,
    "experts": _experts,
    "linear": _linear,
    "norm": _norm,
    "add": _add,
    "activation": _activation,
    "embedding": _embedding,
    "attention": _attention,
}
"""How a layer-table row's shape becomes its operator's backward arguments (the KV-cache write
does not run in training)."""


@dataclass(frozen=True, slots=True)
class TrainOp:
    """One operator of one pass of a training step, placed on the roof."""

    pass_name: str
    result: OpResult

    def to_json(self) -> dict[str, Any]:
        return {"pass": self.pass_name, **self.result.to_json()}


def train_ops(
    model: ModelConfig,
    batch: Num,
    context: Num,
    prec: TrainPrecision,
    *,
    fused: bool = True,
    recompute: str = NONE,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    shard: Shard | None = None,
) -> list[tuple[str, Op]]:
    """(pass, op) for every operator run by a training step, forward then recompute and backward
    (with a ``shard``: one device's part of a parallel plan, :mod:`attnroof.model.parallel`).

    >>> from attnroof.model.config import builtin
    >>> ops = train_ops(builtin("llama-3.1-8b"), 1, 4096, TrainPrecision())
    >>> [(p, o.name) for p, o in ops][-1]
    ('backward', 'embedding')
    """
    if recompute not in (NONE, SELECTIVE, FULL):
        raise ValueError(f"unknown recompute {recompute!r}")
    fwd_prec = Precision(prec.itemsize, prec.weight_itemsize, prec.itemsize)  # K, V: activations
    step = Step(PREFILL, batch, context, fwd_prec, fused, softmax_flops_per_element)
    table = layer_table(model, shard)
    missing = sorted(
        {i.operator for i in table if i.operator not in _BACKWARD and i.operator not in NO_BACKWARD}
    )
    if missing:
        raise InputError(
            f"model {model.name!r}: the backward pass of {', '.join(missing)} is not modelled yet; "
            "a training step would leave it out",
            param="model",
        )
    rows = [replace(i, tokens=ALL_TOKENS) for i in table if i.operator in _BACKWARD]

    def op(i: OpInstance, cost: Cost, name: str | None = None) -> Op:
        return Op(name or i.name, cost, i.count, i.is_attention, i.layer_kind, i.operator)

    out = [(FORWARD, op(i, i.cost(step))) for i in rows]
    for i in rows:
        if recompute == FULL and i.per_layer:
            out.append((RECOMPUTE, op(i, i.cost(step), f"{i.name} (again)")))
        elif recompute == SELECTIVE and i.is_attention and not fused:
            again = Cost(tuple(s for s in i.cost(step) if s.name in (QK, MASK, SOFTMAX)))
            out.append((RECOMPUTE, op(i, again, "attention S, P (again)")))
        elif recompute == SELECTIVE and i.is_attention:  # the fused kernel's forward, for its L rows
            out.append((RECOMPUTE, op(i, i.cost(step), f"{i.name} (again)")))
    out += [(BACKWARD, op(i, _BACKWARD[i.operator](i, step, prec.grad_itemsize))) for i in reversed(rows)]
    return out


def model_flops(model: ModelConfig, batch: Num, context: Num) -> Num:
    """PaLM's model FLOPs of one step of ``batch × context`` tokens (see the module's text).

    >>> from attnroof.model.config import builtin
    >>> round(model_flops(builtin("llama-3.1-8b"), 1, 8192) / 1e12, 1)  # 6·7.50e9·8192 + 6·32·4096·8192²
    421.6
    """
    per_token = (
        PALM_PARAM_FACTOR * matmul_params(model)
        + PALM_ATTENTION_FACTOR * model.layers * _attention_width(model) * context // CAUSAL_SHARE
    )
    return per_token * batch * context


def matmul_params(model: ModelConfig) -> int:
    """N of 6·N: the weights a token multiplies — every weight GEMM, its top_k experts (not all
    E), and latent attention's up-projection.

    >>> from attnroof.model.config import builtin
    >>> m = builtin("mixtral-8x7b")        # active parameters less the embedding and the norm scales
    >>> matmul_params(m) == m.active_params() - 32000 * 4096 - (32 * 2 + 1) * 4096
    True
    """
    total = 0
    for i in layer_table(model):
        if i.operator == "linear":
            total += i.count * i.shape["k"] * i.shape["m"]
        elif i.operator == "experts":
            total += i.count * i.shape["top_k"] * i.shape["k"] * i.shape["m"]
        elif i.operator == "latent attention":
            total += i.count * i.params
    return total


def _attention_width(model: ModelConfig) -> int:
    """H·Q of PaLM's attention term: the query width (latent attention: heads × the mean of the
    Q·Kᵀ and P·V widths, nope + ρ and v)."""
    lat = model.latent
    if lat is None:
        return model.q_width
    return model.heads * (lat.qk_nope_head_dim + lat.qk_rope_head_dim + lat.v_head_dim) // 2


@dataclass(frozen=True, slots=True)
class TrainTotals:
    """One training step (SI units). ``flops`` is the hardware count, by pass."""

    flops_by_pass: dict[str, float]
    time_by_pass: dict[str, float]
    time_s: float
    """Σ of every operator's time, in execution order (the passes' times add up to it)."""
    bytes: float
    model_flops: float
    tokens: float
    peak_flops_per_s: float
    memory_bound_share: float
    attention_share: float

    @property
    def flops(self) -> float:
        return sum(self.flops_by_pass.values())

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.time_s * self.peak_flops_per_s)

    @property
    def hfu(self) -> float:
        return self.flops / (self.time_s * self.peak_flops_per_s)

    @property
    def limiter(self) -> str:
        return MEMORY if self.memory_bound_share >= 0.5 else COMPUTE

    def to_json(self) -> dict[str, Any]:
        return {
            "forward_flops": self.flops_by_pass[FORWARD],
            "backward_flops": self.flops_by_pass[BACKWARD],
            "recompute_flops": self.flops_by_pass[RECOMPUTE],
            "hardware_flops": self.flops,
            "model_flops": self.model_flops,
            "model_flops_per_token": self.model_flops / self.tokens,
            "model_flops_convention": MODEL_FLOPS_CONVENTION,
            "bytes": self.bytes,
            "intensity": self.flops / self.bytes,
            "forward_time_s": self.time_by_pass[FORWARD],
            "backward_time_s": self.time_by_pass[BACKWARD],
            "recompute_time_s": self.time_by_pass[RECOMPUTE],
            "time_s": self.time_s,
            "tokens": self.tokens,
            "tokens_per_s": self.tokens / self.time_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "attention_share": self.attention_share,
            "memory_bound_share": self.memory_bound_share,
            "limiter": self.limiter,
        }


@dataclass(frozen=True, slots=True)
class TrainAnalysis:
    model: ModelConfig
    batch: int
    context: int
    fused: bool
    recompute: str
    prec: TrainPrecision
    roof: Roof
    ops: tuple[TrainOp, ...]
    totals: TrainTotals
    memory: TrainMemory
    notes: tuple[str, ...] = field(default=())


def analyse_train(
    model: ModelConfig,
    batch: int,
    context: int,
    roof: Roof,
    prec: TrainPrecision | None = None,
    *,
    capacity_bytes: float | None = None,
    fused: bool = True,
    recompute: str = NONE,
    softmax_flops_per_element: float = SOFTMAX_FLOPS_PER_ELEMENT,
) -> TrainAnalysis:
    """Place every operator of one training step on ``roof``, sum by pass, and size its memory.

    >>> from attnroof.model.config import builtin
    >>> a = analyse_train(builtin("llama-3.1-8b"), 1, 8192, Roof(989e12, 3.35e12))
    >>> round(a.totals.time_s * 1e3), round(a.totals.mfu, 2)    # compute-bound: ~MFU of the GEMMs
    (469, 0.91)
    """
    p = prec or TrainPrecision()
    placed = tuple(
        TrainOp(name, place_op(op, roof))
        for name, op in train_ops(
            model,
            batch,
            context,
            p,
            fused=fused,
            recompute=recompute,
            softmax_flops_per_element=softmax_flops_per_element,
        )
    )

    def total(attr: str, which: str) -> float:
        return float(sum(t.result.count * getattr(t.result, attr) for t in placed if t.pass_name == which))

    time = sum(t.result.count * t.result.time_s for t in placed)
    totals = TrainTotals(
        flops_by_pass={w: total("flops", w) for w in PASS_NAMES},
        time_by_pass={w: total("time_s", w) for w in PASS_NAMES},
        time_s=time,
        bytes=sum(total("bytes", w) for w in PASS_NAMES),
        model_flops=float(model_flops(model, batch, context)),
        tokens=float(batch * context),
        peak_flops_per_s=roof.peak_flops_per_s,
        memory_bound_share=sum(t.result.count * t.result.memory_time_s for t in placed) / time,
        attention_share=sum(t.result.count * t.result.time_s for t in placed if t.result.attention) / time,
    )
    mem = train_memory(model, batch, context, p, capacity_bytes, fused=fused, recompute=recompute)
    return TrainAnalysis(
        model, batch, context, fused, recompute, p, roof, placed, totals, mem, _notes(fused, recompute)
    )


def _notes(fused: bool, recompute: str) -> tuple[str, ...]:
    notes = [
        "not counted: the loss (a softmax over the vocabulary per token), the optimizer's update "
        "(a memory-bound pass over the parameters and their states), dropout"
    ]
    if fused and recompute == SELECTIVE:
        notes.append(
            "selective recomputation with fused attention checkpoints the core attention (as "
            "Megatron-LM does): it keeps Q, K and V but not the log-sum-exp rows, and reruns the "
            "fused forward before its backward"
        )
    return tuple(notes)
