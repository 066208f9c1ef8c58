"""Device memory of a model at a batch and context: weights, KV cache, activations.

    weights      = Σ over the layer table of runs × parameters × the row's bytes per weight
                   (as the checkpoint stores it, scales included, or --weight-dtype's)
    KV per token = Σ over attention instances of runs × the elements each token adds
                   (2 × kv_heads × head_dim for GQA), × KV itemsize: what a token writes
    KV held      = the cache per sequence / context: per token of context, what the cache holds
                   (less than written when windowed layers keep only their window)
    KV cache     = Σ over attention instances of that × batch × cached tokens (the context,
                   or the sliding window)
    activations  = one layer's live tensors: the residual stream plus the largest transient
                   (the widest GEMM output — QKV, MLP intermediate, the last tokens' logits —
                   or, unfused, the score matrices of all heads)

Weights are paid once; everything else grows in proportion to the batch, so the largest batch
that fits is a division.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

from attnroof import arrays
from attnroof.cost import Num
from attnroof.model.layers import PREFILL, Precision, Step, layer_table, weight_bytes
from attnroof.model.spec import ModelConfig
from attnroof.operators import is_attention, rule
from attnroof.ops.experts import UNIFORM, Routing, touched_experts

if TYPE_CHECKING:
    from attnroof.model.parallel import Shard

MAX_SEARCH_CONTEXT = 2**40
"""Contexts searched for the largest that fits; beyond it (only with a sliding window and fused
attention does memory stop growing with context) the context is reported as unbounded."""


def kv_cache_bytes_per_token(model: ModelConfig, kv_itemsize: float, shard: Shard | None = None) -> float:
    """Bytes of K and V that one token adds to the cache, over all layers.

    >>> from attnroof.model.config import builtin
    >>> kv_cache_bytes_per_token(builtin("llama-3.1-8b"), 2)     # 32 × 2 × 8 × 128 × 2
    131072
    """
    table = layer_table(model, shard)
    fixed = sum(i.count * i.fixed_cache_bytes_per_token for i in table)  # DSA's fp8 index keys
    return sum(i.count * i.kv_elements_per_token for i in table) * kv_itemsize + fixed


def weights_read(
    model: ModelConfig,
    phase: str,
    batch: Num,
    context: Num,
    routing: Routing | str = UNIFORM,
    shard: Shard | None = None,
    prec: Precision | None = None,
) -> Num:
    """Parameters one step reads: every weight it streams whole, and of each mixture of experts
    only the experts its tokens touch (:func:`attnroof.ops.experts.touched_experts`). With
    ``prec``: their bytes, each row's at its own bytes per weight.

    >>> from attnroof.model.config import builtin
    >>> from attnroof.model.layers import params
    >>> m = builtin("mixtral-8x7b")
    >>> weights_read(m, "decode", 1, 4096) < params(m) / 3      # 2 of 8 experts at batch 1
    True
    """
    tokens = Step(phase, batch, context).tokens()
    total: Num = 0
    for i in layer_table(model, shard):
        size = 1 if prec is None else prec.weight_bytes(i)
        if rule(i).routed:  # under expert parallelism: the group's tokens, 1/ep of the experts
            ep = i.shape.get("ep", 1)
            each = i.params_read * ep / i.shape["experts"]
            pooled = tokens * i.shape.get("pool", ep)
            touched = touched_experts(pooled, i.shape["experts"], i.shape["top_k"], routing)
            total = total + i.count * each * touched / ep * size
        else:
            total = total + i.count * i.params_read * size
    return total


def recurrent_state_bytes(model: ModelConfig, kv_itemsize: float, shard: Shard | None = None) -> float:
    """Bytes of one sequence's fixed recurrent state, over every scanning layer (Mamba, gated
    DeltaNet): the part of its cache that does not grow with the context (0 without such layers).

    >>> from attnroof.model.config import builtin
    >>> recurrent_state_bytes(builtin("nemotron-h-8b"), 2)    # 24 Mamba-2 layers × 1,079,296 × 2 B
    51806208
    """
    return (
        sum(i.count * i.state_elements for i in layer_table(model, shard) if i.state_elements) * kv_itemsize
    )


def kv_cache_bytes_per_sequence(
    model: ModelConfig, context: Num, kv_itemsize: float, shard: Shard | None = None
) -> Num:
    """Bytes of one sequence's KV cache at ``context`` tokens: each attention instance keeps its
    own cached tokens (all of them, or its window), and each recurrent mixer its fixed state.

    >>> from attnroof.model.config import builtin
    >>> kv_cache_bytes_per_sequence(builtin("mistral-7b"), 32768, 2)   # 32 × 2 × 8 × 128 × 2 × 4096
    536870912
    """
    total: Num = 0
    fixed: Num = 0
    for i in layer_table(model, shard):
        if i.kv_elements_per_token:
            total = total + i.count * i.kv_elements_per_token * i.cached_tokens(context)
        if i.state_elements:  # a recurrent mixer's fixed state (issue 23), in the cache's dtype
            total = total + i.count * i.state_elements
        if i.fixed_cache_bytes_per_token:  # DSA's index keys, fp8 whatever the cache's dtype
            fixed = fixed + i.count * i.fixed_cache_bytes_per_token * i.cached_tokens(context)
    return total * kv_itemsize + fixed


def activation_bytes(
    model: ModelConfig,
    phase: str,
    batch: Num,
    context: Num,
    prec: Precision,
    *,
    fused: bool,
    shard: Shard | None = None,
) -> Num:
    """Peak live activation bytes of one layer (layers run one after another and free their
    transients). Unfused prefill materialises ``batch × heads`` score matrices of context²."""
    step = Step(phase, batch, context, prec, fused)
    table = layer_table(model, shard)
    hidden = model.hidden
    widest = reduce(
        arrays.maximum, (step.tokens(i.tokens) * gemm(i.shape)[1] for i in table if (gemm := rule(i).gemm))
    )
    if not fused:  # the score matrices (footprint.py, loaded only for unfused attention)
        from attnroof.footprint import score_matrix_bytes

        for i in table:
            if is_attention(i):
                heads = rule(i).query_heads(i)
                per_head = score_matrix_bytes(context, 1) if phase == PREFILL else i.cached_tokens(context)
                widest = arrays.maximum(widest, batch * heads * per_head)
    return (step.tokens() * hidden + widest) * prec.itemsize


@dataclass(frozen=True, slots=True)
class Memory:
    """Bytes on the device, and whether they fit. SI units (bytes)."""

    weights_bytes: float
    weights_read_bytes: float
    """The weights one step streams whole: all but the gathered embedding tables."""
    kv_cache_bytes_per_token_written: float
    """K and V one token writes, every layer's (a windowed layer's too, over its oldest token)."""
    kv_cache_bytes_per_sequence: float
    kv_cache_bytes: float
    activation_bytes: float
    capacity_bytes: float | None
    fits: bool | None
    max_batch: int | None
    """Largest batch whose weights, caches and activations fit at this context (0: not even
    the weights fit)."""
    max_context_by_memory: int | None
    """Largest context that fits in memory at this batch; None when unknown (no capacity) or
    unbounded. :attr:`max_context` bounds it by the model's own limit."""

    context: int
    """The context the cache holds, per sequence."""
    max_context_by_model: int | None = None
    """The model's own limit, its ``max_position_embeddings``; None: it states none."""
    recurrent_state_bytes_per_sequence: float = 0
    """The part of ``kv_cache_bytes_per_sequence`` that is recurrent layers' fixed state."""

    @property
    def max_context(self) -> int | None:
        """The largest context this batch can run at: memory's limit or the model's, the smaller."""
        return largest_context(self.max_context_by_memory, self.max_context_by_model, self.capacity_bytes)[0]

    @property
    def kv_cache_bytes_per_token_held(self) -> float:
        """The cache per token of context: ``kv_cache_bytes_per_sequence / context``. Below the
        written rate once windowed layers stop growing: gpt-oss-120b at 8192 tokens holds 37.4 kB
        per token where every token writes 73.7 kB."""
        return self.kv_cache_bytes_per_sequence / self.context

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.activation_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "weights_bytes": self.weights_bytes,
            "weights_read_bytes": self.weights_read_bytes,
            "kv_cache_bytes_per_token_written": self.kv_cache_bytes_per_token_written,
            "kv_cache_bytes_per_token_held": self.kv_cache_bytes_per_token_held,
            "kv_cache_bytes_per_sequence": self.kv_cache_bytes_per_sequence,
            "recurrent_state_bytes_per_sequence": self.recurrent_state_bytes_per_sequence,
            "kv_cache_bytes": self.kv_cache_bytes,
            "activation_bytes": self.activation_bytes,
            "total_bytes": self.total_bytes,
            "capacity_bytes": self.capacity_bytes,
            "fits": self.fits,
            "max_batch": self.max_batch,
            **context_limit_json(self.max_context_by_memory, self.max_context_by_model, self.capacity_bytes),
        }


MEMORY, MODEL = "memory", "model"
"""What sets the largest context: the device's memory or the model's own limit."""


def largest_context(
    by_memory: int | None, by_model: int | None, capacity_bytes: float | None
) -> tuple[int | None, str | None]:
    """The largest context a batch can run at, and what sets it (:data:`MEMORY` or :data:`MODEL`):
    the smaller of what memory allows (None: unbounded) and the model's ``max_position_embeddings``
    (None: it states none). (None, None) when the capacity is unknown or nothing bounds it.

    >>> largest_context(1188181, 131072, 80e9), largest_context(4096, 131072, 80e9)
    ((131072, 'model'), (4096, 'memory'))
    >>> largest_context(None, 32768, 80e9)      # a sliding window: the cache stops growing
    (32768, 'model')
    """
    if capacity_bytes is None:
        return None, None
    if by_model is not None and (by_memory is None or by_memory > by_model):
        return by_model, MODEL
    return (by_memory, MEMORY) if by_memory is not None else (None, None)


def context_limit_json(
    by_memory: int | None, by_model: int | None, capacity_bytes: float | None
) -> dict[str, int | str | None]:
    """``max_context`` (the limit the text states) with what sets it and both limits apart."""
    limit, by = largest_context(by_memory, by_model, capacity_bytes)
    return {
        "max_context": limit,
        "max_context_limited_by": by,
        "max_context_by_memory": by_memory,
        "max_context_by_model": by_model,
    }


def memory(
    model: ModelConfig,
    phase: str,
    batch: int,
    context: int,
    prec: Precision,
    capacity_bytes: float | None,
    *,
    fused: bool = True,
    routing: Routing | str = UNIFORM,
    shard: Shard | None = None,
) -> Memory:
    """Weights, KV cache and activations of ``batch`` sequences at ``context`` tokens.

    >>> from attnroof.model.config import builtin
    >>> mem = memory(builtin("llama-3.1-8b"), "decode", 1, 8192, Precision(), 141e9)
    >>> mem.kv_cache_bytes, mem.max_batch                     # 131072 B × 8192 tokens = 1 GiB
    (1073741824, 116)
    """
    per_token = kv_cache_bytes_per_token(model, prec.kv_itemsize, shard)
    weights = weight_bytes(model, prec, shard)

    def used(b: int, c: int) -> float:
        kv = kv_cache_bytes_per_sequence(model, c, prec.kv_itemsize, shard) * b
        return weights + kv + activation_bytes(model, phase, b, c, prec, fused=fused, shard=shard)

    per_seq = kv_cache_bytes_per_sequence(model, context, prec.kv_itemsize, shard)
    act = activation_bytes(model, phase, batch, context, prec, fused=fused, shard=shard)
    if capacity_bytes is None:
        fits, max_batch, max_context = None, None, None
    else:
        total = used(batch, context)
        fits = total <= capacity_bytes
        per_batch = used(1, context) - weights  # everything but the weights grows with the batch
        max_batch = max(0, int((capacity_bytes - weights) // per_batch))
        max_context = _largest(lambda c: used(batch, c) <= capacity_bytes)
    return Memory(
        weights_bytes=weights,
        weights_read_bytes=weights_read(model, phase, batch, context, routing, shard, prec),
        kv_cache_bytes_per_token_written=per_token,
        kv_cache_bytes_per_sequence=per_seq,
        kv_cache_bytes=per_seq * batch,
        activation_bytes=act,
        capacity_bytes=capacity_bytes,
        fits=fits,
        max_batch=max_batch,
        max_context_by_memory=max_context,
        context=context,
        max_context_by_model=model.max_positions,
        recurrent_state_bytes_per_sequence=recurrent_state_bytes(model, prec.kv_itemsize, shard),
    )


def _largest(ok: Any) -> int | None:
    """The largest c ≥ 0 with ``ok(c)`` for a predicate that holds up to some c and not after
    (0 when not even one token fits; None when it holds up to :data:`MAX_SEARCH_CONTEXT`)."""
    if ok(MAX_SEARCH_CONTEXT):
        return None
    if not ok(1):
        return 0
    lo, hi = 1, MAX_SEARCH_CONTEXT
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
