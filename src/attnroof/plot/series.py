"""The numbers a roofline chart draws, computed from the core formulas (no matplotlib here).

A :class:`Trajectory` is one operator swept over a size (sequence length ``s`` or tokens ``n``):
its intensity (FLOP/byte) and its attainable rate on a roof (FLOP/s) at every size. Nothing is
re-derived: intensities are ``Cost.intensity`` of :func:`attnroof.attention`, :func:`decode` and
:func:`linear` on numpy arrays, rates are :meth:`Roof.attainable`.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnroof.analysis import DEFAULT_SWEEP_S
from attnroof.cost import Cost
from attnroof.dtypes import BF16_BYTES
from attnroof.ops import SOFTMAX_FLOPS_PER_ELEMENT, attention, decode, linear
from attnroof.roofline import Roof

DEFAULT_S = DEFAULT_SWEEP_S
"""Sequence lengths swept by default: the spec's C4 table, extended to 128k."""

DEFAULT_N = (1, 4, 16, 64, 256, 1024, 4096, 16384)
"""Token counts swept for a linear layer by default."""


@dataclass(frozen=True, slots=True)
class Trajectory:
    """One operator over a range of sizes, placed on one roof.

    ``key`` names it for code and tests (``attention-fused``, ``decode-g8``, ``linear``);
    ``label`` names it for people.
    """

    key: str
    label: str
    variable: str
    sizes: tuple[int, ...]
    intensity: np.ndarray
    """FLOP/byte at each size."""
    attainable: np.ndarray
    """FLOP/s at each size: min(P, I·B) on the roof."""

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "variable": self.variable,
            "sizes": list(self.sizes),
            "intensity": self.intensity.tolist(),
            "attainable_flops_per_s": self.attainable.tolist(),
        }


def _trajectory(
    key: str, label: str, variable: str, sizes: Sequence[int], cost: Cost, roof: Roof
) -> Trajectory:
    intensity = np.asarray(cost.intensity, dtype=np.float64)
    return Trajectory(
        key, label, variable, tuple(int(x) for x in sizes), intensity, np.asarray(roof.attainable(intensity))
    )


def attention_trajectory(
    roof: Roof,
    d: int,
    s_values: Sequence[int] = DEFAULT_S,
    *,
    fused: bool,
    causal: bool = False,
    itemsize: float = BF16_BYTES,
    softmax_flops_per_element: float = SOFTMAX_FLOPS_PER_ELEMENT,
) -> Trajectory:
    """Prefill attention (one head) over ``s_values`` at head dimension ``d``."""
    s = np.asarray(s_values, dtype=np.float64)
    cost = attention(
        s,
        d,
        fused=fused,
        causal=causal,
        itemsize=itemsize,
        softmax_flops_per_element=softmax_flops_per_element,
    )
    variant = "fused" if fused else "unfused"
    mask = "causal " if causal else ""
    key = f"attention-{'causal-' if causal else ''}{variant}"
    return _trajectory(key, f"{variant} {mask}attention, d={d}", "s", s_values, cost, roof)


def decode_trajectory(
    roof: Roof,
    d: int,
    s_values: Sequence[int] = DEFAULT_S,
    *,
    group: int = 1,
    itemsize: float = BF16_BYTES,
    softmax_flops_per_element: float = SOFTMAX_FLOPS_PER_ELEMENT,
) -> Trajectory:
    """Decode (one token per query head against a KV cache of length s), ``group`` query heads
    per KV head, fused: the score vector stays on chip, as in ``attnroof model`` and the sheet's
    GQA table (the unfused F2 table differs by under 1% at g = 1, 12% at g = 8)."""
    s = np.asarray(s_values, dtype=np.float64)
    cost = decode(
        s, d, fused=True, group=group, itemsize=itemsize, softmax_flops_per_element=softmax_flops_per_element
    )
    gqa = f", GQA g={group}" if group > 1 else ""
    return _trajectory(f"decode-g{group}", f"decode{gqa}, d={d}", "s", s_values, cost, roof)


def linear_trajectory(
    roof: Roof,
    k: int,
    m: int,
    n_values: Sequence[int] = DEFAULT_N,
    *,
    itemsize: float = BF16_BYTES,
) -> Trajectory:
    """A linear layer (k × m weight) over ``n_values`` tokens: the batching argument of F3."""
    n = np.asarray(n_values, dtype=np.float64)
    cost = linear(n, k, m, itemsize=itemsize)
    return _trajectory("linear", f"linear {k}×{m}, batched", "n", n_values, cost, roof)


def trajectories(
    roof: Roof,
    *,
    d: int = 128,
    s_values: Sequence[int] = DEFAULT_S,
    attention: bool = True,
    causal: bool = False,
    decode: bool = False,
    groups: Sequence[int] = (),
    linear: tuple[int, int] | None = None,
    n_values: Sequence[int] = DEFAULT_N,
    itemsize: float = BF16_BYTES,
    softmax_flops_per_element: float = SOFTMAX_FLOPS_PER_ELEMENT,
) -> list[Trajectory]:
    """The trajectories a chart asks for: unfused and fused attention (and causal), decode for
    each GQA group (``groups`` implies ``decode``; plain decode is g = 1), a batched linear layer."""
    kw: dict[str, Any] = dict(itemsize=itemsize, softmax_flops_per_element=softmax_flops_per_element)
    out: list[Trajectory] = []
    if attention:
        for masked in (False, True) if causal else (False,):
            for fused in (False, True):
                out.append(attention_trajectory(roof, d, s_values, fused=fused, causal=masked, **kw))
    if decode or groups:
        for g in sorted(set(groups) | ({1} if decode or not groups else set())):
            out.append(decode_trajectory(roof, d, s_values, group=g, **kw))
    if linear is not None:
        out.append(linear_trajectory(roof, *linear, n_values, itemsize=itemsize))
    return out


TRAJECTORY_DEFAULTS = {
    name: param.default
    for name, param in inspect.signature(trajectories).parameters.items()
    if param.default is not inspect.Parameter.empty
}
""":func:`trajectories`' keyword defaults, read from its signature (the one place they are
written), for callers that describe a chart before drawing it."""


def roof_polyline(roof: Roof, x_lo: float, x_hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The roof as three points: the bandwidth slope from ``x_lo`` up to the ridge, then the flat
    compute roof out to ``x_hi`` (FLOP/byte, FLOP/s)."""
    x = np.array([min(x_lo, roof.ridge), roof.ridge, max(x_hi, roof.ridge)], dtype=np.float64)
    return x, np.asarray(roof.attainable(x), dtype=np.float64)


def size_label(n: int) -> str:
    """A size as the CLI accepts it: 512, 1k, 8k, 128k (k = 1024), 1M.

    >>> size_label(512), size_label(8192), size_label(131072), size_label(3000)
    ('512', '8k', '128k', '3000')
    """
    for scale, suffix in ((1024**2, "M"), (1024, "k")):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)
