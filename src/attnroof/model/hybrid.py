"""What a hybrid model's layers mix tokens with, beside (or instead of) softmax attention: the
widths of its gated-DeltaNet, Mamba-2 or Mamba-1 mixers, DeepSeek's sparse-attention indexer,
Llama 4's attention chunk (issue 23). Read from configs by :mod:`attnroof.model.hybrid_config`;
the rows they make are :mod:`attnroof.model.hybrid_rows`'.

A layer's mixer is one of :data:`MIXERS` (a field of :class:`~attnroof.model.architectures.LayerKind`):
softmax attention, chunked attention, linear attention, Mamba-2, Mamba-1, Falcon-H1's attention and
Mamba-2 side by side, or none (Nemotron-H's MLP-only blocks); and a layer may have no MLP
(Nemotron-H's Mamba and attention blocks, every layer of Mamba-2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnroof.ops.recurrent import (
    conv_channels_gdn,
    conv_channels_ssd,
    gdn_state_elements,
    scan_state_elements,
    ssd_state_elements,
)

ATTENTION, CHUNKED, LINEAR, MAMBA2, MAMBA1, PARALLEL, NO_MIXER = (
    "attention",
    "chunked attention",
    "linear attention",
    "mamba2",
    "mamba",
    "attention+mamba2",
    "none",
)
MIXERS = (ATTENTION, CHUNKED, LINEAR, MAMBA2, MAMBA1, PARALLEL, NO_MIXER)


@dataclass(frozen=True, slots=True)
class DeltaNet:
    """Gated DeltaNet (Qwen3-Next's ``linear_*`` fields): ``heads`` value heads of
    ``value_dim``, ``key_heads`` query/key heads of ``key_dim``, a causal conv of ``conv_kernel``
    taps over q, k and v, chunks of ``chunk`` tokens (flash-linear-attention's 64)."""

    heads: int
    key_heads: int
    key_dim: int
    value_dim: int
    conv_kernel: int
    chunk: int = 64

    @property
    def conv_channels(self) -> int:
        return conv_channels_gdn(self.heads, self.key_heads, self.key_dim, self.value_dim)

    @property
    def state_elements(self) -> int:
        return gdn_state_elements(self.heads, self.key_heads, self.key_dim, self.value_dim, self.conv_kernel)

    def to_json(self) -> dict[str, Any]:
        return {"mixer": "gated DeltaNet", "heads": self.heads, "key_heads": self.key_heads,
                "key_dim": self.key_dim, "value_dim": self.value_dim, "conv_kernel": self.conv_kernel,
                "chunk": self.chunk, "state_elements": self.state_elements}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Mamba2:
    """Mamba-2: ``heads`` of ``head_dim`` (the inner width H·P), state N, ``groups`` of B and C,
    a conv over x, B and C, chunks of ``chunk``; ``norm``: the gated RMSNorm before out_proj."""

    heads: int
    head_dim: int
    state: int
    groups: int
    conv_kernel: int
    chunk: int
    conv_bias: bool = True
    proj_bias: bool = False
    norm: bool = True

    @property
    def inner(self) -> int:
        return self.heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        return conv_channels_ssd(self.heads, self.head_dim, self.state, self.groups)

    @property
    def in_width(self) -> int:
        """in_proj's outputs: z and x (2·H·P), B and C (2·G·N), dt (H)."""
        return 2 * self.inner + 2 * self.groups * self.state + self.heads

    @property
    def state_elements(self) -> int:
        return ssd_state_elements(self.heads, self.head_dim, self.state, self.groups, self.conv_kernel)

    def to_json(self) -> dict[str, Any]:
        return {"mixer": "Mamba-2", "heads": self.heads, "head_dim": self.head_dim, "state": self.state,
                "groups": self.groups, "conv_kernel": self.conv_kernel, "chunk": self.chunk,
                "state_elements": self.state_elements}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Mamba1:
    """Mamba-1: ``channels`` (the inner width) each with a state of N, a conv, Δ of rank
    ``dt_rank``; ``inner_norms``: Jamba's RMSNorms on Δ, B and C."""

    channels: int
    state: int
    conv_kernel: int
    dt_rank: int
    conv_bias: bool = True
    proj_bias: bool = False
    inner_norms: bool = False

    @property
    def state_elements(self) -> int:
        return scan_state_elements(self.channels, self.state, self.conv_kernel)

    def to_json(self) -> dict[str, Any]:
        return {"mixer": "Mamba-1", "channels": self.channels, "state": self.state,
                "conv_kernel": self.conv_kernel, "dt_rank": self.dt_rank,
                "state_elements": self.state_elements}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Indexer:
    """DeepSeek Sparse Attention's lightning indexer (``index_n_heads``, ``index_head_dim``,
    ``index_topk``)."""

    heads: int
    head_dim: int
    top_k: int

    def to_json(self) -> dict[str, Any]:
        return {"index_heads": self.heads, "index_head_dim": self.head_dim, "index_topk": self.top_k}


@dataclass(frozen=True, slots=True)
class Mixers:
    """Everything beyond softmax attention a model's layers hold."""

    deltanet: DeltaNet | None = None
    mamba2: Mamba2 | None = None
    mamba1: Mamba1 | None = None
    indexer: Indexer | None = None
    chunk: int | None = None
    """Llama 4's ``attention_chunk_size``: chunked layers attend within chunks of it."""
    gated_attention: bool = False
    """Qwen3-Next: q_proj also makes a sigmoid gate on the attention's output (twice as wide)."""
    mlp_label: str = ""
    """The MLP activation's name when it is neither SiLU nor GELU (Nemotron-H's ReLU²)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("deltanet", "mamba2", "mamba1", "indexer"):
            part = getattr(self, key)
            if part is not None:
                out[key] = part.to_json()
        if self.chunk is not None:
            out["attention_chunk_size"] = self.chunk
        if self.gated_attention:
            out["gated_attention"] = True
        return out
