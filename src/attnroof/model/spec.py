"""The shapes of a decoder-only transformer, as a config fixes them (:class:`ModelConfig`).

Reading a config into one is :mod:`attnroof.model.config`'s and :mod:`attnroof.model.hf_config`'s
work; counting what it holds (parameters, active parameters) is the layer table's
(:mod:`attnroof.model.layers`). This module imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any

from attnroof.model.architectures import Experts, Latent, LayerKind, LayerRuns
from attnroof.model.hybrid import Mixers
from attnroof.model.quantization import Quantization

QK_NORM_HEAD = "head"
"""QK-norm per head (Qwen3, Gemma 3): an RMSNorm over each query and key head, one head_dim
scale for the queries and one for the keys."""
QK_NORM_WIDTH = "width"
"""QK-norm over the whole width (OLMoE): one RMSNorm over all query heads (q width scales), one
over all key heads (KV width scales)."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The shapes that decide a transformer's FLOPs and bytes. Counts, not bytes: dtypes are
    chosen at analysis time.

    >>> from attnroof.model.config import builtin
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
    rotary_dim: int = 0
    """Dims of each query and key head that rotary position embedding turns: the head_dim, or
    its ``partial_rotary_factor`` share (Qwen3-Next: 64 of 256), or latent attention's
    ``qk_rope_head_dim``; 0 for a model without RoPE (learned positions, ALiBi, NoPE). Which
    layers apply it is each :class:`LayerKind`'s ``rope``."""
    sliding_window: int | None = None
    """The window of the windowed layers (all of them, or those ``layer_runs`` marks)."""
    max_positions: int | None = None
    """The model's own context limit, its config's ``max_position_embeddings`` (GPT-2's
    ``n_positions``); None where it states none (a pure state-space model). JSON:
    ``max_position_embeddings``, under the config's own name as ``hidden_size`` and ``vocab_size`` are."""
    layer_runs: LayerRuns | None = None
    """Each layer's kind — its window, whether its MLP is the experts — in runs; None: every layer
    alike, ``sliding_window`` (or global) attention and a dense MLP."""
    experts: Experts | None = None
    latent: Latent | None = None
    activation: str = "silu"
    """The MLP's activation function: "silu" (SwiGLU) or "gelu" (GeGLU, GPT-2's GELU)."""
    norms_per_layer: int = 2
    qk_norm: str = ""
    """"" (none), :data:`QK_NORM_HEAD` or :data:`QK_NORM_WIDTH`."""
    sinks: bool = False
    attn_softcap: float | None = None
    """Gemma 2's cap on attention logits: cap·tanh(score/cap), three more FLOPs per score."""
    final_softcap: float | None = None
    quantization: Quantization | None = None
    """The checkpoint's ``quantization_config``: the format its converted weights are stored in
    (DeepSeek-V3's fp8 blocks, gpt-oss's MXFP4 experts), which the layer table's rows carry."""
    mixers: Mixers | None = None
    """A hybrid's linear-attention, state-space, sparse or chunked mixers (issue 23); None: every
    layer's mixer is softmax attention."""

    _hash: int | None = field(default=None, init=False, repr=False, compare=False)
    """The hash, worked out once: a plan search looks a model up in its caches ~10⁶ times."""

    def __hash__(self) -> int:
        if self._hash is None:
            fields = tuple(getattr(self, f.name) for f in dataclass_fields(self) if f.compare)
            object.__setattr__(self, "_hash", hash(fields))
        assert self._hash is not None
        return self._hash

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

    def layer_kinds(self, first: int = 0, stop: int | None = None) -> dict[LayerKind, int]:
        """How many of layers ``first`` to ``stop − 1`` (default: all) are of each kind, in order
        of first appearance: what the layer table costs, once per kind.

        >>> from attnroof.model.config import builtin
        >>> builtin("gpt-oss-20b").layer_kinds()
        {LayerKind(window=128, moe=True): 12, LayerKind(window=None, moe=True): 12}
        """
        stop = self.layers if stop is None else stop
        if self.layer_runs is None:
            return {LayerKind(self.sliding_window): stop - first} if stop > first else {}
        return self.layer_runs.kinds(first, stop)

    def layer_is_moe(self) -> tuple[bool, ...]:
        """For each layer, whether its MLP is the mixture of experts."""
        runs = self.layer_runs.runs if self.layer_runs else ((LayerKind(self.sliding_window), self.layers),)
        return tuple(kind.moe for kind, n in runs for _ in range(n))

    @property
    def windowed_layers(self) -> int:
        """Layers whose attention keeps a sliding window (0: none; ``layers``: all)."""
        return sum(n for kind, n in self.layer_kinds().items() if kind.window is not None)

    @property
    def moe_layer_count(self) -> int:
        """Layers whose MLP is the mixture of experts."""
        return sum(n for kind, n in self.layer_kinds().items() if kind.moe)

    def to_json(self, counts: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The shapes as JSON; ``counts``: what the layer table counts of them (parameters, active
        parameters: :func:`attnroof.model.layers.config_json`), placed before the architecture."""
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
            "max_position_embeddings": self.max_positions,
            **(counts or {}),
            **self._architecture_json(),
        }

    def _architecture_json(self) -> dict[str, Any]:
        """What a dense Llama-style config lacks: only the keys that apply (so a dense model's
        JSON reads as before, with its active parameters)."""
        out: dict[str, Any] = {"activation": self.activation}
        if self.experts is not None:
            out["experts"] = {**self.experts.to_json(), "moe_layers": self.moe_layer_count}
        if self.latent is not None:
            out["latent_attention"] = self.latent.to_json()
        if 0 < self.windowed_layers < self.layers:
            out["windowed_layers"] = self.windowed_layers
        if self.rotary_dim:
            out["rotary_dim"] = self.rotary_dim
            nope = sum(n for kind, n in self.layer_kinds().items() if not kind.rope)
            if nope:
                out["nope_layers"] = nope
        if self.qk_norm:
            out["qk_norm"] = self.qk_norm
        if self.sinks:
            out["attention_sinks"] = True
        if self.attn_softcap is not None:
            out["attention_logit_softcap"] = self.attn_softcap
        if self.final_softcap is not None:
            out["final_logit_softcap"] = self.final_softcap
        if self.quantization is not None:
            out["quantization"] = self.quantization.to_json()
        if self.mixers is not None:
            out["mixers"] = self.mixers.to_json()
        return out
