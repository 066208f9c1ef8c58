"""The rows of the layer table, layer by layer: what :func:`attnroof.model.layers.layer_table`
merges. One function per part of a model — its input tables, one transformer layer (attention
block, then a dense MLP or a mixture of experts), its head — each a list of
:class:`~attnroof.model.layers.OpInstance` with shapes and parameter counts taken from the config.
"""

from __future__ import annotations

from dataclasses import replace

from attnroof.model.spec import QK_NORM_HEAD, ModelConfig
from attnroof.row import (
    COLUMN,
    EMBEDDING,
    HEAD,
    HEADS,
    KV_TENSORS,
    LAST_TOKEN,
    LAYER,
    REPLICATED,
    ROW,
    VOCAB,
    OpInstance,
)


def _linear(name: str, k: int, m: int, bias: bool, kind: str = LAYER, split: str = REPLICATED) -> OpInstance:
    params = k * m + m * bias
    return OpInstance(name, "linear", 1, kind, {"k": k, "m": m, "bias": bias}, params, params, split=split)


def _norm(
    model: ModelConfig, name: str, width: int, kind: str = LAYER, scale: int | None = None
) -> OpInstance:
    """A norm over ``width`` elements per token with a scale of ``scale`` (default ``width``);
    LayerNorm has a shift as long as its scale."""
    scale = width if scale is None else scale
    n_params = scale * (2 if model.norm == "layer" else 1)
    shape = {"width": width, "kind": model.norm, "scale_width": scale}
    return OpInstance(name, "norm", 1, kind, shape, n_params, n_params)


def input_rows(model: ModelConfig) -> list[OpInstance]:
    m = model
    return [
        OpInstance(
            "embedding",
            "embedding",
            1,
            EMBEDDING,
            {"width": m.hidden, "learned_positions": m.learned_positions, "vocab": m.vocab},
            params=(m.vocab + m.learned_positions) * m.hidden,
            split=VOCAB,
        )
    ]


def head_rows(model: ModelConfig) -> list[OpInstance]:
    m = model
    table = m.hidden * m.vocab
    return [
        _norm(m, "final norm", m.hidden, HEAD),
        OpInstance(
            "LM head",
            "linear",
            1,
            HEAD,
            {"k": m.hidden, "m": m.vocab, "bias": False},
            params=0 if m.tied else table,
            params_read=table,  # tied: the embedding table, read whole here
            tokens=LAST_TOKEN,
            split=VOCAB,
        ),
    ]


def layer_rows(
    model: ModelConfig,
    window: int | None,
    moe: bool,
    attn_kind: str,
    mlp_kind: str,
    *,
    named: bool,
    rope: bool = True,
) -> list[OpInstance]:
    """One layer: the attention block, then its MLP (dense or experts). ``named``: the layers'
    windows differ, so the attention row says which it is; ``rope``: its attention applies the
    model's rotary embedding (False: a NoPE layer)."""
    m = model
    rows = [_norm(m, "attention norm", m.hidden)]
    if m.latent is not None:
        rows += _latent_rows(m, rope=rope)
    else:
        rows += _attention_rows(m, window, attn_kind, named, rope=rope)
    if m.norms_per_layer == 4:
        rows.append(_norm(m, "post-attention norm", m.hidden))
    rows.append(
        OpInstance("residual add (attention)", "add", 1, LAYER, {"width": m.hidden}, kernel="residual add")
    )
    rows.append(_norm(m, "MLP norm", m.hidden))
    rows += _expert_rows(m, mlp_kind) if moe else _mlp_rows(m, m.intermediate, mlp_kind)
    if m.norms_per_layer == 4:
        rows.append(_norm(m, "post-MLP norm", m.hidden))
    rows.append(OpInstance("residual add (MLP)", "add", 1, LAYER, {"width": m.hidden}, kernel="residual add"))
    return rows


def rotary_row(
    m: ModelConfig, q_heads: int, k_heads: int, head_dim: int, name: str = "rotary embedding"
) -> list[OpInstance]:
    """RoPE on each token's queries and keys, before the keys are cached (none for a model
    without it): ``rotary_dim`` of the ``head_dim`` of each head turned (a partial rotary says
    how many)."""
    r = m.rotary_dim
    if not r:
        return []
    label = name if r == head_dim else f"{name} ({r} of {head_dim} dims)"
    shape = {"q_heads": q_heads, "k_heads": k_heads, "rotated": r}
    return [OpInstance(label, "rotary", 1, LAYER, shape, kernel="rotary embedding", split=HEADS)]


def _attention_rows(
    m: ModelConfig, window: int | None, kind: str, named: bool, *, rope: bool = True
) -> list[OpInstance]:
    kv_elements = KV_TENSORS * m.kv_width
    rows = [_linear("QKV projection", m.hidden, m.q_width + 2 * m.kv_width, m.qkv_bias, split=COLUMN)]
    if m.qk_norm:  # per head: one head_dim scale for the queries, one for the keys; else the widths
        scale = 2 * m.head_dim if m.qk_norm == QK_NORM_HEAD else m.q_width + m.kv_width
        rows.append(replace(_norm(m, "QK norm", m.q_width + m.kv_width, scale=scale), split=HEADS))
    if rope:  # after QK-norm (Qwen3, Gemma 3 norm q and k, then rotate them)
        rows += rotary_row(m, m.heads, m.kv_heads, m.head_dim)
    rows.append(
        OpInstance(
            "KV-cache write", "copy", 1, LAYER,
            {"elements_per_token": kv_elements, "tensor": "new K,V", "kv_heads": m.kv_heads},
            split=HEADS,
        )
    )  # fmt: skip
    name = "attention"
    if named:
        name = f"attention (window {window})" if window is not None else "attention (global)"
    sinks = (
        m.heads if m.sinks else 0
    )  # one learned logit per head (read with the kernel's inputs: not counted)
    shape = {
        "head_dim": m.head_dim,
        "group": m.group,
        "kv_heads": m.kv_heads,
        "window": window,
        "kv_elements_per_token": kv_elements,
    }
    rows.append(OpInstance(name, "attention", 1, kind, shape, sinks, split=HEADS))
    rows.append(_linear("output projection", m.q_width, m.hidden, m.o_bias, split=ROW))
    return rows


def _latent_rows(m: ModelConfig, *, rope: bool = True) -> list[OpInstance]:
    lat = m.latent
    assert lat is not None
    H, r, rho = m.heads, lat.kv_lora_rank, lat.qk_rope_head_dim
    q_width = H * (lat.qk_nope_head_dim + rho)
    if lat.q_lora_rank:
        rows = [
            _linear("Q down-projection", m.hidden, lat.q_lora_rank, False),
            _norm(m, "Q norm", lat.q_lora_rank),
            _linear("Q up-projection", lat.q_lora_rank, q_width, False, split=COLUMN),
        ]
    else:
        rows = [_linear("Q projection", m.hidden, q_width, False, split=COLUMN)]
    up = r * H * (lat.qk_nope_head_dim + lat.v_head_dim)  # W_UK and W_UV, used inside attention
    shape = {
        "heads": H,
        "kv_lora_rank": r,
        "qk_rope_head_dim": rho,
        "qk_nope_head_dim": lat.qk_nope_head_dim,
        "v_head_dim": lat.v_head_dim,
        "kv_elements_per_token": lat.cache_elements,
    }
    return [
        *rows,
        _linear("KV down-projection", m.hidden, r + rho, False),
        _norm(m, "KV norm", r),
        # the rope part of each head's query, and the one rope key all heads share (k_pe)
        *(rotary_row(m, H, 1, lat.qk_nope_head_dim + rho) if rope else []),
        OpInstance(
            "KV-cache write", "copy", 1, LAYER, {"elements_per_token": lat.cache_elements, "tensor": "latent"}
        ),
        OpInstance("attention (latent)", "latent attention", 1, LAYER, shape, up, up, split=HEADS),
        _linear("output projection", H * lat.v_head_dim, m.hidden, m.o_bias, split=ROW),
    ]


def _mlp_rows(m: ModelConfig, width: int, kind: str, prefix: str = "") -> list[OpInstance]:
    """A dense MLP of ``width``: gate/up (or up), the activation, down."""
    label = "GELU" if m.activation == "gelu" else "SiLU"
    if m.gated:
        first = _linear(f"{prefix}gate/up projection", m.hidden, 2 * width, m.mlp_bias, kind, COLUMN)
        act_name = f"{prefix}activation ({label}·up)"
    else:
        first = _linear(f"{prefix}up projection", m.hidden, width, m.mlp_bias, kind, COLUMN)
        act_name = f"{prefix}activation (GELU)"
    act = OpInstance(
        act_name,
        "activation",
        1,
        kind,
        {"width": width, "gated": m.gated, "function": m.activation, "routed": 1},
        kernel="activation",
        split=COLUMN,
    )
    return [first, act, _linear(f"{prefix}down projection", width, m.hidden, m.mlp_bias, kind, ROW)]


def _expert_rows(m: ModelConfig, kind: str) -> list[OpInstance]:
    """A mixture of experts: the router, the routed experts (a grouped GEMM each way and the
    activation on every routed token), then any shared expert, a dense MLP every token runs."""
    ex = m.experts
    assert ex is not None
    E, k, w = ex.experts, ex.top_k, ex.width
    router_params = m.hidden * E + ex.router_bias
    rows = [
        OpInstance(
            "router", "linear", 1, kind, {"k": m.hidden, "m": E, "bias": ex.router_bias > 0}, router_params,
            router_params,
        ),
    ]  # fmt: skip
    common = {"experts": E, "top_k": k, "bias": ex.bias}
    for name, k_in, m_out in (("expert gate/up", m.hidden, 2 * w), ("expert down", w, m.hidden)):
        each = k_in * m_out + m_out * ex.bias  # one expert's weights (and bias)
        rows.append(
            OpInstance(
                name, "experts", 1, kind, {"k": k_in, "m": m_out, **common}, E * each, E * each, k * each,
                split=COLUMN if name == "expert gate/up" else ROW,
            )
        )  # fmt: skip
        if name == "expert gate/up":
            label = "GELU" if m.activation == "gelu" else "SiLU"
            rows.append(
                OpInstance(
                    f"expert activation ({label}·up)",
                    "activation",
                    1,
                    kind,
                    {"width": w, "gated": True, "function": m.activation, "routed": k},
                    kernel="activation",
                    split=COLUMN,
                )
            )
    if ex.shared_width:
        rows += _mlp_rows(m, ex.shared_width, kind, prefix="shared expert ")
        if ex.shared_gate:
            rows.append(_linear("shared expert gate", m.hidden, 1, False, kind))
    return rows
