"""Hybrid models' configs (issue 23): each family's own fields for which layer mixes tokens how,
read as ``transformers`` reads them, then the rest of the config by the ordinary reader
(:func:`attnroof.model.hf_config.from_hf`) as the family it builds on.

    model_type          base          its layers
    qwen3_next          qwen3_moe     ``layer_types`` (else every ``full_attention_interval``-th
                                      layer full attention), the others gated DeltaNet
                                      (``linear_*``); attention with an output gate
    nemotron_h          llama         ``hybrid_override_pattern``: M Mamba-2, * attention, - MLP,
                                      one block per layer; ReLU² MLP; ``time_step_limit`` may be
                                      [0.0, Infinity] (Python's JSON writes it)
    granitemoehybrid    llama         ``layer_types``: mamba / attention; experts and a shared MLP
    jamba               llama         attention every ``attn_layer_period`` from
                                      ``attn_layer_offset``, else Mamba-1; experts every
                                      ``expert_layer_period`` from ``expert_layer_offset``
    falcon_h1           llama         attention and Mamba-2 side by side in every layer
    llama4(_text)       llama         ``text_config``; ``no_rope_layers``/``layer_types``: chunked
                                      attention (``attention_chunk_size``) but every 4th layer;
                                      experts with a shared expert
    deepseek_v32        deepseek_v3   MLA with the lightning indexer (``index_*``)
    (mamba_ssm format)  —             ``d_model``, ``n_layer``, ``ssm_cfg``: Mamba-2 (or Mamba-1)
                                      blocks, vocabulary padded to ``pad_vocab_size_multiple``

Anything else goes to the ordinary reader unchanged. A field that is present but malformed is
refused in one line naming it.

Length: one reader per family (eight of them) and mamba_ssm's format, each short; they share the
checks, so they sit together.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from attnroof.model.architectures import LayerKind, LayerRuns, rope_layers
from attnroof.model.fields import MAX_LAYERS, ModelConfigError, read_bool, read_int, show
from attnroof.model.hf_config import from_hf
from attnroof.model.hybrid import (
    ATTENTION,
    CHUNKED,
    LINEAR,
    MAMBA1,
    MAMBA2,
    NO_MIXER,
    PARALLEL,
    DeltaNet,
    Indexer,
    Mamba1,
    Mamba2,
    Mixers,
)
from attnroof.model.spec import ModelConfig

INFINITE_FIELDS = frozenset({"time_step_limit"})
"""Fields whose values may be infinite: Mamba-2's clamp on Δ, ``[0.0, inf]`` meaning none."""

LLAMA4_NOPE_INTERVAL = 4
"""transformers' ``Llama4TextConfig``: without ``no_rope_layers``, every 4th layer is NoPE."""
QWEN3_NEXT_INTERVAL = 4
"""transformers' ``Qwen3NextConfig``: without ``layer_types``, every 4th layer is full attention."""
MAMBA_DT_RANK_DIVISOR = 16
"""Mamba-1's ``dt_rank = "auto"``: ⌈d_model / 16⌉ (mamba_ssm, transformers' Jamba)."""
NEMOTRON_BLOCKS = {"M": (MAMBA2, False), "*": (ATTENTION, False), "-": (NO_MIXER, True)}
"""``hybrid_override_pattern``: each character one layer, a mixer block or an MLP block."""


def from_config(cfg: Any, name: str = "", where: str = "config") -> ModelConfig:
    """A :class:`ModelConfig` from a config dictionary: a hybrid by its family's reader, anything
    else by :func:`~attnroof.model.hf_config.from_hf`.

    >>> from attnroof.model.config import builtin
    >>> m = builtin("qwen3-next-80b-a3b")
    >>> [(k.mixer, n) for k, n in m.layer_runs.runs][:2]
    [('linear attention', 3), ('attention', 1)]
    """
    if not isinstance(cfg, Mapping):
        return from_hf(cfg, name, where)
    _finite(cfg, where, "")
    model_type = str(cfg.get("model_type") or "").lower()
    if model_type == "llama4" and isinstance(cfg.get("text_config"), Mapping):
        cfg = {**cfg["text_config"], "_name_or_path": cfg.get("_name_or_path")}
        model_type = str(cfg.get("model_type") or "llama4_text").lower()
    if not model_type and "d_model" in cfg and "ssm_cfg" in cfg:
        return _mamba_ssm(cfg, name, where)
    reader = READERS.get(model_type)
    if reader is None:
        return from_hf(cfg, name, where)
    name = name or str(cfg.get("_name_or_path") or "") or model_type
    return reader(cfg, name, where)


def _finite(value: Any, where: str, path: str) -> None:
    """Refuse an infinite number anywhere but in :data:`INFINITE_FIELDS` (NaN never parses)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ModelConfigError(f"{where}: {path} = {show(value)} is not a finite number")
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k not in INFINITE_FIELDS:
                _finite(v, where, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for v in value:
            _finite(v, where, path)


def _base(
    cfg: Mapping[str, Any], model_type: str, drop: tuple[str, ...] = (), **extra: Any
) -> dict[str, Any]:
    """The config as the family it builds on: its model type, less the fields read here."""
    return {**{k: v for k, v in cfg.items() if k not in drop}, "model_type": model_type, **extra}


def _runs(kinds: list[LayerKind]) -> LayerRuns:
    return LayerRuns.of(kinds)


def _types(cfg: Mapping[str, Any], where: str, layers: int, known: tuple[str, ...]) -> list[str] | None:
    kinds = cfg.get("layer_types")
    if kinds is None:
        return None
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        raise ModelConfigError(f"{where}: layer_types = {show(kinds)} is not a list of strings")
    if len(kinds) != layers:
        raise ModelConfigError(f"{where}: layer_types has {len(kinds)} entries for {layers} layers")
    odd = sorted(set(kinds) - set(known))
    if odd:
        raise ModelConfigError(
            f"{where}: layer_types: layers of kind {odd[0]!r} are not modelled (known: {', '.join(known)})"
        )
    return kinds


def _mamba2(
    cfg: Mapping[str, Any], where: str, keys: Mapping[str, str], defaults: Mapping[str, Any]
) -> Mamba2:
    """Mamba-2's widths under this family's field names (``keys``), with transformers' defaults."""

    def get(field: str) -> Any:
        return read_int(cfg, keys[field], where, defaults.get(field, ...))

    def flag(field: str) -> bool:
        return read_bool(cfg, keys[field], where, defaults[field])

    _time_step_limit(cfg, where)
    return Mamba2(
        heads=get("heads"), head_dim=get("head_dim"), state=get("state"), groups=get("groups"),
        conv_kernel=get("conv_kernel"), chunk=get("chunk"), conv_bias=flag("conv_bias"),
        proj_bias=flag("proj_bias"), norm=flag("norm") if "norm" in keys else True,
    )  # fmt: skip


def _time_step_limit(cfg: Mapping[str, Any], where: str) -> None:
    """``time_step_limit``: two numbers, 0 ≤ low ≤ high, high possibly infinite."""
    value = cfg.get("time_step_limit")
    if value is None:
        return
    ok = (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(v) for v in value)
        and 0 <= value[0] <= value[1]
    )
    if not ok:
        raise ModelConfigError(
            f"{where}: time_step_limit = {show(value)} is not [low, high] with 0 ≤ low ≤ high"
        )


# ---------------------------------------------------------------- the families


def _qwen3_next(cfg: Mapping[str, Any], name: str, where: str) -> ModelConfig:
    model = from_hf(_base(cfg, "qwen3_moe", ("layer_types",)), name, where)
    kinds = _types(cfg, where, model.layers, ("linear_attention", "full_attention"))
    if kinds is None:
        every = read_int(cfg, "full_attention_interval", where, QWEN3_NEXT_INTERVAL)
        kinds = [
            "full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(model.layers)
        ]
    net = DeltaNet(
        heads=read_int(cfg, "linear_num_value_heads", where, 32),
        key_heads=read_int(cfg, "linear_num_key_heads", where, 16),
        key_dim=read_int(cfg, "linear_key_head_dim", where, 128),
        value_dim=read_int(cfg, "linear_value_head_dim", where, 128),
        conv_kernel=read_int(cfg, "linear_conv_kernel_dim", where, 4),
    )
    if net.heads % net.key_heads:
        raise ModelConfigError(
            f"{where}: linear_num_key_heads = {net.key_heads} does not divide linear_num_value_heads = {net.heads}"
        )
    moe = model.layer_is_moe()
    runs = [
        LayerKind(None, e, LINEAR if k == "linear_attention" else ATTENTION)
        for k, e in zip(kinds, moe, strict=True)
    ]
    return replace(model, layer_runs=_runs(runs), mixers=Mixers(deltanet=net, gated_attention=True))


def _nemotron_h(cfg: Mapping[str, Any], name: str, where: str) -> ModelConfig:
    pattern = cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ModelConfigError(
            f"{where}: hybrid_override_pattern = {show(pattern)} is not a string of M, * and -"
        )
    odd = sorted(set(pattern) - set(NEMOTRON_BLOCKS))
    if odd:
        raise ModelConfigError(
            f"{where}: hybrid_override_pattern holds {odd[0]!r}: only M (Mamba-2), * (attention) and - (MLP) are modelled"
        )
    layers = read_int(cfg, "num_hidden_layers", where, len(pattern))
    if layers != len(pattern):
        raise ModelConfigError(
            f"{where}: hybrid_override_pattern has {len(pattern)} layers, num_hidden_layers = {layers}"
        )
    act = str(cfg.get("mlp_hidden_act") or "relu2")
    head_dim = cfg.get("head_dim") or cfg.get("attention_head_dim")
    base = _base(cfg, "llama", ("hybrid_override_pattern", "time_step_limit"), mlp_gated=False, head_dim=head_dim,
                 num_hidden_layers=layers)  # fmt: skip
    model = from_hf(base, name, where)
    mamba = _mamba2(
        cfg, where,
        {"heads": "mamba_num_heads", "head_dim": "mamba_head_dim", "state": "ssm_state_size", "groups": "n_groups",
         "conv_kernel": "conv_kernel", "chunk": "chunk_size", "conv_bias": "use_conv_bias", "proj_bias": "use_bias"},
        {"heads": 128, "head_dim": 64, "state": 128, "groups": 8, "conv_kernel": 4, "chunk": 128,
         "conv_bias": True, "proj_bias": False},
    )  # fmt: skip
    runs = [LayerKind(None, False, NEMOTRON_BLOCKS[c][0], NEMOTRON_BLOCKS[c][1]) for c in pattern]
    label = "ReLU²" if act == "relu2" else act
    # NemotronHAttention applies no rotary embedding (transformers' modeling_nemotron_h.py): NoPE
    return replace(model, layer_runs=_runs(runs), mixers=Mixers(mamba2=mamba, mlp_label=label), rotary_dim=0)


def _granite_hybrid(cfg: Mapping[str, Any], name: str, where: str) -> ModelConfig:
    model = from_hf(_base(cfg, "llama", ("layer_types",)), name, where)
    kinds = _types(cfg, where, model.layers, ("mamba", "attention")) or ["mamba"] * model.layers
    mamba = _mamba2(
        cfg, where,
        {"heads": "mamba_n_heads", "head_dim": "mamba_d_head", "state": "mamba_d_state", "groups": "mamba_n_groups",
         "conv_kernel": "mamba_d_conv", "chunk": "mamba_chunk_size", "conv_bias": "mamba_conv_bias",
         "proj_bias": "mamba_proj_bias"},
        {"heads": 128, "head_dim": 64, "state": 256, "groups": 1, "conv_kernel": 4, "chunk": 256,
         "conv_bias": True, "proj_bias": False},
    )  # fmt: skip
    shared = read_int(cfg, "shared_intermediate_size", where, 0, zero=True)
    experts = model.experts
    if experts is not None and shared:
        experts = replace(experts, shared_width=shared, shared_gate=False)
    moe = model.layer_is_moe()
    runs = [
        LayerKind(None, e, MAMBA2 if k == "mamba" else ATTENTION) for k, e in zip(kinds, moe, strict=True)
    ]
    # GraniteMoeHybridAttention rotates only when position_embedding_type is "rope" (None by default)
    rotary = model.rotary_dim if cfg.get("position_embedding_type") is not None else 0
    return replace(
        model, experts=experts, layer_runs=_runs(runs), mixers=Mixers(mamba2=mamba), rotary_dim=rotary
    )


def _jamba(cfg: Mapping[str, Any], name: str, where: str) -> ModelConfig:
    model = from_hf(_base(cfg, "llama"), name, where)
    period = read_int(cfg, "attn_layer_period", where, 8)
    offset = read_int(cfg, "attn_layer_offset", where, 4, zero=True)
    e_period = read_int(cfg, "expert_layer_period", where, 2)
    e_offset = read_int(cfg, "expert_layer_offset", where, 1, zero=True)
    for key, off, per in (("attn_layer_offset", offset, period), ("expert_layer_offset", e_offset, e_period)):
        if off >= per:
            raise ModelConfigError(f"{where}: {key} = {off} is not below its period {per}")
    hidden = model.hidden
    rank = cfg.get("mamba_dt_rank", "auto")
    dt_rank = (
        math.ceil(hidden / MAMBA_DT_RANK_DIVISOR) if rank == "auto" else read_int(cfg, "mamba_dt_rank", where)
    )
    mamba = Mamba1(
        channels=read_int(cfg, "mamba_expand", where, 2) * hidden,
        state=read_int(cfg, "mamba_d_state", where, 16),
        conv_kernel=read_int(cfg, "mamba_d_conv", where, 4),
        dt_rank=dt_rank,
        conv_bias=read_bool(cfg, "mamba_conv_bias", where, True),
        proj_bias=read_bool(cfg, "mamba_proj_bias", where, False),
        inner_norms=True,
    )
    experts = model.experts is not None
    runs = [
        LayerKind(None, experts and i % e_period == e_offset, ATTENTION if i % period == offset else MAMBA1)
        for i in range(model.layers)
    ]
    # JambaAttention has no positional embedding: the Mamba layers carry the order (NoPE)
    return replace(model, layer_runs=_runs(runs), mixers=Mixers(mamba1=mamba), rotary_dim=0)


def _falcon_h1(cfg: Mapping[str, Any], name: str, where: str) -> ModelConfig:
    if cfg.get("attn_layer_indices") is not None:
        raise ModelConfigError(
            f"{where}: attn_layer_indices = {show(cfg['attn_layer_indices'])}: attention on some layers only is not modelled"
        )
    model = from_hf(_base(cfg, "llama"), name, where)
    mamba = _mamba2(
        cfg, where,
        {"heads": "mamba_n_heads", "head_dim": "mamba_d_head", "state": "mamba_d_state", "groups": "mamba_n_groups",
         "conv_kernel": "mamba_d_conv", "chunk": "mamba_chunk_size", "conv_bias": "mamba_conv_bias",
         "proj_bias": "mamba_proj_bias", "norm": "mamba_rms_norm"},
        {"heads": 128, "head_dim": 64, "state": 256, "groups": 1, "conv_kernel": 4, "chunk": 256,
         "conv_bias": True, "proj_bias": False, "norm": False},
    )  # fmt: skip
    d_ssm = read_int(cfg, "mamba_d_ssm", where, None)
    if d_ssm is not None and d_ssm != mamba.inner:
        raise ModelConfigError(
            f"{where}: mamba_d_ssm = {d_ssm} is not mamba_n_heads × mamba_d_head = {mamba.inner}"
        )
    runs = [LayerKind(None, False, PARALLEL)] * model.layers
    return replace(model, layer_runs=_runs(runs), mixers=Mixers(mamba2=mamba))


def _llama4(cfg: Mapping[str, Any], name: str, where: str) -> ModelConfig:
    drop = ("attention_chunk_size", "layer_types", "no_rope_layers", "moe_layers")
    dense = read_int(cfg, "intermediate_size_mlp", where, None)
    model = from_hf(_base(cfg, "llama", drop), name, where)
    layers = model.layers
    chunk = read_int(cfg, "attention_chunk_size", where, None)
    kinds = _types(cfg, where, layers, ("chunked_attention", "full_attention"))
    # transformers' Llama4TextConfig: no_rope_layers[i] = 1 where layer i uses RoPE; by default
    # every 4th layer is NoPE, and (attention_chunk_size given) the RoPE layers are the chunked ones
    rope = rope_layers(cfg, where, layers, default=lambda i: (i + 1) % LLAMA4_NOPE_INTERVAL)
    if kinds is None:
        kinds = ["chunked_attention" if r and chunk else "full_attention" for r in rope]
    if "chunked_attention" in kinds and chunk is None:
        raise ModelConfigError(
            f"{where}: layer_types has chunked_attention layers but no attention_chunk_size"
        )
    moe_list = cfg.get("moe_layers")
    if moe_list is not None:
        if not isinstance(moe_list, list) or not all(
            isinstance(i, int) and 0 <= i < layers for i in moe_list
        ):
            raise ModelConfigError(f"{where}: moe_layers = {show(moe_list)} is not a list of layer numbers")
        moe = [i in moe_list for i in range(layers)]
    else:
        step = read_int(cfg, "interleave_moe_layer_step", where, 1)
        moe = [(i + 1) % step == 0 for i in range(layers)]
    experts = model.experts
    if experts is not None:  # Llama 4's shared expert is as wide as a routed one
        experts = replace(experts, shared_width=experts.width)
    moe = [m and experts is not None for m in moe]
    runs = [
        LayerKind(None, e, CHUNKED if k == "chunked_attention" else ATTENTION, rope=r)
        for k, e, r in zip(kinds, moe, rope, strict=True)
    ]
    return replace(
        model, intermediate=dense or model.intermediate, experts=experts, layer_runs=_runs(runs),
        mixers=Mixers(chunk=chunk),
    )  # fmt: skip


def _deepseek_v32(cfg: Mapping[str, Any], name: str, where: str) -> ModelConfig:
    model = from_hf(_base(cfg, "deepseek_v3"), name, where)
    index = Indexer(
        heads=read_int(cfg, "index_n_heads", where, 64),
        head_dim=read_int(cfg, "index_head_dim", where, 128),
        top_k=read_int(cfg, "index_topk", where, 2048),
    )
    return replace(model, mixers=Mixers(indexer=index))


def _mamba_ssm(cfg: Mapping[str, Any], name: str, where: str) -> ModelConfig:
    """state-spaces' own format (mamba_ssm's ``MambaConfig``): Mamba blocks, an MLP when
    ``d_intermediate`` > 0, the vocabulary padded up to ``pad_vocab_size_multiple``."""
    ssm = cfg.get("ssm_cfg") or {}
    if not isinstance(ssm, Mapping):
        raise ModelConfigError(f"{where}: ssm_cfg = {show(ssm)} is not an object")
    if cfg.get("attn_layer_idx"):
        raise ModelConfigError(
            f"{where}: attn_layer_idx = {show(cfg['attn_layer_idx'])}: mamba_ssm's attention layers are not modelled"
        )
    hidden = read_int(cfg, "d_model", where)
    layers = read_int(cfg, "n_layer", where)
    if layers > MAX_LAYERS:
        raise ModelConfigError(f"{where}: n_layer = {layers:,} is more layers than any model has")
    multiple = read_int(cfg, "pad_vocab_size_multiple", where, 1)
    vocab = -(-read_int(cfg, "vocab_size", where) // multiple) * multiple
    mlp = read_int(cfg, "d_intermediate", where, 0, zero=True)
    kind = ssm.get("layer", "Mamba1")
    expand = read_int(ssm, "expand", f"{where}: ssm_cfg", 2)
    conv = read_int(ssm, "d_conv", f"{where}: ssm_cfg", 4)
    if kind == "Mamba2":
        head_dim = read_int(ssm, "headdim", f"{where}: ssm_cfg", 64)
        inner = expand * hidden
        if inner % head_dim:
            raise ModelConfigError(
                f"{where}: ssm_cfg.headdim = {head_dim} does not divide expand × d_model = {inner}"
            )
        mixers = Mixers(mamba2=Mamba2(
            heads=inner // head_dim, head_dim=head_dim, state=read_int(ssm, "d_state", f"{where}: ssm_cfg", 128),
            groups=read_int(ssm, "ngroups", f"{where}: ssm_cfg", 1), conv_kernel=conv,
            chunk=read_int(ssm, "chunk_size", f"{where}: ssm_cfg", 256),
        ))  # fmt: skip
        heads, mixer = inner // head_dim, MAMBA2
    elif kind == "Mamba1":
        mixers = Mixers(mamba1=Mamba1(
            channels=expand * hidden, state=read_int(ssm, "d_state", f"{where}: ssm_cfg", 16), conv_kernel=conv,
            dt_rank=math.ceil(hidden / MAMBA_DT_RANK_DIVISOR),
        ))  # fmt: skip
        heads, head_dim, mixer = 1, expand * hidden, MAMBA1
    else:
        raise ModelConfigError(f"{where}: ssm_cfg.layer = {show(kind)}: known Mamba1, Mamba2")
    return ModelConfig(
        name=name or "mamba", hidden=hidden, layers=layers, heads=heads, kv_heads=heads, head_dim=head_dim,
        intermediate=mlp, vocab=vocab, gated=True, norm="rms" if read_bool(cfg, "rms_norm", where, True) else "layer",
        tied=read_bool(cfg, "tie_embeddings", where, True), max_positions=None,
        layer_runs=LayerRuns.of([LayerKind(None, False, mixer, mlp > 0)] * layers), mixers=mixers,
    )  # fmt: skip


READERS: dict[str, Callable[[Mapping[str, Any], str, str], ModelConfig]] = {
    "qwen3_next": _qwen3_next,
    "nemotron_h": _nemotron_h,
    "granitemoehybrid": _granite_hybrid,
    "jamba": _jamba,
    "falcon_h1": _falcon_h1,
    "llama4_text": _llama4,
    "llama4": _llama4,
    "deepseek_v32": _deepseek_v32,
}
"""Each hybrid family's reader."""
