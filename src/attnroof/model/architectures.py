"""What a config says beyond a dense Llama block: mixture-of-experts layers, multi-head latent
attention, and which layers attend over a sliding window. Each is read the way ``transformers``
reads it, field by field, and refused in one line when malformed.

- **Experts** (Mixtral, Qwen2/3-MoE, OLMoE, PhiMoE, DeepSeek-V2/V3, gpt-oss): ``E`` routed experts
  (``num_local_experts``, ``num_experts``, ``n_routed_experts``), ``top_k`` per token
  (``num_experts_per_tok``, ``experts_per_token``), each a gated MLP of ``moe_intermediate_size``
  (else ``intermediate_size``); shared experts (``n_shared_experts`` of that width, or one of
  ``shared_expert_intermediate_size``); dense layers first (``first_k_dense_replace``) or listed
  (``mlp_only_layers``, ``decoder_sparse_step``); group-limited routing (``n_group`` groups of
  contiguous experts, each token's top-k from its ``topk_group`` best: DeepSeek-V2/V3, whose
  ``topk_method`` "greedy" ignores the groups).
- **Latent attention** (DeepSeek-V2/V3): ``kv_lora_rank``, ``q_lora_rank`` (null: a plain Q
  projection), ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``.
- **Windows**: ``layer_types`` when present; else Gemma-2's alternation (even layers local), a
  ``sliding_window_pattern`` p (every p-th layer global: Gemma 3, Cohere 2), Qwen2's
  ``max_window_layers`` (layers from it on are windowed), or one ``sliding_window`` on every layer
  (Mistral, Phi-3), unless ``use_sliding_window`` is false.

Layers that share a window and an MLP are one :class:`LayerKind`; a model is its kinds in runs
(:class:`LayerRuns`), so a step is costed once per kind, times its count, never once per layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from attnroof.model.fields import ModelConfigError, read_bool, read_int, show

EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk")
LATENT_KEYS = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
SLIDING, FULL = "sliding_attention", "full_attention"

GEMMA2_TYPES = frozenset({"gemma2"})
"""Gemma 2 alternates without saying so: layer i is windowed when i is even (transformers'
``Gemma2Config``)."""
EXPERT_BIAS_TYPES = frozenset({"gpt_oss"})
"""Families whose router and experts carry biases (gpt-oss)."""


@dataclass(frozen=True, slots=True)
class Experts:
    """The mixture-of-experts of a layer: ``experts`` gated MLPs of ``width``, ``top_k`` per token,
    plus always-on shared experts of ``shared_width`` in all (0: none)."""

    experts: int
    top_k: int
    width: int
    shared_width: int = 0
    bias: bool = False
    router_bias: int = 0
    """Router bias parameters per layer: E (gpt-oss) or 0. DeepSeek-V3's score-correction bias is a
    buffer, not a parameter (as transformers counts it), and is left out."""
    shared_gate: bool = False
    """Qwen2-MoE's sigmoid gate on the shared expert (a Linear(hidden, 1))."""
    groups: int = 1
    """``n_group``: the experts in that many groups of E/groups contiguous experts."""
    groups_per_token: int = 0
    """``topk_group``: each token's top-k are chosen from its best groups, that many of them
    (transformers' ``DeepseekV3TopkRouter.get_topk_indices``); 0: no limit. DeepSeek-V3 lays a
    group on a node, so a token reaches at most 4 nodes."""

    def to_json(self) -> dict[str, Any]:
        limited = {"expert_groups": self.groups, "groups_per_token": self.groups_per_token}
        return {
            "experts": self.experts,
            "top_k": self.top_k,
            "expert_width": self.width,
            "shared_width": self.shared_width,
            **(limited if self.groups_per_token else {}),
        }


@dataclass(frozen=True, slots=True)
class Latent:
    """Multi-head latent attention's widths (DeepSeek-V2/V3)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None

    @property
    def cache_elements(self) -> int:
        """Elements one token adds to a layer's cache: the latent and the shared rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def to_json(self) -> dict[str, Any]:
        return {
            "kv_lora_rank": self.kv_lora_rank,
            "q_lora_rank": self.q_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "v_head_dim": self.v_head_dim,
        }


@dataclass(frozen=True, slots=True)
class LayerKind:
    """What sets one layer's rows apart from another's: its attention's window (None: global) and
    whether its MLP is the mixture of experts. Layers of one kind cost the same. (A layer's mixer —
    attention, linear attention, a state-space block — would be one more field.)"""

    window: int | None = None
    moe: bool = False
    mixer: str = field(default="attention", repr=False)
    """What mixes the tokens (:data:`attnroof.model.hybrid.MIXERS`): softmax attention unless a
    hybrid's config says otherwise (issue 23)."""
    mlp: bool = field(default=True, repr=False)
    """Whether the layer has an MLP (Nemotron-H's Mamba and attention blocks have none)."""
    rope: bool = field(default=True, repr=False)
    """Whether its attention applies the model's rotary embedding: False for a NoPE layer
    (``no_rope_layers`` 0: Llama 4's global layers)."""


@dataclass(frozen=True, slots=True)
class LayerRuns:
    """A model's layers in order, as runs of one :class:`LayerKind`: ``((kind, count), ...)``.

    >>> gemma2 = LayerRuns.of([LayerKind(4096), LayerKind(None)] * 2)
    >>> gemma2.runs
    ((LayerKind(window=4096, moe=False), 1), (LayerKind(window=None, moe=False), 1), (LayerKind(window=4096, moe=False), 1), (LayerKind(window=None, moe=False), 1))
    >>> gemma2.kinds(1, 4)                  # layers 1 to 3: two global, one windowed
    {LayerKind(window=None, moe=False): 2, LayerKind(window=4096, moe=False): 1}
    """

    runs: tuple[tuple[LayerKind, int], ...]

    @classmethod
    def of(cls, kinds: Iterable[LayerKind]) -> LayerRuns:
        return cls(tuple((kind, sum(1 for _ in group)) for kind, group in groupby(kinds)))

    @property
    def layers(self) -> int:
        return sum(n for _, n in self.runs)

    def kinds(self, first: int = 0, stop: int | None = None) -> dict[LayerKind, int]:
        """How many of layers ``first`` to ``stop − 1`` are of each kind, in order of first appearance."""
        stop = self.layers if stop is None else stop
        out: dict[LayerKind, int] = {}
        start = 0
        for kind, n in self.runs:
            overlap = min(stop, start + n) - max(first, start)
            if overlap > 0:
                out[kind] = out.get(kind, 0) + overlap
            start += n
        return out


def _first(cfg: Mapping[str, Any], keys: tuple[str, ...], where: str) -> tuple[str, int] | None:
    for key in keys:
        value = read_int(cfg, key, where, None)
        if value is not None:
            return key, value
    return None


def read_experts(cfg: Mapping[str, Any], where: str, model_type: str, intermediate: int) -> Experts | None:
    """The config's experts, or None for a dense model."""
    count = _first(cfg, EXPERT_COUNT_KEYS, where)
    if count is None:
        return None
    key, experts = count
    top = _first(cfg, TOP_K_KEYS, where)
    if top is None:
        raise ModelConfigError(f"{where}: {key} = {experts} but no experts per token ({TOP_K_KEYS[0]})")
    top_k = top[1]
    if top_k > experts:
        raise ModelConfigError(f"{where}: {top[0]} = {top_k} exceeds {key} = {experts}")
    width = read_int(cfg, "moe_intermediate_size", where, intermediate)
    shared = read_int(cfg, "n_shared_experts", where, 0, zero=True) * width
    qwen_shared = read_int(cfg, "shared_expert_intermediate_size", where, 0, zero=True)
    bias = model_type in EXPERT_BIAS_TYPES
    groups, per_token = _expert_groups(cfg, where, experts, top_k)
    return Experts(
        experts=experts,
        top_k=top_k,
        width=width,
        shared_width=shared + qwen_shared,
        bias=bias,
        router_bias=experts if bias else 0,
        shared_gate=qwen_shared > 0,
        groups=groups,
        groups_per_token=per_token,
    )


def _expert_groups(cfg: Mapping[str, Any], where: str, experts: int, top_k: int) -> tuple[int, int]:
    """``n_group`` and ``topk_group``: (groups, groups a token may choose from; 0 when that is no
    limit: all of them, one group, or ``topk_method`` "greedy", which routes without groups)."""
    groups = read_int(cfg, "n_group", where, 1)
    if experts % groups:
        raise ModelConfigError(f"{where}: n_group = {groups} does not divide the {experts} experts")
    per_token = read_int(cfg, "topk_group", where, groups)
    if per_token > groups:
        raise ModelConfigError(f"{where}: topk_group = {per_token} exceeds n_group = {groups}")
    if per_token * (experts // groups) < top_k:
        raise ModelConfigError(
            f"{where}: topk_group = {per_token} groups of {experts // groups} experts hold fewer than the "
            f"{top_k} experts a token picks"
        )
    if per_token == groups or cfg.get("topk_method") == "greedy":
        return groups, 0
    return groups, per_token


def moe_layers(cfg: Mapping[str, Any], where: str, layers: int, experts: Experts | None) -> tuple[bool, ...]:
    """For each layer, whether its MLP is the mixture of experts (False: a dense MLP)."""
    if experts is None:
        return (False,) * layers
    first_dense = read_int(cfg, "first_k_dense_replace", where, 0, zero=True)
    if first_dense > layers:
        raise ModelConfigError(
            f"{where}: first_k_dense_replace = {first_dense} exceeds the model's {layers} layers"
        )
    step = read_int(cfg, "decoder_sparse_step", where, 1)
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise ModelConfigError(f"{where}: mlp_only_layers = {show(only)} is not a list of layer numbers")
    outside = [i for i in only if not 0 <= i < layers]
    if outside:
        raise ModelConfigError(
            f"{where}: mlp_only_layers holds layer {outside[0]}, outside the model's layers 0 to {layers - 1}"
        )
    freq = read_int(cfg, "moe_layer_freq", where, 1)
    return tuple(
        i >= first_dense and i not in only and (i + 1) % step == 0 and (i - first_dense) % freq == 0
        for i in range(layers)
    )


def read_latent(cfg: Mapping[str, Any], where: str) -> Latent | None:
    """Latent attention's widths, or None for ordinary attention."""
    present = [k for k in LATENT_KEYS if cfg.get(k) is not None]
    if not present:
        return None
    missing = [k for k in LATENT_KEYS if k not in present]
    if missing:
        raise ModelConfigError(f"{where}: latent attention needs {', '.join(missing)} beside {present[0]}")
    return Latent(
        kv_lora_rank=read_int(cfg, "kv_lora_rank", where),
        qk_rope_head_dim=read_int(cfg, "qk_rope_head_dim", where),
        qk_nope_head_dim=read_int(cfg, "qk_nope_head_dim", where),
        v_head_dim=read_int(cfg, "v_head_dim", where),
        q_lora_rank=read_int(cfg, "q_lora_rank", where, None),
    )


def layer_windows(cfg: Mapping[str, Any], where: str, layers: int, model_type: str) -> tuple[int | None, ...]:
    """Each layer's sliding window (None: attends over the whole context).

    >>> layer_windows({"sliding_window": 4096}, "c", 4, "gemma2")
    (4096, None, 4096, None)
    >>> layer_windows({"sliding_window": 512, "sliding_window_pattern": 3}, "c", 6, "gemma3")
    (512, 512, None, 512, 512, None)
    """
    window = read_int(cfg, "sliding_window", where, None)  # checked even when unused
    if not read_bool(cfg, "use_sliding_window", where, True):
        return (None,) * layers  # Qwen2.5: a window is configured but switched off
    kinds = cfg.get("layer_types")
    if kinds is not None:
        if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
            raise ModelConfigError(f"{where}: layer_types = {show(kinds)} is not a list of strings")
        if len(kinds) != layers:
            raise ModelConfigError(f"{where}: layer_types has {len(kinds)} entries for {layers} layers")
        odd = sorted(set(kinds) - {SLIDING, FULL})
        if odd:
            raise ModelConfigError(f"{where}: layer_types: layers of kind {odd[0]!r} are not modelled")
        if SLIDING in kinds and window is None:
            raise ModelConfigError(f"{where}: layer_types has sliding_attention layers but no sliding_window")
        return tuple(window if k == SLIDING else None for k in kinds)
    if window is None:
        return (None,) * layers
    if model_type in GEMMA2_TYPES:
        return tuple(window if i % 2 == 0 else None for i in range(layers))
    pattern = read_int(cfg, "sliding_window_pattern", where, None)
    if pattern is not None:
        return tuple(window if (i + 1) % pattern else None for i in range(layers))
    if "use_sliding_window" in cfg and "max_window_layers" in cfg:
        first = read_int(cfg, "max_window_layers", where, 0, zero=True)
        return tuple(window if i >= first else None for i in range(layers))
    return (window,) * layers


POSITION_TYPES = {"rope": True, "rotary": True, "nope": False, "none": False, "alibi": False}
"""``position_embedding_type``: whether attention rotates q and k (Granite 4.0-H says "nope";
ALiBi's bias is added to the scores, not counted)."""


def rope_layers(cfg: Mapping[str, Any], where: str, layers: int, default: Any = None) -> tuple[bool, ...]:
    """For each layer, whether it applies rotary embedding: ``no_rope_layers`` (transformers'
    Llama 4 and SmolLM3 name, 1 where a layer *does* use RoPE, 0 for a NoPE layer), else
    ``default(i)`` (Llama 4: every 4th layer NoPE), else all.

    >>> rope_layers({"no_rope_layers": [1, 1, 0]}, "c", 3)
    (True, True, False)
    """
    nope = cfg.get("no_rope_layers")
    if nope is None:
        return tuple(bool(default(i)) if default else True for i in range(layers))
    if (
        not isinstance(nope, list)
        or len(nope) != layers
        or any(v not in (0, 1) or isinstance(v, float) for v in nope)
    ):
        raise ModelConfigError(f"{where}: no_rope_layers = {show(nope)} is not {layers} zeros and ones")
    return tuple(v == 1 for v in nope)


def read_rotary_dim(cfg: Mapping[str, Any], where: str, head_dim: int, latent: Latent | None) -> int:
    """The dims of each head that RoPE turns (0: none): the head, or its share under
    ``partial_rotary_factor`` (GPT-NeoX's ``rotary_pct``; transformers rounds head_dim × factor
    down) or ``rotary_dim`` (GPT-J); latent attention's ``qk_rope_head_dim``. None at all where
    ``position_embedding_type`` says "nope" (or ALiBi).

    >>> read_rotary_dim({"partial_rotary_factor": 0.25}, "c", 256, None)   # Qwen3-Next
    64
    """
    kind = cfg.get("position_embedding_type")
    if kind is not None:
        if not isinstance(kind, str) or kind.lower() not in POSITION_TYPES:
            raise ModelConfigError(
                f"{where}: position_embedding_type = {show(kind)} is not modelled (known: {', '.join(POSITION_TYPES)})"
            )
        if not POSITION_TYPES[kind.lower()]:
            return 0
    if latent is not None:
        return latent.qk_rope_head_dim
    key = next((k for k in ("partial_rotary_factor", "rotary_pct") if cfg.get(k) is not None), None)
    if key is not None:
        factor = cfg[key]
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
            raise ModelConfigError(
                f"{where}: {key} = {show(factor)} is not a share of the head, above 0 and at most 1"
            )
        dims, what = int(head_dim * factor), f"{key} = {factor:g} of head_dim {head_dim}"
    elif cfg.get("rotary_dim") is not None:
        dims, what = read_int(cfg, "rotary_dim", where), "rotary_dim"
        if dims > head_dim:
            raise ModelConfigError(f"{where}: rotary_dim = {dims} exceeds head_dim = {head_dim}")
    else:
        return head_dim
    if dims == 0 or dims % 2:
        raise ModelConfigError(f"{where}: {what} is {dims} dims, not a whole number of rotated pairs")
    return dims
