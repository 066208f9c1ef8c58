"""The operators of one forward step of a model, each a :class:`~attnroof.cost.Cost` from the core
formulas: ``linear`` for every projection, ``attention``/``decode`` for attention, and the
element-wise formulas for norms, adds, activations and copies. Nothing is re-derived here; this
module only decides shapes and dtypes.

Prefill runs ``batch × context`` tokens through every layer with causal attention; decode runs
``batch`` tokens, each against its own KV cache of ``context`` tokens (``min(context, window)``
with a sliding window), and appends the new token's K and V to the cache.

A projection with a bias (GPT-2, Qwen2's QKV) reads the bias with its weight and adds it in the
GEMM's epilogue: one more read and one FLOP per output element on the same kernel. Not counted
(well under 1% of a layer's bytes and FLOPs): rotary position embedding and sampling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnroof.cost import Access, Cost, Stage
from attnroof.dtypes import BF16_BYTES
from attnroof.model.config import ModelConfig
from attnroof.ops import attention, decode, linear
from attnroof.ops.elementwise import activation, add, copy, norm
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT

PREFILL, DECODE = "prefill", "decode"
PHASES = (PREFILL, DECODE)


@dataclass(frozen=True, slots=True)
class Precision:
    """Bytes per element of activations (the compute dtype), weights and the KV cache."""

    itemsize: float = BF16_BYTES
    weight_itemsize: float = BF16_BYTES
    kv_itemsize: float = BF16_BYTES


@dataclass(frozen=True, slots=True)
class Op:
    """One operator of the model: its cost per run and how many times a step runs it."""

    name: str
    cost: Cost
    count: int = 1
    attention: bool = False


BIAS_FLOPS_PER_ELEMENT = 1
"""A bias add in the GEMM epilogue: one addition per output element."""


def with_bias(cost: Cost, n: int, m: int, weight_itemsize: float) -> Cost:
    """A one-kernel ``linear`` cost that also reads an ``m``-wide bias and adds it to its
    ``n × m`` output."""
    (st,) = cost.stages
    bias = Access("bias", m * weight_itemsize)
    return Cost((Stage(st.name, st.flops + BIAS_FLOPS_PER_ELEMENT * n * m, (*st.reads, bias), st.writes),))


def cached_tokens(model: ModelConfig, context: int) -> int:
    """Tokens a sequence keeps in its KV cache: all of them, or the last ``window`` (a rolling
    buffer) with a sliding window.

    >>> from attnroof.model.config import builtin
    >>> cached_tokens(builtin("mistral-7b"), 32768)    # sliding window 4096
    4096
    """
    w = model.sliding_window
    return context if w is None else min(context, w)


def attention_cost(
    model: ModelConfig,
    phase: str,
    batch: int,
    context: int,
    prec: Precision,
    *,
    fused: bool = True,
    softmax_flops_per_element: float = SOFTMAX_FLOPS_PER_ELEMENT,
) -> Cost:
    """One layer's attention, all heads and sequences: the core's ``attention`` (prefill, causal)
    or ``decode`` with ``kv_heads`` and ``group = heads / kv_heads``."""
    kw: dict[str, Any] = dict(
        fused=fused,
        group=model.group,
        itemsize=prec.itemsize,
        kv_itemsize=prec.kv_itemsize,
        softmax_flops_per_element=softmax_flops_per_element,
        batch=batch,
        kv_heads=model.kv_heads,
    )
    if phase == PREFILL:
        return attention(context, model.head_dim, causal=True, **kw)
    return decode(cached_tokens(model, context), model.head_dim, **kw)


def model_ops(
    model: ModelConfig,
    phase: str,
    batch: int,
    context: int,
    prec: Precision | None = None,
    *,
    fused: bool = True,
    softmax_flops_per_element: float = SOFTMAX_FLOPS_PER_ELEMENT,
) -> list[Op]:
    """Every operator of one step, in execution order; per-layer ops carry ``count = layers``.

    The LM head runs on the last position of each sequence only (the one whose next token is
    wanted), in prefill as in decode.

    >>> from attnroof.model.config import builtin
    >>> ops = model_ops(builtin("llama-3.1-8b"), "decode", 1, 8192)
    >>> [(o.name, o.count) for o in ops][:3]
    [('embedding', 1), ('attention norm', 32), ('QKV projection', 32)]
    """
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
    p = prec or Precision()
    m = model
    n = batch * context if phase == PREFILL else batch  # tokens through every layer
    a, w = p.itemsize, p.weight_itemsize
    L = m.layers

    emb = copy(n * m.hidden, read_itemsize=w, write_itemsize=a, name="token rows", tensor="embedding rows")
    if m.learned_positions:
        emb = (
            emb
            + copy(
                n * m.hidden, read_itemsize=w, write_itemsize=a, name="position rows", tensor="position rows"
            )
            + add(n, m.hidden, itemsize=a, name="position add")
        )

    def lin(k: int, out: int, name: str, bias: bool = False, tokens: int = n) -> Cost:
        cost = linear(tokens, k, out, itemsize=a, weight_itemsize=w, name=name)
        return with_bias(cost, tokens, out, w) if bias else cost

    def nrm(name: str) -> Cost:
        return norm(n, m.hidden, itemsize=a, weight_itemsize=w, kind=m.norm, name=name)

    ops = [
        Op("embedding", emb),
        Op("attention norm", nrm("attention norm"), L),
        Op("QKV projection", lin(m.hidden, m.q_width + 2 * m.kv_width, "QKV projection", m.qkv_bias), L),
        Op(
            "KV-cache write",
            copy(
                n * 2 * m.kv_width,
                read_itemsize=a,
                write_itemsize=p.kv_itemsize,
                name="KV-cache write",
                tensor="new K,V",
            ),
            L,
        ),
        Op(
            "attention",
            attention_cost(
                m, phase, batch, context, p, fused=fused, softmax_flops_per_element=softmax_flops_per_element
            ),
            L,
            attention=True,
        ),
        Op("output projection", lin(m.q_width, m.hidden, "output projection", m.o_bias), L),
        Op("residual add (attention)", add(n, m.hidden, itemsize=a, name="residual add"), L),
        Op("MLP norm", nrm("MLP norm"), L),
    ]
    if m.gated:
        ops += [
            Op("gate/up projection", lin(m.hidden, 2 * m.intermediate, "gate/up projection", m.mlp_bias), L),
            Op("activation (SiLU·up)", activation(n, m.intermediate, gated=True, itemsize=a), L),
        ]
    else:
        ops += [
            Op("up projection", lin(m.hidden, m.intermediate, "up projection", m.mlp_bias), L),
            Op("activation (GELU)", activation(n, m.intermediate, gated=False, itemsize=a), L),
        ]
    ops += [
        Op("down projection", lin(m.intermediate, m.hidden, "down projection", m.mlp_bias), L),
        Op("residual add (MLP)", add(n, m.hidden, itemsize=a, name="residual add"), L),
        Op("final norm", nrm("final norm")),
        Op("LM head", lin(m.hidden, m.vocab, "LM head", tokens=batch)),
    ]
    return ops
