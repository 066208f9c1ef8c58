"""The calibrated time of one kernel call: the roofline with a handful of physical parameters.

For each stage (kernel) of the cost that the implementation really runs::

    t = Σ_stages [ t0 + smax( W / (η_c · P), B / (η · BW) ) ]

- ``t0`` (s): the fixed cost of one kernel call (launch, host dispatch, prologue);
- ``W``: the FLOPs the kernel really does: a causal fused kernel computes **whole diagonal
  tiles** of ``block`` × ``block`` scores (``(nb + 1)/(2·nb)`` of the square, not ½), and work is
  rounded up to **full waves** over the device's SM count where it is known; fused decode
  computes **whole query tiles** (FlashAttention 2: 128 rows per KV head, 64 when it splits the
  cache, for a group of 1 to 8 query heads) and, split, writes float32 partials that a second
  kernel combines (:mod:`attnroof.calibration.splitkv`; ``split_kv``, a fitted yes/no where the
  implementation's kernels are not known);
- ``η_c``: compute efficiency, a fraction of the measured matmul peak ``P``; for attention it
  depends on the head dimension (one value per head dimension seen, log-interpolated between
  them, held at the nearest outside);
- ``η``: memory efficiency, a fraction of the measured copy bandwidth ``BW`` — ``η_m`` for the
  kernel's own traffic; for the element-wise passes of unfused implementations ``η_pass`` for
  the softmax, one value per softmax row length (the keys, ``s``) seen and log-interpolated like
  ``η_c`` (a row reduction's efficiency depends on how long its rows are), and ``η_mask`` for
  the causal mask pass (``masked_fill`` of a broadcast boolean mask: no reduction, its own
  efficiency); a case whose bytes fit in the L2 cache (timed without flushing it) reads
  ``l2_speedup`` times faster;
- ``smax(a, b) = (aᵖ + bᵖ)^(1/p)``: a smooth maximum; ``p`` (``sharpness``) → ∞ is the plain max.

Everything here is plain arithmetic on floats; the fit (:mod:`attnroof.calibration.fit`) finds
the parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attnroof.calibration import splitkv
from attnroof.cost import Cost
from attnroof.dtypes import dtype
from attnroof.ops import attention, decode, linear
from attnroof.profiles.kernels import diagonal_factor

ATTENTION, DECODE, LINEAR = "attention", "decode", "linear"
KINDS = (ATTENTION, DECODE, LINEAR)
OPERATOR_CLASS = {ATTENTION: "attention", DECODE: "attention", LINEAR: "gemm"}
"""The operator table's kind (:data:`attnroof.operators.KINDS`) of each measured kind."""

UNFUSED = frozenset({"eager", "eager-gqa", "sdpa-math"})
MASKING = frozenset({"eager", "sdpa-math"})
NOT_MODELLED = frozenset({"sdpa-math"})
"""Implementations whose stage table does not match what runs: torch's math backend scales Q
and K in separate passes, builds the causal mask in the query dtype and adds safe-softmax
passes (about 16 bytes per score where the model counts 8). They are not calibrated."""

PASS_STAGES = frozenset({"softmax", "mask"})
"""Element-wise passes of unfused attention: memory-bound at their own efficiency."""
KERNEL, PASS, MASK = "kernel", "pass", "mask"
"""A kernel's role: its own traffic at ``η_m``, a softmax pass at ``η_pass``, the mask at ``η_mask``."""

CAUSAL_BLOCKS = (64, 128, 256)
"""Tile sizes (query rows = key columns) tried for a causal fused kernel's diagonal tiles."""
GEMM_TILE = 128
"""Output tile side of a GEMM (rows and columns), for wave quantization."""

SM_COUNT = {"H200 SXM": 132, "H100 SXM": 132, "H100 PCIe": 114, "A100 SXM 80GB": 108}
"""Streaming multiprocessors per catalog device (NVIDIA's specifications), where known."""
L2_BYTES = {"H200 SXM": 60e6, "H100 SXM": 50e6, "H100 PCIe": 50e6, "A100 SXM 80GB": 40e6}
"""L2 cache size (bytes) per catalog device, where known (H200: 60 MB, as CUDA reports)."""

DEFAULT_SHARPNESS = 4.0
"""``p`` of the smooth maximum when the data cannot fit it (no points near the ridge)."""


@dataclass(frozen=True)
class Params:
    """One implementation's fitted parameters (SI units; efficiencies are fractions of a roof)."""

    t0_s: float
    eta_compute: Mapping[int, float]
    """Compute efficiency per head dimension (one entry, key 0, for a GEMM)."""
    eta_memory: float
    eta_pass: Mapping[int, float]
    """Softmax pass efficiency per softmax row length (keys; one entry, key 0, for all)."""
    sharpness: float
    l2_speedup: float
    causal_block: int
    eta_mask: float | None = None
    """Mask pass efficiency; ``None``: the softmax's at the same row length."""
    split_kv: bool = False
    """Fused decode splits the cache over thread blocks (where the implementation's own choice
    is not known: :mod:`attnroof.calibration.splitkv`)."""

    def eta_c(self, d: int) -> float:
        """η_c at head dimension ``d``: log-linear between the head dimensions fitted."""
        return log_interp(self.eta_compute, d)

    def eta_p(self, row: int) -> float:
        """η_pass at softmax row length ``row``: log-linear between the row lengths fitted."""
        return log_interp(self.eta_pass, row)

    def eta_of(self, k: Kernel) -> float:
        """The memory efficiency of kernel ``k`` by its role."""
        if k.role == MASK and self.eta_mask is not None:
            return self.eta_mask
        return self.eta_memory if k.role == KERNEL else self.eta_p(k.row)


def log_interp(table: Mapping[int, float], x: int) -> float:
    """``table`` at ``x``: log-linear in both between its keys, the nearest key's value outside.

    >>> log_interp({64: 0.4, 256: 0.8}, 128)      # halfway in log: √(0.4 · 0.8)
    0.565685424949238
    """
    keys = sorted(table)
    if len(keys) == 1 or x <= keys[0]:
        return table[keys[0]]
    if x >= keys[-1]:
        return table[keys[-1]]
    hi = next(k for k in keys if k >= x)
    lo = max(k for k in keys if k < x)
    w = math.log(x / lo) / math.log(hi / lo)
    return math.exp((1 - w) * math.log(table[lo]) + w * math.log(table[hi]))


@dataclass(frozen=True)
class Roofs:
    """The roofs the efficiencies are fractions of, and what is known of the device."""

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    sms: int | None = None
    l2_bytes: float | None = None


def cost_of(kind: str, impl: str, shape: Mapping[str, Any], dt: str) -> Cost:
    """The stage table an implementation runs, for a results record's ``shape``: unfused for
    eager, fused for the others; ``heads`` are query heads, ``group`` of them per KV head."""
    item = dtype(dt).itemsize
    fused = impl not in UNFUSED
    if kind == LINEAR:
        return linear(shape["n"], shape["k"], shape["m"], itemsize=item)
    group = shape.get("group", 1)
    kw: dict[str, Any] = dict(
        fused=fused, group=group, itemsize=item, batch=shape["batch"], kv_heads=shape["heads"] // group
    )
    if kind == ATTENTION:
        return attention(
            shape["s"], shape["d"], causal=bool(shape["causal"]), mask_pass=impl in MASKING, **kw
        )
    return decode(shape["s"], shape["d"], **kw)


def wave_factor(units: int, sms: int | None) -> float:
    """Work rounded up to full waves of ``units`` tiles over ``sms`` SMs, over the work itself.

    >>> wave_factor(264, 132), wave_factor(133, 132)
    (1.0, 1.9849624060150375)
    """
    if not sms or units <= 0:
        return 1.0
    return math.ceil(units / sms) * sms / units


@dataclass(frozen=True)
class Kernel:
    """One stage as the model sees it: work, bytes, and what changes its efficiency: its
    ``role`` (:data:`KERNEL`, :data:`PASS`, :data:`MASK`) and, for a pass, its row length."""

    flops: float
    bytes: float
    role: str = KERNEL
    row: int = 0


def stage_role(name: str) -> str:
    """The role of a cost stage by its name: the softmax and mask passes, or a kernel."""
    return MASK if name == "mask" else PASS if name in PASS_STAGES else KERNEL


@dataclass(frozen=True)
class Features:
    """What the time of one call depends on, for given roofs and causal block."""

    kernels: tuple[Kernel, ...]
    d: int
    in_l2: bool


def features(
    kind: str, impl: str, shape: Mapping[str, Any], dt: str, roofs: Roofs, block: int, split_kv: bool = False
) -> Features:
    """The kernels of one call with the work they really do (diagonal tiles, full waves; for
    fused decode, whole query tiles and the split-KV plan of :mod:`attnroof.calibration.splitkv`)."""
    cost = cost_of(kind, impl, shape, dt)
    in_l2 = roofs.l2_bytes is not None and float(cost.bytes) <= roofs.l2_bytes
    if kind == DECODE and impl not in UNFUSED:
        return Features(decode_kernels(impl, shape, cost, roofs, split_kv), int(shape["d"]), in_l2)
    factor = 1.0
    if kind == LINEAR:
        units = math.ceil(shape["n"] / GEMM_TILE) * math.ceil(shape["m"] / GEMM_TILE)
        factor = wave_factor(units, roofs.sms)
    elif kind == ATTENTION and impl not in UNFUSED:
        s = shape["s"]
        if shape["causal"]:
            factor = diagonal_factor(s, block)
        factor *= wave_factor(shape["batch"] * shape["heads"] * math.ceil(s / block), roofs.sms)
    row = int(shape.get("s", 0))
    kernels = tuple(
        Kernel(float(st.flops) * factor, float(st.bytes), stage_role(st.name), row) for st in cost.stages
    )
    return Features(kernels, int(shape.get("d", 0)), in_l2)


def call_features(
    kind: str, impl: str, shape: Mapping[str, Any], dt: str, roofs: Roofs, p: Params
) -> Features:
    """:func:`features` with the whole-number choices of fitted parameters ``p``."""
    return features(kind, impl, shape, dt, roofs, p.causal_block, p.split_kv)


def decode_kernels(
    impl: str, shape: Mapping[str, Any], cost: Cost, roofs: Roofs, split_kv: bool
) -> tuple[Kernel, ...]:
    """A fused decode call: its kernel on whole query tiles, writing float32 partials when it
    splits the cache, then the kernel that combines them."""
    g = shape.get("group", 1)
    units = shape["batch"] * shape["heads"] // g
    pl = splitkv.plan(impl, shape["s"], shape["d"], units, g, roofs.sms, split_kv)
    partial = float(splitkv.partial_bytes(pl, units, g, shape["d"]))
    (st,) = cost.stages
    main = Kernel(float(st.flops) * pl.rows / g, float(st.bytes) + partial)
    return (main, Kernel(0.0, partial)) if pl.splits > 1 else (main,)


def predict(f: Features, p: Params, roofs: Roofs) -> float:
    """Expected time (s) of one call with features ``f``."""
    eta_c = p.eta_c(f.d)
    speed = p.l2_speedup if f.in_l2 else 1.0
    total = 0.0
    for k in f.kernels:
        a = k.flops / (eta_c * roofs.peak_flops_per_s)
        b = k.bytes / (p.eta_of(k) * speed * roofs.bandwidth_bytes_per_s)
        total += p.t0_s + smooth_max(a, b, p.sharpness)
    return total


def smooth_max(a: float, b: float, p: float) -> float:
    """``(aᵖ + bᵖ)^(1/p)``, computed without overflow; ``p = inf`` is ``max(a, b)``.

    >>> smooth_max(3.0, 4.0, 2.0), smooth_max(3.0, 4.0, math.inf)
    (5.0, 4.0)
    """
    m = max(a, b)
    if m == 0 or math.isinf(p):
        return m
    return m * ((a / m) ** p + (b / m) ** p) ** (1 / p)
