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
"""

from __future__ import annotations

from attnroof import validate
from attnroof.cost import Access, Cost, Num, Stage
from attnroof.dtypes import BF16_BYTES
from attnroof.ops.attention import FUSED, PV, QK, SOFTMAX, causal_half
from attnroof.ops.backward import BACKWARD_MATMULS_FUSED, FP32_BYTES
from attnroof.ops.matmul import FLOPS_PER_MAC
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
    kv = itemsize if kv_itemsize is None else kv_itemsize
    dv = d if d_v is None else d_v
    scores = group * chunk_scores(s, chunk)
    qk, pv = scores * FLOPS_PER_MAC * d, scores * FLOPS_PER_MAC * dv
    sm = scores * softmax_flops_per_element
    q, o = Access("Q", group * s * d * itemsize), Access("O", group * s * dv * itemsize)
    k, v = Access("K", s * d * kv), Access("V", s * dv * kv)
    if fused:
        one = Cost((Stage(FUSED, qk + sm + pv, (q, k, v), (o,)),))
    else:
        sb = Access("S", scores * itemsize)
        pb = Access("P", scores * itemsize)
        one = Cost(
            (
                Stage(QK, qk, (q, k), (sb,)),
                Stage(SOFTMAX, sm, (sb,), (pb,)),
                Stage(PV, pv, (pb, v), (o,)),
            )
        )
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
    dv_ = d if d_v is None else d_v
    scores = group * chunk_scores(s, chunk)
    mm, mm_v = scores * FLOPS_PER_MAC * d, scores * FLOPS_PER_MAC * dv_
    e = scores * softmax_flops_per_element
    q, dq = (Access(t, group * s * d * itemsize) for t in ("Q", "dQ"))
    o, do = (Access(t, group * s * dv_ * itemsize) for t in ("O", "dO"))
    k, dk = (Access(t, s * d * kv) for t in ("K", "dK"))
    v, dv = (Access(t, s * dv_ * kv) for t in ("V", "dV"))
    if fused:
        rows = group * s * FP32_BYTES
        lse, dd = Access("L", rows), Access("D", rows)
        one = Cost(
            (
                Stage("backward preprocess", 0, (o, do), (dd,)),
                Stage(
                    "fused attention backward",
                    (BACKWARD_MATMULS_FUSED - 2) * mm + 2 * mm_v + e,
                    (q, k, v, do, lse, dd),
                    (dq, dk, dv),
                ),
            )
        )
    else:
        sb = scores * itemsize
        p, dp, ds = Access("P", sb), Access("dP", sb), Access("dS", sb)
        one = Cost(
            (
                Stage("dV = Pᵀ·dO", mm_v, (p, do), (dv,)),
                Stage("dP = dO·Vᵀ", mm_v, (do, v), (dp,)),
                Stage("softmax backward", e, (p, dp), (ds,)),
                Stage("dQ = dS·K", mm, (ds, k), (dq,)),
                Stage("dK = dSᵀ·Q", mm, (ds, q), (dk,)),
            )
        )
    return one * (batch * kv_heads)
