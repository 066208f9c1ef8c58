"""The layer table: a model config becomes, once, the list of operator instances one forward
step runs, each with its shape, how many times a step runs it, and the kind of layer it sits in.

    instance              operator           shape (fixed by the config)              runs
    embedding             embedding          hidden (+ learned positions)             1
    attention norm        norm               hidden                                   per layer
    QKV projection        linear             hidden → q + 2·kv width                  (latent: Q and KV
                                                                                        down/up-projections)
    QK norm               norm               each head's q and k (Qwen3, Gemma 3)
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

Rows are built layer by layer and merged where identical, so a model whose layers differ —
windowed and global attention (Gemma 2, gpt-oss), dense layers before MoE ones (DeepSeek-V3) —
gets one row per kind, each with its count. Everything that needs a model's shapes reads this
table: the cost of each operator at a step (:mod:`attnroof.model.costs`, through the operator
table), parameters (total and active), the KV cache each attention instance keeps, the widest
activation, the GEMM shapes of the batching argument. A new architecture adds rows here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from attnroof import arrays
from attnroof.cost import Cost, Num
from attnroof.dtypes import BF16_BYTES
from attnroof.model.config import ModelConfig
from attnroof.ops.experts import UNIFORM
from attnroof.ops.latent import ABSORBED
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT

if TYPE_CHECKING:
    from attnroof.model.parallel import Shard

PREFILL, DECODE = "prefill", "decode"
PHASES = (PREFILL, DECODE)

EMBEDDING, LAYER, HEAD = "embedding", "layer", "head"
LOCAL, GLOBAL, DENSE_MLP, MOE = "local attention", "global attention", "dense MLP", "MoE"
"""Layer kinds a row belongs to: the input tables, every layer, the output head; or, where layers
differ, the windowed or global ones, the dense-MLP or mixture-of-experts ones."""

ALL_TOKENS, LAST_TOKEN = "all", "last"
"""Which tokens an instance runs on: every token of the step, or the last position of each
sequence (the LM head: only the next token's logits are wanted)."""

KV_TENSORS = 2
"""A KV cache keeps two tensors per token and layer: K and V."""

REPLICATED, COLUMN, ROW, HEADS, VOCAB = "replicated", "column", "row", "heads", "vocab"
"""How tensor parallelism cuts a row (:mod:`attnroof.model.parallel`): not at all (norms, adds,
the router, latent down-projections), along its output (a column-parallel weight: QKV, gate/up),
along its input (a row-parallel weight: output and down projections, an all-reduce after), by
heads (attention, its KV cache and QK norm) or by vocabulary rows (embedding, LM head). Experts
are cut like a dense MLP (gate/up by column, down by row) and spread over expert parallelism."""


@dataclass(frozen=True, slots=True)
class Precision:
    """Bytes per element of activations (the compute dtype), weights and the KV cache."""

    itemsize: float = BF16_BYTES
    weight_itemsize: float = BF16_BYTES
    kv_itemsize: float = BF16_BYTES


@dataclass(frozen=True, slots=True)
class Step:
    """One forward step: the phase, sequences and context, dtypes and the attention variant.
    ``batch`` and ``context`` may be numpy arrays: the whole table is then costed on a grid.
    ``routing`` says how many experts a batch touches (:mod:`attnroof.ops.experts`);
    ``latent_form`` how latent attention decodes (:mod:`attnroof.ops.latent`)."""

    phase: str
    batch: Num
    context: Num
    prec: Precision = field(default_factory=Precision)
    fused: bool = True
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT
    routing: str = UNIFORM
    latent_form: str = ABSORBED

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
    """Runs per step: the layers it sits in, or 1 for the embedding and the head."""
    layer_kind: str
    shape: Mapping[str, Any]
    params: int = 0
    """Parameters this instance owns (0 for one that shares another's, like a tied LM head)."""
    params_read: int = 0
    """Parameters one run reads whole (an embedding gathers rows: 0; a tied LM head: the table;
    experts: all of them, an upper bound — a step reads those its tokens touch)."""
    active_params: int | None = None
    """Parameters one token runs through, when not all of ``params`` (experts: its top_k). The
    input embedding counts whole, by the usual convention; :meth:`ModelConfig.active_params` can
    leave it out."""
    tokens: str = ALL_TOKENS
    kernel: str = ""
    """The stage name its cost carries, when it differs from ``name``."""
    split: str = REPLICATED
    """How tensor parallelism cuts it (:data:`COLUMN`, :data:`ROW`, ...)."""

    @property
    def active(self) -> int:
        return self.params if self.active_params is None else self.active_params

    @property
    def per_layer(self) -> bool:
        """A row that runs in the transformer layers (not the embedding or the head)."""
        return self.layer_kind not in (EMBEDDING, HEAD)

    @property
    def is_attention(self) -> bool:
        return self.operator in ("attention", "latent attention")

    def cost(self, step: Step) -> Cost:
        """The cost of one run of this instance at ``step``, from the operator table."""
        from attnroof.model.costs import COST

        return COST[self.operator](self, step)

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

    def key(self) -> tuple[Any, ...]:
        """What makes two rows the same row (everything but the count)."""
        return (self.name, self.operator, self.layer_kind, tuple(sorted(self.shape.items())), self.params)


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
    from attnroof.model.parallel import shard_row

    return tuple(shard_row(r, model, shard) for r in _layer_table(model, shard.first, shard.stop))


def stage_table(model: ModelConfig, first: int, stop: int) -> list[OpInstance]:
    """The rows of layers ``first`` to ``stop - 1`` only: one pipeline stage's, with the input
    tables on the stage that holds layer 0 and the head on the one that holds the last layer.

    >>> from attnroof.model.config import builtin
    >>> m = builtin("llama-3.1-8b")
    >>> [(i.name, i.count) for i in stage_table(m, 16, 32)][:2]
    [('attention norm', 16), ('QKV projection', 16)]
    """
    return list(_layer_table(model, first, stop))


@lru_cache(maxsize=256)
def _layer_table(model: ModelConfig, first: int = 0, stop: int | None = None) -> tuple[OpInstance, ...]:
    from attnroof.model.rows import head_rows, input_rows, layer_rows

    windows, moe = model.layer_windows(), model.layer_is_moe()
    mixed_windows = len(set(windows)) > 1
    mixed_mlp = len(set(moe)) > 1 or any(moe)
    last = len(windows) if stop is None else stop
    first_rows: dict[tuple[Any, ...], OpInstance] = {}
    counts: dict[tuple[Any, ...], int] = {}
    for window, is_moe in list(zip(windows, moe, strict=True))[first:last]:
        attn_kind = (LOCAL if window is not None else GLOBAL) if mixed_windows else LAYER
        mlp_kind = (MOE if is_moe else DENSE_MLP) if mixed_mlp else LAYER
        for row in layer_rows(model, window, is_moe, attn_kind, mlp_kind, named=mixed_windows):
            k = row.key()
            first_rows.setdefault(k, row)
            counts[k] = counts.get(k, 0) + 1
    merged = [replace(row, count=counts[k]) for k, row in first_rows.items()]
    inputs = input_rows(model) if first == 0 else []
    head = head_rows(model) if last == len(windows) else []
    if first > 0 and model.tied:  # a pipeline's last stage keeps its own copy of a tied table
        head = [replace(r, params=r.params_read) if r.split == VOCAB else r for r in head]
    return (*inputs, *merged, *head)


def params(model: ModelConfig, shard: Shard | None = None) -> int:
    """Every parameter of ``model`` (on one device of a ``shard``), summed over its layer table."""
    return sum(i.count * i.params for i in layer_table(model, shard))


def params_read(model: ModelConfig) -> int:
    """Parameters one step reads whole: all but the tables it only gathers rows of."""
    return sum(i.count * i.params_read for i in layer_table(model))


def active_params(model: ModelConfig, *, embedding: bool = True) -> int:
    """Distinct parameters one token runs through: every dense weight, its top_k experts and the
    shared ones, and the embedding table. ``embedding=False`` leaves out the input embedding (of
    which a token only gathers a row) — but not a tied table, which the LM head reads whole."""
    total = sum(i.count * i.active for i in layer_table(model))
    if embedding:
        return total
    table = model.vocab * model.hidden * (not model.tied)
    return total - table - model.learned_positions * model.hidden


def gemm_shapes(model: ModelConfig) -> list[tuple[str, int, int]]:
    """(name, k, m) of each weight GEMM of ``model``: the linear rows of its layer table."""
    return [(i.name, i.shape["k"], i.shape["m"]) for i in layer_table(model) if i.operator == "linear"]
