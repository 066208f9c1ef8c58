"""A decoder-only transformer as a Hugging Face ``config.json`` describes it.

Read from a local file, from the packaged configs under ``model/configs/`` by name, or from the
Hugging Face hub cache by repository id (``org/name``, :mod:`attnroof.model.hub`, which downloads
only through the optional ``huggingface_hub``). Two key families are understood: the Llama one
(``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``,
``intermediate_size``: Llama, Mistral, Qwen2 and most recent models) and GPT-2's (``n_embd``,
``n_layer``, ``n_head``, ``n_inner``, ``n_positions``).

What a config does not say is filled in the way ``transformers`` fills it, and named here:
KV heads default to the query heads (plain multi-head attention); ``head_dim`` to
hidden / heads; GPT-2's ``n_inner`` to 4 × hidden; word embeddings are tied for GPT-2 and Gemma
and untied otherwise; the norm is RMSNorm when the config has ``rms_norm_eps``, else LayerNorm.

A config is read as strictly as a device file: strict JSON (no ``NaN``; ``Infinity`` only where
a published config holds it, Mamba-2's ``time_step_limit``), every size
a positive integer below :data:`MAX_CONFIG_INT`, at most :data:`MAX_LAYERS` layers, layer numbers
inside the model, a ``model_type`` attnroof reads (:data:`attnroof.model.hf_config.FAMILIES`), and
any field that changes the arithmetic in a way attnroof does not model (chunked attention,
encoder-decoder) refused by name rather than counted as something else (see
:func:`unmodelled`). Mixture-of-experts, latent attention and sliding windows on all or some
layers are modelled (:mod:`attnroof.model.architectures`); so are the hybrids' linear-attention,
state-space, sparse and chunked layers (:mod:`attnroof.model.hybrid_config`). Fields that change nothing attnroof
counts (rope settings, dropout, token ids, ...) are ignored.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any

from attnroof.errors import InputError, loads_strict, read_json
from attnroof.model.fields import ModelConfigError
from attnroof.model.hub import cached_config, download_config, is_repo_id
from attnroof.model.hybrid_config import from_config
from attnroof.model.spec import ModelConfig

__all__ = [  # ModelConfig lives in attnroof.model.spec (below the readers); re-exported here
    "CONFIGS", "ModelConfig", "ModelConfigError", "UnknownModel", "builtin", "builtin_names", "get_model",
    "hub_model", "load_config_file",
]  # fmt: skip


class UnknownModel(InputError, LookupError):
    """No built-in model of that name."""


CONFIGS = Path(__file__).with_name("configs")
"""The packaged model configs (``model/configs/NAME.json``)."""


# ---------------------------------------------------------------- loading


def load_config_file(path: str | os.PathLike[str]) -> ModelConfig:
    """Read a local ``config.json``; :class:`ModelConfigError` if unreadable or malformed."""
    p = Path(path)
    cfg = read_json(p, "model config", ModelConfigError, infinity=True)
    default = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    name = cfg.get("_name_or_path") if isinstance(cfg, dict) else None

    return from_config(cfg, name if isinstance(name, str) and name else default, str(p))


def _key(name: str) -> str:
    """Lookup key: case-insensitive, blind to spaces, dashes, underscores and dots."""
    return re.sub(r"[\s_\-.]+", "", name.lower())


def builtin_names() -> list[str]:
    """Names of the packaged models, sorted: ``gpt2``, ``llama-3.1-70b``, ..."""
    folder = CONFIGS
    return sorted(f.name.removesuffix(".json") for f in folder.iterdir() if f.name.endswith(".json"))


def _builtin_raw(name: str) -> dict[str, Any]:
    path = CONFIGS / f"{name}.json"
    return loads_strict(path.read_text(encoding="utf-8"), infinity=True)


def builtin(name: str) -> ModelConfig:
    """A packaged model by name (case-insensitive; also its Hugging Face id, e.g.
    ``meta-llama/Llama-3.1-8B``)."""
    wanted = _key(name.strip())
    labels: dict[str, str] = {}
    for n in builtin_names():
        labels[_key(n)] = n
        hf_id = str(_builtin_raw(n).get("_name_or_path") or "")
        if hf_id:
            labels[_key(hf_id)] = n
            labels[_key(hf_id.rsplit("/", 1)[-1])] = n
    if wanted in labels:
        n = labels[wanted]

        return from_config(_builtin_raw(n), n, f"built-in {n}")
    close = difflib.get_close_matches(wanted, list(labels), n=3, cutoff=0.5)
    hint = ""
    if close:
        hint = "; did you mean " + ", ".join(dict.fromkeys(labels[c] for c in close)) + "?"
    raise UnknownModel(
        f"unknown model {name!r}{hint} (list them with 'attnroof model --list', or pass a config.json path)"
    )


def get_model(name_or_path: str) -> ModelConfig:
    """A built-in model by name, the model of a local ``config.json``, or a Hugging Face hub
    repository ``org/name`` (:mod:`attnroof.model.hub`: its cached config, else the built-in
    copy, else a download)."""
    text = name_or_path.strip()
    if not text:
        raise UnknownModel("empty model name (list them with 'attnroof model --list')")
    # os.path answers False for a name the system cannot look up (a part over 255 bytes), where
    # Path raises: such a name is no file, and is looked up as a model name.
    if os.path.isdir(text):
        config = Path(text) / "config.json"
        if not config.is_file():
            raise ModelConfigError(f"model folder {text!r} holds no config.json")
        return load_config_file(config)
    if text.endswith(".json") or os.path.exists(text):  # a path that exists is a file (/dev/null)
        return load_config_file(text)
    if "/" in text and is_repo_id(text):
        return hub_model(text)
    return builtin(text)


def hub_model(repo_id: str) -> ModelConfig:
    """The model of hub repository ``repo_id`` (:mod:`attnroof.model.hub`): its cached config, else
    the built-in copy, else a download."""
    path = cached_config(repo_id)
    if path is None:
        try:
            return builtin(repo_id)
        except UnknownModel:
            path = download_config(repo_id)
    return from_config(read_json(path, "model config", ModelConfigError, infinity=True), repo_id, str(path))
