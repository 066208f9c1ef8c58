"""A row of a model's layer table and the step it is costed at: what an operator's rules read.

A :class:`OpInstance` (a row) is a registered operator (:mod:`attnroof.operators`) with the shape
a model config fixes, how many times a step runs it, the kind of layer it sits in and how
tensor parallelism cuts it; a :class:`Step` is one forward step (phase, batch, context, dtypes,
the attention variant). The operator table turns the two into a :class:`~attnroof.cost.Cost`;
:mod:`attnroof.model.layers` builds the rows from a config. Nothing here imports the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from attnroof import arrays
from attnroof.cost import Num
from attnroof.dtypes import BF16_BYTES
from attnroof.formats import WeightFormat
from attnroof.ops.experts import UNIFORM, Routing
from attnroof.ops.latent import ABSORBED
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT

PREFILL, DECODE, CHUNK = "prefill", "decode", "chunk"
PHASES = (PREFILL, DECODE)
"""The steps a whole model is analysed at."""
STEP_PHASES = (*PHASES, CHUNK)
"""And a chunk: ``queries`` new tokens per sequence against a cache that ends at ``context``
(chunked prefill, the serving engine's mixed steps). Prefill is the chunk of the whole
context, decode the chunk of one token."""

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
    """Bytes per element of activations (the compute dtype), weights and the KV cache.
    ``weight_itemsize`` is every weight's unless ``stored``: then a row whose checkpoint stores
    it in a format of its own (``OpInstance.weight_format``, from ``quantization_config``) keeps
    that format's bytes, scales included. ``--weight-dtype`` given by the user sets ``stored``
    False: one dtype for every row."""

    itemsize: float = BF16_BYTES
    weight_itemsize: float = BF16_BYTES
    kv_itemsize: float = BF16_BYTES
    stored: bool = True

    def weight_bytes(self, row: OpInstance) -> float:
        """Bytes per weight of ``row``: its stored format's, or :attr:`weight_itemsize`.

        >>> from attnroof.formats import MXFP4
        >>> experts = OpInstance("expert down", "experts", 36, LAYER, {}, weight_format=MXFP4)
        >>> Precision().weight_bytes(experts), Precision(stored=False).weight_bytes(experts)
        (0.53125, 2)
        """
        fmt = row.weight_format
        return fmt.itemsize if self.stored and fmt is not None else self.weight_itemsize


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
    routing: Routing | str = UNIFORM
    latent_form: str = ABSORBED
    queries: Num = 1
    """A chunk's new tokens per sequence (:data:`CHUNK`); ``context`` then counts them too."""

    def __post_init__(self) -> None:
        if self.phase not in STEP_PHASES:
            raise ValueError(f"unknown phase {self.phase!r}; known: {', '.join(STEP_PHASES)}")

    def tokens(self, which: str = ALL_TOKENS) -> Num:
        """Tokens through an instance: ``batch × context`` at prefill, ``batch`` at decode,
        ``batch × queries`` in a chunk; the last position of each sequence (``batch``) for a
        ``LAST_TOKEN`` instance."""
        if which == LAST_TOKEN or self.phase == DECODE:
            return self.batch
        if self.phase == CHUNK:
            return self.batch * self.queries
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
    weight_format: WeightFormat | None = None
    """The format the checkpoint stores its weights in, when its ``quantization_config`` says
    (:mod:`attnroof.model.quantization`); None: the step's weight dtype. Read its bytes through
    :meth:`Precision.weight_bytes`, never from here."""

    @property
    def active(self) -> int:
        return self.params if self.active_params is None else self.active_params

    @property
    def per_layer(self) -> bool:
        """A row that runs in the transformer layers (not the embedding or the head)."""
        return self.layer_kind not in (EMBEDDING, HEAD)

    def cached_tokens(self, context: Num) -> Num:
        """Tokens of KV cache an attention instance keeps per sequence: the context, or the last
        ``window`` of it (a rolling buffer).

        >>> attn = OpInstance("attention", "attention", 32, LAYER, {"window": 4096})
        >>> attn.cached_tokens(32768), attn.cached_tokens(1024)     # a rolling buffer of 4096
        (4096, 1024)
        """
        window = self.shape.get("window")
        if window is None:
            window = self.shape.get("attention_chunk")  # chunked attention: the current chunk
        return context if window is None else arrays.minimum(context, window)

    @property
    def kv_elements_per_token(self) -> int:
        """Elements one token adds to this instance's KV cache (per run)."""
        return self.shape.get("kv_elements_per_token", 0)

    @property
    def fixed_cache_bytes_per_token(self) -> int:
        """Bytes one cached token keeps in this instance whatever the cache's dtype (DeepSeek's
        index keys: fp8 and a scale; issue 23)."""
        return self.shape.get("fixed_cache_bytes_per_token", 0)

    @property
    def state_elements(self) -> int:
        """Elements of the fixed state one sequence keeps in this instance, whatever its context
        (a linear-attention or state-space mixer's state and conv state; issue 23)."""
        return self.shape.get("state_elements", 0)

    def key(self) -> tuple[Any, ...]:
        """What makes two rows the same row (everything but the count)."""
        return (self.name, self.operator, self.layer_kind, tuple(sorted(self.shape.items())), self.params)


SPLITS = (REPLICATED, COLUMN, ROW, HEADS, VOCAB)


class Saving(NamedTuple):
    """What a training step's forward pass keeps for its backward pass depends on: the micro-batch
    (``batch`` sequences of ``context`` tokens), the activations' bytes per element, whether
    attention is fused, and whether selective recomputation checkpoints the attention core."""

    batch: Num
    context: Num
    itemsize: float
    fused: bool
    selective: bool = False

    @property
    def tokens(self) -> Num:
        return self.batch * self.context
