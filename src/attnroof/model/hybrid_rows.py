"""The rows of a hybrid model's layer (issue 23): its mixer — softmax, chunked or sparse attention,
gated DeltaNet, Mamba-2, Mamba-1, or attention and Mamba-2 side by side — then its MLP, if any.

    block           rows                                                      models
    norm            norm (one per block: Nemotron-H's blocks have one each)
    attention       as a dense model's (:mod:`attnroof.model.rows`); Qwen3-Next's q_proj twice as
                    wide (the output gate); Llama 4's chunked layers run ``chunked attention``;
                    DeepSeek-V3.2's latent attention runs ``sparse attention`` after its indexer
                    (wq_b, wk, k_norm, weights_proj)
    gated DeltaNet  QKVZ and BA projections, ``linear attention`` (conv + chunked scan; its taps,
                    A and dt bias), gated norm, output projection                  Qwen3-Next
    Mamba-2         in_proj, ``ssd`` (conv + SSD; taps, A, D, dt bias), gated norm, out_proj
                                                    Nemotron-H, Granite 4.0-H, Falcon-H1, Mamba-2
    Mamba-1         in_proj, ``selective scan`` (conv + scan; taps, A, D), x_proj, Δ/B/C norms,
                    dt_proj                                                              Jamba
    residual add
    MLP             norm, a dense MLP or experts (:mod:`attnroof.model.rows`), residual add

The mixer's own small parameters (conv taps and bias, A, D, dt bias) are the mixer row's; the
state it keeps per sequence is its shape's ``state_elements``.
"""

from __future__ import annotations

from dataclasses import replace

from attnroof.model.architectures import LayerKind
from attnroof.model.hybrid import ATTENTION, CHUNKED, LINEAR, MAMBA1, MAMBA2, NO_MIXER, PARALLEL
from attnroof.model.rows import (
    _attention_rows,
    _expert_rows,
    _latent_rows,
    _linear,
    _mlp_rows,
    _norm,
    rotary_row,
)
from attnroof.model.spec import ModelConfig
from attnroof.ops.sparse import FP8_BYTES, index_key_bytes
from attnroof.row import COLUMN, HEADS, LAYER, REPLICATED, ROW, OpInstance

MIXER_KINDS = {
    ATTENTION: "attention layer",
    CHUNKED: "chunked-attention layer",
    LINEAR: "linear-attention layer",
    MAMBA2: "Mamba-2 layer",
    MAMBA1: "Mamba layer",
    PARALLEL: "attention + Mamba-2 layer",
}
"""The layer kind a mixer's rows report under, where a model mixes several."""


def layer_rows(model: ModelConfig, kind: LayerKind, mlp_kind: str, *, mixed: bool) -> list[OpInstance]:
    """One layer of ``kind``: its mixer block (if any), then its MLP block (if any). ``mixed``:
    the model's layers differ in mixer, so the mixer rows say which kind of layer they sit in."""
    m = model
    where = MIXER_KINDS.get(kind.mixer, LAYER) if mixed else LAYER
    rows: list[OpInstance] = []
    if kind.mixer != NO_MIXER:
        rows.append(
            _norm(m, "attention norm" if kind.mixer in (ATTENTION, CHUNKED) else "mixer norm", m.hidden)
        )
        rows += _mixer_rows(m, kind, where)
        rows.append(
            OpInstance("residual add (mixer)", "add", 1, LAYER, {"width": m.hidden}, kernel="residual add")
        )
    if kind.mlp:
        rows.append(_norm(m, "MLP norm", m.hidden))
        rows += _expert_rows(m, mlp_kind) if kind.moe else _dense_mlp(m, mlp_kind)
        rows.append(
            OpInstance("residual add (MLP)", "add", 1, LAYER, {"width": m.hidden}, kernel="residual add")
        )
    return rows


def _dense_mlp(m: ModelConfig, kind: str) -> list[OpInstance]:
    out = _mlp_rows(m, m.intermediate, kind)
    label = m.mixers.mlp_label if m.mixers else ""
    if label:
        first, act, down = out  # gate/up (or up), the activation, down
        out = [first, replace(act, name=f"activation ({label})"), down]
    return out


def _mixer_rows(m: ModelConfig, kind: LayerKind, where: str) -> list[OpInstance]:
    mx = m.mixers
    assert mx is not None
    if kind.mixer == LINEAR:
        return _deltanet_rows(m, where)
    if kind.mixer == MAMBA2:
        return _mamba2_rows(m, where)
    if kind.mixer == MAMBA1:
        return _mamba1_rows(m, where)
    if kind.mixer == PARALLEL:  # Falcon-H1: both read the same normed input; their outputs add
        return _softmax_rows(m, kind, where) + _mamba2_rows(m, where)
    return _softmax_rows(m, kind, where)


def _softmax_rows(m: ModelConfig, kind: LayerKind, where: str) -> list[OpInstance]:
    mx = m.mixers
    assert mx is not None
    if m.latent is not None:
        return _sparse_rows(m, where) if mx.indexer is not None else _latent_rows(m, rope=kind.rope)
    out = _attention_rows(m, kind.window, where, False, rope=kind.rope)
    if mx.gated_attention:  # q_proj holds the queries and their output gate
        out = [
            _linear("QKV projection", m.hidden, 2 * m.q_width + 2 * m.kv_width, m.qkv_bias, split=COLUMN)
            if r.name == "QKV projection"
            else r
            for r in out
        ]
    if kind.mixer == CHUNKED:
        out = [
            replace(r, name="attention (chunked)", operator="chunked attention",
                    shape={**r.shape, "attention_chunk": mx.chunk})
            if r.name == "attention"
            else r
            for r in out
        ]  # fmt: skip
    return out


def _sparse_rows(m: ModelConfig, where: str) -> list[OpInstance]:
    """DeepSeek-V3.2: MLA's rows, the indexer's projections and its fp8 key's write before the
    attention, the attention itself the indexer and latent attention over the top-k; the index
    keys join the cache at 132 B a token (fp8 and a scale) whatever the cache's dtype."""
    mx, lat = m.mixers, m.latent
    assert mx is not None and lat is not None and mx.indexer is not None
    ix = mx.indexer
    q_in = lat.q_lora_rank or m.hidden
    indexer = [
        _linear("indexer Q projection", q_in, ix.heads * ix.head_dim, False),
        _linear("indexer K projection", m.hidden, ix.head_dim, False),
        replace(_norm(m, "indexer K norm", ix.head_dim), shape={"width": ix.head_dim, "kind": "layer",
                "scale_width": ix.head_dim}, params=2 * ix.head_dim, params_read=2 * ix.head_dim),
        # its q and k rotate their first qk_rope_head_dim dims (DeepSeek's inference/model.py, Indexer)
        *(replace(r, split=REPLICATED) for r in rotary_row(m, ix.heads, 1, ix.head_dim, "indexer rotary embedding")),
        _linear("indexer weights", m.hidden, ix.heads, False),
    ]  # fmt: skip
    out: list[OpInstance] = []
    for r in _latent_rows(m):
        if r.name == "attention (latent)":
            out += indexer
            out.append(
                OpInstance("index-key write", "copy", 1, LAYER,
                           {"elements_per_token": ix.head_dim, "tensor": "index key (fp8)", "write_itemsize": FP8_BYTES})
            )  # fmt: skip
            shape = {**r.shape, "index_heads": ix.heads, "index_head_dim": ix.head_dim, "top_k": ix.top_k,
                     "fixed_cache_bytes_per_token": index_key_bytes(ix.head_dim)}  # fmt: skip
            r = replace(r, name="attention (sparse)", operator="sparse attention", shape=shape)
        out.append(r)
    return out


def _mixer(name: str, operator: str, where: str, shape: dict[str, int], params: int) -> OpInstance:
    return OpInstance(name, operator, 1, where, shape, params, params, split=HEADS)


def _deltanet_rows(m: ModelConfig, where: str) -> list[OpInstance]:
    mx = m.mixers
    assert mx is not None and mx.deltanet is not None
    g = mx.deltanet
    qk, v = g.key_heads * g.key_dim, g.heads * g.value_dim
    shape = {"heads": g.heads, "key_heads": g.key_heads, "key_dim": g.key_dim, "value_dim": g.value_dim,
             "chunk": g.chunk, "conv_kernel": g.conv_kernel, "conv_bias": False,
             "state_elements": g.state_elements}  # fmt: skip
    taps = g.conv_channels * g.conv_kernel  # no conv bias
    return [
        _linear("QKVZ projection", m.hidden, 2 * qk + 2 * v, False, split=COLUMN),
        _linear("BA projection", m.hidden, 2 * g.heads, False, split=COLUMN),
        _mixer("linear attention (gated DeltaNet)", "linear attention", where, shape, taps + 2 * g.heads),
        replace(_norm(m, "gated norm", v, scale=g.value_dim), split=HEADS),
        _linear("output projection", v, m.hidden, False, split=ROW),
    ]


def _mamba2_rows(m: ModelConfig, where: str) -> list[OpInstance]:
    mx = m.mixers
    assert mx is not None and mx.mamba2 is not None
    b = mx.mamba2
    shape = {"heads": b.heads, "head_dim": b.head_dim, "state": b.state, "groups": b.groups, "chunk": b.chunk,
             "conv_kernel": b.conv_kernel, "conv_bias": b.conv_bias, "state_elements": b.state_elements}  # fmt: skip
    own = b.conv_channels * (b.conv_kernel + b.conv_bias) + 3 * b.heads  # taps, bias; A, D, dt bias
    rows = [
        _linear("Mamba in_proj", m.hidden, b.in_width, b.proj_bias, split=COLUMN),
        _mixer("SSD (Mamba-2)", "ssd", where, shape, own),
    ]
    if b.norm:
        rows.append(replace(_norm(m, "gated norm", b.inner), split=HEADS))
    rows.append(_linear("Mamba out_proj", b.inner, m.hidden, b.proj_bias, split=ROW))
    return rows


def _mamba1_rows(m: ModelConfig, where: str) -> list[OpInstance]:
    mx = m.mixers
    assert mx is not None and mx.mamba1 is not None
    b = mx.mamba1
    D, N, r = b.channels, b.state, b.dt_rank
    shape = {"channels": D, "state": N, "conv_kernel": b.conv_kernel, "conv_bias": b.conv_bias,
             "state_elements": b.state_elements}  # fmt: skip
    own = D * (b.conv_kernel + b.conv_bias) + D * N + D  # taps, bias; A (D × N), D
    rows = [
        _linear("Mamba in_proj", m.hidden, 2 * D, b.proj_bias, split=COLUMN),
        _linear("x_proj (Δ, B, C)", D, r + 2 * N, False, split=ROW),
    ]
    if b.inner_norms:
        rows += [
            _norm(m, "Δ norm", r),
            _norm(m, "B norm", N),
            _norm(m, "C norm", N),
        ]
    rows += [
        _linear("dt_proj", r, D, True, split=COLUMN),
        _mixer("selective scan (Mamba)", "selective scan", where, shape, own),
        _linear("Mamba out_proj", D, m.hidden, b.proj_bias, split=ROW),
    ]
    return rows
