"""A public kernel measurement (a row of ``data/public/*.jsonl``, its format in that folder's
README) as attnroof costs it: the FLOPs and bytes of the kernel it timed, the kernel's shape as
a forecast sees it, the roof of the device it ran on, and the time it took. The profiles are
fitted on these (``scripts/fit_profiles.py``) and the bounds held against them
(``tests/test_public_bounds.py``, ``tests/test_public_kernel_bounds.py``), through this one
mapping.

    kind        cost                                                kernel
    gemm        ops.linear(m, k, n): C[m×n] = A[m×k]·B[k×n]          gemm, t = m tokens
    attention   ops.attention fused (its backward for bwd)           attention, d, keys, causal
    decode      ops.decode fused                                     decode
    norm, elementwise, activation: ops.elementwise (backward)        memory
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from attnroof.cost import Cost
from attnroof.devices import Device, get_device
from attnroof.ops import backward as bwd
from attnroof.ops import elementwise as ew
from attnroof.ops.attention import FUSED, attention, chunk, decode
from attnroof.ops.latent import latent_attention
from attnroof.ops.linear import linear
from attnroof.roofline import Roof

ITEMSIZE = {"fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4, "tf32": 4, "fp64": 8, "int8": 1}
KERNEL_KINDS = ("gemm", "attention", "decode", "norm", "elementwise", "activation")
MEMORY_KINDS = ("norm", "elementwise", "activation")

ELEMENTWISE = {
    "rmsnorm": lambda n, h, it: ew.norm(n, h, itemsize=it),
    "layernorm": lambda n, h, it: ew.norm(n, h, itemsize=it, kind="layer"),
    "silu_mul": lambda n, w, it: ew.activation(n, w, gated=True, itemsize=it),
    "relu_squared": lambda n, h, it: ew.copy(n * h, read_itemsize=it),
    "copy": lambda n, h, it: ew.copy(n * h, read_itemsize=it),
    "scale": lambda n, h, it: ew.copy(n * h, read_itemsize=it),
    "add": lambda n, h, it: ew.add(n, h, itemsize=it),
    "add_rmsnorm": lambda n, h, it: ew.add_norm(n, h, itemsize=it),
    "triad": lambda n, h, it: ew.add(n, h, itemsize=it),
}
ELEMENTWISE_BACKWARD = {
    "rmsnorm": lambda n, h, it: bwd.norm_backward(n, h, itemsize=it),
    "layernorm": lambda n, h, it: bwd.norm_backward(n, h, itemsize=it, kind="layer"),
    "silu_mul": lambda n, w, it: bwd.activation_backward(n, w, gated=True, itemsize=it),
}


@functools.cache
def device(name: str) -> Device:
    return get_device(name)


def roof(dev: Device, dtype: str) -> Roof:
    """The device's roof for ``dtype``; without a peak for it, its fastest peak (still a bound)."""
    if dtype in dev.peak_flops_per_s:
        return Roof.of(dev, dtype)
    return Roof(max(dev.peak_flops_per_s.values()), dev.bandwidth_bytes_per_s, dev.name, dtype)


@dataclass(frozen=True)
class Kernel:
    """One measured kernel: what attnroof counts of it, and what it took."""

    row: dict[str, Any]
    cost: Cost
    kernels: tuple[dict[str, Any], ...]
    """Each stage's kernel shape (:meth:`attnroof.operators.Operator.kernel_shape`'s form)."""
    roof: Roof
    measured_s: float

    @property
    def kind(self) -> str:
        return self.row["kind"]

    @property
    def bound_s(self) -> float:
        return float(sum(self.roof.time(st.flops, st.bytes) for st in self.cost.stages))

    def forecast_s(self, forecast_roof: Any) -> float:
        """Its time on ``forecast_roof`` (a :class:`ForecastRoof` over :attr:`roof`)."""
        return float(
            sum(
                forecast_roof.kernel_time(st.flops, st.bytes, k)
                for st, k in zip(self.cost.stages, self.kernels, strict=True)
            )
        )


FA_PASSES = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}
"""FlashAttention's benchmark count of a pass's FLOPs, in forward passes: what its figures'
TFLOP/s divide (``benchmarks/benchmark_flash_attention.py``)."""


def source_flops(r: dict[str, Any], flops: float) -> float:
    """The FLOPs the source divided by its time to print a rate: FlashAttention's count for
    attention (4·b·h·s_q·s_k·d a forward, halved when causal, ×2.5 backward, ×3.5 both), attnroof's
    own for a GEMM (2·m·n·k, the same count every GEMM benchmark uses)."""
    if r["kind"] != "attention":
        return flops
    fwd = (
        4 * r["batch"] * r["heads"] * r["seq_q"] * r["seq_k"] * r["head_dim"] / (2 if r.get("causal") else 1)
    )
    return fwd * FA_PASSES[r.get("pass", "fwd")]


def _measured(r: dict[str, Any], flops: float, nbytes: float) -> float:
    if "measured_s" in r:
        return float(r["measured_s"])
    if "measured_flops_per_s" in r:
        return source_flops(r, flops) / float(r["measured_flops_per_s"])
    if "measured_bandwidth_fraction" in r:  # FlashInfer: the cache's bytes over the time, over the peak
        return nbytes / (float(r["measured_bandwidth_fraction"]) * float(r["source_bandwidth_bytes_per_s"]))
    if "measured_bytes_per_s" in r:
        return float(r.get("measured_bytes", nbytes)) / float(r["measured_bytes_per_s"])
    raise ValueError(f"row has no measured time: {r.get('where')}")


def _gemm(r: dict[str, Any]) -> tuple[Cost, tuple[dict[str, Any], ...]]:
    """Once a group (a grouped GEMM of ``groups`` alike); an fp8 output counted at one byte."""
    it = ITEMSIZE[r["dtype"]]
    cost = linear(r["m"], r["k"], r["n"], itemsize=it, weight_itemsize=it) * r.get("groups", 1)
    return cost, ({"kernel": "gemm", "t": r["m"] * r.get("groups", 1), "k": r["k"], "m": r["n"]},) * len(
        cost.stages
    )


def _attention(r: dict[str, Any]) -> tuple[Cost, tuple[dict[str, Any], ...]]:
    it = ITEMSIZE[r["dtype"]]
    heads, kv = r["heads"], r.get("kv_heads") or r["heads"]
    kw = dict(
        fused=True, causal=bool(r.get("causal")), group=heads // kv, itemsize=it, batch=r["batch"], kv_heads=kv,
        d_v=r.get("head_dim_v"), queries=r["seq_q"] if r["seq_q"] != r["seq_k"] else None, window=r.get("window"),
    )  # fmt: skip
    passes = {
        "fwd": (attention,),
        "bwd": (bwd.attention_backward,),
        "fwd+bwd": (attention, bwd.attention_backward),
    }
    costs = [f(r["seq_k"], r["head_dim"], **kw) for f in passes[r.get("pass", "fwd")]]
    shape = {"kernel": "attention", "d": r["head_dim"], "s": r["seq_k"], "causal": bool(r.get("causal"))}
    shapes = tuple(
        {**shape, "backward": f is not attention}
        for f, c in zip(passes[r.get("pass", "fwd")], costs, strict=True)
        for _ in c.stages
    )
    return Cost(tuple(st for c in costs for st in c.stages)), shapes


MLA_NOPE, MLA_V = 128, 128
"""DeepSeek-V3's widths: only the absorb GEMMs use them, not the fused stage a FlashMLA row times."""


def _decode(r: dict[str, Any]) -> tuple[Cost, tuple[dict[str, Any], ...]]:
    """``seq_q`` new tokens a sequence against ``seq_k`` cached ones (the chunk formula when
    more than one); a latent (MLA) cache: the fused stage of absorbed latent attention."""
    it = ITEMSIZE[r["dtype"]]
    s_q, s_k = r.get("seq_q", 1), r["seq_k"]
    heads, kv = r["heads"], r.get("kv_heads") or r["heads"]
    if r.get("latent"):
        v = r["head_dim_v"]
        full = latent_attention(
            s_q, s_k, heads=heads, kv_lora_rank=v, qk_rope_head_dim=r["head_dim"] - v, qk_nope_head_dim=MLA_NOPE,
            v_head_dim=MLA_V, causal=s_q > 1, batch=r["batch"], itemsize=it,
        )  # fmt: skip
        cost = Cost(tuple(st for st in full.stages if st.name == FUSED))
    elif s_q > 1:
        cost = chunk(
            s_q,
            s_k,
            r["head_dim"],
            d_v=r.get("head_dim_v"),
            group=heads // kv,
            batch=r["batch"],
            kv_heads=kv,
            itemsize=it,
        )
    else:
        cost = decode(
            s_k, r["head_dim"], fused=True, group=heads // kv, itemsize=it, batch=r["batch"], kv_heads=kv,
            d_v=r.get("head_dim_v"),
        )  # fmt: skip
    return cost, ({"kernel": "decode"},) * len(cost.stages)


def _memory(r: dict[str, Any]) -> tuple[Cost, tuple[dict[str, Any], ...]]:
    n, h = (1, r["elements"]) if "elements" in r else (r["tokens"], r.get("hidden") or r["width"])
    it = ITEMSIZE[r["dtype"]]
    tables = {
        "fwd": (ELEMENTWISE,),
        "bwd": (ELEMENTWISE_BACKWARD,),
        "fwd+bwd": (ELEMENTWISE, ELEMENTWISE_BACKWARD),
    }
    costs = [t[r["op"]](n, h, it) for t in tables[r.get("pass", "fwd")]]
    cost = Cost(tuple(st for c in costs for st in c.stages))
    return cost, ({"kernel": "memory"},) * len(cost.stages)


COSTS = {"gemm": _gemm, "attention": _attention, "decode": _decode, **dict.fromkeys(MEMORY_KINDS, _memory)}


def kernel(r: dict[str, Any]) -> Kernel:
    """Row ``r`` as a measured kernel; ``KeyError``/``ValueError`` for a row it cannot read."""
    cost, shapes = COSTS[r["kind"]](r)
    on = roof(device(r["device"]), r["dtype"])
    return Kernel(r, cost, shapes, on, _measured(r, float(cost.flops), float(cost.bytes)))
