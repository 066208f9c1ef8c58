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

A **chunk** (:func:`chunk`: chunked prefill, a prompt after a cached prefix, a speculative
draft being verified) is ``s_q`` new queries at the end of a sequence of ``s_kv`` tokens, the
first p = s_kv − s_q of them already cached. Its scores are a rectangle and a triangle::

    s_q × p  every new query against every cached key (those within a window)
    ½ s_q²   the new queries among themselves, causal (the prefill convention)

so a chunk of the whole sequence (p = 0) is causal prefill and a chunk of one token is decode,
score for score and byte for byte.

Length: the three shapes of one stage table (prefill, decode, a chunk) and the score counts
they share, kept together so that the chunk's two ends can never drift from the other two.
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
    """An int, an integer numpy scalar or array (or an array of Python ints, which never
    overflow), or a sympy integer (not a symbol or a float)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, numbers.Integral):
        return True
    kind = getattr(getattr(x, "dtype", None), "kind", None)
    if kind == "O":
        return all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in x.flat)
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


def _triangular(n: Num) -> Num:
    """1 + 2 + … + n (0 for n ≤ 0 is the caller's business): whole for integers."""
    return n * (n + 1) // 2 if _is_integer(n) else n * (n + 1) / 2


def _capped_sum(n: Num, cap: Num) -> Num:
    """min(cap, x) summed over x = 1 … n (n ≥ 0): a triangle up to ``cap``, then ``cap`` a step."""
    m = arrays.minimum(n, cap)
    return _triangular(m) + (n - m) * cap


def _is_zero(x: Num) -> bool:
    """True for a number (or a sympy expression) that is 0; False for anything else, arrays
    included (their elements are counted one by one)."""
    try:
        return bool(x == 0)
    except (TypeError, ValueError):
        return False


def chunk_scores(s_q: Num, s_kv: Num, window: Num | None = None) -> Num:
    """Scores of one query head when the last ``s_q`` of ``s_kv`` tokens are the queries (the
    first p = s_kv − s_q cached): s_q·p for the rectangle against the cache, and the causal
    triangle of the chunk itself counted as prefill counts it (:func:`causal_half`). With a
    ``window`` of w keys, the chunk's band (:func:`causal_band`) and, of the rectangle, the
    cached keys within the window of each query: query i (0-based) sees min(p, w − 1 − i) of
    them, summed over x = w − s_q … w − 1 of min(p, x).

    >>> chunk_scores(4096, 4096) == causal_half(4096 * 4096)      # p = 0: prefill
    True
    >>> chunk_scores(1, 8192), chunk_scores(1, 8192, window=4096)  # one token: decode reads s, or w
    (8192, 4096)
    >>> chunk_scores(512, 8192)                                    # 512 · 7680 + ½ · 512²
    4063232
    """
    past = s_kv - s_q
    if _is_zero(past):  # the whole sequence: prefill's count (symbols stay free of min and max)
        return kept_scores(s_q, s_kv, True, window)
    if window is None:
        return s_q * past + causal_half(s_q * s_q)
    last = window - 1  # the most cached keys a query can see: the first query's
    rectangle = _capped_sum(arrays.maximum(last, 0), past) - _capped_sum(arrays.maximum(last - s_q, 0), past)
    return rectangle + causal_band(s_q, window)


def chunk_keys(s_q: Num, s_kv: Num, window: Num | None = None) -> Num:
    """Keys (and values) a chunk reads: all ``s_kv``, or with a ``window`` the chunk's own and
    the last w − 1 cached before it (the first query's reach).

    >>> chunk_keys(1, 8192, window=4096), chunk_keys(512, 8192, window=4096)
    (4096, 4607)
    """
    if window is None or _is_zero(s_kv - s_q):  # every key, or the whole sequence (symbols too)
        return s_kv
    return arrays.minimum(s_kv - s_q, window - 1) + s_q


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
    last: bool = False,
) -> Cost:
    """One KV head and its ``group`` query heads; ``last``: the queries are the sequence's last
    ``s_q`` (a chunk), else a share of it (context parallelism) or all of it."""
    skip = causal and not mask_pass  # causal tiles skipped, or every score computed then masked
    if last:
        scores = group * chunk_scores(s_q, s_kv, window)
        keys = chunk_keys(s_q, s_kv, window)
    else:
        scores = group * kept_scores(s_q, s_kv, skip, window)  # elements of S (and of P) per KV head
        keys = s_kv
    mask = None
    if not fused and causal and mask_pass:  # a pass of its own: read S and the mask, write S
        # one mask element per score, like S: counted per query head (the same s_q × s_kv mask
        # is read again for every head it is broadcast over)
        mask = Access("mask", group * s_q * s_kv * MASK_BYTES_PER_ELEMENT)
    return score_table(
        scores, s_q, keys, d, d_v=d_v, group=group, itemsize=itemsize, kv_itemsize=kv_itemsize,
        softmax_flops_per_element=softmax_flops_per_element, fused=fused, mask=mask,
    )  # fmt: skip


def score_table(
    scores: Num,
    queries: Num,
    keys: Num,
    d: Num,
    *,
    d_v: Num | None,
    group: Num,
    itemsize: Num,
    kv_itemsize: Num,
    softmax_flops_per_element: Num,
    fused: bool,
    mask: Access | None = None,
) -> Cost:
    """The stage table of one KV head's attention, whatever decides which scores it keeps (a
    causal triangle, a window's band, attention chunks): ``scores`` kept over its ``group``
    query heads of ``queries`` tokens, K and V of ``keys``. Fused, one kernel reading Q, K, V
    and writing O; unfused, Q·Kᵀ, the softmax and P·V through S and P (and, with a ``mask``
    read, a masking pass of its own)."""
    dv = d if d_v is None else d_v
    qk_flops = scores * matmul_flops(1, d, 1)  # each score: a (1×d)·(d×1) dot product
    pv_flops = scores * matmul_flops(1, 1, dv)  # each kept score weights one d_v-vector of V
    sm_flops = softmax_flops(scores, softmax_flops_per_element)

    q = Access("Q", group * queries * d * itemsize)
    k = Access("K", keys * d * kv_itemsize)
    v = Access("V", keys * dv * kv_itemsize)
    o = Access("O", group * queries * dv * itemsize)
    if fused:
        return Cost((Stage(FUSED, qk_flops + sm_flops + pv_flops, (q, k, v), (o,)),))
    s = scores * itemsize
    masking = () if mask is None else (Stage(MASK, 0, (Access("S", s), mask), (Access("S", s),)),)
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


def chunk(
    s_q: Num,
    s_kv: Num,
    d: Num,
    *,
    fused: bool = True,
    group: Num = 1,
    itemsize: Num = BF16_BYTES,
    kv_itemsize: Num | None = None,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    batch: Num = 1,
    kv_heads: Num = 1,
    d_v: Num | None = None,
    window: Num | None = None,
) -> Cost:
    """``s_q`` new queries against a sequence of ``s_kv`` tokens whose first s_kv − s_q are
    cached: chunked prefill, a prompt after a cached prefix, a draft being verified. Scores by
    :func:`chunk_scores`; Q and O of the chunk, K and V of every key it reads
    (:func:`chunk_keys`). Its two ends are the other two formulas:

    >>> chunk(8192, 8192, 128) == attention(8192, 128, causal=True, fused=True)
    True
    >>> chunk(1, 8192, 128, fused=False) == decode(8192, 128)
    True

    Between them, a chunk of 512 against 7,680 cached tokens (the rectangle and the triangle,
    4,063,232 scores; Q and O 2·512·128, K and V 2·8192·128, 2 bytes each):

    >>> c = chunk(512, 8192, 128)
    >>> c.flops == 4063232 * (4 * 128 + 5), c.bytes == 2 * (2 * 512 * 128 + 2 * 8192 * 128)
    (True, True)
    """
    _check(s_kv, d, group, itemsize, kv_itemsize, softmax_flops_per_element, batch, kv_heads)
    validate.size("s_q", s_q)
    _check_widths(d_v, window, True)
    over = s_q - s_kv
    if getattr(over, "shape", ()) != ():  # arrays: every pair
        if bool((arrays.as_float(over) > 0).any()):
            raise InputError("a chunk of more queries than the sequence has tokens", param="s_q")
    elif getattr(over, "is_number", True) and over > 0:  # numbers (a symbol's sign is its own)
        raise InputError(f"a chunk of {s_q} queries in a sequence of {s_kv} tokens", param="s_q")
    one = _attention(
        s_q,
        s_kv,
        d,
        fused=fused,
        causal=True,
        d_v=d_v,
        window=window,
        group=group,
        itemsize=itemsize,
        kv_itemsize=itemsize if kv_itemsize is None else kv_itemsize,
        softmax_flops_per_element=softmax_flops_per_element,
        last=True,
    )
    return one * (batch * kv_heads)
