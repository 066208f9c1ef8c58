"""DeepSeek Sparse Attention (DeepSeek-V3.2-Exp): a lightning indexer scores every cached token
for each query in fp8, the top-k of them are kept, and latent attention (:mod:`attnroof.ops.latent`,
absorbed: MLA's MQA mode) runs over those k tokens only.

The indexer (DeepSeek-V3.2-Exp technical report, 2025, §2.1; kernels: DeepGEMM's
``fp8_mqa_logits`` and ``fp8_paged_mqa_logits``; the reference ``Indexer`` in DeepSeek's
``inference/model.py``) has H_I heads of dimension d_I (64 × 128 in V3.2) and one shared key per
token, cached in fp8 with one fp32 scale; a query's score of key j is Σ_h w_h · ReLU(q_h · k_j)::

    index scores   reads q_I (fp8), the index keys (fp8 + scale), w     writes the logits (fp32)
                   H_I·(2·d_I + 3) FLOPs per (query, key) pair: the dot, ReLU, the weight, the sum
    top-k          reads the logits                                      writes k indices (int32)
    attention      MLA absorbed over min(k, keys) latents per query

The indexer still touches every (query, key) pair — O(s²) at prefill, O(s) per decode token —
but at H_I·(2d_I + 3) ≈ 16.6 k FLOPs and d_I + 4 bytes of cache per key, against the main
attention's H·(4r + 2ρ) ≈ 279 k FLOPs and (r + ρ)·2 bytes; the main attention becomes O(s·k).
Decode bytes per token grow with the context through the index keys only (132 B per cached token
and layer, against 1152 B of latent for dense MLA in bf16).

Convention: at prefill each latent is read once (the band of the k most recent keys stands for
the selected ones; a gather that loads a latent for several queries is taken to hit on-chip
caches), and the scores kept are those of a causal band of k: Σ_t min(t, k). A chunk of q new
queries against a cache (a serving engine's chunked prefill) keeps the band too: it reads the
latents of its own tokens and the k − 1 before them — a lower bound, as every figure here is (the
queries' selections may reach further back) — and its indexer scores every earlier key.
"""

from __future__ import annotations

from attnroof import arrays, validate
from attnroof.cost import Access, Cost, Num, Stage
from attnroof.dtypes import BF16_BYTES
from attnroof.ops.attention import chunk_keys, chunk_scores, kept_scores
from attnroof.ops.latent import ABSORBED, latent_attention
from attnroof.ops.matmul import FLOPS_PER_MAC
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT

FP8_BYTES = 1
"""The indexer's queries and keys are fp8 (e4m3)."""
INDEX_SCALE_BYTES = 4
"""One fp32 scale per cached index key (DeepGEMM's per-token scale)."""
LOGIT_BYTES = 4
"""Index logits are fp32."""
INDEX_BYTES = 4
"""Selected token indices are int32."""
INDEX_FLOPS_PER_HEAD = 3
"""Per (query, key, index head) beyond the dot product: ReLU, the head's weight, the sum."""
INDEX_SCORES, TOP_K = "index scores", "top-k"


def index_key_bytes(index_head_dim: Num, index_itemsize: Num = FP8_BYTES) -> Num:
    """Bytes one token adds to a layer's index-key cache: d_I in fp8 and a scale.

    >>> index_key_bytes(128)
    132
    """
    return index_head_dim * index_itemsize + INDEX_SCALE_BYTES


def indexer(
    s_q: Num,
    s_kv: Num,
    *,
    index_heads: Num,
    index_head_dim: Num,
    top_k: Num,
    causal: bool = False,
    batch: Num = 1,
    index_itemsize: Num = FP8_BYTES,
) -> Cost:
    """The lightning indexer of ``batch`` sequences: ``s_q`` queries scoring ``s_kv`` keys
    (causal: the queries are the last s_q of the s_kv tokens, each scoring the keys up to its
    own — prefill's lower triangle when s_q = s_kv, a chunk against a cache when fewer:
    :func:`attnroof.ops.attention.chunk_scores`), then their top ``top_k``.

    >>> c = indexer(1, 131072, index_heads=64, index_head_dim=128, top_k=2048)
    >>> c.stages[0].flops                      # 131072 keys · 64 · (2·128 + 3)
    2172649472
    >>> c.stages[0].bytes_read                 # q 64·128 + w 64·4 + keys 131072·132
    17309952
    """
    validate.sizes(s_q=s_q, s_kv=s_kv, index_heads=index_heads, index_head_dim=index_head_dim,
                   top_k=top_k, batch=batch)  # fmt: skip
    validate.positive("index_itemsize", index_itemsize)
    hi, di = index_heads, index_head_dim
    pairs = batch * (chunk_scores(s_q, s_kv) if causal else kept_scores(s_q, s_kv, False))
    logits = Access("index logits", pairs * LOGIT_BYTES)
    reads = (
        Access("q_I", batch * s_q * hi * di * index_itemsize),
        Access("index weights", batch * s_q * hi * LOGIT_BYTES),
        Access("index keys", batch * s_kv * index_key_bytes(di, index_itemsize)),
    )
    picked = Access("indices", batch * s_q * arrays.minimum(s_kv, top_k) * INDEX_BYTES)
    return Cost(
        (
            Stage(INDEX_SCORES, pairs * hi * (FLOPS_PER_MAC * di + INDEX_FLOPS_PER_HEAD), reads, (logits,)),
            Stage(TOP_K, 0, (logits,), (picked,)),
        )
    )


def sparse_attention(
    s_q: Num,
    s_kv: Num,
    *,
    heads: Num,
    kv_lora_rank: Num,
    qk_rope_head_dim: Num,
    qk_nope_head_dim: Num,
    v_head_dim: Num,
    index_heads: Num,
    index_head_dim: Num,
    top_k: Num,
    causal: bool = False,
    form: str = ABSORBED,
    fused: bool = True,
    batch: Num = 1,
    itemsize: Num = BF16_BYTES,
    kv_itemsize: Num | None = None,
    weight_itemsize: Num | None = None,
    index_itemsize: Num = FP8_BYTES,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
) -> Cost:
    """DSA: the indexer, then latent attention over the ``top_k`` selected tokens of each query
    (prefill: ``s_q = s_kv = s``, causal; decode: ``s_q = 1``; a chunk of a prompt against the
    cache before it, a serving engine's chunked prefill: ``s_q < s_kv``, causal).

    >>> dsa = dict(heads=128, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
    ...            v_head_dim=128, index_heads=64, index_head_dim=128, top_k=2048)
    >>> short, long = sparse_attention(1, 8192, **dsa), sparse_attention(1, 131072, **dsa)
    >>> long.stages[-2].bytes == short.stages[-2].bytes      # the main attention: 2048 latents
    True
    >>> long.bytes - short.bytes                             # 122880 more keys: 132 B each, a logit 4 B twice
    17203200
    """
    idx = indexer(s_q, s_kv, index_heads=index_heads, index_head_dim=index_head_dim, top_k=top_k,
                  causal=causal, batch=batch, index_itemsize=index_itemsize)  # fmt: skip
    mla = dict(
        heads=heads, kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim,
        qk_nope_head_dim=qk_nope_head_dim, v_head_dim=v_head_dim, form=form, fused=fused, batch=batch,
        itemsize=itemsize, kv_itemsize=kv_itemsize, weight_itemsize=weight_itemsize,
        softmax_flops_per_element=softmax_flops_per_element,
    )  # fmt: skip
    if causal:  # the band of the k most recent keys stands for each query's selection
        main = latent_attention(s_q, chunk_keys(s_q, s_kv, top_k), causal=True, window=top_k, **mla)
    else:
        main = latent_attention(s_q, arrays.minimum(s_kv, top_k), **mla)
    return idx + main
