"""Reading a model config's fields as strictly as a device file: each a value of the right type,
in range, or one line naming the field and the file."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from attnroof.errors import InputError


class ModelConfigError(InputError):
    """A model config that is unreadable, malformed, or has impossible values."""


MAX_CONFIG_INT = 2**31 - 1
"""Largest size a config field may hold. Real configs stay far below it (vocabularies ~2.6e5,
contexts ~1e7); a tensor dimension beyond the int32 range is not a model but a corrupted or
hostile file, and a bound keeps every product exact and printable."""


MAX_LAYERS = 10_000
"""Most layers a config may have. The deepest published language models have about a hundred
(Llama 3.1 405B: 126; PaLM 540B: 118) and the deepest transformer trained in research 1,000
(DeepNet, Wang et al. 2022); ten times that is no model but a corrupted or hostile file, and the
readers build a layer's kind once per layer."""


def read_int(cfg: Mapping[str, Any], key: str, where: str, default: Any = ..., *, zero: bool = False) -> Any:
    """A positive integer field (``zero``: or 0, for counts such as shared experts); ``default``
    when absent or null (missing and required: error)."""
    value = cfg.get(key)
    if value is None:
        if default is ...:
            raise ModelConfigError(f"{where}: missing required field {key!r}")
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and (not math.isfinite(value) or value != int(value)))
    ):
        raise ModelConfigError(f"{where}: {key} = {show(value)} is not an integer")
    if value < 0 or (value == 0 and not zero):
        raise ModelConfigError(
            f"{where}: {key} = {show(value)} must be {'0 or more' if zero else 'positive'}"
        )
    if value > MAX_CONFIG_INT:
        raise ModelConfigError(
            f"{where}: {key} = {show(value)} is absurdly large for a model (above {MAX_CONFIG_INT:,})"
        )
    return int(value)


def read_str(cfg: Mapping[str, Any], key: str, where: str) -> str:
    """A string field; "" when absent or null."""
    value = cfg.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ModelConfigError(f"{where}: {key} = {show(value)} is not a string")
    return value


def show(value: Any, limit: int = 60) -> str:
    """A field's value for an error line: its JSON-ish repr, cut short if long (a 4000-digit
    integer, a list of 80 layer kinds)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_set(value: Any) -> bool:
    """A field that says something: not null, false, 0 or empty."""
    return value is not None and value is not False and value != 0 and value not in ("", [], {})


def read_bool(cfg: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ModelConfigError(f"{where}: {key} = {value!r} is not true or false")
    return value
