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

from dataclasses import dataclass, replace
from typing import Any

from attnroof.cost import Num
from attnroof.model.config import ModelConfig
from attnroof.model.layers import ALL_TOKENS, EMBEDDING, OpInstance, layer_table, params
from attnroof.model.memory import _largest
from attnroof.model.train_options import FULL, NONE, OPTIMIZER_STATES, RECOMPUTE, SELECTIVE  # noqa: F401 (re-exported)
from attnroof.ops.attention import causal_band, causal_half
from attnroof.ops.backward import FP32_BYTES


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


def _scores_kept(
    i: OpInstance, batch: Num, context: Num, heads: Num, itemsize: float, fused: bool, recompute: str
) -> Num:
    """What attention keeps beyond Q, K and V: fused, the log-sum-exp of each row (fp32);
    unfused, P (the band within a window, if any). Selective recomputation checkpoints the core
    attention, as Megatron-LM does: it keeps only Q, K and V and reruns the forward."""
    if recompute == SELECTIVE:
        return 0
    if fused:
        return batch * context * heads * FP32_BYTES
    window = i.shape.get("window")
    scores = causal_half(context * context) if window is None else causal_band(context, window)
    return batch * heads * scores * itemsize


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
    """Bytes one run of row ``i`` keeps for the backward pass (the table above)."""
    tokens = batch * context
    op = i.operator
    if op == "norm":
        return tokens * i.shape["width"] * itemsize
    if op == "linear":
        return tokens * i.shape["k"] * itemsize
    if op == "activation":  # experts: on every routed token
        routed = tokens * i.shape.get("routed", 1)
        return routed * i.shape["width"] * (2 if i.shape["gated"] else 1) * itemsize
    if op == "experts":  # each routed token's input row, for dW
        return tokens * i.shape["top_k"] * i.shape["k"] * itemsize
    if op == "attention":
        heads = i.shape["group"] * i.shape["kv_heads"]
        d = i.shape["head_dim"]
        qkv = tokens * (heads + 2 * i.shape["kv_heads"]) * d * itemsize
        return qkv + _scores_kept(i, batch, context, heads, itemsize, fused, recompute)
    if op == "latent attention":  # naive: the latent (for dW_UKV), then Q, K, V of every head
        s = i.shape
        widths = 2 * (s["qk_nope_head_dim"] + s["qk_rope_head_dim"]) + s["v_head_dim"]
        kept = tokens * (s["kv_lora_rank"] + s["heads"] * widths) * itemsize
        return kept + _scores_kept(i, batch, context, s["heads"], itemsize, fused, recompute)
    return 0


def layer_input_bytes(model: ModelConfig, batch: Num, context: Num, itemsize: float) -> Num:
    """The residual stream entering a layer: what full recomputation keeps per layer."""
    return batch * context * model.hidden * itemsize


def activation_bytes(
    model: ModelConfig, batch: Num, context: Num, itemsize: float, *, fused: bool, recompute: str
) -> dict[str, Num]:
    """Activation bytes a training step keeps: ``per_layer`` (one layer's saved tensors),
    ``kept_per_layer`` (what each layer keeps between forward and backward), ``head`` (the
    final norm's and the LM head's inputs, and the logits) and ``total``."""
    table = layer_table(model)
    layer_rows = [i for i in table if i.per_layer]
    L = model.layers

    def saved(i: OpInstance, how: str) -> Num:
        return saved_bytes(i, model, batch, context, itemsize, fused=fused, recompute=how)

    per_layer: Num = sum(saved(i, recompute if recompute != FULL else NONE) for i in layer_rows)
    head_rows = [
        replace(i, tokens=ALL_TOKENS) for i in table if not i.per_layer and i.layer_kind != EMBEDDING
    ]
    head = sum(saved(i, NONE) for i in head_rows) + batch * context * model.vocab * itemsize
    if recompute == FULL:
        kept = layer_input_bytes(model, batch, context, itemsize)
        total = L * kept + per_layer + head
    else:
        kept = per_layer
        total = L * per_layer + head
    return {"per_layer": per_layer, "kept_per_layer": kept, "head": head, "total": total}


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
    max_context: int | None

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
            "max_context": self.max_context,
        }


def train_memory(
    model: ModelConfig,
    batch: int,
    context: int,
    prec: TrainPrecision,
    capacity_bytes: float | None,
    *,
    fused: bool = True,
    recompute: str = NONE,
) -> TrainMemory:
    """Weights, gradients, optimizer state and activations of one training step.

    >>> from attnroof.model.config import builtin
    >>> m = train_memory(builtin("llama-3.1-8b"), 1, 8192, TrainPrecision(), 141e9)
    >>> m.optimizer_bytes == 12 * builtin("llama-3.1-8b").params(), m.fits
    (True, False)
    """
    n = params(model)
    states = n * (prec.weight_itemsize + prec.grad_itemsize + prec.optimizer_bytes_per_param)

    def act(b: int, c: int) -> dict[str, Num]:
        return activation_bytes(model, b, c, prec.itemsize, fused=fused, recompute=recompute)

    a = act(batch, context)
    if capacity_bytes is None:
        fits, max_batch, max_context = None, None, None
    else:
        fits = states + a["total"] <= capacity_bytes
        per_batch = act(1, context)["total"]  # every activation grows with the batch
        max_batch = max(0, int((capacity_bytes - states) // per_batch))
        max_context = _largest(lambda c: states + act(batch, c)["total"] <= capacity_bytes)
    return TrainMemory(
        weights_bytes=n * prec.weight_itemsize,
        gradient_bytes=n * prec.grad_itemsize,
        optimizer_bytes=n * prec.optimizer_bytes_per_param,
        activation_bytes=a["total"],
        activation_bytes_per_layer=a["kept_per_layer"],
        capacity_bytes=capacity_bytes,
        fits=fits,
        max_batch=max_batch,
        max_context=max_context,
    )
