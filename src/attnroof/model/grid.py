"""A whole model on a grid of batch sizes × contexts in one evaluation of its layer table.

The layer table's costs are plain arithmetic, so feeding numpy arrays of batch (as a column)
and context (as a row) costs every operator at every grid point at once; placing each kernel
on the roof is element-wise too. The numbers equal :func:`attnroof.model.analysis.analyse`'s
at each point (``tests/test_model_grid.py`` checks it); what a grid leaves out are the per-point
searches (largest batch, largest context).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnroof import arrays
from attnroof.model.costs import model_ops
from attnroof.model.layers import DECODE, Precision, weight_bytes
from attnroof.model.memory import activation_bytes, kv_cache_bytes_per_sequence
from attnroof.model.spec import ModelConfig
from attnroof.ops.experts import UNIFORM, Routing
from attnroof.ops.latent import ABSORBED
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT
from attnroof.roofline import COMPUTE, MEMORY, Roof, place


@dataclass(frozen=True, slots=True)
class Grid:
    """One step at every (batch, context): arrays of shape (len(batch), len(context)), SI units."""

    batch: Any
    context: Any
    flops: Any
    bytes: Any
    time_s: Any
    memory_bound_share: Any
    attention_share: Any
    tokens_per_s: Any | None
    """Decode: batch / step time; None for prefill (the step time is the time to first token)."""
    memory_bytes: Any
    """Weights + KV cache + activations."""
    fits: Any | None
    """memory_bytes ≤ capacity, where a capacity is given."""


def grid(
    model: ModelConfig,
    phase: str,
    batch: Any,
    context: Any,
    roof: Roof,
    prec: Precision | None = None,
    *,
    capacity_bytes: float | None = None,
    fused: bool = True,
    softmax_flops_per_element: float = SOFTMAX_FLOPS_PER_ELEMENT,
    routing: Routing | str = UNIFORM,
    latent_form: str = ABSORBED,
) -> Grid:
    """``model``'s ``phase`` step at every batch × context, from one pass over its layer table.

    >>> from attnroof.model.config import builtin
    >>> g = grid(builtin("llama-3.1-8b"), "decode", [1, 64], [8192], Roof(989e12, 4.8e12))
    >>> g.tokens_per_s.round().tolist()      # batch 1: 1 / ((15.0 GB weights + 1.07 GB KV) / 4.8 TB/s)
    [[298.0], [3637.0]]
    """
    import numpy as np

    p = prec or Precision()
    b = np.asarray(batch, dtype=np.float64).reshape(-1, 1)
    c = np.asarray(context, dtype=np.float64).reshape(1, -1)
    zero = np.zeros(np.broadcast_shapes(b.shape, c.shape))
    flops, nbytes, time, mem_time, attn_time = zero, zero, zero, zero, zero
    ops = model_ops(
        model, phase, b, c, p, fused=fused, softmax_flops_per_element=softmax_flops_per_element,
        routing=routing, latent_form=latent_form,
    )  # fmt: skip
    for op in ops:
        for stage, resident in zip(op.cost, op.resident(roof), strict=True):
            pl = place((stage.flops, stage.bytes), roof, resident)
            flops = flops + op.count * pl.flops
            nbytes = nbytes + op.count * pl.bytes
            time = time + op.count * pl.time_s
            mem_time = mem_time + op.count * arrays.where(pl.limiter == MEMORY, pl.time_s, 0.0)
            if op.attention:
                attn_time = attn_time + op.count * pl.time_s
    used = (
        weight_bytes(model, p)
        + kv_cache_bytes_per_sequence(model, c, p.kv_itemsize) * b
        + activation_bytes(model, phase, b, c, p, fused=fused)
    )
    return Grid(
        batch=b,
        context=c,
        flops=flops,
        bytes=nbytes,
        time_s=time,
        memory_bound_share=mem_time / time,
        attention_share=attn_time / time,
        tokens_per_s=b / time if phase == DECODE else None,
        memory_bytes=used + zero,
        fits=None if capacity_bytes is None else used + zero <= capacity_bytes,
    )


GRID_BYTES_PER_POINT = {"text": 400, "json": 1600}
"""A grid point's memory beyond its operators' arrays: the running sums (FLOPs, bytes, time,
memory-bound and attention time), each kernel's placement while it is summed, and the answer's
own arrays: some 40 float64 values for a table; for ``--json`` each figure again as a Python
float in a list, and its text (measured: 290 and 1,550 bytes a point, Llama-3.1-8B decode)."""
GRID_BYTES_PER_STAGE_POINT = 40
"""Each stage's FLOPs and bytes at every point, held for the whole pass over the layer table
(two float64 values, and their product by the layer count; measured: ~30 bytes a stage a point,
DeepSeek-V3.2 prefill, 34 stages)."""


def grid_bytes(model: ModelConfig, phase: str, points: int, prec: Precision | None = None, *,
               json: bool = False, **options: Any) -> float:  # fmt: skip
    """The most memory a grid of ``points`` batch × context points takes (its peak, within 3× of
    the measured RSS for every built-in model): :data:`GRID_BYTES_PER_POINT` and
    :data:`GRID_BYTES_PER_STAGE_POINT` for each stage of the model's layer table.

    >>> from attnroof.model.config import builtin
    >>> grid_bytes(builtin("llama-3.1-8b"), "decode", 1_000_000)       # 15 stages: 400 + 15 × 40 B a point
    1000000000
    """
    stages = sum(len(op.cost.stages) for op in model_ops(model, phase, 1, 1, prec or Precision(), **options))
    return points * (GRID_BYTES_PER_POINT["json" if json else "text"] + GRID_BYTES_PER_STAGE_POINT * stages)


def first_true_batch(g: Grid, mask: Any) -> list[int | None]:
    """Per context (column), the first batch of the grid where ``mask`` holds (None: none does)."""
    import numpy as np

    batches = g.batch[:, 0]
    return [int(batches[np.argmax(col)]) if col.any() else None for col in np.asarray(mask).T]


def summary(g: Grid) -> dict[str, list[int | None]]:
    """Per context: the first batch whose step is compute-bound (under half its time in
    memory-bound kernels, as a single step's limiter says), and the largest batch that fits."""
    import numpy as np

    out = {"compute_bound_from_batch": first_true_batch(g, g.memory_bound_share < 0.5)}
    if g.fits is not None:
        batches = g.batch[:, 0]
        out["largest_fitting_batch"] = [
            int(batches[col].max()) if col.any() else None for col in np.asarray(g.fits).T
        ]
    return out


def grid_json(g: Grid) -> dict[str, Any]:
    """Every array as nested lists (rows: batch, columns: context), with :func:`summary`."""
    import numpy as np

    arrays_ = {
        "flops": g.flops,
        "bytes": g.bytes,
        "time_s": g.time_s,
        "tokens_per_s": g.tokens_per_s,
        "memory_bound_share": g.memory_bound_share,
        "attention_share": g.attention_share,
        "memory_bytes": g.memory_bytes,
        "fits": g.fits,
    }
    return {
        "batch": [int(b) for b in g.batch[:, 0]],
        "context": [int(c) for c in g.context[0]],
        **{k: None if v is None else np.asarray(v).tolist() for k, v in arrays_.items()},
        "limiter": np.where(g.memory_bound_share >= 0.5, MEMORY, COMPUTE).tolist(),
        **summary(g),
    }
