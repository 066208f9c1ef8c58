"""Config fields and model types that change the arithmetic in ways attnroof does not model:
refused by name, never counted as something else.

Refused here, the base reader's guard: what only :mod:`attnroof.model.hybrid_config` reads (the
hybrids of issue 23, through ``get_model`` and ``load_config_file``).

Modelled (and so not refused here): mixture-of-experts layers, multi-head latent attention,
sliding windows on every layer or on some of them (``layer_types``, Gemma's alternation,
``sliding_window_pattern``, Qwen2's ``max_window_layers``), attention logit soft-capping, attention
sinks, QK-norm — see :mod:`attnroof.model.architectures`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnroof.model.fields import ModelConfigError, is_set, show

_CHUNKED = (
    "chunked local attention is read by attnroof.model.hybrid_config.from_config (attnroof model, "
    "get_model); this reader alone would count full attention"
)
_ENC_DEC = "encoder-decoder models are not modelled; attnroof counts a decoder-only stack"
_HYBRID = (
    "state-space (Mamba) layers are read by attnroof.model.hybrid_config.from_config (attnroof model, "
    "get_model); this reader alone would count attention layers only"
)
_OTHER_MOE = "this family's expert layout is not modelled; attnroof would guess its experts' shapes"

UNMODELLED_FIELDS: tuple[tuple[str, str], ...] = (
    ("attention_chunk_size", _CHUNKED),  # Llama 4
    ("is_encoder_decoder", _ENC_DEC),
)
"""Fields that change the arithmetic in a way attnroof does not model, each with why it is
refused. A field counts when its value is set: not null, false, 0 or empty."""

UNMODELLED_MODEL_TYPES: dict[str, str] = {
    "llama4": _CHUNKED,
    "llama4_text": _CHUNKED,
    "jamba": _HYBRID,
    "dbrx": _OTHER_MOE,
    "granitemoe": _OTHER_MOE,
}
"""Model types whose architecture attnroof does not model even when the config has none of the
fields above."""


def unmodelled(cfg: Mapping[str, Any], where: str = "config") -> None:
    """:class:`ModelConfigError` naming the first field (and value) of ``cfg`` that attnroof does
    not model, with the others after it; nothing when everything it says is modelled or harmless.

    >>> unmodelled({"model_type": "llama4", "attention_chunk_size": 8192})
    Traceback (most recent call last):
    ...
    attnroof.model.fields.ModelConfigError: config: attention_chunk_size = 8192: chunked local attention is read by attnroof.model.hybrid_config.from_config (attnroof model, get_model); this reader alone would count full attention (also: model_type)
    """
    found: list[tuple[str, Any, str]] = [
        (key, cfg[key], why) for key, why in UNMODELLED_FIELDS if is_set(cfg.get(key))
    ]
    model_type = str(cfg.get("model_type") or "").lower()
    if model_type in UNMODELLED_MODEL_TYPES:
        found.append(("model_type", model_type, UNMODELLED_MODEL_TYPES[model_type]))
    if found:
        key, value, why = found[0]
        others = list(dict.fromkeys(k for k, _, _ in found[1:] if k != key))
        also = f" (also: {', '.join(others)})" if others else ""
        raise ModelConfigError(f"{where}: {key} = {show(value)}: {why}{also}")
