"""A kernel's forecast: the bound's arithmetic with a profile's efficiencies applied.

The bound of one kernel is ``max(F/P, B/BW)``. Its forecast, kind by kind::

    GEMM       launch + max( F·pad·waves / (η·P),  B / (μ·BW) )
                   pad   = ⌈t/t₀⌉·t₀ · ⌈m/m₀⌉·m₀ / (t·m)        whole output tiles (t₀ × m₀; t₀ no
                                                                more than the tokens' power of two, ≥ 16)
                   waves = ⌈tiles/SMs⌉·SMs / tiles              whole waves, once the tiles fill the SMs
                   η     = ceiling · k / (k + k_half)            each tile's prologue, over its depth
    attention  launch + max( F·diag / (η·P),  B / (μ·BW) )
                   diag  = (nb + 1)/nb, nb = ⌈s/block⌉           causal: whole diagonal tiles
                   η     = ceiling(d) · s / (s + s_half)         per head dimension; short keys
    decode     launch + max( F / P,  B / (δ·BW) )               split-KV attention: memory-bound
    memory     launch + B / (φ·BW)                              element-wise passes, norms, copies

F, B: the stage's FLOPs and bytes; P, BW: the roof's peak and bandwidth; the Greek letters are
fractions of those roofs (≤ 1), ``launch`` a fixed cost ≥ 0, ``pad``, ``waves``, ``diag`` ≥ 1.
So each forecast is at least its bound, and with the identity profile (every fraction 1, every
cost 0, tiles of one element, no SM count) it *is* the bound: the same two quotients, the same max.
Every function takes numbers or numpy arrays alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from attnroof import arrays
from attnroof.cost import Cost, Num
from attnroof.ops.attention import FUSED, PV, QK
from attnroof.profiles import IDENTITY, Attention, Gemm, Memory, Profile
from attnroof.roofline import Roof, loop_resident

GEMM, ATTENTION, DECODE, MEMORY = "gemm", "attention", "decode", "memory"


def _ceil(x: Num) -> Num:
    if arrays.is_scalar(x):
        return math.ceil(x)
    import numpy as np

    return np.ceil(x)


def diagonal_factor(s: Num, block: int) -> Num:
    """Share of a causal s × s score square a kernel of ``block``-row tiles computes, over the ½
    the bound counts: ``(nb + 1)/nb`` for ``nb = ⌈s/block⌉`` tiles a side (1 for ``block`` 0).

    >>> diagonal_factor(512, 128)    # 4 tiles a side: 10 of 16 computed, 5/8 over 1/2
    1.25
    """
    if not block:
        return 1.0
    nb = _ceil(s / block)
    return (nb + 1) / nb


def wave_factor(units: Num, sms: int | None) -> Num:
    """Work rounded up to whole waves of ``units`` tiles over ``sms`` SMs, over the work itself;
    1 while the tiles do not fill the SMs once (a library then splits the depth) or ``sms`` is
    unknown.

    >>> wave_factor(264, 132), wave_factor(133, 132), wave_factor(32, 132)
    (1.0, 1.9849624060150375, 1.0)
    """
    if not sms:
        return 1.0
    whole = _ceil(units / sms) * sms / units
    return arrays.where(units >= sms, whole, 1.0)


def tile_factor(t: Num, m: Num, tile_t: int, tile_m: int) -> Num:
    """Output rows and columns rounded up to whole tiles, over the output itself.

    >>> tile_factor(100, 4096, 128, 128)     # 100 tokens fill 100/128 of one tile row
    1.28
    """
    return _ceil(t / tile_t) * tile_t * (_ceil(m / tile_m) * tile_m) / (t * m)


def log_interp(table: Mapping[int, float], x: Num) -> Num:
    """``table`` at ``x``: log-linear in both between its keys, the nearest key's value outside.

    >>> round(log_interp({64: 0.4, 256: 0.8}, 128), 4)      # halfway in log: √(0.4 · 0.8)
    0.5657
    """
    keys = sorted(table)
    if len(keys) == 1:
        return table[keys[0]]
    if arrays.is_scalar(x):  # plain arithmetic: a command of one shape never pays numpy's import
        x = min(max(x, keys[0]), keys[-1])
        hi = next(k for k in keys if k >= x)
        lo = max((k for k in keys if k <= x), default=hi)
        if hi == lo:
            return table[hi]
        w = (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return math.exp((1 - w) * math.log(table[lo]) + w * math.log(table[hi]))
    import numpy as np

    lx = np.log(np.clip(np.asarray(x, dtype="float64"), keys[0], keys[-1]))
    out = np.exp(np.interp(lx, np.log(keys), np.log([table[k] for k in keys])))
    return float(out) if arrays.is_scalar(x) else out


MMA_ROWS = 16
"""The fewest rows a tensor-core tile computes (PTX's ``mma.m16n8k16``): a GEMM of a few tokens
runs tiles of the tokens rounded up to a power of two, from 16 up to the profile's tile."""


def token_tile(t: Num, tile_t: int) -> Num:
    """The rows of the tiles a GEMM of ``t`` tokens runs: the profile's ``tile_t``, or fewer for
    fewer tokens — the tokens' next power of two, at least :data:`MMA_ROWS` (libraries pick
    small tiles, or a GEMV, for skinny GEMMs); ``tile_t`` itself when it is 1 (the identity).

    >>> token_tile(1, 128), token_tile(24, 128), token_tile(4096, 128), token_tile(5, 1)
    (16, 32, 128, 1)
    """
    if tile_t <= 1:
        return tile_t
    if arrays.is_scalar(t):
        return min(tile_t, max(MMA_ROWS, 1 << max(0, math.ceil(math.log2(t)))))
    import numpy as np

    return np.minimum(tile_t, np.maximum(MMA_ROWS, 2 ** np.ceil(np.log2(np.maximum(t, 1)))))


class Parts(NamedTuple):
    """A kernel's forecast as the bound's own arithmetic on what a real kernel does: its fixed
    cost, the FLOPs the compute roof sees (F·pad·waves/η) and the bytes the memory roof sees
    (B/μ, of which R/μ at the cache's bandwidth). Its time on ``roof`` is
    ``launch + roof.time(flops, bytes, resident)``: with the identity profile, the bound itself."""

    launch: Num
    flops: Num
    bytes: Num
    resident: Num

    def time(self, roof: Roof) -> Num:
        return self.launch + Roof.time(roof, self.flops, self.bytes, self.resident)

    def __add__(self, other: Parts) -> Parts:  # type: ignore[override]
        return Parts(*(a + b for a, b in zip(self, other, strict=True)))


def gemm_parts(
    g: Gemm, sms: int, roof: Roof, flops: Num, nbytes: Num, t: Num, k: Num, m: Num, resident: Num = 0
) -> Parts:
    """A GEMM of ``t`` tokens × depth ``k`` × ``m`` outputs (its FLOPs and bytes as the bound
    counts them) as a real kernel takes it."""
    rows = token_tile(t, g.tile_t)
    tiles = _ceil(t / rows) * _ceil(m / g.tile_m)
    work = flops * tile_factor(t, m, rows, g.tile_m) * wave_factor(tiles, sms)
    eta = g.ceiling * k / (k + g.k_half)
    return Parts(g.launch_s, work / eta, nbytes / g.memory, resident / g.memory)


def attention_parts(
    a: Attention, roof: Roof, flops: Num, nbytes: Num, d: int, s: Num, causal: bool, backward: bool = False,
    resident: Num = 0,
) -> Parts:  # fmt: skip
    """Fused attention (prefill or training; ``backward``: its backward kernel) at head
    dimension ``d`` over ``s`` keys."""
    work = flops * (diagonal_factor(s, a.block) if causal else 1.0)
    eta = log_interp(a.ceiling, d) * s / (s + a.s_half) * (a.backward if backward else 1.0)
    return Parts(a.launch_s, work / eta, nbytes / a.memory, resident / a.memory)


def decode_parts(a: Attention, roof: Roof, flops: Num, nbytes: Num, resident: Num = 0) -> Parts:
    """Attention of a few queries against a KV cache: the cache's stream at ``a.decode`` of the
    memory roof."""
    return Parts(a.launch_s, flops, nbytes / a.decode, resident / a.decode)


def memory_parts(mem: Memory, roof: Roof, flops: Num, nbytes: Num, resident: Num = 0) -> Parts:
    """An element-wise pass, norm or copy: its bytes at ``mem.fraction`` of the memory roof (its
    FLOPs on the compute roof, which they never reach in practice)."""
    return Parts(mem.launch_s, flops, nbytes / mem.fraction, resident / mem.fraction)


def kernel_parts(
    profile: Profile, kind: str, roof: Roof, flops: Num, nbytes: Num, resident: Num = 0, **shape: Any
) -> Parts:
    """One kernel by its kind (:data:`GEMM` with ``t, k, m, sms``; :data:`ATTENTION` with ``d, s,
    causal``; :data:`DECODE`; :data:`MEMORY`; any other: the GEMM's ceiling and the memory's
    fraction alone); ``resident`` of its bytes at the cache's bandwidth, as the bound charges them
    (the same two levels, each at the profile's fraction)."""
    if kind == GEMM and "t" in shape:
        g = profile.gemm
        return gemm_parts(
            g, shape.get("sms", 0), roof, flops, nbytes, shape["t"], shape["k"], shape["m"], resident
        )
    if kind == GEMM:  # a GEMM of unknown tiles (grouped experts): its ceiling alone
        g = profile.gemm
        return Parts(g.launch_s, flops / g.ceiling, nbytes / g.memory, resident / g.memory)
    if kind == ATTENTION:
        a = profile.attention
        causal, back = shape.get("causal", False), shape.get("backward", False)
        return attention_parts(a, roof, flops, nbytes, shape["d"], shape["s"], causal, back, resident)
    if kind == DECODE:
        return decode_parts(profile.attention, roof, flops, nbytes, resident)
    return memory_parts(profile.memory, roof, flops, nbytes, resident)


@dataclass(frozen=True, slots=True)
class ForecastRoof(Roof):
    """A roof whose kernels take the time real ones do: the same peaks and bandwidth as the
    bound's roof, with ``profile``'s efficiencies applied kernel by kernel (``sms``: the
    device's SM or CU count, for whole waves). Everything that times kernels on a roof — a
    model's step, a plan's stages, a serving engine's steps — forecasts when handed one."""

    profile: Profile = IDENTITY
    sms: int = 0

    @classmethod
    def over(
        cls, roof: Roof, profile: Profile, sms: int | None = None, *, step: bool = False
    ) -> ForecastRoof:
        """``roof`` forecast by ``profile``; ``sms`` by default the profile's count for the
        roof's device (none in the identity profile); ``step``: for the kernels of a step of many,
        each launched back to back (:meth:`Profile.in_step`), not one timed alone."""
        n = profile.sms(roof.device) if sms is None else sms
        p = profile.in_step() if step else profile
        return cls(
            roof.peak_flops_per_s, roof.bandwidth_bytes_per_s, roof.device, roof.dtype,
            roof.cache_bytes, roof.cache_bandwidth_bytes_per_s, profile=p, sms=n,
        )  # fmt: skip

    @property
    def forecasts(self) -> bool:
        return True

    @property
    def bound(self) -> Roof:
        """The bound's roof under this forecast."""
        return Roof(
            self.peak_flops_per_s, self.bandwidth_bytes_per_s, self.device, self.dtype,
            self.cache_bytes, self.cache_bandwidth_bytes_per_s,
        )  # fmt: skip

    def kernel_parts(
        self, flops: Num, nbytes: Num, kernel: Mapping[str, Any] | None = None, resident: Num = 0
    ) -> Parts:
        """The profile's :class:`Parts` for the kernel, its ``resident`` bytes at the cache's
        bandwidth as the bound has them (the identity profile gives the bound back, two levels and
        all)."""
        shape = dict(kernel or {})
        kind = shape.pop("kernel", "")
        shape.setdefault("sms", self.sms)
        return kernel_parts(self.profile, kind, self, flops, nbytes, resident, **shape)

    def kernel_time(
        self, flops: Num, nbytes: Num, kernel: Mapping[str, Any] | None = None, resident: Num = 0
    ) -> Num:
        return self.kernel_parts(flops, nbytes, kernel, resident).time(self)


def attention_kernels(
    cost: Cost, *, queries: Num, keys: Num, d: int, units: Num, causal: bool
) -> list[dict[str, Any]]:
    """The kernel each stage of one attention cost is (the ``attention`` and ``decode``
    commands' stage tables): the fused kernel as fused attention over ``keys`` (``decode`` for a
    query or a few against a cache); unfused, Q·Kᵀ and P·V as GEMMs batched over ``units``
    (batch × heads: ``queries × d → keys`` and ``queries × keys → d`` each) and the softmax and
    mask as memory passes."""
    few = arrays.is_scalar(queries) and queries <= 16
    out: list[dict[str, Any]] = []
    for st in cost.stages:
        if st.name == FUSED:
            out.append(
                {"kernel": DECODE} if few else {"kernel": ATTENTION, "d": d, "s": keys, "causal": causal}
            )
        elif st.name == QK:
            out.append({"kernel": GEMM, "t": queries * units, "k": d, "m": keys})
        elif st.name == PV:
            out.append({"kernel": GEMM, "t": queries * units, "k": keys, "m": d})
        else:
            out.append({"kernel": MEMORY})
    return out


def cost_time(roof: ForecastRoof, cost: Cost, kernels: list[dict[str, Any]]) -> Num:
    """One kernel command's variant (``cost``, each stage the kernel ``kernels[i]``) as its bound
    places it — its stages' work and traffic summed, timed in a loop
    (:func:`attnroof.roofline.loop_resident`) — with each stage's efficiencies and fixed cost:
    Σ launch + max(Σ compute, Σ memory)."""
    total = Parts(0.0, 0.0, 0.0, 0.0)
    for st, k, r in zip(cost.stages, kernels, loop_resident(cost, roof), strict=True):
        total = total + roof.kernel_parts(st.flops, st.bytes, k, r)
    return total.time(roof)
