"""Chunked local attention (Llama 4): each query sees only the keys of its own chunk of C tokens,
causally; the chunks do not overlap (a sliding window would let every query see its last w keys).

Prefill over s tokens is ⌊s/C⌋ full chunks and one of the remaining r = s − C⌊s/C⌋ tokens, each a
causal attention of its own; the stage table is attention's (:mod:`attnroof.ops.attention`), with
the scores kept per query head::

    scores = ⌊s/C⌋ · ½C² + ½r²          (each half counted as :func:`attnroof.ops.attention.causal_half`)

Unfused (three kernels, the chunks' score blocks through off-chip memory)::

    Q·Kᵀ     reads Q, K      writes S      2·d per score
    softmax  reads S         writes P      5 per score
    P·V      reads P, V      writes O      2·d_v per score

Fused: one kernel reading Q, K, V once and writing O (the block-diagonal mask is a tile skip,
as in transformers' ``chunked_attention`` mask and vLLM's ``ChunkedLocalAttention``).

As s grows, FLOPs grow as s·C/2 rather than s²/2: fused intensity rises like full attention's
until s = C, then levels off at C(4d + 5)/(16d) FLOP/byte for bf16 (2068 at C = 8192, d = 128),
far above any device's ridge; unfused, the score blocks keep its limit at (4d + 5)/8, as full
attention's. Decode attends over the current chunk only: ((s − 1) mod C) + 1 keys, never more
than C (:func:`chunk_position`), so the cache a chunked layer needs is bounded by C.

A serving engine's chunk — the last q of s tokens new, the first p = s − q cached
(:func:`chunk_of_queries`) — sees, from its first query, the cached keys of that query's own
attention chunk, from c₀ = C⌊p/C⌋: the q₁ = min(s, c₀ + C) − p queries in that chunk see the
p − c₀ cached keys and their own triangle, and the rest of the new tokens, from c₀ + C, are a
prefill of whole attention chunks::

    scores = q₁·(p − c₀) + ½q₁² + chunk_scores(s − c₀ − C)      keys read: s − c₀

At p = 0 it is prefill's count; at q = 1, decode's ((s − 1) mod C) + 1.
"""

from __future__ import annotations

from attnroof import arrays, validate
from attnroof.cost import Cost, Num
from attnroof.dtypes import BF16_BYTES
from attnroof.ops.attention import causal_half, score_table
from attnroof.ops.backward import score_backward_table
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT


def chunk_scores(s: Num, chunk: Num) -> Num:
    """Scores one query head computes over ``s`` tokens in chunks of ``chunk``.

    >>> chunk_scores(8192, 8192) == causal_half(8192 * 8192)       # one chunk: full causal
    True
    >>> chunk_scores(20000, 8192)          # 2 · 8192²/2 + 3616²/2
    73646592
    """
    full = s // chunk
    rest = s - full * chunk
    return full * causal_half(chunk * chunk) + causal_half(rest * rest)


def chunk_position(s: Num, chunk: Num) -> Num:
    """Keys the decode token at context ``s`` sees: those of its chunk, ((s − 1) mod C) + 1.

    >>> chunk_position(131072, 8192), chunk_position(131073, 8192), chunk_position(100, 8192)
    (8192, 1, 100)
    """
    return (s - 1) % chunk + 1


def chunk_of_queries_scores(s_q: Num, s_kv: Num, chunk: Num) -> Num:
    """Scores one query head computes when the last ``s_q`` of ``s_kv`` tokens are new (the
    module's table).

    >>> chunk_of_queries_scores(8192, 8192, 8192) == chunk_scores(8192, 8192)    # nothing cached
    True
    >>> chunk_of_queries_scores(1, 20000, 8192) == chunk_position(20000, 8192)    # one token
    True
    >>> chunk_of_queries_scores(2048, 9216, 8192)    # 1024·7168 + ½·1024², then 1024 of a new chunk
    8388608
    """
    past = s_kv - s_q
    start = past // chunk * chunk  # the first key the first new query sees
    first = arrays.minimum(s_kv, start + chunk) - past
    rest = arrays.maximum(s_kv - start - chunk, 0)
    return first * (past - start) + causal_half(first * first) + chunk_scores(rest, chunk)


def chunk_of_queries_keys(s_q: Num, s_kv: Num, chunk: Num) -> Num:
    """Keys (and values) such a chunk reads: from the start of its first query's attention chunk.

    >>> chunk_of_queries_keys(2048, 9216, 8192), chunk_of_queries_keys(1, 20000, 8192)
    (9216, 3616)
    """
    return s_kv - (s_kv - s_q) // chunk * chunk


def chunk_of_queries(
    s_q: Num,
    s_kv: Num,
    d: Num,
    *,
    chunk: Num,
    fused: bool = True,
    group: Num = 1,
    itemsize: Num = BF16_BYTES,
    kv_itemsize: Num | None = None,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    batch: Num = 1,
    kv_heads: Num = 1,
    d_v: Num | None = None,
) -> Cost:
    """``s_q`` new queries at the end of ``s_kv`` tokens under chunked local attention (a
    serving engine's chunked prefill): scores by :func:`chunk_of_queries_scores`, Q and O of the
    new queries, K and V of :func:`chunk_of_queries_keys`; the stage table is
    :func:`chunked_attention`'s. Its two ends are prefill and decode:

    >>> chunk_of_queries(20000, 20000, 128, chunk=8192) == chunked_attention(20000, 128, chunk=8192)
    True
    """
    _check(s_kv, d, chunk, group, batch, kv_heads, itemsize)
    validate.size("s_q", s_q)
    validate.nonnegative("softmax_flops_per_element", softmax_flops_per_element)
    scores = group * chunk_of_queries_scores(s_q, s_kv, chunk)
    keys = chunk_of_queries_keys(s_q, s_kv, chunk)
    return _table(
        scores, s_q, keys, d, d_v, group, itemsize, kv_itemsize, softmax_flops_per_element, fused
    ) * (batch * kv_heads)


def _table(
    scores: Num, queries: Num, keys: Num, d: Num, d_v: Num | None, group: Num, itemsize: Num,
    kv_itemsize: Num | None, softmax_flops_per_element: Num, fused: bool,
) -> Cost:  # fmt: skip
    """Attention's stage table (:func:`attnroof.ops.attention.score_table`) over the chunks' scores."""
    kv = itemsize if kv_itemsize is None else kv_itemsize
    return score_table(
        scores, queries, keys, d, d_v=d_v, group=group, itemsize=itemsize, kv_itemsize=kv,
        softmax_flops_per_element=softmax_flops_per_element, fused=fused,
    )  # fmt: skip


def _check(s: Num, d: Num, chunk: Num, group: Num, batch: Num, kv_heads: Num, itemsize: Num) -> None:
    validate.sizes(s=s, d=d, chunk=chunk, group=group, batch=batch, kv_heads=kv_heads)
    validate.positive("itemsize", itemsize)


def chunked_attention(
    s: Num,
    d: Num,
    *,
    chunk: Num,
    fused: bool = True,
    group: Num = 1,
    itemsize: Num = BF16_BYTES,
    kv_itemsize: Num | None = None,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    batch: Num = 1,
    kv_heads: Num = 1,
    d_v: Num | None = None,
) -> Cost:
    """Causal attention within chunks of ``chunk`` tokens over a prompt of ``s`` (prefill):
    ``batch × kv_heads`` KV heads, each with ``group`` query heads.

    >>> c = chunked_attention(32768, 128, chunk=8192)        # 4 chunks of 8192, one head
    >>> c.flops == 4 * (8192 * 8192 // 2) * (4 * 128 + 5)
    True
    >>> round(c.flops / c.bytes)                             # C(4d + 5)/(16d) at s ≥ C: 8192·517/2048
    2068
    """
    _check(s, d, chunk, group, batch, kv_heads, itemsize)
    validate.nonnegative("softmax_flops_per_element", softmax_flops_per_element)
    scores = group * chunk_scores(s, chunk)
    one = _table(scores, s, s, d, d_v, group, itemsize, kv_itemsize, softmax_flops_per_element, fused)
    return one * (batch * kv_heads)


def chunked_attention_backward(
    s: Num,
    d: Num,
    *,
    chunk: Num,
    fused: bool = True,
    group: Num = 1,
    itemsize: Num = BF16_BYTES,
    kv_itemsize: Num | None = None,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    batch: Num = 1,
    kv_heads: Num = 1,
    d_v: Num | None = None,
) -> Cost:
    """The backward of :func:`chunked_attention`, by :mod:`attnroof.ops.backward`'s conventions
    for attention over the chunks' scores: fused (FlashAttention-2), five products per score
    (S again, dV, dP, dQ, dK) reading Q, K, V, dO and the fp32 row statistics; unfused, four, P
    kept from the forward.

    >>> b = chunked_attention_backward(16384, 128, chunk=8192, softmax_flops_per_element=0)
    >>> b.flops == 2 * (8192 * 8192 // 2) * 10 * 128         # 10·d per score, 2 chunks
    True
    """
    _check(s, d, chunk, group, batch, kv_heads, itemsize)
    kv = itemsize if kv_itemsize is None else kv_itemsize
    scores = group * chunk_scores(s, chunk)
    one = score_backward_table(
        scores, s, s, d, d_v=d_v, group=group, itemsize=itemsize, kv_itemsize=kv,
        softmax_flops_per_element=softmax_flops_per_element, fused=fused,
    )  # fmt: skip
    return one * (batch * kv_heads)
