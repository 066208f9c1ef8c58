"""A Hugging Face ``config.json`` read into a :class:`~attnroof.model.config.ModelConfig`: which
key family (Llama's or GPT-2's), what ``transformers`` fills in when a field is absent, and each
model type's facts the config does not state (:data:`FAMILIES`: gated MLPs, tied heads, four
norms, QK-norm, sinks). A model type not in that table is refused in one line: its layers may
differ in ways no field says, and reading them as a Llama's gives a wrong count without a word."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attnroof.model.architectures import (
    LayerKind,
    LayerRuns,
    layer_windows,
    moe_layers,
    read_experts,
    read_latent,
    read_rotary_dim,
    rope_layers,
)
from attnroof.model.fields import MAX_LAYERS, ModelConfigError, read_bool, read_int, read_str, show
from attnroof.model.quantization import read_quantization
from attnroof.model.spec import QK_NORM_HEAD, QK_NORM_WIDTH, ModelConfig
from attnroof.model.unmodelled import unmodelled


@dataclass(frozen=True, slots=True)
class Family:
    """What a ``model_type`` fixes that its config does not say (``transformers``' modeling code)."""

    what: str
    gated: bool = True
    """The MLP (and each expert) is gated: gate and up projections, then down (SwiGLU, GeGLU)."""
    tied: bool = False
    """The LM head reuses the embedding table unless ``tie_word_embeddings`` says otherwise."""
    norms_per_layer: int = 2
    qk_norm: str = ""
    """QK-norm: "" none, :data:`QK_NORM_HEAD` or :data:`QK_NORM_WIDTH`."""
    sinks: bool = False
    """Attention sinks: one learned logit per head that every query also attends to."""
    rope: bool = True
    """Attention rotates q and k (RoPE), unless the config says otherwise; GPT-2 learns its
    positions instead."""


FAMILIES: dict[str, Family] = {
    "gpt2": Family("GPT-2: LayerNorm, GELU MLP (4 × hidden), learned positions, tied head", gated=False, tied=True, rope=False),
    "llama": Family("Llama: RMSNorm, SwiGLU MLP, rotary positions, untied head"),
    "mistral": Family("Mistral: Llama's layer, a sliding window on every layer"),
    "mixtral": Family("Mixtral: Mistral's layer with SwiGLU experts"),
    "phi3": Family("Phi-3: Llama's layer (fused QKV and gate/up), a sliding window"),
    "phimoe": Family("PhiMoE: Phi-3's layer with SwiGLU experts"),
    "qwen2": Family("Qwen2: Llama's layer with q/k/v biases, windows from max_window_layers"),
    "qwen2_moe": Family("Qwen2-MoE: experts plus a sigmoid-gated shared expert"),
    "qwen3": Family("Qwen3: Llama's layer with per-head QK-norm", qk_norm=QK_NORM_HEAD),
    "qwen3_moe": Family("Qwen3-MoE: Qwen3's layer with SwiGLU experts", qk_norm=QK_NORM_HEAD),
    "olmoe": Family("OLMoE: SwiGLU experts, QK-norm over the whole q and k width", qk_norm=QK_NORM_WIDTH),
    "gemma": Family("Gemma: GeGLU MLP, tied head", tied=True),
    "gemma2": Family("Gemma 2: four norms per layer, alternating windows, soft-capping", tied=True, norms_per_layer=4),
    "gemma3": Family("Gemma 3: Gemma 2's layer with per-head QK-norm", tied=True, norms_per_layer=4, qk_norm=QK_NORM_HEAD),
    "gemma3_text": Family("Gemma 3 (text only)", tied=True, norms_per_layer=4, qk_norm=QK_NORM_HEAD),
    "deepseek_v2": Family("DeepSeek-V2: latent attention, shared and routed experts, dense layers first"),
    "deepseek_v3": Family("DeepSeek-V3: DeepSeek-V2's layout, sigmoid routing"),
    "gpt_oss": Family("gpt-oss: experts with biases, attention sinks, alternating windows", sinks=True),
}  # fmt: skip
"""The model types attnroof reads, each with what it means; any other ``model_type`` is refused
in one line (its layers could differ in ways no field says: Granite's multipliers, Cohere's
parallel block, InternLM2's fused projections). A config without ``model_type`` is read as a
Llama-style stack (GPT-2's with ``n_embd`` keys), gated when its activation is SiLU or
``mlp_gated`` says so."""
GATED_ACTIVATIONS = frozenset({"silu", "swish", "swiglu"})
"""Without a known model type, a SiLU activation means a gated MLP (every SiLU LLM uses SwiGLU)."""
GPT2_INNER_FACTOR = 4
"""GPT-2's MLP width when ``n_inner`` is null: 4 × hidden (``GPT2MLP`` in transformers)."""


def from_hf(cfg: Mapping[str, Any], name: str = "", where: str = "config") -> ModelConfig:
    """A :class:`ModelConfig` from the dictionary of a Hugging Face ``config.json``.

    >>> gpt2 = {"n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024, "vocab_size": 50257}
    >>> from attnroof.model.layers import params
    >>> params(from_hf(gpt2))              # GPT-2 small: the published 124 M
    124439808
    """
    if not isinstance(cfg, Mapping):
        raise ModelConfigError(f"{where}: a config must be a JSON object, not {_json_type(cfg)}")
    model_type = read_str(cfg, "model_type", where).lower()
    name = name or read_str(cfg, "_name_or_path", where)
    read_str(cfg, "_name_or_path", where)  # a name that is not a string is an error, even when unused
    unmodelled(cfg, where)
    family = _family(model_type, where)
    gpt2 = model_type == "gpt2" or "n_embd" in cfg
    k = (
        {"hidden": "n_embd", "layers": "n_layer", "heads": "n_head", "inner": "n_inner", "pos": "n_positions"}
        if gpt2
        else {
            "hidden": "hidden_size",
            "layers": "num_hidden_layers",
            "heads": "num_attention_heads",
            "inner": "intermediate_size",
            "pos": "max_position_embeddings",
        }
    )
    hidden = read_int(cfg, k["hidden"], where)
    layers = read_int(cfg, k["layers"], where)
    if layers > MAX_LAYERS:
        raise ModelConfigError(
            f"{where}: {k['layers']} = {layers:,} is more layers than any model has "
            f"(attnroof reads at most {MAX_LAYERS:,}; Llama 3.1 405B has 126)"
        )
    heads = read_int(cfg, k["heads"], where)
    kv_heads = read_int(cfg, "num_key_value_heads", where, heads)
    head_dim = read_int(cfg, "head_dim", where, None)
    if head_dim is None:
        if hidden % heads:
            raise ModelConfigError(
                f"{where}: {k['heads']} = {heads} does not divide {k['hidden']} = {hidden} "
                "(and there is no head_dim)"
            )
        head_dim = hidden // heads
    if heads % kv_heads:
        raise ModelConfigError(
            f"{where}: num_key_value_heads = {kv_heads} does not divide {k['heads']} = {heads}"
        )
    vocab = read_int(cfg, "vocab_size", where)
    max_positions = read_int(cfg, k["pos"], where, None)
    if gpt2:
        intermediate = read_int(cfg, k["inner"], where, GPT2_INNER_FACTOR * hidden)
        gated, norm, tied = False, "layer", read_bool(cfg, "tie_word_embeddings", where, True)
        qkv_bias = o_bias = mlp_bias = True
        learned = max_positions or 0
        act = "gelu"
    else:
        intermediate = read_int(cfg, k["inner"], where)
        act = (read_str(cfg, "hidden_act", where) or read_str(cfg, "hidden_activation", where)).lower()
        gated = family.gated if family else act in GATED_ACTIVATIONS
        norm = "rms" if "rms_norm_eps" in cfg else "layer"
        tied = read_bool(cfg, "tie_word_embeddings", where, bool(family and family.tied))
        bias = read_bool(cfg, "attention_bias", where, False)
        qwen2 = model_type == "qwen2"  # Qwen2 has q/k/v biases and none on o_proj, whatever the config says
        qkv_bias, o_bias = (True, False) if qwen2 else (bias, bias)
        mlp_bias = read_bool(cfg, "mlp_bias", where, False)
        learned = 0
    gated = read_bool(cfg, "mlp_gated", where, gated)  # attnroof's own override, for unknown model types
    windows = layer_windows(cfg, where, layers, model_type)
    experts = read_experts(cfg, where, model_type, intermediate)
    moe = moe_layers(cfg, where, layers, experts)
    latent = read_latent(cfg, where)
    rotary = 0 if gpt2 or (family and not family.rope) else read_rotary_dim(cfg, where, head_dim, latent)
    rope = rope_layers(cfg, where, layers)
    runs = LayerRuns.of(LayerKind(w, e, rope=r) for w, e, r in zip(windows, moe, rope, strict=True))
    sliding = max((w for w in windows if w is not None), default=None)
    return ModelConfig(
        name=name or model_type or "model",
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=vocab,
        gated=gated,
        norm=norm,
        tied=tied,
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        mlp_bias=mlp_bias,
        learned_positions=learned,
        sliding_window=sliding,
        max_positions=max_positions,
        layer_runs=runs,
        experts=experts,
        latent=latent,
        rotary_dim=rotary,
        activation="gelu" if act.startswith("gelu") else "silu",
        norms_per_layer=family.norms_per_layer if family else 2,
        qk_norm=family.qk_norm if family else "",
        sinks=bool(family and family.sinks),
        quantization=read_quantization(cfg, where),
        attn_softcap=_softcap(cfg, "attn_logit_softcapping", where),
        final_softcap=_softcap(cfg, "final_logit_softcapping", where),
    )


def _family(model_type: str, where: str) -> Family | None:
    """The family of ``model_type`` (None: the config has none); one line naming it, and what is
    read, when attnroof does not read it."""
    if not model_type:
        return None
    if model_type not in FAMILIES:
        raise ModelConfigError(
            f"{where}: model_type = {show(model_type)} is not a model type attnroof reads "
            f"(it reads {', '.join(sorted(FAMILIES))})"
        )
    return FAMILIES[model_type]


def _softcap(cfg: Mapping[str, Any], key: str, where: str) -> float | None:
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise ModelConfigError(f"{where}: {key} = {show(value)} is not a positive number")
    return float(value)


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else type(value).__name__)
