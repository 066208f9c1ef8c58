"""Config fields that change the arithmetic in ways attnroof does not model yet: refused by name,
never counted as a dense model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnroof.model.fields import ModelConfigError, is_set, read_bool, read_int, show

_MOE = "mixture-of-experts layers are not modelled yet; attnroof would count a dense model"
_MLA = "multi-head latent attention (compressed KV) is not modelled yet; attnroof would count plain attention"
_ALTERNATING = (
    "attention that alternates between sliding-window and full layers is not modelled yet; "
    "attnroof would count one kind for every layer"
)
_CHUNKED = "chunked local attention is not modelled yet; attnroof would count full attention"
_SOFTCAP = (
    "logit soft-capping (a tanh on every score) is not modelled yet; attnroof would count "
    "plain softmax attention"
)
_FINAL_SOFTCAP = "soft-capping of the output logits is not modelled yet"
_ENC_DEC = "encoder-decoder models are not modelled; attnroof counts a decoder-only stack"

UNMODELLED_FIELDS: tuple[tuple[str, str], ...] = (
    ("num_local_experts", _MOE),  # Mixtral, gpt-oss, Llama 4, PhiMoE
    ("num_experts", _MOE),  # Qwen2/3-MoE, OLMoE
    ("n_routed_experts", _MOE),  # DeepSeek-V2/V3
    ("moe_num_experts", _MOE),
    ("num_experts_per_tok", _MOE),
    ("experts_per_token", _MOE),  # gpt-oss
    ("moe_intermediate_size", _MOE),
    ("n_shared_experts", _MOE),
    ("shared_expert_intermediate_size", _MOE),  # Qwen2-MoE
    ("first_k_dense_replace", _MOE),  # DeepSeek: dense layers before the MoE ones
    ("kv_lora_rank", _MLA),  # DeepSeek-V2/V3
    ("q_lora_rank", _MLA),
    ("qk_rope_head_dim", _MLA),
    ("qk_nope_head_dim", _MLA),
    ("v_head_dim", _MLA),
    ("sliding_window_pattern", _ALTERNATING),  # Gemma 3: every n-th layer global
    ("attention_chunk_size", _CHUNKED),  # Llama 4
    ("attn_logit_softcapping", _SOFTCAP),  # Gemma 2
    ("final_logit_softcapping", _FINAL_SOFTCAP),
    ("is_encoder_decoder", _ENC_DEC),
)
"""Fields that change the arithmetic in a way attnroof does not model, each with why it is
refused. A field counts when its value is set: not null, false, 0 or empty."""

UNMODELLED_MODEL_TYPES: dict[str, str] = {
    "mixtral": _MOE,
    "phimoe": _MOE,
    "qwen2_moe": _MOE,
    "qwen3_moe": _MOE,
    "olmoe": _MOE,
    "dbrx": _MOE,
    "jamba": _MOE,
    "granitemoe": _MOE,
    "llama4": _MOE,
    "llama4_text": _MOE,
    "deepseek_v2": _MLA,
    "deepseek_v3": _MLA,
    "gemma2": _ALTERNATING,
    "gemma3": _ALTERNATING,
    "gemma3_text": _ALTERNATING,
    "cohere2": _ALTERNATING,
    "gpt_oss": "alternating sliding-window layers, attention sinks and mixture-of-experts are not "
    "modelled yet; attnroof would count a dense model",
}
"""Model types whose architecture attnroof does not model even when the config has none of the
fields above (Gemma 2 alternates windowed and global layers without saying so in its config)."""

LAYER_KINDS = frozenset({"full_attention", "sliding_attention"})


def unmodelled(cfg: Mapping[str, Any], where: str = "config") -> None:
    """:class:`ModelConfigError` naming the first field (and value) of ``cfg`` that changes the
    arithmetic in a way attnroof does not model yet, with the others after it; nothing when
    every field is one attnroof counts or one that changes nothing.

    >>> unmodelled({"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2})
    Traceback (most recent call last):
    ...
    attnroof.model.fields.ModelConfigError: config: num_local_experts = 8: mixture-of-experts layers are not modelled yet; attnroof would count a dense model (also: num_experts_per_tok, model_type)
    """
    found: list[tuple[str, Any, str]] = [
        (key, cfg[key], why) for key, why in UNMODELLED_FIELDS if is_set(cfg.get(key))
    ]
    kinds = cfg.get("layer_types")
    if kinds is not None:
        if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
            raise ModelConfigError(f"{where}: layer_types = {show(kinds)} is not a list of strings")
        odd = sorted(set(kinds) - LAYER_KINDS)
        if odd:
            found.append(("layer_types", kinds, f"layers of kind {odd[0]!r} are not modelled yet"))
        elif len(set(kinds)) > 1:
            found.append(("layer_types", kinds, _ALTERNATING))
    if read_bool(cfg, "use_sliding_window", where, False) and "max_window_layers" in cfg:
        # Qwen2: layers from max_window_layers on are windowed, those before are not
        first = cfg["max_window_layers"]
        total = cfg.get("num_hidden_layers")
        if isinstance(first, int) and isinstance(total, int) and 0 < first < total:
            found.append(("max_window_layers", first, _ALTERNATING))
    model_type = str(cfg.get("model_type") or "").lower()
    if model_type in UNMODELLED_MODEL_TYPES:
        found.append(("model_type", model_type, UNMODELLED_MODEL_TYPES[model_type]))
    if found:
        key, value, why = found[0]
        # the other fields, one for each other reason first (DeepSeek: its latent attention
        # is named before the rest of its expert fields)
        rest = [(k, w) for k, _, w in found[1:] if k != key]
        firsts = [k for i, (k, w) in enumerate(rest) if w != why and w not in {x for _, x in rest[:i]}]
        others = list(dict.fromkeys([*firsts, *(k for k, _ in rest)]))
        named = ", ".join(others[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "")
        also = f" (also: {named})" if others else ""
        raise ModelConfigError(f"{where}: {key} = {show(value)}: {why}{also}")


def sliding_window(cfg: Mapping[str, Any], where: str, layers: int) -> int | None:
    """The sliding window of every layer, or ``None`` (full attention); call after
    :func:`unmodelled`, which refuses windows on only some layers."""
    window = read_int(cfg, "sliding_window", where, None)  # checked even when unused
    if not read_bool(cfg, "use_sliding_window", where, True):
        return None  # Qwen2.5: a window is configured but switched off
    kinds = cfg.get("layer_types")
    if kinds is not None:
        if len(kinds) != layers:
            raise ModelConfigError(f"{where}: layer_types has {len(kinds)} entries for {layers} layers")
        if kinds and set(kinds) == {"full_attention"}:
            return None
        if window is None and kinds:
            raise ModelConfigError(f"{where}: layer_types has sliding_attention layers but no sliding_window")
    first = cfg.get("max_window_layers")
    if window is not None and "use_sliding_window" in cfg and isinstance(first, int) and first >= layers:
        return None  # Qwen2: no layer reaches max_window_layers
    return window
