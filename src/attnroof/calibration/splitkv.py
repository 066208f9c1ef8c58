"""How a fused decode kernel cuts its work: query tiles and split-KV ("flash decoding").

Decode is one new token per query head against a cache of ``s`` keys. A fused kernel computes
the ``group`` query heads of one KV head as the rows of one tile (the measured kernels pass them
as the query axis; FlashAttention packs them so for grouped-query decode), and a tile computes
all of its rows whether they hold a query or not: the work is ``⌈g/m⌉·m`` rows of scores per KV
head, not ``g``. With too few (batch × KV head) tiles to fill the SMs, FlashAttention also
**splits the cache** across thread blocks and combines their partial outputs in a second kernel.

What FlashAttention 2 in torch does (``aten/src/ATen/native/transformers/cuda/flash_attn``:
``flash_api.cpp``, ``flash_fwd_launch_template.h``), used as is for ``sdpa-flash``:

- splits = ``num_splits_heuristic(batch·kv_heads·⌈g/64⌉, 2·SMs, ⌈s/block_n⌉, 128)``, with
  ``block_n`` = 256 keys for d ≤ 64, 128 for d ≤ 128, else 64 (:func:`fa2_splits`);
- the split-KV kernel's tile is 64 query rows (``kBlockM = 64``, every head dimension); the
  one-split kernel's is 128 (``Flash_fwd_kernel_traits<d, 128, …>`` for d ≤ 128 on sm80/sm90);
- the combine kernel reads every split's float32 partial output and log-sum-exp.

For a fused implementation whose kernels are not known here, no padding is assumed, and whether
it splits the cache is a fitted choice (:attr:`attnroof.calibration.physics.Params.split_kv`),
by the same heuristic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FA2_MAX_SPLITS = 128
FA2_CTAS_PER_SM = 2
"""FlashAttention 2 sizes its splits for two 128-thread blocks per SM (``multiProcessorCount * 2``)."""
FA2_SPLIT_ROWS = 64
"""Query rows of a tile in FlashAttention 2's split-KV kernel, and the rows its heuristic counts."""
FP32_BYTES = 4


@dataclass(frozen=True)
class Traits:
    """What is known of one implementation's decode kernels: query rows per tile with one split
    and with several, and whether it splits the cache (``None``: a fitted choice)."""

    tile: int = 1
    split_tile: int = 1
    splits: bool | None = None


KNOWN = {"sdpa-flash": Traits(tile=128, split_tile=FA2_SPLIT_ROWS, splits=True)}
"""Implementations whose decode kernels are read from their source (above)."""


def fa2_block_n(d: int) -> int:
    """Keys per tile of FlashAttention 2's split-KV kernel at head dimension ``d``."""
    return 256 if d <= 64 else 128 if d <= 128 else 64


def fa2_splits(units: int, slots: int, n_blocks: int, max_splits: int = FA2_MAX_SPLITS) -> int:
    """FlashAttention 2's number of cache splits: 1 when ``units`` (batch × heads × query tiles)
    nearly fill the ``slots`` (2 per SM); else the fewest splits whose wave efficiency
    ``w/⌈w⌉`` (``w = units·splits/slots``) is within 85% of the best, among split counts that
    change the keys per split.

    >>> fa2_splits(256, 264, 8)     # 8·32 tiles ≥ 0.8 · 264: no split
    1
    >>> fa2_splits(64, 264, 8)      # 4 splits: 256 of 264 slots (97%), as good as any
    4
    >>> fa2_splits(32, 264, 128)    # 7 splits: 224/264 = 85% ≥ 0.85 × 97% (8 splits)
    7
    """
    if units >= 0.8 * slots:
        return 1
    max_splits = min(max_splits, slots, n_blocks)

    def eligible(n: int) -> bool:
        return n == 1 or math.ceil(n_blocks / n) != math.ceil(n_blocks / (n - 1))

    eff = {}
    for n in range(1, max_splits + 1):
        if eligible(n):
            waves = units * n / slots
            eff[n] = waves / math.ceil(waves)
    best = max(eff.values())
    return next(n for n, e in eff.items() if e >= 0.85 * best)


@dataclass(frozen=True)
class Plan:
    """How one decode call runs: query rows computed per KV head, and cache splits."""

    rows: int
    splits: int


def plan(impl: str, s: int, d: int, units: int, group: int, sms: int | None, split_kv: bool) -> Plan:
    """The rows and splits of a fused decode call: ``units`` = batch × KV heads, ``group``
    query heads on each; ``split_kv`` applies where the implementation's choice is not known.
    The kernels of :data:`KNOWN` are CUDA kernels: on a device with no SM count (a CPU) nothing
    is assumed of them.

    >>> plan("sdpa-flash", 16384, 128, 8 * 32, 1, 132, False)   # 256 tiles: one split, 128 rows
    Plan(rows=128, splits=1)
    >>> plan("sdpa-flash", 16384, 128, 8 * 8, 4, 132, False)    # 64 tiles: 4 splits of 64 rows
    Plan(rows=64, splits=4)
    >>> plan("sdpa-cudnn", 16384, 128, 8 * 8, 4, 132, True)     # unknown kernels: no padding
    Plan(rows=4, splits=4)
    >>> plan("sdpa-flash", 16384, 128, 8 * 8, 4, None, False)   # no SM count: a CPU
    Plan(rows=4, splits=1)
    """
    traits = KNOWN.get(impl, Traits()) if sms else Traits()  # CUDA kernels: a GPU's SM count known
    split = traits.splits if traits.splits is not None else split_kv
    splits = 1
    if split and sms:
        tiles = units * math.ceil(group / FA2_SPLIT_ROWS)
        splits = fa2_splits(tiles, FA2_CTAS_PER_SM * sms, math.ceil(s / fa2_block_n(d)))
    m = traits.split_tile if splits > 1 else traits.tile
    return Plan(math.ceil(group / m) * m, splits)


def partial_bytes(p: Plan, units: int, group: int, d: int) -> float:
    """Bytes of the float32 partial outputs and log-sum-exps the split kernel writes (and the
    combine kernel reads): one ``d``-vector and one scalar per query head, per split.

    >>> partial_bytes(Plan(64, 4), 64, 4, 128)      # 4 splits × 256 heads × 129 × 4 B
    528384
    """
    return p.splits * units * group * (d + 1) * FP32_BYTES if p.splits > 1 else 0
