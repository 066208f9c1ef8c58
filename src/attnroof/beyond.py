"""Attention beyond softmax, by the seed's method (issue 23): for each kind of attention, one layer
of a published model, its prefill intensity as s grows, the limit, the crossover with the ridge
(or the proof that there is none), and its decode bytes per token against the context; then, for
each hybrid built-in, the context from which its cache is a stated factor smaller than that of the
same model with softmax attention in every mixing layer.

    variant    the layer                                        prefill FLOPs, bytes      decode bytes
    softmax    Qwen3-Next's full attention (16 q, 2 KV × 256)   s², s (fused)             grow as s
    chunked    Llama 4's (40 q, 8 KV × 128), chunks of 8192     s·C, s                    ≤ C tokens
    sparse     DeepSeek-V3.2's MLA + indexer, top 2048          s²·(indexer) + s·k, s     indexer: s
    linear     Qwen3-Next's gated DeltaNet (32 × 128 × 128)     s, s                      flat
    mamba2     Nemotron-H's SSD (128 × 64, N 128)               s, s                      flat
    mamba      Jamba's selective scan (8192 channels, N 16)     s, s                      flat

Each layer's widths are read from its built-in model's layer table (:data:`LAYERS`: the published
config's), so the sheet and ``model`` cost the same layer. Limits and crossovers are exact (sympy,
on the same formulas); a variant whose formula changes form at a size (chunked at C, sparse at k)
is solved on each side of it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from attnroof.analysis import stage_json
from attnroof.cost import Cost
from attnroof.ops import attention, decode
from attnroof.ops.chunked import chunk_position, chunked_attention
from attnroof.ops.recurrent import (
    gated_delta_rule,
    gated_delta_step,
    selective_scan,
    selective_scan_step,
    ssd,
    ssd_step,
)
from attnroof.ops.sparse import sparse_attention
from attnroof.roofline import Roof
from attnroof.solve import Crossover, crossover

SWEEP = (512, 2048, 8192, 32768, 131072, 1048576)
"""Prompt lengths of the intensity table."""
DECODE_CONTEXTS = (4096, 32768, 131072, 1048576)
"""Contexts of the decode table."""
CACHE_FACTOR = 2
"""The default factor by which a hybrid's cache is to be smaller than its all-attention twin's."""
MAX_CONTEXT = 2**40


@dataclass(frozen=True)
class Variant:
    """One kind of attention: the layer it is measured on and its two formulas of s."""

    name: str
    layer: str
    prefill: Callable[[Any], Cost]
    decode: Callable[[Any], Cost]
    regime: Callable[[Any], Cost] | None = None
    """Below ``bound``: the prefill formula as it reads there (no chunk or top-k cut yet)."""
    bound: int | None = None
    """The size at which the prefill formula changes form (the chunk, the top-k)."""
    beyond: Callable[[Any], Any] | None = None
    """s past ``bound`` as a function of a positive symbol (k·C, or k + t)."""


LAYERS: dict[str, tuple[str, str]] = {
    "softmax": ("qwen3-next-80b-a3b", "attention"),
    "chunked": ("llama-4-scout", "chunked attention"),
    "sparse": ("deepseek-v3.2-exp", "sparse attention"),
    "linear": ("qwen3-next-80b-a3b", "linear attention"),
    "mamba2": ("nemotron-h-8b", "ssd"),
    "mamba": ("jamba-mini-1.5", "selective scan"),
}
"""Each variant's layer: (built-in model, operator). Its widths are that model's layer-table row's,
read from the published config, not written here again."""
ATTENTION_KEYS = ("group", "kv_heads")
SPARSE_KEYS = ("heads", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "index_heads",
               "index_head_dim")  # fmt: skip
RECURRENT_KEYS = {
    "linear attention": ("heads", "key_heads", "key_dim", "value_dim", "conv_kernel", "conv_bias"),
    "ssd": ("heads", "head_dim", "state", "groups", "conv_kernel", "conv_bias"),
    "selective scan": ("channels", "state", "conv_kernel", "conv_bias"),
}


@functools.cache
def layer_shape(variant: str) -> dict[str, Any]:
    """The shape of the variant's layer: the first row of its operator in its model's table.

    >>> layer_shape("chunked")["attention_chunk"], layer_shape("mamba2")["state"]
    (8192, 128)
    """
    from attnroof.model.config import builtin
    from attnroof.model.layers import layer_table
    from attnroof.operators import operator, rule

    model, name = LAYERS[variant]
    entry = operator(name)
    return dict(next(r.shape for r in layer_table(builtin(model)) if rule(r) is entry))


def _keys(variant: str, keys: tuple[str, ...]) -> dict[str, Any]:
    shape = layer_shape(variant)
    return {k: shape[k] for k in keys}


def _softmax(fused: bool) -> Variant:
    sh = layer_shape("softmax")
    d, kw = sh["head_dim"], _keys("softmax", ATTENTION_KEYS)
    return Variant(
        "softmax" if fused else "softmax (unfused)",
        f"Qwen3-Next-80B-A3B full attention: {sh['group'] * sh['kv_heads']} query heads on {sh['kv_heads']} "
        f"KV heads of {d}, causal",
        lambda s: attention(s, d, fused=fused, causal=True, **kw),
        lambda s: decode(s, d, fused=fused, **kw),
    )


def _chunked() -> Variant:
    sh = layer_shape("chunked")
    d, c, kw = sh["head_dim"], sh["attention_chunk"], _keys("chunked", ATTENTION_KEYS)
    return Variant(
        "chunked",
        f"Llama-4-Scout chunked layer: {sh['group'] * sh['kv_heads']} query heads on {sh['kv_heads']} KV heads "
        f"of {d}, chunks of {c}",
        lambda s: chunked_attention(s, d, chunk=c, **kw),
        lambda s: decode(chunk_position(s, c), d, fused=True, **kw),
        regime=lambda s: attention(s, d, fused=True, causal=True, **kw),
        bound=c,
        beyond=lambda k: c * k,
    )


def _sparse() -> Variant:
    sh = layer_shape("sparse")
    k, kw = sh["top_k"], _keys("sparse", SPARSE_KEYS)
    return Variant(
        "sparse",
        f"DeepSeek-V3.2-Exp: MLA absorbed ({sh['heads']} heads, latent {sh['kv_lora_rank']} + "
        f"{sh['qk_rope_head_dim']}) over the top {k} of a {sh['index_heads']} × {sh['index_head_dim']} fp8 indexer",
        lambda s: sparse_attention(s, s, causal=True, top_k=k, **kw),
        lambda s: sparse_attention(1, s, top_k=k, **kw),
        regime=lambda s: sparse_attention(s, s, causal=True, top_k=s, **kw),
        bound=k,
        beyond=lambda t: k + t,
    )


def _recurrent(
    name: str, layer: Callable[[dict[str, Any]], str], prefill: Callable[..., Cost], step: Callable[..., Cost]
) -> Variant:
    sh, kw = layer_shape(name), _keys(name, RECURRENT_KEYS[LAYERS[name][1]])
    chunk = {"chunk": sh["chunk"]} if "chunk" in sh else {}
    return Variant(name, layer(sh), lambda s: prefill(s, **chunk, **kw), lambda s: step(**kw))


MAKERS: dict[str, Callable[[], Variant]] = {
    "softmax": lambda: _softmax(True),
    "softmax-unfused": lambda: _softmax(False),
    "chunked": _chunked,
    "sparse": _sparse,
    "linear": lambda: _recurrent(
        "linear", lambda sh: f"Qwen3-Next-80B-A3B gated DeltaNet: {sh['heads']} value heads on {sh['key_heads']} "
        f"key heads, {sh['key_dim']} × {sh['value_dim']} state, chunks of {sh['chunk']}",
        gated_delta_rule, gated_delta_step,
    ),
    "mamba2": lambda: _recurrent(
        "mamba2", lambda sh: f"Nemotron-H-8B Mamba-2: {sh['heads']} heads of {sh['head_dim']}, state {sh['state']}, "
        f"{sh['groups']} groups, chunks of {sh['chunk']}", ssd, ssd_step,
    ),
    "mamba": lambda: _recurrent(
        "mamba", lambda sh: f"Jamba-Mini-1.5 Mamba-1: {sh['channels']} channels, state {sh['state']}", selective_scan,
        selective_scan_step,
    ),
}  # fmt: skip
"""Every variant by its ``--variant`` name, built when first asked for (:func:`variant`): each
reads its model's config."""


@functools.cache
def variant(name: str) -> Variant:
    """The variant ``name`` (a key of :data:`MAKERS`)."""
    return MAKERS[name]()


@dataclass(frozen=True)
class VariantAnalysis:
    name: str
    layer: str
    sweep: list[tuple[int, float]]
    """(s, FLOP/byte) of the prefill."""
    limit_intensity: float | None
    """As s → ∞ (None: unbounded)."""
    limit_exact: str
    crossover_s: int | None
    """The smallest prompt at which prefill reaches the ridge; None: never."""
    decode: list[tuple[int, float, float]]
    """(context, bytes, FLOP/byte) of one decode token."""
    s: int = 8192
    prefill_cost: Cost | None = None
    """The prefill's stage table at ``s`` tokens, and the decode token's at a context of ``s``."""
    decode_cost: Cost | None = None

    @property
    def decode_growth(self) -> str:
        """ "flat" (the same bytes at every context), "bounded" (they stop growing: a chunk) or
        "grows"."""
        b = [x for _, x, _ in self.decode]
        if b[0] == b[-1]:
            return "flat"
        return "bounded" if b[-2] == b[-1] else "grows"

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.name,
            "layer": self.layer,
            "prefill_intensity": [{"s": s, "flop_per_byte": i} for s, i in self.sweep],
            "limit_intensity": self.limit_intensity,
            "limit_exact": self.limit_exact,
            "crossover_s": self.crossover_s,
            "never": self.crossover_s is None,
            "decode": [{"context": c, "bytes": b, "flop_per_byte": i} for c, b, i in self.decode],
            "decode_bytes": self.decode_growth,
            "s": self.s,
            "prefill_stages": [stage_json(st) for st in self.prefill_cost or ()],
            "decode_stages": [stage_json(st) for st in self.decode_cost or ()],
        }


def _limit(v: Variant) -> tuple[float | None, str]:
    import sympy as sp

    from attnroof.solve import exact_expr, fraction_text

    if v.beyond is None:
        x = sp.Symbol("s", positive=True)
        size = x
    else:
        x = sp.Symbol("k", positive=True, integer=True)
        size = v.beyond(x)
    cost = v.prefill(size)
    lim = sp.limit(exact_expr(cost.flops / cost.bytes), x, sp.oo)
    return (None if lim == sp.oo else float(lim)), fraction_text(lim)


def _crossover(v: Variant, roof: Roof) -> Crossover | int | None:
    """The smallest prompt at which the prefill reaches the ridge, solved exactly on each side of
    the variant's ``bound``."""
    p, b = roof.peak_flops_per_s, roof.bandwidth_bytes_per_s
    if v.bound is None:
        c = crossover(lambda s: v.prefill(s).intensity, p, b)
        return None if c.never else c.s_min
    below = crossover(lambda s: v.regime(s).intensity, p, b)  # type: ignore[misc]
    if not below.never and below.s_min is not None and below.s_min <= v.bound:
        return below.s_min
    if v.name == "sparse":  # past the top-k: s = k + t
        past = crossover(lambda t: v.prefill(v.bound + t).intensity, p, b, variable="t")
        return None if past.never else v.bound + (past.s_min or 0)
    return None  # chunked: past C the intensity only falls back towards its limit


def analyse_variant(name: str, roof: Roof, s: int = 8192) -> VariantAnalysis:
    """The seed's questions for one variant on ``roof``, and its stage tables at ``s``.

    >>> from attnroof.devices import get_device
    >>> a = analyse_variant("linear", Roof.of(get_device("h200"), "bf16"))
    >>> round(a.limit_intensity, 1), a.crossover_s, a.decode_growth     # never compute-bound
    (29.8, None, 'flat')
    """
    v = variant(name)
    lim, lim_text = _limit(v)
    cross = _crossover(v, roof)
    sweep = [(s, float(Fraction(c.flops) / Fraction(c.bytes))) for s in SWEEP for c in [v.prefill(s)]]
    dec = [
        (n, float(c.bytes), float(Fraction(c.flops) / Fraction(c.bytes)))
        for n in DECODE_CONTEXTS
        for c in [v.decode(n)]
    ]
    crossing = cross if isinstance(cross, int) else None
    return VariantAnalysis(v.name, v.layer, sweep, lim, lim_text, crossing, dec, s, v.prefill(s), v.decode(s))


# ---------------------------------------------------------------- hybrid caches


@dataclass(frozen=True)
class CacheComparison:
    """A hybrid's cache per sequence against its twin's: the same model with softmax attention
    (its own attention layer's K and V) in every layer that mixes tokens."""

    model: str
    factor: float
    twin_bytes_per_token: int
    hybrid_bytes_per_token: int
    """K and V one token adds to the hybrid's cache once every window and chunk is full."""
    state_bytes: int
    """The fixed state of its recurrent layers, per sequence."""
    context: int | None
    """The smallest context at which twin ≥ factor × hybrid; None: never."""
    limit_ratio: float | None
    """twin / hybrid as the context grows (None: the hybrid has no attention cache growing)."""
    samples: list[tuple[int, int, int]] = field(default_factory=list)
    """(context, hybrid bytes, twin bytes)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model, "factor": self.factor, "twin_bytes_per_token": self.twin_bytes_per_token,
            "hybrid_bytes_per_token": self.hybrid_bytes_per_token, "state_bytes": self.state_bytes,
            "context": self.context, "never": self.context is None, "limit_ratio": self.limit_ratio,
            "samples": [{"context": c, "hybrid_bytes": h, "twin_bytes": t} for c, h, t in self.samples],
        }  # fmt: skip


def compare_cache(name: str, factor: float = CACHE_FACTOR, kv_itemsize: int = 2) -> CacheComparison | None:
    """``name``'s cache against its all-attention twin's; None for a model with no attention layer
    to copy (Mamba-2-2.7B).

    >>> c = compare_cache("qwen3-next-80b-a3b")
    >>> c.twin_bytes_per_token, c.hybrid_bytes_per_token, c.state_bytes, c.context
    (98304, 24576, 39518208, 1608)
    """
    from attnroof.model.config import builtin
    from attnroof.model.layers import layer_table
    from attnroof.model.memory import kv_cache_bytes_per_sequence

    model = builtin(name)
    table = layer_table(model)
    attn = [r for r in table if r.kv_elements_per_token]
    if not attn:
        return None
    per_layer = max(r.kv_elements_per_token for r in attn) * kv_itemsize
    mixing = sum(n for kind, n in model.layer_kinds().items() if kind.mixer != "none")
    twin = per_layer * mixing
    state = sum(r.count * r.state_elements for r in table) * kv_itemsize
    growing = sum(
        r.count * r.kv_elements_per_token for r in attn if r.cached_tokens(MAX_CONTEXT) == MAX_CONTEXT
    )
    growing *= kv_itemsize

    def hybrid(c: int) -> int:
        return round(kv_cache_bytes_per_sequence(model, c, kv_itemsize))

    ok = lambda c: twin * c >= factor * hybrid(c)  # noqa: E731  (twin/hybrid grows with c)
    context: int | None = None
    if ok(MAX_CONTEXT):
        lo, hi = 0, MAX_CONTEXT
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        context = hi
    samples = [(c, hybrid(c), twin * c) for c in DECODE_CONTEXTS]
    full = sum(r.count * r.kv_elements_per_token for r in attn) * kv_itemsize
    return CacheComparison(
        name, factor, twin, full, state, context, (twin / growing) if growing else None, samples
    )
