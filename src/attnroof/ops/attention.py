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

Values may be narrower than queries and keys (``d_v``; DeepSeek's latent attention: d = 192 for
Q·Kᵀ, d_v = 128 for P·V). A sliding ``window`` of w keys (causal prefill) keeps only the band of
the score matrix within w of the diagonal: ½s² − ½(s − w)² scores for s > w, all ½s² otherwise.
"""

from __future__ import annotations

import numbers

from attnroof import arrays, validate
from attnroof.cost import Access, Cost, Num, Stage
from attnroof.dtypes import BF16_BYTES
from attnroof.errors import InputError
from attnroof.ops.matmul import matmul_flops
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT, softmax_flops

CAUSAL_DIVISOR = 2
"""Causal masking skips the score tiles wholly above the diagonal: about half of the score
matrix is computed and, unfused, written and read. The exact lower-triangle share is
(s + 1)/(2s); the FlashAttention papers and tritonbench use ½ too. Q, K, V and O are still
read and written whole, so fused traffic does not shrink. See :func:`causal_half`."""

QK, MASK, SOFTMAX, PV, FUSED = "Q·Kᵀ", "mask", "softmax", "P·V", "fused attention"
"""Stage names: what tables show, and how :func:`attnroof.analysis.softmax_flops` finds softmax."""

MASK_BYTES_PER_ELEMENT = 1
"""A boolean mask: one byte per score (torch.bool)."""


def causal_half(scores: Num) -> Num:
    """The scores a causal kernel computes out of ``scores``: half of them, counted whole.

    Integers (Python, numpy or sympy ints, and integer arrays) give ⌈scores/2⌉, so no count of
    elements or FLOPs is ever fractional; this is exactly ½ whenever ``scores`` is even (s² with
    s even, as in every spec number). Symbols and floats give ``scores/2``, the continuous form
    the limits and crossovers use; the two agree whenever s is even.

    >>> causal_half(8192 * 8192), causal_half(1), causal_half(9)
    (33554432, 1, 5)
    """
    if _is_integer(scores):
        return -(-scores // CAUSAL_DIVISOR)
    return scores / CAUSAL_DIVISOR


def _is_integer(x: Num) -> bool:
    """An int, an integer numpy scalar or array, or a sympy integer (not a symbol or a float)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, numbers.Integral):
        return True
    kind = getattr(getattr(x, "dtype", None), "kind", None)
    return kind in ("i", "u")


def kept_scores(s_q: Num, s_kv: Num, causal: bool, window: Num | None = None) -> Num:
    """Scores one query head computes: all s_q·s_kv, half of them when causal (whole for
    integers), or the band within ``window`` of the diagonal. The forward and backward passes
    and latent attention all count their score work with it.

    >>> kept_scores(4, 4, False), kept_scores(4, 4, True), kept_scores(8, 8, True, window=4)
    (16, 8, 24)
    """
    if causal and window is not None:
        return causal_band(s_kv, window)
    return causal_half(s_q * s_kv) if causal else s_q * s_kv


def causal_band(s: Num, window: Num) -> Num:
    """Scores of causal attention over ``s`` tokens where each query sees at most ``window``
    keys: the causal triangle less the triangle beyond the window, each counted by
    :func:`causal_half` (so whole for integers, and all ½s² when s ≤ w).

    >>> causal_band(8192, 4096), causal_half(8192 * 8192) - causal_half(4096 * 4096)
    (25165824, 25165824)
    >>> causal_band(100, 4096) == causal_half(100 * 100)
    True
    """
    beyond = arrays.maximum(s - window, 0)
    return causal_half(s * s) - causal_half(beyond * beyond)


def _check(
    s: Num,
    d: Num,
    group: Num,
    itemsize: Num,
    kv_itemsize: Num | None,
    softmax_flops_per_element: Num,
    batch: Num,
    kv_heads: Num,
) -> None:
    """Refuse a size that is not a positive whole number, and a non-finite or negative figure."""
    validate.sizes(s=s, d=d, group=group, batch=batch, kv_heads=kv_heads)
    validate.positive("itemsize", itemsize)
    if kv_itemsize is not None:
        validate.positive("kv_itemsize", kv_itemsize)
    validate.nonnegative("softmax_flops_per_element", softmax_flops_per_element)


def _queries(s: Num, queries: Num | None, window: Num | None) -> Num:
    """The queries of one device: all ``s``, or its ``queries`` under context parallelism (not
    with a sliding window, whose band :func:`kept_scores` counts over the whole sequence)."""
    if queries is None:
        return s
    validate.size("queries", queries)
    if window is not None:
        raise InputError("a sliding window with queries on a share of the sequence", param="window")
    return queries


def _check_widths(d_v: Num | None, window: Num | None, causal: bool) -> None:
    if d_v is not None:
        validate.size("d_v", d_v)
    if window is not None:
        validate.size("window", window)
        if not causal:
            raise InputError("a sliding window applies to causal attention", param="window")


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
    d_v: Num | None = None,
    window: Num | None = None,
) -> Cost:
    """One KV head and its ``group`` query heads."""
    skip = causal and not mask_pass  # causal tiles skipped, or every score computed then masked
    scores = group * kept_scores(s_q, s_kv, skip, window)  # elements of S (and of P) per KV head
    dv = d if d_v is None else d_v
    qk_flops = scores * matmul_flops(1, d, 1)  # each score: a (1×d)·(d×1) dot product
    pv_flops = scores * matmul_flops(1, 1, dv)  # each kept score weights one d_v-vector of V
    sm_flops = softmax_flops(scores, softmax_flops_per_element)

    q = Access("Q", group * s_q * d * itemsize)
    k = Access("K", s_kv * d * kv_itemsize)
    v = Access("V", s_kv * dv * kv_itemsize)
    o = Access("O", group * s_q * dv * itemsize)
    if fused:
        return Cost((Stage(FUSED, qk_flops + sm_flops + pv_flops, (q, k, v), (o,)),))
    s = scores * itemsize
    masking: tuple[Stage, ...] = ()
    if causal and mask_pass:  # a pass of its own: read S and the mask, write S
        # one mask element per score, like S: counted per query head (the same s_q × s_kv mask
        # is read again for every head it is broadcast over)
        mask = Access("mask", group * s_q * s_kv * MASK_BYTES_PER_ELEMENT)
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
    d_v: Num | None = None,
    window: Num | None = None,
    queries: Num | None = None,
) -> Cost:
    """Attention forward over a sequence of length ``s`` (prefill), head dimension ``d``.

    The cost of one KV head with its ``group`` query heads, times ``batch × kv_heads``.
    Bytes use ``itemsize`` bytes per element of Q, S, P and O, and ``kv_itemsize`` (default:
    the same) for K and V.

    ``causal`` follows the convention of skipped tiles (half the scores). ``mask_pass=True``
    models eager PyTorch instead: every score is computed, then a separate pass masks S (one
    more read and write of S, and a read of the boolean mask, in the unfused form). ``d_v``
    (default ``d``) is the width of V and O; a ``window`` (causal only) keeps each query's last
    ``window`` keys.

    ``queries`` (default ``s``): the queries one device holds under context parallelism, s/C
    of them against all ``s`` keys and values (Megatron-LM's context parallelism: two chunks of
    s/2C each, i and 2C − 1 − i, so that every device computes the same ½·(s/C)·s causal
    scores, 1/C of the whole; TransformerEngine's ``AttnFuncWithCPAndKVP2P``). Q and O are
    the device's own; K and V of the whole sequence pass through it.

    >>> attention(8192, 128).flops          # s²(4d + 5), part A2
    34695282688
    >>> attention(8192, 128).bytes          # 2·(4sd + 4s²), part B1
    545259520
    >>> attention(8192, 128, fused=True).bytes   # 2·4sd, part B2
    8388608
    >>> attention(1, 128, causal=True).flops   # ⌈1/2⌉ = 1 score: 2·128 + 5 + 2·128, never 258.5
    517
    >>> whole = attention(8192, 128, causal=True, fused=True)
    >>> attention(8192, 128, causal=True, fused=True, queries=2048).flops * 4 == whole.flops  # C = 4
    True
    """
    _check(s, d, group, itemsize, kv_itemsize, softmax_flops_per_element, batch, kv_heads)
    _check_widths(d_v, window, causal)
    one = _attention(
        _queries(s, queries, window),
        s,
        d,
        fused=fused,
        causal=causal,
        mask_pass=mask_pass,
        d_v=d_v,
        window=window,
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
    d_v: Num | None = None,
) -> Cost:
    """One new query token per query head against a KV cache of length ``s`` (part F2, F3).

    Each sequence of the batch has its own cache, so batching multiplies traffic as much as
    work; grouping ``group`` query heads on one KV head reads K and V once for all of them.

    >>> c = decode(8192, 128)
    >>> c.flops, c.bytes                    # 4sd + 5s, 2·(2sd + 4s + 2d)
    (4235264, 4260352)
    """
    _check(s, d, group, itemsize, kv_itemsize, softmax_flops_per_element, batch, kv_heads)
    _check_widths(d_v, None, False)
    one = _attention(
        1,
        s,
        d,
        fused=fused,
        causal=False,
        d_v=d_v,
        group=group,
        itemsize=itemsize,
        kv_itemsize=itemsize if kv_itemsize is None else kv_itemsize,
        softmax_flops_per_element=softmax_flops_per_element,
    )
    return one * (batch * kv_heads)
