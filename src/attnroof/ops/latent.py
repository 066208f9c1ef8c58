"""Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds one compressed latent per token,
shared by every head, instead of each head's K and V.

Per token and layer the cache keeps ``r + ρ`` elements: the latent c_kv (``kv_lora_rank`` r) and
one rotary key shared by all heads (``qk_rope_head_dim`` ρ). Head h's key is
[W_UK,h·c_kv ; k_rope] (``qk_nope_head_dim`` n + ρ wide) and its value W_UV,h·c_kv (``v_head_dim``
v wide). Two ways to run it, offered side by side as fused/unfused are for attention:

**naive** (decompress; what transformers runs, and what prefill uses)::

    KV up-projection   reads c_kv (s_kv·r), W_UKV (r·H·(n + v))   writes K_nope, V     2·s_kv·r·H·(n + v)
    attention          H heads of d = n + ρ (Q·Kᵀ), d_v = v (P·V): the usual stage table, K and V
                       read per head

**absorbed** (W_UK folded into the query, W_UV into the output; DeepSeek's decode)::

    Q absorb           reads q_nope (s_q·H·n), W_UK (H·n·r)       writes q_lat (s_q·H·r)   2·s_q·H·n·r
    latent attention   reads q_lat + q_rope (s_q·H·(r + ρ)), the cache (s_kv·(r + ρ)) once for all
                       heads                                      writes o_lat (s_q·H·r)
                       per score: 2(r + ρ) for Q·Kᵀ, 2r for P·V (the values are c_kv itself)
    V absorb           reads o_lat, W_UV (H·r·v)                  writes O (s_q·H·v)       2·s_q·H·r·v

Absorbed, every head reads the same latent: decode attention is grouped-query attention with
g = H over a "head" of r + ρ, so its intensity grows with the heads — about 2H·(2r + ρ)/(r + ρ)/b
FLOP/byte for b-byte elements, ~235 for DeepSeek-V3's 128 heads in bf16, against ~1 for the
naive form's per-head K and V. Not counted: the copy that concatenates the shared rotary key
onto each head in the naive form.
"""

from __future__ import annotations

from attnroof import validate
from attnroof.cost import Access, Cost, Num, Stage
from attnroof.dtypes import BF16_BYTES
from attnroof.errors import InputError
from attnroof.ops.attention import FUSED, PV, QK, SOFTMAX, attention, chunk, chunk_scores, decode, kept_scores
from attnroof.ops.matmul import matmul_flops
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT, softmax_flops

NAIVE, ABSORBED = "naive", "absorbed"
MLA_FORMS = (NAIVE, ABSORBED)
Q_ABSORB, V_ABSORB, KV_UP = "Q absorb", "V absorb", "KV up-projection"


def latent_attention(
    s_q: Num,
    s_kv: Num,
    *,
    heads: Num,
    kv_lora_rank: Num,
    qk_rope_head_dim: Num,
    qk_nope_head_dim: Num,
    v_head_dim: Num,
    form: str = ABSORBED,
    fused: bool = True,
    causal: bool = False,
    window: Num | None = None,
    batch: Num = 1,
    itemsize: Num = BF16_BYTES,
    kv_itemsize: Num | None = None,
    weight_itemsize: Num | None = None,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
) -> Cost:
    """``batch`` sequences of ``s_q`` queries against ``s_kv`` cached latents (decode: s_q = 1;
    prefill: s_q = s_kv = s, causal), every head; the up-projection weights are read once.

    >>> mla = dict(heads=128, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
    >>> c = latent_attention(1, 8192, **mla)                  # DeepSeek-V3 decode, absorbed
    >>> c.flops == 2 * 128 * 128 * 512 + 128 * 8192 * (2 * 576 + 5 + 2 * 512) + 2 * 128 * 512 * 128
    True
    >>> round(c.stages[1].flops / c.stages[1].bytes)          # the latent read once for 128 heads
    235
    """
    validate.sizes(
        s_q=s_q, s_kv=s_kv, heads=heads, kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim,
        qk_nope_head_dim=qk_nope_head_dim, v_head_dim=v_head_dim, batch=batch,
    )  # fmt: skip
    if form not in MLA_FORMS:
        raise InputError(f"form {form!r}: known {', '.join(MLA_FORMS)}", param="form")
    a = itemsize
    kv = itemsize if kv_itemsize is None else kv_itemsize
    w = itemsize if weight_itemsize is None else weight_itemsize
    H, r, rho, n, v = heads, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim
    if form == NAIVE:
        up = Stage(
            KV_UP,
            matmul_flops(batch * s_kv, r, H * (n + v)),
            (Access("c_kv", batch * s_kv * r * kv), Access("W_UKV", r * H * (n + v) * w, weight=True)),
            (Access("K_nope,V", batch * s_kv * H * (n + v) * a),),
        )
        kw = dict(
            fused=fused, itemsize=a, kv_itemsize=a, d_v=v, batch=batch, kv_heads=H,
            softmax_flops_per_element=softmax_flops_per_element,
        )  # fmt: skip
        if not causal and s_q == 1:
            heads_part = decode(s_kv, n + rho, **kw)
        elif causal:  # the last s_q queries: prefill is the chunk of all s_kv
            heads_part = chunk(s_q, s_kv, n + rho, window=window, **kw)
        else:
            heads_part = attention(s_kv, n + rho, window=window, **kw)
        return Cost((up,)) + heads_part
    rows = batch * s_q * H  # query rows, all heads
    q_absorb = Stage(
        Q_ABSORB,
        matmul_flops(rows, n, r),
        (Access("q_nope", rows * n * a), Access("W_UK", H * n * r * w, weight=True)),
        (Access("q_lat", rows * r * a),),
    )
    v_absorb = Stage(
        V_ABSORB,
        matmul_flops(rows, r, v),
        (Access("o_lat", rows * r * a), Access("W_UV", H * r * v * w, weight=True)),
        (Access("O", rows * v * a),),
    )
    scores = batch * H * (chunk_scores(s_q, s_kv, window) if causal else kept_scores(s_q, s_kv, False))
    qk = scores * matmul_flops(1, r + rho, 1)
    pv = scores * matmul_flops(1, 1, r)
    sm = softmax_flops(scores, softmax_flops_per_element)
    q = Access("q_lat,q_rope", rows * (r + rho) * a)
    cache = Access("c_kv,k_rope", batch * s_kv * (r + rho) * kv)
    o = Access("o_lat", rows * r * a)
    if fused:
        middle: tuple[Stage, ...] = (Stage(FUSED, qk + sm + pv, (q, cache), (o,)),)
    else:
        s = Access("S", scores * a)
        p = Access("P", scores * a)
        middle = (
            Stage(QK, qk, (q, cache), (s,)),
            Stage(SOFTMAX, sm, (s,), (p,)),
            Stage(PV, pv, (p, Access("c_kv", batch * s_kv * r * kv)), (o,)),
        )
    return Cost((q_absorb, *middle, v_absorb))


def latent_cache_elements(kv_lora_rank: Num, qk_rope_head_dim: Num) -> Num:
    """Elements one token adds to a layer's latent cache: r + ρ (DeepSeek-V3: 576).

    >>> latent_cache_elements(512, 64) * 61 * 2       # bytes per token, 61 layers, bf16
    70272
    """
    return kv_lora_rank + qk_rope_head_dim
