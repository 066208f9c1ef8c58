"""Whole-model analysis: a decoder-only transformer's prefill and decode, operator by operator."""

from attnroof.model.config import (
    ModelConfig,
    ModelConfigError,
    UnknownModel,
    builtin,
    builtin_names,
    get_model,
    load_config_file,
)
from attnroof.model.hf_config import from_hf
from attnroof.model.hybrid_config import from_config

__all__ = [
    "ModelConfig",
    "ModelConfigError",
    "UnknownModel",
    "builtin",
    "builtin_names",
    "from_config",
    "from_hf",
    "get_model",
    "load_config_file",
]
