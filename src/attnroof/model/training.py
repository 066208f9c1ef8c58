"""A training step: the forward pass over every position, the backward pass of every row of the
layer table (through the operator table's ``backward`` slots), and what recomputation adds;
placed on the roofline and summed, with the memory it must hold (:mod:`.training_memory`).

    forward      the prefill step's rows, the LM head on every position (the loss needs all
                 the logits), no KV-cache write (training keeps no cache)
    backward     each row's backward formula, bound by its operator's entry (:mod:`attnroof.operators`)
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
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from attnroof.cost import Cost, Num
from attnroof.errors import InputError
from attnroof.model.analysis import OpResult, place_op
from attnroof.model.costs import Op, in_order
from attnroof.model.layers import ALL_TOKENS, PREFILL, OpInstance, Precision, Step, layer_table, weight_bytes
from attnroof.model.notes import step_notes
from attnroof.model.spec import ModelConfig
from attnroof.model.train_options import BACKWARD, FORWARD, PASS_NAMES, RECOMPUTE_PASS, TRAIN
from attnroof.model.training_memory import FULL, NONE, SELECTIVE, TrainMemory, TrainPrecision, train_memory
from attnroof.operators import is_attention, rule
from attnroof.ops.experts import UNIFORM
from attnroof.ops.latent import NAIVE
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
    # K, V: activations; every weight at the training dtype (a checkpoint's quantized layout is a
    # serving format: training reads the weights it updates)
    fwd_prec = Precision(prec.itemsize, prec.weight_itemsize, prec.itemsize, stored=False)
    step = Step(PREFILL, batch, context, fwd_prec, fused, softmax_flops_per_element)
    rows = [replace(i, tokens=ALL_TOKENS) for i in layer_table(model, shard) if rule(i).in_training]
    missing = sorted({i.operator for i in rows if rule(i).backward is None})
    if missing:
        raise InputError(
            f"model {model.name!r}: the backward pass of {', '.join(missing)} is not modelled yet; "
            "a training step would leave it out",
            param="model",
        )

    def op(i: OpInstance, cost: Cost, name: str | None = None, backward: bool = False) -> Op:
        shape = rule(i).kernel_shape(i, step, backward=backward)
        return Op(name or i.name, cost, i.count, is_attention(i), i.layer_kind, i.operator, shape)

    out = [(FORWARD, op(i, rule(i).cost(i, step))) for i in rows]
    for i in rows:
        selective = rule(i).selective
        if recompute == FULL and i.per_layer:
            out.append((RECOMPUTE, op(i, rule(i).cost(i, step), f"{i.name} (again)")))
        elif recompute == SELECTIVE and selective is not None:
            name, again = selective(i, rule(i).cost(i, step), fused)
            out.append((RECOMPUTE, op(i, again, name)))
    g = prec.grad_itemsize
    out += [
        (BACKWARD, op(i, rule(i).cost(i, step, backward=True, grad_itemsize=g), backward=True))
        for i in reversed(rows)
    ]
    placed = in_order([o for _, o in out], weight_bytes(model, fwd_prec, shard))
    return [(name, o) for (name, _), o in zip(out, placed, strict=True)]


def model_flops(model: ModelConfig, batch: Num, context: Num) -> Num:
    """PaLM's model FLOPs of one step of ``batch × context`` tokens (see the module's text).

    >>> from attnroof.model.config import builtin
    >>> round(model_flops(builtin("llama-3.1-8b"), 1, 8192) / 1e12, 1)  # 6·7.50e9·8192 + 6·32·4096·8192²
    421.6
    """
    per_token = (
        PALM_PARAM_FACTOR * matmul_params(model)
        + PALM_ATTENTION_FACTOR * _attention_layers(model) * _attention_width(model) * context // CAUSAL_SHARE
    )
    return per_token * batch * context


def _attention_layers(model: ModelConfig) -> int:
    """The layers whose attention forms score matrices: every layer of a transformer; of a hybrid
    only its softmax-attention layers (a linear-attention or state-space layer forms none, its
    entry's ``heads`` rule says 0; issue 23).

    >>> from attnroof.model.config import builtin
    >>> _attention_layers(builtin("llama-3.1-8b")), _attention_layers(builtin("nemotron-h-8b"))
    (32, 4)
    """
    return sum(
        i.count for i in layer_table(model) if rule(i).heads is not None and rule(i).query_heads(i) > 0
    )


def matmul_params(model: ModelConfig) -> int:
    """N of 6·N: the weights a token multiplies — every weight GEMM, its top_k experts (not all
    E), and latent attention's up-projection.

    >>> from attnroof.model.config import builtin
    >>> m = builtin("mixtral-8x7b")        # active parameters less the embedding and the norm scales
    >>> from attnroof.model.layers import active_params
    >>> matmul_params(m) == active_params(m) - 32000 * 4096 - (32 * 2 + 1) * 4096
    True
    """
    return sum(i.count * matmul(i) for i in layer_table(model) if (matmul := rule(i).matmul) is not None)


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
    (472, 0.9)
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
        model,
        batch,
        context,
        fused,
        recompute,
        p,
        roof,
        placed,
        totals,
        mem,
        train_notes(model, batch, context, p, fused, recompute),
    )


def train_notes(
    model: ModelConfig, batch: int, context: int, prec: TrainPrecision, fused: bool, recompute: str
) -> tuple[str, ...]:
    """What a training step's numbers leave out or assume: the model's own notes (its forward
    is a prefill's, latent attention decompressed) and the training step's."""
    forward = Precision(prec.itemsize, prec.weight_itemsize, stored=False)
    notes = [
        *step_notes(model, TRAIN, batch, context, forward, routing=UNIFORM, latent_form=NAIVE),
        "not counted: the loss (a softmax over the vocabulary per token), the optimizer's update "
        "(a memory-bound pass over the parameters and their states), dropout",
    ]
    if fused and recompute == SELECTIVE:
        notes.append(
            "selective recomputation with fused attention checkpoints the core attention (as "
            "Megatron-LM does): it keeps Q, K and V but not the log-sum-exp rows, and reruns the "
            "fused forward before its backward"
        )
    return tuple(notes)
