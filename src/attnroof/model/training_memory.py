"""What a training step holds in device memory: weights, gradients, optimizer state, and the
activations the backward pass needs, read from the same layer table as the step's costs.

    weights      parameters × weight bytes                        (bf16: 2)
    gradients    parameters × gradient bytes                      (bf16: 2)
    optimizer    parameters × (master copy + states × state bytes) (AdamW, fp32: 4 + 2·4 = 12)

the ZeRO paper's accounting of mixed-precision Adam: 2 + 2 + 12 = 16 bytes per parameter. A
master dtype equal to the weights' keeps no separate copy (the weights are the master); the
optimizer's states are kept in the master dtype.

Activations: what each operator's backward reads that its forward computed, per token::

    norm              its input X                        hidden
    linear            its input X (dW = Xᵀ·dY)           k  (the QKV projection's input is the
                                                             norm's output, and so on: each
                                                             GEMM's input is its own tensor)
    attention         Q, K, V                            q width + 2·kv width
                      + fused: the row log-sum-exp L     heads × 4 bytes
                      + unfused: P, per sequence         heads × s² (half when causal)
    activation        gated: gate and up; else X         2·intermediate, or intermediate
    residual add, embedding                              nothing (the gradient passes through)
    the loss          the logits                         vocab (the LM head runs on every position)

Attention's output O is counted once, as the output projection's input. ``selective``
recomputes the attention core (Korthikanti et al. 2022): P is not kept (with fused attention
it never was, so selective keeps what none keeps). ``full`` keeps each layer's input (hidden per
token) and, while one layer is recomputed, that layer's saved tensors: its working set. Not
counted: per-row norm statistics (4 bytes per token), transient buffers and gradients in
flight (about one layer's worth), dropout (modern models train without it), and an fp32 copy
of the logits that some loss implementations make.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from attnroof.cost import Num
from attnroof.model.layers import (
    ALL_TOKENS,
    DENSE_MLP,
    EMBEDDING,
    GLOBAL,
    LAYER,
    LOCAL,
    MOE,
    OpInstance,
    layer_table,
    params,
)
from attnroof.model.memory import _largest, context_limit_json, largest_context
from attnroof.model.shard import Shard, standing_for
from attnroof.model.spec import ModelConfig
from attnroof.model.train_options import (  # noqa: F401 (re-exported)
    EVERY_MICROBATCH,
    EVERY_PASS,
    FULL,
    NONE,
    OPTIMIZER_STATES,
    RECOMPUTE,
    SELECTIVE,
)
from attnroof.operators import rule
from attnroof.ops.backward import FP32_BYTES
from attnroof.row import Saving


@dataclass(frozen=True, slots=True)
class TrainPrecision:
    """Bytes per element of activations, weights, gradients, the master copy and the optimizer."""

    itemsize: float = 2
    weight_itemsize: float = 2
    grad_itemsize: float = 2
    master_itemsize: float = FP32_BYTES
    optimizer: str = "adamw"

    @property
    def optimizer_bytes_per_param(self) -> float:
        """A master copy unless the weights are kept in the master dtype, plus the states."""
        master = 0 if self.master_itemsize == self.weight_itemsize else self.master_itemsize
        return master + OPTIMIZER_STATES[self.optimizer] * self.master_itemsize


def saved_bytes(
    i: OpInstance,
    model: ModelConfig,
    batch: Num,
    context: Num,
    itemsize: float,
    *,
    fused: bool,
    recompute: str,
) -> Num:
    """Bytes one run of row ``i`` keeps for the backward pass (the table above): its operator's
    ``saved`` rule (:mod:`attnroof.operators`)."""
    return rule(i).saved_bytes(i, Saving(batch, context, itemsize, fused, selective=recompute == SELECTIVE))


def layer_input_bytes(model: ModelConfig, batch: Num, context: Num, itemsize: float) -> Num:
    """The residual stream entering a layer: what full recomputation keeps per layer."""
    return batch * context * model.hidden * itemsize


def _sequence_split(i: OpInstance, shard: Shard | None) -> int:
    """1/t of a row's saved input is kept under sequence parallelism where the input is the
    replicated residual stream: a norm's, and a column-parallel (or replicated) GEMM's, whose
    all-gathered input Megatron-LM does not keep but gathers again in the backward pass
    (Korthikanti et al. 2022, section 4.2.2)."""
    if shard is None or not shard.sp:
        return 1
    return shard.tp if i.split in rule(i).saved_split else 1


def _largest_layer(rows: list[OpInstance], saved: Callable[[OpInstance], Num]) -> Num:
    """The saved tensors of the largest single layer: the rows every layer runs, plus the
    largest of each set of alternatives (windowed or global attention; a dense or an MoE MLP)."""
    every: Num = sum(saved(i) for i in rows if i.layer_kind == LAYER)
    for kinds in ((LOCAL, GLOBAL), (DENSE_MLP, MOE)):
        every += max((sum(saved(i) for i in rows if i.layer_kind == k) for k in kinds), default=0)
    return every


@functools.lru_cache(maxsize=65536)
def _shard_params(model: ModelConfig, shard: Shard | None) -> tuple[int, int]:
    """A device's dense and expert parameters, kept (a plan search asks for each shard's once
    per ZeRO stage, micro-batch and schedule; a shard standing for its like)."""
    if shard is not None:
        shard = standing_for(model, shard)
    experts = expert_params(model, shard)
    return params(model, shard) - experts, experts


@functools.lru_cache(maxsize=65536)
def kept_activations(
    model: ModelConfig, batch: int, context: int, itemsize: float, fused: bool, recompute: str,
    shard: Shard | None,
) -> dict[str, Num]:  # fmt: skip
    """:func:`activation_bytes` of whole numbers, kept: a plan search asks for the same stage at
    the same micro-batch once per ZeRO stage, replica count and micro-batch count (a stage
    standing for its like, :func:`attnroof.model.shard.standing_for`). Read, never changed."""
    if shard is not None:
        shard = standing_for(model, shard)
    return activation_bytes(model, batch, context, itemsize, fused=fused, recompute=recompute, shard=shard)


def activation_bytes(
    model: ModelConfig,
    batch: Num,
    context: Num,
    itemsize: float,
    *,
    fused: bool,
    recompute: str,
    shard: Shard | None = None,
) -> dict[str, Num]:
    """Activation bytes a training step keeps: ``kept_per_layer`` (what a layer keeps between
    its forward and its backward pass, the mean over the layers), ``head`` (the final norm's
    and the LM head's inputs, and the logits), ``working`` (full recomputation: the largest
    layer's saved tensors while it is recomputed) and ``total``. With a ``shard``: one device's
    stage of a parallel plan, its tensors cut as its rows are."""
    table = layer_table(model, shard)
    layer_rows = [i for i in table if i.per_layer]
    L = model.layers if shard is None else shard.layers

    def saved(i: OpInstance, how: str) -> Num:
        kept = saved_bytes(i, model, batch, context, itemsize, fused=fused, recompute=how)
        return kept / _sequence_split(i, shard)

    head_rows = [
        replace(i, tokens=ALL_TOKENS) for i in table if not i.per_layer and i.layer_kind != EMBEDDING
    ]
    logits = sum(batch * context * gemm(i.shape)[1] for i in head_rows if (gemm := rule(i).gemm)) * itemsize
    head = sum(saved(i, NONE) for i in head_rows) + logits
    working: Num = 0
    if recompute == FULL:
        kept = layer_input_bytes(model, batch, context, itemsize) / (shard.tp if shard and shard.sp else 1)
        working = _largest_layer(layer_rows, lambda i: saved(i, NONE))
        total = L * kept + working + head
    else:
        layers = sum(i.count * saved(i, recompute) for i in layer_rows)
        kept = layers / L
        total = layers + head
    return {"kept_per_layer": kept, "head": head, "working": working, "total": total}


@dataclass(frozen=True, slots=True)
class TrainMemory:
    """Device memory of a training step (bytes), and whether it fits."""

    weights_bytes: float
    gradient_bytes: float
    optimizer_bytes: float
    activation_bytes: float
    activation_bytes_per_layer: float
    """What each layer keeps from its forward pass to its backward pass."""
    capacity_bytes: float | None
    fits: bool | None
    max_batch: int | None
    max_context_by_memory: int | None
    """Largest context that fits in memory at this batch; None when unknown or unbounded."""
    max_context_by_model: int | None = None
    """The model's own limit, its ``max_position_embeddings``; None: it states none."""

    @property
    def max_context(self) -> int | None:
        """The largest context this batch can run at: memory's limit or the model's, the smaller."""
        return largest_context(self.max_context_by_memory, self.max_context_by_model, self.capacity_bytes)[0]

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.gradient_bytes + self.optimizer_bytes + self.activation_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "weights_bytes": self.weights_bytes,
            "gradient_bytes": self.gradient_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activation_bytes": self.activation_bytes,
            "activation_bytes_per_layer": self.activation_bytes_per_layer,
            "total_bytes": self.total_bytes,
            "capacity_bytes": self.capacity_bytes,
            "fits": self.fits,
            "max_batch": self.max_batch,
            **context_limit_json(self.max_context_by_memory, self.max_context_by_model, self.capacity_bytes),
        }


@dataclass(frozen=True, slots=True)
class Zero:
    """ZeRO's sharding (Rajbhandari et al. 2020) over the data-parallel replicas: stage 1 splits
    the optimizer states, 2 the gradients too, 3 the weights too. Expert weights have their own,
    smaller, data-parallel group: the ``dp/ep`` replicas that hold the same experts (``edp``
    where the experts are cut unlike the attention: tp · dp / (etp · ep)). Under hybrid sharding
    ``dp`` and ``edp`` are the shard groups', the cut each device keeps. Gradients reduced once
    a step (``grad_reduce``) accumulate whole on every device, so they are never cut; ZeRO 3's
    weights gathered once a micro-batch or a step (``weight_gather``) stay resident, the whole
    shard's beside the device's own cut (:mod:`attnroof.model.sharding`)."""

    stage: int = 0
    dp: int = 1
    ep: int = 1
    edp: int = 0
    weight_gather: str = EVERY_PASS
    grad_reduce: str = EVERY_MICROBATCH

    def per_device(self, dense: Num, experts: Num, from_stage: int) -> Num:
        """Parameters a device keeps of a state that ZeRO shards from ``from_stage`` on."""
        if self.stage < from_stage:
            return dense + experts
        return dense / self.dp + experts / (self.edp or self.dp // self.ep)

    @property
    def gradients_from(self) -> int:
        """The stage from which the gradients are kept cut: 2, or never when they accumulate
        whole until a once-a-step reduction."""
        return 2 if self.grad_reduce == EVERY_MICROBATCH else NEVER

    @property
    def keeps_gathered(self) -> bool:
        """ZeRO 3 keeping the gathered weights between passes: the whole shard's stay resident."""
        return self.stage >= 3 and self.weight_gather != EVERY_PASS


NEVER = 4
"""A stage past ZeRO's last: a state that no stage cuts."""


def expert_params(model: ModelConfig, shard: Shard | None = None) -> int:
    """The routed experts' parameters (on one device of a ``shard``)."""
    return sum(i.count * i.params for i in layer_table(model, shard) if rule(i).routed)


def state_bytes(
    model: ModelConfig, prec: TrainPrecision, shard: Shard | None, zero: Zero | None
) -> tuple[float, float, float]:
    """The weights', gradients' and optimizer's bytes one device keeps: its shard's parameters,
    each cut by ZeRO from its stage on, and the gathered weights ZeRO 3 keeps (:class:`Zero`)."""
    z = zero or Zero()
    dense, experts = _shard_params(model, shard)
    gathered = (dense + experts) if z.keeps_gathered else 0
    return (
        (z.per_device(dense, experts, 3) + gathered) * prec.weight_itemsize,
        z.per_device(dense, experts, z.gradients_from) * prec.grad_itemsize,
        z.per_device(dense, experts, 1) * prec.optimizer_bytes_per_param,
    )


def held_activations(a: dict[str, Num], in_flight: Num) -> Num:
    """The activations a device holds (``a``: :func:`activation_bytes` of one micro-batch):
    every micro-batch in flight keeps its layers' own; the head's are one micro-batch's, and
    one layer at a time is recomputed (``working``)."""
    layers = a["total"] - a["working"] - a["head"]
    return in_flight * layers + a["head"] + a["working"]


def train_memory(
    model: ModelConfig,
    batch: int,
    context: int,
    prec: TrainPrecision,
    capacity_bytes: float | None,
    *,
    fused: bool = True,
    recompute: str = NONE,
    shard: Shard | None = None,
    zero: Zero | None = None,
    in_flight: float = 1,
) -> TrainMemory:
    """Weights, gradients, optimizer state and activations of one training step. On one device
    of a parallel plan: its ``shard``'s parameters, sharded further by ``zero``, and the
    activations of ``in_flight`` micro-batches of ``batch`` sequences (a pipeline stage holds
    those it has run forward and not yet backward: min(m, p − stage) under 1F1B; each schedule's
    in :mod:`attnroof.model.schedules`, a fraction where it counts model chunks). The head's
    tensors (the last stage's) are one micro-batch's: its loss and backward follow its forward.

    >>> from attnroof.model.config import builtin
    >>> m = train_memory(builtin("llama-3.1-8b"), 1, 8192, TrainPrecision(), 141e9)
    >>> m.optimizer_bytes == 12 * params(builtin("llama-3.1-8b")), m.fits
    (True, False)
    """
    weights, grads, optimizer = state_bytes(model, prec, shard, zero)
    states = weights + grads + optimizer

    def act(b: int, c: int) -> dict[str, Num]:
        if isinstance(b, int) and isinstance(c, int):
            a = kept_activations(model, b, c, prec.itemsize, fused, recompute, shard)
        else:  # arrays (a grid): nothing to keep
            a = activation_bytes(model, b, c, prec.itemsize, fused=fused, recompute=recompute, shard=shard)
        return {**a, "total": held_activations(a, in_flight)}

    a = act(batch, context)
    if capacity_bytes is None:
        fits, max_batch, max_context = None, None, None
    else:
        fits = states + a["total"] <= capacity_bytes
        per_batch = act(1, context)["total"]  # every activation grows with the batch
        max_batch = max(0, int((capacity_bytes - states) // per_batch))
        max_context = _largest(lambda c: states + act(batch, c)["total"] <= capacity_bytes)
    return TrainMemory(
        weights_bytes=weights,
        gradient_bytes=grads,
        optimizer_bytes=optimizer,
        activation_bytes=a["total"],
        activation_bytes_per_layer=a["kept_per_layer"],
        capacity_bytes=capacity_bytes,
        fits=fits,
        max_batch=max_batch,
        max_context_by_memory=max_context,
        max_context_by_model=model.max_positions,
    )
