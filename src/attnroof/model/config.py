"""A decoder-only transformer as a Hugging Face ``config.json`` describes it.

Read from a local file, from the packaged configs under ``model/configs/`` by name, or from the
Hugging Face hub cache by repository id (``org/name``, :mod:`attnroof.model.hub`, which downloads
only through the optional ``huggingface_hub``). Two key families are understood: the Llama one
(``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``,
``intermediate_size``: Llama, Mistral, Qwen2 and most recent models) and GPT-2's (``n_embd``,
``n_layer``, ``n_head``, ``n_inner``, ``n_positions``).

What a config does not say is filled in the way ``transformers`` fills it, and named here:
KV heads default to the query heads (plain multi-head attention); ``head_dim`` to
hidden / heads; GPT-2's ``n_inner`` to 4 × hidden; word embeddings are tied for GPT-2 and
untied otherwise; the norm is RMSNorm when the config has ``rms_norm_eps``, else LayerNorm.

A config is read as strictly as a device file: strict JSON (no ``NaN``/``Infinity``), every size
a positive integer below :data:`MAX_CONFIG_INT`, and any field that changes the arithmetic in a
way attnroof does not model yet (mixture-of-experts, latent attention, alternating local/global
layers, chunked attention, logit soft-capping, encoder-decoder) is refused by name rather than
counted as a dense model (see :func:`unmodelled`). Fields that change nothing attnroof counts
(rope settings, dropout, token ids, ...) are ignored.

Sliding windows: one window on *every* layer is modelled (decode reads ``min(context, window)``
tokens of KV cache; prefill is counted over the whole causal prompt, an upper bound that the
analysis says). So ``sliding_window`` alone is accepted (Mistral-7B, Phi-3-mini); what is refused
is a window on only some layers (``layer_types`` that mix kinds, ``sliding_window_pattern``,
Qwen2's ``max_window_layers`` below the layer count, Gemma-2/3's alternation).
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnroof.errors import InputError, loads_strict, read_json
from attnroof.model.architectures import Experts, Latent
from attnroof.model.fields import ModelConfigError


class UnknownModel(InputError, LookupError):
    """No built-in model of that name."""


CONFIGS = Path(__file__).with_name("configs")
"""The packaged model configs (``model/configs/NAME.json``)."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The shapes that decide a transformer's FLOPs and bytes. Counts, not bytes: dtypes are
    chosen at analysis time.

    >>> m = builtin("llama-3.1-8b")
    >>> m.group, m.kv_heads * m.head_dim        # 32 query heads on 8 KV heads; KV width 1024
    (4, 1024)
    """

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    gated: bool = True
    norm: str = "rms"
    """"rms" (RMSNorm: a scale) or "layer" (LayerNorm: a scale and a shift)."""
    tied: bool = False
    """The LM head reuses the token-embedding matrix."""
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    learned_positions: int = 0
    """Rows of a learned position-embedding table (GPT-2: 1024); 0 for rotary models."""
    sliding_window: int | None = None
    """The window of the windowed layers (all of them, or those ``windows`` marks)."""
    max_positions: int | None = None
    windows: tuple[int | None, ...] = ()
    """Each layer's window (None: global); empty means ``sliding_window`` on every layer."""
    experts: Experts | None = None
    moe_layers: tuple[bool, ...] = ()
    """Which layers' MLP is the mixture of experts (empty: none)."""
    latent: Latent | None = None
    activation: str = "silu"
    """The MLP's activation function: "silu" (SwiGLU) or "gelu" (GeGLU, GPT-2's GELU)."""
    norms_per_layer: int = 2
    qk_norm: bool = False
    sinks: bool = False
    attn_softcap: float | None = None
    """Gemma 2's cap on attention logits: cap·tanh(score/cap), three more FLOPs per score."""
    final_softcap: float | None = None
    stored_weights: str | None = None
    """The checkpoint's own weight format when it is not the compute dtype (``quantization_config``:
    DeepSeek-V3's fp8 blocks, gpt-oss's MXFP4 experts); analysed in ``--weight-dtype``, said in a note."""

    @property
    def group(self) -> int:
        """Query heads per KV head: 1 for multi-head, heads for multi-query attention."""
        return self.heads // self.kv_heads

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    def layer_windows(self) -> tuple[int | None, ...]:
        """Each layer's sliding window (None: global attention)."""
        return self.windows or (self.sliding_window,) * self.layers

    def layer_is_moe(self) -> tuple[bool, ...]:
        return self.moe_layers or (False,) * self.layers

    def active_params(self, *, embedding: bool = True) -> int:
        """Parameters one token runs through: every dense weight, ``top_k`` routed experts and
        the shared ones; ``embedding=False`` leaves out the input embedding (gpt-oss's convention),
        which a token only gathers one row of.

        >>> builtin("llama-3.1-8b").active_params() == builtin("llama-3.1-8b").params()
        True
        """
        from attnroof.model.layers import active_params

        return active_params(self, embedding=embedding)

    def params(self) -> int:
        """All parameters, summed over the layer table (:mod:`attnroof.model.layers`).

        >>> builtin("llama-3.1-8b").params()      # the published 8.03 B
        8030261248
        """
        from attnroof.model.layers import params

        return params(self)

    def streamed_params(self) -> int:
        """Parameters a forward step reads whole: all but the tables it only gathers rows of
        (the token embedding, unless the LM head shares it, and learned positions).

        >>> builtin("llama-3.1-8b").streamed_params()   # 8.03 B less the 128256 × 4096 embedding
        7504924672
        """
        from attnroof.model.layers import params_read

        return params_read(self)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hidden_size": self.hidden,
            "layers": self.layers,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate,
            "vocab_size": self.vocab,
            "gated_mlp": self.gated,
            "norm": self.norm,
            "tied_embeddings": self.tied,
            "sliding_window": self.sliding_window,
            "max_positions": self.max_positions,
            "params": self.params(),
            **self._architecture_json(),
        }

    def _architecture_json(self) -> dict[str, Any]:
        """What a dense Llama-style config lacks: only the keys that apply (so a dense model's
        JSON reads as before, with its active parameters)."""
        out: dict[str, Any] = {
            "active_params": self.active_params(),
            "active_params_excluding_embedding": self.active_params(embedding=False),
            "activation": self.activation,
        }
        if self.experts is not None:
            out["experts"] = {**self.experts.to_json(), "moe_layers": sum(self.layer_is_moe())}
        if self.latent is not None:
            out["latent_attention"] = self.latent.to_json()
        if self.windows and len(set(self.windows)) > 1:
            out["windowed_layers"] = sum(w is not None for w in self.windows)
        for key, on in (("qk_norm", self.qk_norm), ("attention_sinks", self.sinks)):
            if on:
                out[key] = True
        if self.attn_softcap is not None:
            out["attention_logit_softcap"] = self.attn_softcap
        if self.final_softcap is not None:
            out["final_logit_softcap"] = self.final_softcap
        return out


# ---------------------------------------------------------------- loading


def load_config_file(path: str | os.PathLike[str]) -> ModelConfig:
    """Read a local ``config.json``; :class:`ModelConfigError` if unreadable or malformed."""
    p = Path(path)
    cfg = read_json(p, "model config", ModelConfigError)
    default = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    name = cfg.get("_name_or_path") if isinstance(cfg, dict) else None
    from attnroof.model.hf_config import from_hf

    return from_hf(cfg, name if isinstance(name, str) and name else default, str(p))


def _key(name: str) -> str:
    """Lookup key: case-insensitive, blind to spaces, dashes, underscores and dots."""
    return re.sub(r"[\s_\-.]+", "", name.lower())


def builtin_names() -> list[str]:
    """Names of the packaged models, sorted: ``gpt2``, ``llama-3.1-70b``, ..."""
    folder = CONFIGS
    return sorted(f.name.removesuffix(".json") for f in folder.iterdir() if f.name.endswith(".json"))


def _builtin_raw(name: str) -> dict[str, Any]:
    path = CONFIGS / f"{name}.json"
    return loads_strict(path.read_text(encoding="utf-8"))


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
        from attnroof.model.hf_config import from_hf

        return from_hf(_builtin_raw(n), n, f"built-in {n}")
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
    path = Path(text)
    if path.is_dir() and (path / "config.json").is_file():
        return load_config_file(path / "config.json")
    if text.endswith(".json") or path.is_file():
        return load_config_file(path)
    if "/" in text and not path.exists():
        from attnroof.model.hub import hub_model, is_repo_id  # it imports this module

        if is_repo_id(text):
            return hub_model(text)
    return builtin(text)
