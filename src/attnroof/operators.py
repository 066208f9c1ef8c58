"""The operator table: every operator attnroof can cost, and everything attnroof knows about it,
in one entry.

Like ``torch/utils/flop_counter.py``'s registered formulas or jax's per-primitive roofline rules,
each entry names an operator and holds its rules; nothing else in attnroof asks which operator a
row is. An entry has:

    forward, backward   the formulas (:mod:`attnroof.ops`, :mod:`attnroof.ops.backward`): shapes
                        in, a :class:`~attnroof.cost.Cost` out; the backward takes the forward's
                        arguments (and ``grad_itemsize``, the bytes of a weight's gradient, where
                        it has a weight)
    bind                a layer-table row and a step → the formulas' arguments, one binder for
                        both passes (a :class:`Call`)
    cuts                per tensor-parallel split (column, row, heads, vocab) how the row's shape
                        is cut over t devices and the share of its parameters each keeps
    routed              a mixture of experts: spread over expert parallelism, its tokens pooled
                        over the group, only the experts its tokens touch read
    sequence_parallel   an element-wise pass on the residual stream: 1/t of the tokens under
                        sequence parallelism
    context_parallel    attention: it runs under context parallelism, the device's share of
                        each sequence's queries against the whole sequence's keys (every other
                        row works token by token and runs on the device's tokens unchanged)
    saved               the bytes its backward pass needs kept from the forward (selective
                        recomputation may keep fewer), and ``saved_split``: the splits under which
                        that input is the sequence-split residual stream (kept 1/t)
    selective           what selective recomputation runs again of it
    weight_gradient     the part of its backward that computes its weights' gradients (the W
                        pass a zero-bubble schedule defers; the rest is B, the input's gradient)
    heads               attention: the query heads a row's shape holds (each forms a score matrix)
    matmul, gemm        whether it is a matrix product: the parameters a token multiplies (PaLM's
                        N), and for a dense weight GEMM its (k, m)
    kind                what a calibration fits and a report sums it as: ``gemm``, ``attention``,
                        ``memory`` (element-wise passes and copies), ``collective``
    measured_as         the measured kernel family that forecasts it (``linear``, ``attention``)
    in_training         False for a row a training step leaves out (the KV-cache write)

An entry without a rule that something asks for is refused in one line naming what it lacks,
never counted as zero. Collectives are operators too (:mod:`attnroof.ops.collectives`): their
formulas return a :class:`~attnroof.ops.collectives.Comm` for the link roof, and they are not rows.

    >>> operator("linear").forward(1, 8192, 8192).flops    # 2 · 1 · 8192 · 8192
    134217728
    >>> sorted(o for o in OPERATORS if OPERATORS[o].kind != COLLECTIVE)
    ['activation', 'add', 'attention', 'chunk', 'chunked attention', 'chunked attention chunk', 'copy', 'decode', 'embedding', 'experts', 'latent attention', 'linear', 'linear attention', 'linear attention step', 'norm', 'rotary', 'selective scan', 'selective scan step', 'softmax', 'sparse attention', 'ssd', 'ssd step']
    >>> [o for o in OPERATORS if OPERATORS[o].kind == COLLECTIVE]
    ['all-reduce', 'reduce-scatter', 'all-gather', 'all-to-all', 'send/recv']

Length: one block per operator (its binder, cuts and saved bytes beside its ``register`` call),
so that an operator is read, and added, in one place.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from attnroof.cost import Cost, Num
from attnroof.errors import InputError
from attnroof.ops import attention, chunked, decode, linear, recurrent, sparse
from attnroof.ops import backward as bwd
from attnroof.ops import collectives as coll
from attnroof.ops.attention import MASK, QK, SOFTMAX, causal_band, causal_half, chunk
from attnroof.ops.backward import FP32_BYTES
from attnroof.ops.elementwise import activation, add, copy, embedding, norm, rotary
from attnroof.ops.experts import expert_gemm
from attnroof.ops.latent import NAIVE, latent_attention
from attnroof.ops.softmax import softmax
from attnroof.row import (
    CHUNK,
    COLUMN,
    HEADS,
    PREFILL,
    REPLICATED,
    ROW,
    SPLITS,
    VOCAB,
    OpInstance,
    Saving,
    Step,
)

GEMM, ATTENTION, MEMORY_PASS, COLLECTIVE = "gemm", "attention", "memory", "collective"
KINDS = (GEMM, ATTENTION, MEMORY_PASS, COLLECTIVE)

CostFn = Callable[..., Any]
"""A formula: returns a :class:`~attnroof.cost.Cost`, or a :class:`~attnroof.ops.collectives.Comm` for a collective."""


class Call(NamedTuple):
    """A row's arguments for its operator's formulas at a step; ``via``: another entry whose
    formulas run instead (attention at decode runs the ``decode`` formulas). A named tuple, not a
    dataclass: it is made on every row's cost, and defined at every start-up."""

    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = {}
    via: str | None = None


Binder = Callable[[OpInstance, Step], Call]
Cut = Callable[[Mapping[str, Any], int], tuple[dict[str, Any], float]]
"""A row's shape and t devices → one device's shape and the share of the parameters it keeps."""
Saver = Callable[[OpInstance, Saving], Num]


@dataclass(frozen=True, slots=True)
class Operator:
    """One registered operator and its rules (see the module's text)."""

    name: str
    kind: str
    forward: CostFn
    backward: CostFn | None = None
    bind: Binder | None = None
    cuts: Mapping[str, Cut] = field(default_factory=dict)
    routed: bool = False
    sequence_parallel: bool = False
    context_parallel: bool = False
    saved: Saver | None = None
    saved_split: frozenset[str] = frozenset()
    selective: Callable[[OpInstance, Cost, bool], tuple[str, Cost]] | None = None
    heads: Callable[[Mapping[str, Any]], int] | None = None
    matmul: Callable[[OpInstance], int] | None = None
    gemm: Callable[[Mapping[str, Any]], tuple[int, int]] | None = None
    measured_as: str | None = None
    in_training: bool = True
    weight_gradient: Callable[[Cost], Cost] | None = None

    @property
    def summary(self) -> str:
        """The first line of the forward formula's docstring."""
        return (self.forward.__doc__ or "").strip().splitlines()[0]

    def lacks(self, what: str) -> InputError:
        """The one-line refusal for a rule this entry does not have."""
        return InputError(
            f"operator {self.name!r} has no {what} in its entry of the operator table (attnroof.operators)",
            param="operator",
        )

    def cost(
        self, row: OpInstance, step: Step, *, backward: bool = False, grad_itemsize: float | None = None
    ) -> Cost:
        """One run of ``row`` at ``step``: its forward, or with ``backward`` its backward pass
        (weight gradients of ``grad_itemsize`` bytes, where it has weights)."""
        if self.bind is None:
            raise self.lacks("binder (it cannot run as a row of a layer table)")
        call = self.bind(row, step)
        op = self if call.via is None else operator(call.via)
        if not backward:
            return op.forward(*call.args, **call.kwargs)
        if op.backward is None:
            raise op.lacks("backward formula")
        kwargs = dict(call.kwargs)
        if grad_itemsize is not None and _takes_grad_itemsize(op.backward):
            kwargs["grad_itemsize"] = grad_itemsize
        return op.backward(*call.args, **kwargs)

    def kernel_shape(self, row: OpInstance, step: Step, *, backward: bool = False) -> dict[str, Any]:
        """What a forecast needs of one run of ``row`` at ``step`` beside its FLOPs and bytes
        (:mod:`attnroof.profiles.kernels`): the kernel's kind — ``gemm`` (a dense weight GEMM's
        tokens ``t``, depth ``k`` and outputs ``m``; another GEMM, such as grouped experts, its
        kind alone), ``attention`` (prefill: head dimension ``d``, keys ``s``, causal), ``decode``
        (a few queries against a cache), ``memory`` (an element-wise pass) — from the rules the
        entry already has; ``backward``: the row's backward kernel."""
        if self.kind == GEMM:
            if self.gemm is None or self.bind is None:
                return {"kernel": "gemm"}
            k, m = self.gemm(row.shape)
            return {"kernel": "gemm", "t": self.bind(row, step).args[0], "k": k, "m": m}
        if self.kind == ATTENTION:
            if step.phase != PREFILL:
                return {"kernel": "decode"}
            s = step.context * row.shape.get("context_shards", 1)
            d = row.shape.get("head_dim") or row.shape.get("qk_rope_head_dim", 0) + row.shape.get(
                "qk_nope_head_dim", 0
            )
            return {"kernel": "attention", "d": d or 128, "s": s, "causal": True, "backward": backward}
        return {"kernel": "memory" if self.kind == MEMORY_PASS else "collective"}

    def cut(self, row: OpInstance, t: int) -> tuple[dict[str, Any], float]:
        """``row``'s shape on one of ``t`` tensor-parallel devices, and the share of its
        parameters that device keeps."""
        if t == 1 or row.split == REPLICATED:
            return dict(row.shape), 1.0
        if row.split not in self.cuts:
            raise self.lacks(f"rule for the {row.split} split (row {row.name!r} under tensor parallelism)")
        return self.cuts[row.split](row.shape, t)

    def query_heads(self, row: OpInstance) -> int:
        """The query heads ``row`` holds (an attention row; each forms a score matrix)."""
        if self.heads is None:
            raise self.lacks("heads rule (how many score matrices its row forms)")
        return self.heads(row.shape)

    def weight_part(self, backward: Cost) -> Cost:
        """The stages of this operator's ``backward`` cost that compute its weights' gradients
        (Qi et al. 2024's W; the rest is B)."""
        if self.weight_gradient is None:
            raise self.lacks("weight_gradient rule (which part of its backward is the W pass)")
        return self.weight_gradient(backward)

    def saved_bytes(self, row: OpInstance, saving: Saving) -> Num:
        """Bytes one run of ``row`` keeps from its forward pass for its backward pass."""
        if self.saved is None:
            raise self.lacks("rule for the bytes its backward pass keeps (training)")
        return self.saved(row, saving)


@functools.cache
def _takes_grad_itemsize(backward: CostFn) -> bool:
    """Whether a backward formula writes a weight's gradient (takes ``grad_itemsize``)."""
    return "grad_itemsize" in inspect.signature(backward).parameters


OPERATORS: dict[str, Operator] = {}


def register(name: str, forward: CostFn, *, kind: str, **rules: Any) -> Operator:
    """Add ``name`` to the table. A name is registered once: a second registration is a bug."""
    if name in OPERATORS:
        raise ValueError(f"operator {name!r} is already registered")
    if kind not in KINDS:
        raise ValueError(f"operator {name!r}: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    if kind == GEMM and rules.get("matmul") is None:
        raise ValueError(f"operator {name!r}: a matrix product needs its matmul rule (PaLM's N)")
    op = Operator(name, kind, forward, **rules)
    OPERATORS[name] = op
    return op


def unregister(name: str) -> None:
    """Remove ``name`` (a test's own operator, once the test is done)."""
    OPERATORS.pop(name, None)


def operator(name: str) -> Operator:
    """The registered operator ``name``; :class:`InputError` with a suggestion otherwise."""
    try:
        return OPERATORS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(OPERATORS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InputError(f"unknown operator {name!r}{hint} (known: {', '.join(sorted(OPERATORS))})") from None


def rule(row: OpInstance) -> Operator:
    """The entry of ``row``'s operator."""
    return operator(row.operator)


def is_attention(row: OpInstance) -> bool:
    return rule(row).kind == ATTENTION


# ---------------------------------------------------------------- shared rules


def cut_width(key: str) -> Cut:
    """Cut the width ``key`` t ways (rounded up where t does not divide it: one device takes the
    remainder); the parameters follow the width."""

    def cut(shape: Mapping[str, Any], t: int) -> tuple[dict[str, Any], float]:
        here = math.ceil(shape[key] / t)
        return {**shape, key: here}, here / shape[key]

    return cut


def row_tokens(i: OpInstance, st: Step) -> Num:
    """Tokens an element-wise row runs on: all of the step's, or 1/t of them where sequence
    parallelism spreads the norms and adds of a tensor-parallel group (``sequence_shards`` = t)."""
    return st.tokens() / i.shape["sequence_shards"] if "sequence_shards" in i.shape else st.tokens()


def kv_heads_kept(kv_heads: int, t: int) -> int:
    """KV heads each of ``t`` devices keeps: kv/t, or one when there are fewer KV heads than
    devices (each is then replicated).

    >>> kv_heads_kept(8, 4), kv_heads_kept(8, 16)      # Llama-3.1-70B's 8 KV heads
    (2, 1)
    """
    return max(1, kv_heads // t)


def _kernel(i: OpInstance) -> str:
    return i.kernel or i.name


def saves_input(key: str) -> Saver:
    """The row's input, ``key`` wide per token: what dW = Xᵀ·dY (or a norm's backward) reads."""
    return lambda i, s: s.tokens * i.shape[key] * s.itemsize


def saves_nothing(i: OpInstance, s: Saving) -> Num:
    """A gradient that passes through (a residual add) or a gather (an embedding): nothing kept."""
    return 0


def no_weights(backward: Cost) -> Cost:
    """No weight gradient: an operator without weights (attention, adds, activations), or one
    whose weight's gradient is summed inside the kernel that computes dX (a norm's scale)."""
    return Cost(())


def all_weights(backward: Cost) -> Cost:
    """All of it: a backward that only scatters into a weight's gradient (an embedding table)."""
    return backward


# ---------------------------------------------------------------- linear


def _bind_linear(i: OpInstance, st: Step) -> Call:
    p = st.prec
    kw = dict(itemsize=p.itemsize, weight_itemsize=p.weight_bytes(i), bias=i.shape["bias"], name=_kernel(i))
    return Call((st.tokens(i.tokens), i.shape["k"], i.shape["m"]), kw)


register(
    "linear", linear, kind=GEMM, backward=bwd.linear_backward, bind=_bind_linear,
    cuts={COLUMN: cut_width("m"), ROW: cut_width("k"), VOCAB: cut_width("m")},
    saved=saves_input("k"), saved_split=frozenset({COLUMN, REPLICATED}),
    matmul=lambda i: i.shape["k"] * i.shape["m"], gemm=lambda s: (s["k"], s["m"]), measured_as="linear",
    weight_gradient=bwd.weight_gradient_stages,
)  # fmt: skip


# ---------------------------------------------------------------- attention


def _attention_kwargs(i: OpInstance, st: Step) -> dict[str, Any]:
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


def _bind_attention(i: OpInstance, st: Step) -> Call:
    """Prefill: causal attention over the prompt, a windowed layer only the band within its
    window. Decode: one token per sequence against its cache (the ``decode`` formulas). Under
    context parallelism (``context_shards`` = C in the shape) the step is one device's: its
    context tokens are the queries, against the C · context keys of the whole sequence."""
    kw = _attention_kwargs(i, st)
    d = i.shape["head_dim"]
    if st.phase == CHUNK:  # the last ``queries`` of each sequence, against the cache before them
        if i.shape.get("context_shards", 1) > 1:
            raise InputError("a chunk against a cache under context parallelism is not modelled", param="cp")
        window = i.shape.get("window")
        return Call((st.queries, st.context, d), {**kw, "window": window}, via="chunk")
    if st.phase == PREFILL:
        kw |= {"causal": True, "window": i.shape.get("window")}
        if (shards := i.shape.get("context_shards", 1)) > 1:
            return Call((st.context * shards, d), {**kw, "queries": st.context})
        return Call((st.context, d), kw)
    return Call((i.cached_tokens(st.context), d), kw, via="decode")


def _cut_attention(shape: Mapping[str, Any], t: int) -> tuple[dict[str, Any], float]:
    """Heads t ways; KV heads too, or one each where there are fewer KV heads than devices (each
    then replicated)."""
    kv = shape["kv_heads"]
    kv_here = kv_heads_kept(kv, t)
    cut = {
        **shape,
        "kv_heads": kv_here,
        "group": shape["group"] * kv // t // kv_here,
        "kv_elements_per_token": shape["kv_elements_per_token"] * kv_here // kv,
    }
    return cut, 1 / t


def _scores_kept(i: OpInstance, s: Saving, heads: Num) -> Num:
    """What attention keeps beyond Q, K and V: fused, the log-sum-exp of each row (fp32);
    unfused, P (the band within a window, if any). Selective recomputation checkpoints the core
    attention, as Megatron-LM does: it keeps only Q, K and V and reruns the forward."""
    if s.selective:
        return 0
    if s.fused:
        return s.batch * s.context * heads * FP32_BYTES
    window = i.shape.get("window")
    scores = causal_half(s.context * s.context) if window is None else causal_band(s.context, window)
    return s.batch * heads * scores * s.itemsize


def _attention_heads(shape: Mapping[str, Any]) -> int:
    return shape["group"] * shape["kv_heads"]


def _saved_attention(i: OpInstance, s: Saving) -> Num:
    """Q, K and V, and the scores' statistics or the scores themselves."""
    heads = _attention_heads(i.shape)
    qkv = s.tokens * (heads + 2 * i.shape["kv_heads"]) * i.shape["head_dim"] * s.itemsize
    return qkv + _scores_kept(i, s, heads)


def _selective_attention(i: OpInstance, cost: Cost, fused: bool) -> tuple[str, Cost]:
    """Unfused: S and P again (Q·Kᵀ, the mask and softmax); fused: the fused forward again, for
    the log-sum-exp rows its backward needs."""
    if fused:
        return f"{i.name} (again)", cost
    return "attention S, P (again)", Cost(tuple(s for s in cost if s.name in (QK, MASK, SOFTMAX)))


register(
    "attention", attention, kind=ATTENTION, backward=bwd.attention_backward, bind=_bind_attention,
    cuts={HEADS: _cut_attention}, saved=_saved_attention, selective=_selective_attention,
    heads=_attention_heads, measured_as="attention", weight_gradient=no_weights, context_parallel=True,
)  # fmt: skip
register(
    "decode", decode, kind=ATTENTION, backward=bwd.decode_backward, measured_as="attention",
    weight_gradient=no_weights,
)  # fmt: skip
register(
    "chunk",
    chunk,
    kind=ATTENTION,
    backward=bwd.chunk_backward,
    measured_as="attention",
    weight_gradient=no_weights,
)


# ---------------------------------------------------------------- latent attention

LATENT_WIDTHS = ("heads", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
"""A latent-attention row's shape keys, which are its formulas' keyword arguments."""


def _bind_latent(i: OpInstance, st: Step) -> Call:
    """Prefill (and training) decompress the latent: the naive form, compute-bound anyway;
    decode runs the step's ``latent_form``, absorbed by default."""
    p = st.prec
    kw: dict[str, Any] = dict(
        fused=st.fused,
        batch=st.batch,
        itemsize=p.itemsize,
        kv_itemsize=p.kv_itemsize,
        weight_itemsize=p.weight_bytes(i),
        softmax_flops_per_element=st.softmax_flops_per_element,
        **{k: i.shape[k] for k in LATENT_WIDTHS},
    )
    if st.phase == PREFILL:
        return Call((st.context, st.context), {**kw, "form": NAIVE, "causal": True})
    if st.phase == CHUNK:  # a chunk decompresses the cache, as prefill does
        return Call((st.queries, st.context), {**kw, "form": NAIVE, "causal": True})
    return Call((1, i.cached_tokens(st.context)), {**kw, "form": st.latent_form})


def _cut_latent(shape: Mapping[str, Any], t: int) -> tuple[dict[str, Any], float]:
    return {**shape, "heads": shape["heads"] // t}, 1 / t


def _saved_latent(i: OpInstance, s: Saving) -> Num:
    """Naive: the latent (for dW_UKV), then Q, K and V of every head, and the scores' share."""
    sh = i.shape
    widths = 2 * (sh["qk_nope_head_dim"] + sh["qk_rope_head_dim"]) + sh["v_head_dim"]
    kept = s.tokens * (sh["kv_lora_rank"] + sh["heads"] * widths) * s.itemsize
    return kept + _scores_kept(i, s, sh["heads"])


register(
    "latent attention", latent_attention, kind=ATTENTION, backward=bwd.latent_attention_backward,
    bind=_bind_latent, cuts={HEADS: _cut_latent}, saved=_saved_latent, selective=_selective_attention,
    heads=lambda shape: shape["heads"],
    matmul=lambda i: i.params,  # W_UK and W_UV, multiplied inside attention
    weight_gradient=bwd.weight_gradient_stages,  # the KV up-projection's dW
)  # fmt: skip


# ---------------------------------------------------------------- element-wise passes


def _bind_norm(i: OpInstance, st: Step) -> Call:
    p = st.prec
    kw = dict(
        itemsize=p.itemsize,
        weight_itemsize=p.weight_bytes(i),
        kind=i.shape["kind"],
        name=_kernel(i),
        scale_width=i.shape.get("scale_width"),
    )
    return Call((row_tokens(i, st), i.shape["width"]), kw)


def _cut_qk_norm(shape: Mapping[str, Any], t: int) -> tuple[dict[str, Any], float]:
    """QK norm: this device's q and k heads; its scales are one per head width, kept whole."""
    return {**shape, "width": math.ceil(shape["width"] / t)}, 1.0


register(
    "norm", norm, kind=MEMORY_PASS, backward=bwd.norm_backward, bind=_bind_norm, cuts={HEADS: _cut_qk_norm},
    sequence_parallel=True, saved=saves_input("width"), saved_split=frozenset(SPLITS),
    weight_gradient=no_weights,
)  # fmt: skip


def _bind_add(i: OpInstance, st: Step) -> Call:
    return Call((row_tokens(i, st), i.shape["width"]), dict(itemsize=st.prec.itemsize, name=_kernel(i)))


register(
    "add", add, kind=MEMORY_PASS, backward=bwd.add_backward, bind=_bind_add, sequence_parallel=True,
    saved=saves_nothing, weight_gradient=no_weights,
)  # fmt: skip


def _bind_rotary(i: OpInstance, st: Step) -> Call:
    """Every token's queries and keys (a decode step's new ones: the cache holds its keys
    already turned)."""
    sh = i.shape
    kw = dict(itemsize=st.prec.itemsize, name=_kernel(i))
    return Call((st.tokens(), sh["q_heads"], sh["k_heads"], sh["rotated"]), kw)


def _cut_rotary(shape: Mapping[str, Any], t: int) -> tuple[dict[str, Any], float]:
    """This device's query heads, and its KV heads (one each where there are fewer KV heads than
    devices; latent attention's one shared rotary key stays whole on every device)."""
    return {
        **shape,
        "q_heads": math.ceil(shape["q_heads"] / t),
        "k_heads": kv_heads_kept(shape["k_heads"], t),
    }, 1.0


register(
    "rotary", rotary, kind=MEMORY_PASS, backward=bwd.rotary_backward, bind=_bind_rotary,
    cuts={HEADS: _cut_rotary}, saved=saves_nothing, weight_gradient=no_weights,
)  # fmt: skip


def _activated(i: OpInstance, tokens: Num) -> Num:
    """The rows the activation runs on: every token, or for experts every routed one (``routed``
    = top_k per token), × the imbalance on the busiest device."""
    return tokens * i.shape.get("routed", 1) * i.shape.get("imbalance", 1)


def _bind_activation(i: OpInstance, st: Step) -> Call:
    """The MLP's activation, on :func:`_activated` rows."""
    kw = dict(gated=i.shape["gated"], itemsize=st.prec.itemsize, function=i.shape.get("function", "silu"))
    return Call((_activated(i, st.tokens()), i.shape["width"]), kw)


def _saved_activation(i: OpInstance, s: Saving) -> Num:
    """Gated: gate and up; else its input, on :func:`_activated` rows."""
    return _activated(i, s.tokens) * i.shape["width"] * (2 if i.shape["gated"] else 1) * s.itemsize


register(
    "activation", activation, kind=MEMORY_PASS, backward=bwd.activation_backward, bind=_bind_activation,
    cuts={COLUMN: cut_width("width")}, saved=_saved_activation, weight_gradient=no_weights,
)  # fmt: skip


def _bind_embedding(i: OpInstance, st: Step) -> Call:
    p = st.prec
    kw = dict(
        weight_itemsize=p.weight_bytes(i),
        itemsize=p.itemsize,
        positions=i.shape["learned_positions"],
        name="token rows",
        tensor="embedding rows",
    )
    return Call((st.tokens(), i.shape["width"]), kw)


def _cut_vocab_table(shape: Mapping[str, Any], t: int) -> tuple[dict[str, Any], float]:
    """A vocabulary-parallel table: V/t rows each; every token's row is still gathered."""
    return dict(shape), math.ceil(shape["vocab"] / t) / shape["vocab"]


register(
    "embedding", embedding, kind=MEMORY_PASS, backward=bwd.embedding_backward, bind=_bind_embedding,
    cuts={VOCAB: _cut_vocab_table}, saved=saves_nothing, weight_gradient=all_weights,
)  # fmt: skip


def _bind_copy(i: OpInstance, st: Step) -> Call:
    p = st.prec
    write = i.shape.get("write_itemsize", p.kv_itemsize)  # DSA's index keys: fp8 whatever the cache
    kw = dict(read_itemsize=p.itemsize, write_itemsize=write, name=_kernel(i), tensor=i.shape["tensor"])
    return Call((st.tokens() * i.shape["elements_per_token"],), kw)


def _cut_kv_write(shape: Mapping[str, Any], t: int) -> tuple[dict[str, Any], float]:
    """The KV-cache write: the elements of the KV heads this device keeps (one each where there
    are fewer KV heads than devices)."""
    kv = shape["kv_heads"]
    return {
        **shape,
        "elements_per_token": round(shape["elements_per_token"] * kv_heads_kept(kv, t) / kv),
    }, 1.0


register(
    "copy", copy, kind=MEMORY_PASS, backward=bwd.copy_backward, bind=_bind_copy, cuts={HEADS: _cut_kv_write},
    saved=saves_nothing, in_training=False,  # the KV-cache write: training keeps no cache
    weight_gradient=no_weights,
)  # fmt: skip
register("softmax", softmax, kind=MEMORY_PASS, backward=bwd.softmax_backward, weight_gradient=no_weights)


# ---------------------------------------------------------------- experts


def _bind_experts(i: OpInstance, st: Step) -> Call:
    """Under expert parallelism (``ep`` in the shape) the tokens are the EP group's — ``pool``
    replicas' worth (etp · ep / tp; ep when the experts are cut like the attention) — and the
    formula keeps one device's 1/ep, its routed rows ``imbalance`` × the mean on the busiest."""
    p = st.prec
    ep = i.shape.get("ep", 1)
    kw = dict(
        experts=i.shape["experts"],
        top_k=i.shape["top_k"],
        routing=st.routing,
        itemsize=p.itemsize,
        weight_itemsize=p.weight_bytes(i),
        bias=i.shape["bias"],
        ep=ep,
        imbalance=i.shape.get("imbalance", 1),
        name=_kernel(i),
    )
    return Call((st.tokens() * i.shape.get("pool", ep), i.shape["k"], i.shape["m"]), kw)


def _saved_experts(i: OpInstance, s: Saving) -> Num:
    """Each routed token's input row, for dW: the device's pool/ep of the replica's routed rows
    (all of them when etp = tp), × the imbalance on the busiest device."""
    share = i.shape.get("pool", 1) / i.shape.get("ep", 1) * i.shape.get("imbalance", 1)
    return s.tokens * i.shape["top_k"] * i.shape["k"] * s.itemsize * share


register(
    "experts", expert_gemm, kind=GEMM, backward=bwd.expert_backward, bind=_bind_experts,
    cuts={COLUMN: cut_width("m"), ROW: cut_width("k")}, routed=True, saved=_saved_experts,
    matmul=lambda i: i.shape["top_k"] * i.shape["k"] * i.shape["m"], measured_as="linear",
    weight_gradient=bwd.weight_gradient_stages,
)  # fmt: skip


# ---------------------------------------------------------------- beyond softmax (issue 23)
# Linear attention (gated DeltaNet), state-space scans (Mamba-2's SSD, Mamba-1's selective scan),
# chunked local attention (Llama 4) and DeepSeek's sparse attention. The recurrent mixers keep a
# fixed state per sequence (``state_elements`` in the shape: what the cache holds whatever the
# context) and form no score matrix (their ``heads`` rule: 0). None has a context-parallel rule:
# ``--cp`` refuses them in one line (the state would have to pass from device to device).


def _no_score_matrix(shape: Mapping[str, Any]) -> int:
    """A recurrent mixer forms no s × s score matrix."""
    return 0


def _scanned(st: Step) -> Num:
    """Tokens a recurrent mixer scans in a step: the context at prefill; a chunk's new tokens,
    its state carried in from the cache (that state's one read is not counted: a few MB a layer
    against the chunk's activations)."""
    return st.queries if st.phase == CHUNK else st.context


def _recurrent_kwargs(i: OpInstance, st: Step, keys: tuple[str, ...]) -> dict[str, Any]:
    p = st.prec
    return dict(
        batch=st.batch, itemsize=p.itemsize, state_itemsize=p.kv_itemsize, weight_itemsize=p.weight_bytes(i),
        **{k: i.shape[k] for k in keys},
    )  # fmt: skip


GDN_STEP_KEYS = ("heads", "key_heads", "key_dim", "value_dim", "conv_kernel")


def _bind_gdn(i: OpInstance, st: Step) -> Call:
    """Prefill: the chunked kernels over the context; decode: the recurrent step."""
    kw = _recurrent_kwargs(i, st, (*GDN_STEP_KEYS, "conv_bias"))
    if st.phase in (PREFILL, CHUNK):
        return Call((_scanned(st),), {**kw, "chunk": i.shape["chunk"]})
    return Call((), kw, via="linear attention step")


def _cut_gdn(shape: Mapping[str, Any], t: int) -> tuple[dict[str, Any], float]:
    """Heads t ways (value and key heads, and so the conv's channels and the state)."""
    cut = {**shape, "heads": math.ceil(shape["heads"] / t), "key_heads": math.ceil(shape["key_heads"] / t)}
    cut["state_elements"] = recurrent.gdn_state_elements(*(cut[k] for k in GDN_STEP_KEYS))
    return cut, 1 / t


def _saved_gdn(i: OpInstance, s: Saving) -> Num:
    """The conv's input, then q, k, v, g, β and A⁻¹ (flash-linear-attention's saved tensors;
    w, u and the chunk states are recomputed)."""
    sh = i.shape
    conv = recurrent.conv_channels_gdn(sh["heads"], sh["key_heads"], sh["key_dim"], sh["value_dim"])
    per_head = 2 * sh["key_dim"] + sh["value_dim"] + 2 + sh["chunk"]
    return s.tokens * (conv + sh["heads"] * per_head) * s.itemsize


register(
    "linear attention", recurrent.gated_delta_rule, kind=ATTENTION, backward=recurrent.gated_delta_rule_backward,
    bind=_bind_gdn, cuts={HEADS: _cut_gdn}, saved=_saved_gdn, heads=_no_score_matrix, weight_gradient=no_weights,
)  # fmt: skip
register("linear attention step", recurrent.gated_delta_step, kind=ATTENTION, weight_gradient=no_weights)

SSD_STEP_KEYS = ("heads", "head_dim", "state", "groups", "conv_kernel")


def _bind_ssd(i: OpInstance, st: Step) -> Call:
    kw = _recurrent_kwargs(i, st, (*SSD_STEP_KEYS, "conv_bias"))
    if st.phase in (PREFILL, CHUNK):
        return Call((_scanned(st),), {**kw, "chunk": i.shape["chunk"]})
    return Call((), kw, via="ssd step")


def _cut_ssd(shape: Mapping[str, Any], t: int) -> tuple[dict[str, Any], float]:
    """Heads t ways; B and C's groups too, or one each where there are fewer groups than
    devices (Megatron's Mamba mixer: ngroups a multiple of the TP degree, or replicated)."""
    cut = {**shape, "heads": math.ceil(shape["heads"] / t), "groups": kv_heads_kept(shape["groups"], t)}
    cut["state_elements"] = recurrent.ssd_state_elements(*(cut[k] for k in SSD_STEP_KEYS))
    return cut, 1 / t


def _saved_ssd(i: OpInstance, s: Saving) -> Num:
    """The conv's input and dt (mamba_ssm's fused split-conv-scan recomputes the conv's output)."""
    sh = i.shape
    conv = recurrent.conv_channels_ssd(sh["heads"], sh["head_dim"], sh["state"], sh["groups"])
    return s.tokens * (conv + sh["heads"]) * s.itemsize


register(
    "ssd", recurrent.ssd, kind=ATTENTION, backward=recurrent.ssd_backward, bind=_bind_ssd, cuts={HEADS: _cut_ssd},
    saved=_saved_ssd, heads=_no_score_matrix, weight_gradient=no_weights,
)  # fmt: skip
register("ssd step", recurrent.ssd_step, kind=ATTENTION, weight_gradient=no_weights)

SCAN_STEP_KEYS = ("channels", "state", "conv_kernel")


def _bind_scan(i: OpInstance, st: Step) -> Call:
    kw = _recurrent_kwargs(i, st, (*SCAN_STEP_KEYS, "conv_bias"))
    if st.phase in (PREFILL, CHUNK):
        return Call((_scanned(st),), kw)
    return Call((), kw, via="selective scan step")


def _cut_scan(shape: Mapping[str, Any], t: int) -> tuple[dict[str, Any], float]:
    cut = {**shape, "channels": math.ceil(shape["channels"] / t)}
    cut["state_elements"] = recurrent.scan_state_elements(*(cut[k] for k in SCAN_STEP_KEYS))
    return cut, 1 / t


def _saved_scan(i: OpInstance, s: Saving) -> Num:
    """The conv's input, and u, Δ, z, B and C (mamba_ssm's ``selective_scan_fn``)."""
    return s.tokens * (4 * i.shape["channels"] + 2 * i.shape["state"]) * s.itemsize


register(
    "selective scan", recurrent.selective_scan, kind=ATTENTION, backward=recurrent.selective_scan_backward,
    bind=_bind_scan, cuts={HEADS: _cut_scan}, saved=_saved_scan, heads=_no_score_matrix,
    weight_gradient=no_weights,
)  # fmt: skip
register("selective scan step", recurrent.selective_scan_step, kind=ATTENTION, weight_gradient=no_weights)


def _bind_chunked(i: OpInstance, st: Step) -> Call:
    """Prefill: causal attention within each chunk; decode: the current chunk's keys only
    (the ``decode`` formulas over :func:`~attnroof.ops.chunked.chunk_position` keys)."""
    kw = _attention_kwargs(i, st)
    d, c = i.shape["head_dim"], i.shape["attention_chunk"]
    if st.phase == CHUNK:  # the last ``queries`` of each sequence, against the cache before them
        return Call((st.queries, st.context, d), {**kw, "chunk": c}, via="chunked attention chunk")
    if st.phase == PREFILL:
        return Call((st.context, d), {**kw, "chunk": c})
    return Call((chunked.chunk_position(st.context, c), d), kw, via="decode")


def _saved_chunked(i: OpInstance, s: Saving) -> Num:
    """Q, K and V, and the row statistics (fused) or the chunks' P (unfused)."""
    heads = _attention_heads(i.shape)
    qkv = s.tokens * (heads + 2 * i.shape["kv_heads"]) * i.shape["head_dim"] * s.itemsize
    if s.selective:
        return qkv
    if s.fused:
        return qkv + s.batch * s.context * heads * FP32_BYTES
    return qkv + s.batch * heads * chunked.chunk_scores(s.context, i.shape["attention_chunk"]) * s.itemsize


register(
    "chunked attention", chunked.chunked_attention, kind=ATTENTION, backward=chunked.chunked_attention_backward,
    bind=_bind_chunked, cuts={HEADS: _cut_attention}, saved=_saved_chunked, selective=_selective_attention,
    heads=_attention_heads, measured_as="attention", weight_gradient=no_weights,
)  # fmt: skip

register("chunked attention chunk", chunked.chunk_of_queries, kind=ATTENTION, measured_as="attention")

SPARSE_KEYS = (*LATENT_WIDTHS, "index_heads", "index_head_dim", "top_k")


def _bind_sparse(i: OpInstance, st: Step) -> Call:
    """The indexer and latent attention over the top-k, in the step's ``latent_form`` at prefill
    and decode alike: absorbed by default, MLA's MQA mode, as DeepSeek runs DSA (naive is what
    transformers runs)."""
    p = st.prec
    kw: dict[str, Any] = dict(
        fused=st.fused, batch=st.batch, itemsize=p.itemsize, kv_itemsize=p.kv_itemsize,
        weight_itemsize=p.weight_bytes(i), softmax_flops_per_element=st.softmax_flops_per_element,
        **{k: i.shape[k] for k in SPARSE_KEYS},
    )  # fmt: skip
    if st.phase in (PREFILL, CHUNK):  # a chunk: the last ``queries`` of each sequence
        return Call((st.queries if st.phase == CHUNK else st.context, st.context),
                    {**kw, "causal": True, "form": st.latent_form})  # fmt: skip
    return Call((1, st.context), {**kw, "form": st.latent_form})


register(
    "sparse attention", sparse.sparse_attention, kind=ATTENTION, bind=_bind_sparse, cuts={HEADS: _cut_latent},
    heads=lambda shape: shape["heads"], matmul=lambda i: i.params, weight_gradient=bwd.weight_gradient_stages,
)  # fmt: skip


# ---------------------------------------------------------------- collectives

for _name in coll.COLLECTIVES:
    register(
        _name, coll.COLLECTIVE_FN[_name], kind=COLLECTIVE, backward=coll.COLLECTIVE_FN[coll.CONJUGATE[_name]]
    )
