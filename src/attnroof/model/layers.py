"""The layer table: a model config becomes, once, the list of operator instances one forward
step runs, each with its shape, how many times a step runs it, and the kind of layer it sits in.

    instance              operator           shape (fixed by the config)              runs
    embedding             embedding          hidden (+ learned positions)             1
    attention norm        norm               hidden                                   per layer
    QKV projection        linear             hidden → q + 2·kv width                  (latent: Q and KV
                                                                                        down/up-projections)
    QK norm               norm               q and k, per head (Qwen3, Gemma 3) or whole (OLMoE)
    rotary embedding      rotary             q and kv heads × rotated dims (RoPE models; latent:
                                               heads × ρ and one shared key)
    KV-cache write        copy               2·kv width (latent: r + ρ) per token
    attention             attention          head_dim, group, kv_heads, window        per window kind
                          latent attention   heads, r, ρ, nope, v
    output projection     linear             q width → hidden
    residual add          add                hidden
    MLP norm              norm               hidden                                   (Gemma: four norms)
    gate/up, up           linear             hidden → 2·intermediate (gated)          dense layers
    router                linear             hidden → experts                         MoE layers
    expert gate/up, down  experts            per expert, top_k of E per token         MoE layers
    shared expert …       linear             hidden → 2·shared width                  MoE layers
    activation            activation         intermediate (experts: per routed token)
    down projection       linear             intermediate → hidden
    final norm, LM head   norm, linear       hidden → vocab, last position only       1

Rows are built once per layer kind (:class:`~attnroof.model.architectures.LayerKind`: a window,
a dense or expert MLP) and merged where identical, so a model whose layers differ — windowed and
global attention (Gemma 2, gpt-oss), dense layers before MoE ones (DeepSeek-V3) — gets one row
per kind, each with its count, and no step is costed layer by layer. Everything that needs a model's shapes reads this
table: the cost of each operator at a step (:mod:`attnroof.model.costs`, through the operator
table), parameters (total and active), the KV cache each attention instance keeps, the widest
activation, the GEMM shapes of the batching argument. A new architecture adds rows here.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

from attnroof.model import hybrid_rows, rows
from attnroof.model.quantization import stored_formats
from attnroof.model.shard import Shard, shard_row
from attnroof.model.spec import ModelConfig
from attnroof.operators import rule
from attnroof.row import (
    ALL_TOKENS,
    COLUMN,
    DECODE,
    DENSE_MLP,
    EMBEDDING,
    GLOBAL,
    HEAD,
    HEADS,
    KV_TENSORS,
    LAST_TOKEN,
    LAYER,
    LOCAL,
    MOE,
    PHASES,
    PREFILL,
    REPLICATED,
    ROW,
    VOCAB,
    OpInstance,
    Precision,
    Step,
)

__all__ = [  # the row and step types live in attnroof.row; re-exported for the model's callers
    "ALL_TOKENS",
    "COLUMN",
    "DECODE",
    "DENSE_MLP",
    "EMBEDDING",
    "GLOBAL",
    "HEAD",
    "HEADS",
    "KV_TENSORS",
    "LAST_TOKEN",
    "LAYER",
    "LOCAL",
    "MOE",
    "PHASES",
    "PREFILL",
    "REPLICATED",
    "ROW",
    "VOCAB",
    "OpInstance",
    "Precision",
    "Step",
    "active_params",
    "config_json",
    "gemm_shapes",
    "layer_table",
    "params",
    "params_read",
    "stage_table",
    "weight_bytes",
]  # fmt: skip


# ---------------------------------------------------------------- the table


def layer_table(model: ModelConfig, shard: Shard | None = None) -> list[OpInstance]:
    """The operator instances of one forward step of ``model``, in execution order (built once
    per model: every analysis, memory search and grid reads the same table).

    >>> from attnroof.model.config import builtin
    >>> [(i.name, i.operator, i.count) for i in layer_table(builtin("llama-3.1-8b"))][:3]
    [('embedding', 'embedding', 1), ('attention norm', 'norm', 32), ('QKV projection', 'linear', 32)]

    With a ``shard``: what one device of a parallel plan runs (:mod:`attnroof.model.parallel`).
    """
    if shard is not None:
        return list(_device_table(model, shard))
    return list(_layer_table(model))


@lru_cache(maxsize=256)
def _device_table(model: ModelConfig, shard: Shard) -> tuple[OpInstance, ...]:
    """One device's rows: of its one range of layers, or, holding several model chunks (an
    interleaved pipeline), each chunk's rows merged, a row's count summed over the chunks."""
    if not shard.more:
        return tuple(shard_row(r, shard) for r in _layer_table(model, shard.first, shard.stop))
    first_rows: dict[tuple[Any, ...], OpInstance] = {}
    counts: dict[tuple[Any, ...], int] = {}
    for first, stop in shard.ranges:
        for row in _layer_table(model, first, stop):
            k = row.key()
            first_rows.setdefault(k, row)
            counts[k] = counts.get(k, 0) + row.count
    return tuple(shard_row(replace(row, count=counts[k]), shard) for k, row in first_rows.items())


def stage_table(model: ModelConfig, first: int, stop: int) -> list[OpInstance]:
    """The rows of layers ``first`` to ``stop - 1`` only: one pipeline stage's, with the input
    tables on the stage that holds layer 0 and the head on the one that holds the last layer.

    >>> from attnroof.model.config import builtin
    >>> m = builtin("llama-3.1-8b")
    >>> [(i.name, i.count) for i in stage_table(m, 16, 32)][:2]
    [('attention norm', 16), ('QKV projection', 16)]
    """
    return list(_layer_table(model, first, stop))


def mlp_row_kind(model: ModelConfig, kind: Any) -> str:
    """The kind a layer's MLP rows are filed under: MoE or dense MLP where the model has both
    (experts on some layers), else the layer's own kind.

    >>> from attnroof.model.config import builtin
    >>> m = builtin("deepseek-v3")                 # 3 dense layers, then 58 of experts
    >>> [mlp_row_kind(m, k) for k in m.layer_kinds()]
    ['dense MLP', 'MoE']
    >>> [mlp_row_kind(builtin("llama-3.1-8b"), k) for k in builtin("llama-3.1-8b").layer_kinds()]
    ['layer']
    """
    if not any(k.moe for k in model.layer_kinds()):
        return LAYER
    return MOE if kind.moe else DENSE_MLP


@lru_cache(maxsize=256)
def _layer_table(model: ModelConfig, first: int = 0, stop: int | None = None) -> tuple[OpInstance, ...]:
    """The rows of layers ``first`` to ``stop − 1``: each layer kind's rows built once, times the
    layers of that kind (a row two kinds share, such as the MLP of windowed and global layers,
    counts both)."""
    every = model.layer_kinds()
    mixed_windows = len({kind.window for kind in every}) > 1
    last = model.layers if stop is None else stop
    first_rows: dict[tuple[Any, ...], OpInstance] = {}
    counts: dict[tuple[Any, ...], int] = {}
    mixed_mixers = len({kind.mixer for kind in every}) > 1
    for kind, n in model.layer_kinds(first, last).items():
        attn_kind = (LOCAL if kind.window is not None else GLOBAL) if mixed_windows else LAYER
        mlp_kind = mlp_row_kind(model, kind)
        if model.mixers is None:
            built = rows.layer_rows(
                model, kind.window, kind.moe, attn_kind, mlp_kind, named=mixed_windows, rope=kind.rope
            )
        else:  # a hybrid's layer (issue 23)
            built = hybrid_rows.layer_rows(model, kind, mlp_kind, mixed=mixed_mixers)
        for row in built:
            k = row.key()
            first_rows.setdefault(k, row)
            counts[k] = counts.get(k, 0) + n
    merged = [replace(row, count=counts[k]) for k, row in first_rows.items()]
    inputs = rows.input_rows(model) if first == 0 else []
    head = rows.head_rows(model) if last == model.layers else []
    if first > 0 and model.tied:  # a pipeline's last stage keeps its own copy of a tied table
        head = [replace(r, params=r.params_read) if r.split == VOCAB else r for r in head]
    return stored_formats(model.quantization, (*inputs, *merged, *head))


def params(model: ModelConfig, shard: Shard | None = None) -> int:
    """Every parameter of ``model`` (on one device of a ``shard``), summed over its layer table."""
    return sum(i.count * i.params for i in layer_table(model, shard))


def weight_bytes(model: ModelConfig, prec: Precision, shard: Shard | None = None) -> float:
    """Bytes of every weight of ``model`` (on one device of a ``shard``): each row's parameters at
    its own bytes per weight (:meth:`Precision.weight_bytes`: as the checkpoint stores it, or
    ``--weight-dtype``'s).

    >>> from attnroof.model.config import builtin
    >>> m = builtin("gpt-oss-120b")
    >>> round(weight_bytes(m, Precision()) / 2**30, 2)     # the model card's checkpoint: 60.8 GiB
    60.71

    (The experts in MXFP4, 4.25 bits, the rest in bf16; the card's 0.1 GiB more is mostly the
    experts' biases, which the checkpoint keeps in bf16 and a row counts in its own format.)
    """
    return sum(i.count * i.params * prec.weight_bytes(i) for i in layer_table(model, shard))


def params_read(model: ModelConfig) -> int:
    """Parameters one step reads whole: all but the tables it only gathers rows of."""
    return sum(i.count * i.params_read for i in layer_table(model))


def active_params(model: ModelConfig, *, embedding: bool = True) -> int:
    """Distinct parameters one token runs through: every dense weight, its top_k experts and the
    shared ones, and (``embedding``) the input embedding table.

    Model cards differ on that table. gpt-oss's leaves it out: 5.13 B active of gpt-oss-120b's
    116.83 B (card, table 1; the LM head, which a token multiplies through whole, stays in), and
    ``embedding=False`` gives those 5,132,849,472; Mixtral's 12.9 B and Qwen3-30B-A3B's 3.3 B
    count it. Without it is the count whose double is a token's weight-GEMM FLOPs (a token only
    gathers one row of the table), so it is shown first. A tied table stays in either way: the
    LM head reads it whole."""
    total = sum(i.count * i.active for i in layer_table(model))
    if embedding:
        return total
    table = model.vocab * model.hidden * (not model.tied)
    return total - table - model.learned_positions * model.hidden


def gemm_shapes(model: ModelConfig) -> list[tuple[str, int, int]]:
    """(name, k, m) of each dense weight GEMM of ``model``: the rows of its layer table whose
    operator has a ``gemm`` rule (:mod:`attnroof.operators`)."""
    return [(i.name, *gemm(i.shape)) for i in layer_table(model) if (gemm := rule(i).gemm) is not None]


def config_json(model: ModelConfig) -> dict[str, Any]:
    """The config's JSON with what the layer table counts: parameters, and active parameters
    without the input embedding (gpt-oss's card's convention, first) and with it
    (:func:`active_params`)."""
    return model.to_json(
        counts={
            "params": params(model),
            "active_params_excluding_embedding": active_params(model, embedding=False),
            "active_params_including_embedding": active_params(model),
        }
    )
