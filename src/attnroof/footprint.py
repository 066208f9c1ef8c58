"""Memory footprint of the materialised score matrix (part E1).

Unfused attention writes an s × s matrix per head to device memory (the scores S, then the
probabilities P in their place); training keeps one of them per head for the backward pass. The
footprint counts that one matrix, as part E1 does. Fused attention never materialises it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from attnroof import validate
from attnroof.cost import Num
from attnroof.dtypes import BF16_BYTES


def score_matrix_bytes(s: Num, itemsize: Num = BF16_BYTES) -> Num:
    """Bytes of one head's s × s score matrix: s²·itemsize.

    >>> score_matrix_bytes(8192)            # 8192² × 2 B
    134217728
    """
    validate.size("s", s)
    validate.positive("itemsize", itemsize)
    return s * s * itemsize


@dataclass(frozen=True, slots=True)
class Footprint:
    """Score-matrix bytes for a shape, against a device's memory capacity."""

    s: int
    itemsize: float
    batch: int
    heads: int
    layers: int
    bytes_per_head: float
    bytes: float
    capacity_bytes: float | None
    fraction_of_capacity: float | None
    fits: bool | None
    s_max_fits: int | None
    """Largest s whose score matrices, for the same batch, heads and layers, fit in capacity."""

    def to_json(self) -> dict[str, Any]:
        return {
            "s": self.s,
            "itemsize": self.itemsize,
            "batch": self.batch,
            "heads": self.heads,
            "layers": self.layers,
            "bytes_per_head": self.bytes_per_head,
            "bytes": self.bytes,
            "capacity_bytes": self.capacity_bytes,
            "fraction_of_capacity": self.fraction_of_capacity,
            "fits": self.fits,
            "s_max_fits": self.s_max_fits,
        }


def footprint(
    s: int,
    *,
    itemsize: float = BF16_BYTES,
    batch: int = 1,
    heads: int = 1,
    layers: int = 1,
    capacity_bytes: float | None = None,
) -> Footprint:
    """Score matrices of ``batch × heads × layers`` heads at sequence length ``s``.

    >>> f = footprint(8192, batch=8, heads=32, capacity_bytes=192e9)
    >>> round(f.bytes / 1e9, 1), round(f.fraction_of_capacity, 2)     # part E1
    (34.4, 0.18)
    """
    validate.sizes(batch=batch, heads=heads, layers=layers)
    if capacity_bytes is not None:
        validate.positive("capacity_bytes", capacity_bytes)
    per_head = score_matrix_bytes(s, itemsize)
    copies = batch * heads * layers
    total = per_head * copies
    if capacity_bytes is None:
        return Footprint(s, itemsize, batch, heads, layers, per_head, total, None, None, None, None)
    s_max = (
        math.isqrt(int(capacity_bytes // (itemsize * copies))) if capacity_bytes >= itemsize * copies else 0
    )
    while score_matrix_bytes(s_max + 1, itemsize) * copies <= capacity_bytes:  # isqrt of a floor: check
        s_max += 1
    return Footprint(
        s,
        itemsize,
        batch,
        heads,
        layers,
        per_head,
        total,
        capacity_bytes,
        total / capacity_bytes,
        total <= capacity_bytes,
        s_max,
    )
