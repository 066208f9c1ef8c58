"""Scaled dot-product attention, forward: FLOPs and off-chip traffic per stage.

One KV head serving ``group`` query heads (``group = 1`` is plain multi-head attention), with
``s_q`` queries against ``s_kv`` keys of head dimension ``d``. Prefill is ``s_q = s_kv = s``;
decode is one new token, ``s_q = 1``, against a KV cache of ``s_kv = s``. Both are the same
stage table, so the decode numbers can never drift from the prefill ones.

Unfused (three kernels, the score matrix goes through off-chip memory twice)::

    Q·Kᵀ     reads Q, K      writes S      2·s_q·s_kv·d FLOPs per query head
    softmax  reads S         writes P      5·s_q·s_kv
    P·V      reads P, V      writes O      2·s_q·s_kv·d

Fused (one kernel; S and P live on chip tile by tile and never land)::

    attention  reads Q, K, V  writes O
"""

from __future__ import annotations

from attnroof.cost import Access, Cost, Num, Stage
from attnroof.dtypes import BF16_BYTES
from attnroof.ops.matmul import matmul_flops
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT, softmax_flops

CAUSAL_DIVISOR = 2
"""Causal masking skips the score tiles wholly above the diagonal: about half of the score
matrix is computed and, unfused, written and read. The exact lower-triangle share is
(s + 1)/(2s); the FlashAttention papers and tritonbench use ½ too. Q, K, V and O are still
read and written whole, so fused traffic does not shrink."""

QK, MASK, SOFTMAX, PV, FUSED = "Q·Kᵀ", "mask", "softmax", "P·V", "fused attention"
"""Stage names: what tables show, and how :func:`attnroof.analysis.softmax_flops` finds softmax."""

MASK_BYTES_PER_ELEMENT = 1
"""A boolean mask: one byte per score (torch.bool)."""


def _kept(scores: Num, causal: bool) -> Num:
    """The part of a block of scores that is computed (all of it, or half when causal)."""
    return scores / CAUSAL_DIVISOR if causal else scores


def _attention(
    s_q: Num,
    s_kv: Num,
    d: Num,
    *,
    fused: bool,
    causal: bool,
    group: Num,
    itemsize: Num,
    kv_itemsize: Num,
    softmax_flops_per_element: Num,
    mask_pass: bool = False,
) -> Cost:
    """One KV head and its ``group`` query heads."""
    skip = causal and not mask_pass  # causal tiles skipped, or every score computed then masked
    scores = _kept(group * s_q * s_kv, skip)  # elements of S (and of P) actually produced
    qk_flops = _kept(group * matmul_flops(s_q, d, s_kv), skip)
    pv_flops = _kept(group * matmul_flops(s_q, s_kv, d), skip)
    sm_flops = softmax_flops(scores, softmax_flops_per_element)

    q = Access("Q", group * s_q * d * itemsize)
    k = Access("K", s_kv * d * kv_itemsize)
    v = Access("V", s_kv * d * kv_itemsize)
    o = Access("O", group * s_q * d * itemsize)
    if fused:
        return Cost((Stage(FUSED, qk_flops + sm_flops + pv_flops, (q, k, v), (o,)),))
    s = scores * itemsize
    masking: tuple[Stage, ...] = ()
    if causal and mask_pass:  # a pass of its own: read S and the mask, write S
        mask = Access("mask", s_q * s_kv * MASK_BYTES_PER_ELEMENT)
        masking = (Stage(MASK, 0, (Access("S", s), mask), (Access("S", s),)),)
    return Cost(
        (
            Stage(QK, qk_flops, (q, k), (Access("S", s),)),
            *masking,
            Stage(SOFTMAX, sm_flops, (Access("S", s),), (Access("P", s),)),
            Stage(PV, pv_flops, (Access("P", s), v), (o,)),
        )
    )


def attention(
    s: Num,
    d: Num,
    *,
    fused: bool = False,
    causal: bool = False,
    group: Num = 1,
    itemsize: Num = BF16_BYTES,
    kv_itemsize: Num | None = None,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    batch: Num = 1,
    kv_heads: Num = 1,
    mask_pass: bool = False,
) -> Cost:
    """Attention forward over a sequence of length ``s`` (prefill), head dimension ``d``.

    The cost of one KV head with its ``group`` query heads, times ``batch × kv_heads``.
    Bytes use ``itemsize`` bytes per element of Q, S, P and O, and ``kv_itemsize`` (default:
    the same) for K and V.

    ``causal`` follows the convention of skipped tiles (half the scores). ``mask_pass=True``
    models eager PyTorch instead: every score is computed, then a separate pass masks S (one
    more read and write of S, and a read of the boolean mask, in the unfused form).

    >>> attention(8192, 128).flops          # s²(4d + 5), part A2
    34695282688
    >>> attention(8192, 128).bytes          # 2·(4sd + 4s²), part B1
    545259520
    >>> attention(8192, 128, fused=True).bytes   # 2·4sd, part B2
    8388608
    """
    one = _attention(
        s,
        s,
        d,
        fused=fused,
        causal=causal,
        mask_pass=mask_pass,
        group=group,
        itemsize=itemsize,
        kv_itemsize=itemsize if kv_itemsize is None else kv_itemsize,
        softmax_flops_per_element=softmax_flops_per_element,
    )
    return one * (batch * kv_heads)


def decode(
    s: Num,
    d: Num,
    *,
    fused: bool = False,
    group: Num = 1,
    itemsize: Num = BF16_BYTES,
    kv_itemsize: Num | None = None,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    batch: Num = 1,
    kv_heads: Num = 1,
) -> Cost:
    """One new query token per query head against a KV cache of length ``s`` (part F2, F3).

    Each sequence of the batch has its own cache, so batching multiplies traffic as much as
    work; grouping ``group`` query heads on one KV head reads K and V once for all of them.

    >>> c = decode(8192, 128)
    >>> c.flops, c.bytes                    # 4sd + 5s, 2·(2sd + 4s + 2d)
    (4235264, 4260352)
    """
    one = _attention(
        1,
        s,
        d,
        fused=fused,
        causal=False,
        group=group,
        itemsize=itemsize,
        kv_itemsize=itemsize if kv_itemsize is None else kv_itemsize,
        softmax_flops_per_element=softmax_flops_per_element,
    )
    return one * (batch * kv_heads)
