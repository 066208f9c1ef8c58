"""A trace's records as kernels, two ways, and each kernel on the roofline.

*Unfused*: one kernel per ATen operator, reading every tensor it takes and writing every tensor
it returns — eager PyTorch. *Fused*, the stated rule (a compiler's, as Inductor fuses by default):
matrix products and attention stay kernels of their own (cuBLAS, FlashAttention); a run of
element-wise operators and reductions in program order, each reading something the run has
produced, is one kernel, which reads what comes from outside the run and writes only what an
operator after it (or the caller) reads. The difference is the seed's argument generalised:
the bytes of intermediates that never leave the chip.

Attention is costed by attnroof's formulas (:mod:`attnroof.ops.attention`, the backward's
:mod:`attnroof.ops.backward`): unfused, S and P pass through memory; fused, only Q, K, V, O.
Each kernel is placed with the step's cache rule (:func:`attnroof.roofline.step_resident`): the
bytes the kernel before it wrote, and the weights where they all fit, at the cache's bandwidth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnroof.cost import Access, Cost, Stage
from attnroof.ops.attention import _attention
from attnroof.ops.backward import _attention_backward
from attnroof.profiles.kernels import ATTENTION as ATTENTION_KERNEL
from attnroof.profiles.kernels import GEMM, MEMORY, ForecastRoof, attention_kernels
from attnroof.roofline import Placement, Roof, place, step_resident
from attnroof.trace import rules
from attnroof.trace.capture import ATTENTION, Record, Tensor

UNFUSED, FUSED = "unfused", "fused"
BACKWARD_KERNEL = "fused attention backward"
"""The fused backward's main stage, as :func:`attnroof.ops.backward.attention_backward` names it."""


@dataclass(frozen=True, slots=True)
class Kernel:
    """One kernel: the records it runs (their names), its stage, the module of its first record."""

    records: tuple[Record, ...]
    stage: Stage
    spec: tuple[tuple[str, Any], ...] = ()
    """Which kernel it is, for a forecast (:func:`attnroof.profiles.kernels.kernel_parts`): a GEMM
    with its tiles, fused attention with its head dimension and keys, or a memory pass."""

    @property
    def module(self) -> str:
        return self.records[0].module

    @property
    def name(self) -> str:
        names = [r.name for r in self.records]
        return names[0] if len(names) == 1 else f"{names[0]} +{len(names) - 1} fused"


def attention_cost(
    r: Record, fused: bool, softmax_flops_per_element: float = rules.SOFTMAX_FLOPS_PER_ELEMENT
) -> Cost:
    """An attention record by attnroof's formulas: one KV head's ``h/h_kv`` query heads, times
    batch × KV heads; a mask tensor given is read once more by the kernel that applies it."""
    a = r.attention
    formula = _attention_backward if r.backward else _attention
    one = formula(
        a["s_q"], a["s_kv"], a["d"], fused=fused, causal=a["causal"], group=a["heads"] // a["kv_heads"],
        itemsize=a["itemsize"], kv_itemsize=a["itemsize"], softmax_flops_per_element=softmax_flops_per_element,
        d_v=a["d_v"],
    )  # fmt: skip
    cost = one * (a["batch"] * a["kv_heads"])
    if not a["mask_bytes"]:
        return cost
    first, *rest = cost.stages
    return Cost(
        (Stage(first.name, first.flops, (*first.reads, Access("mask", a["mask_bytes"])), first.writes), *rest)
    )


def _access(t: Tensor) -> Access:
    return Access(f"storage {t.storage:x}", t.bytes, t.weight)


def _stage(name: str, flops: float, reads: Sequence[Tensor], writes: Sequence[Tensor]) -> Stage:
    return Stage(name, flops, tuple(_access(t) for t in reads), tuple(_access(t) for t in writes))


def costed(records: Sequence[Record]) -> list[Record]:
    """The records that cost something: not the uncosted (named apart) and not the empty."""
    return [r for r in records if r.kind != rules.UNCOSTED and (r.kind == ATTENTION or r.reads or r.writes)]


def unfused(records: Sequence[Record]) -> list[Kernel]:
    """One kernel per operator; attention's several (S and P through memory), one per stage."""
    out = []
    for r in costed(records):
        if r.kind == ATTENTION:
            cost = attention_cost(r, fused=False)
            out += [Kernel((r,), s, k) for s, k in zip(cost.stages, attention_specs(r, cost), strict=True)]
        else:
            out.append(Kernel((r,), _stage(r.name, r.flops, r.reads, r.writes), record_spec(r)))
    return out


def record_spec(r: Record) -> tuple[tuple[str, Any], ...]:
    """The forecast's kernel of one operator: a GEMM (its tiles where it has two operands), else
    a memory pass."""
    if r.kind != rules.MATMUL:
        return (("kernel", MEMORY),)
    if r.gemm is None:
        return (("kernel", GEMM),)
    t, k, m = r.gemm
    return (("kernel", GEMM), ("t", t), ("k", k), ("m", m))


def attention_specs(r: Record, cost: Cost) -> list[tuple[tuple[str, Any], ...]]:
    """The forecast's kernel of each stage of an attention record: the forward's as the attention
    command has them; the backward's fused kernel as fused attention's backward, its unfused
    products as GEMMs (each ``rows × depth → outputs`` over batch × heads), the rest memory passes."""
    a = r.attention
    q, s, d, units = a["s_q"], a["s_kv"], a["d"], a["batch"] * a["heads"]
    if not r.backward:
        specs = attention_kernels(cost, queries=q, keys=s, d=d, units=units, causal=a["causal"])
        return [tuple(k.items()) for k in specs]
    gemms = {
        "dV = Pᵀ·dO": (s * units, q, d), "dP = dO·Vᵀ": (q * units, d, s),
        "dQ = dS·K": (q * units, s, d), "dK = dSᵀ·Q": (s * units, q, d),
    }  # fmt: skip
    out: list[tuple[tuple[str, Any], ...]] = []
    for st in cost.stages:
        if st.name in gemms:
            t, k, m = gemms[st.name]
            out.append((("kernel", GEMM), ("t", t), ("k", k), ("m", m)))
        elif st.name == BACKWARD_KERNEL:
            out.append(
                (
                    ("kernel", ATTENTION_KERNEL),
                    ("d", d),
                    ("s", s),
                    ("causal", a["causal"]),
                    ("backward", True),
                )
            )
        else:
            out.append((("kernel", MEMORY),))
    return out


def fused(records: Sequence[Record], returned: set[int]) -> list[Kernel]:
    """The fusion rule of the module's docstring; ``returned``: the storages the caller gets back."""
    records = costed(records)
    groups: list[list[int]] = []
    for i, r in enumerate(records):
        group = groups[-1] if groups else None
        if (
            group is not None
            and r.kind in rules.FUSIBLE
            and all(records[j].kind in rules.FUSIBLE for j in group)
            and any(t.storage in {w.storage for j in group for w in records[j].writes} for t in r.reads)
        ):
            group.append(i)
        else:
            groups.append([i])
    last_read = {t.storage: i for i, r in enumerate(records) for t in r.reads}
    out = []
    for group in groups:
        run = [records[j] for j in group]
        if run[0].kind == ATTENTION:  # its one kernel (a backward: and its preprocessing pass)
            cost = attention_cost(run[0], fused=True)
            specs = attention_specs(run[0], cost)
            out += [Kernel(tuple(run), s, k) for s, k in zip(cost.stages, specs, strict=True)]
            continue
        made = {w.storage for g in run for w in g.writes}
        reads = {(t.storage, t.view): t for g in run for t in g.reads if t.storage not in made}
        end = group[-1]
        writes = {
            (t.storage, t.view): t
            for g in run
            for t in g.writes
            if t.storage in returned or last_read.get(t.storage, -1) > end
        }
        name = run[0].name if len(run) == 1 else f"{run[0].name} +{len(run) - 1}"
        stage = _stage(name, sum(g.flops for g in run), list(reads.values()), list(writes.values()))
        out.append(Kernel(tuple(run), stage, record_spec(run[0]) if len(run) == 1 else (("kernel", MEMORY),)))
    return out


def forecast(kernels: Sequence[Kernel], roof: ForecastRoof, weights_held: float) -> list[float]:
    """Each kernel's forecast on ``roof`` (a profile's efficiencies, launched back to back), the
    cache charged as :func:`placed` charges it; never below its bound."""
    stages = tuple(k.stage for k in kernels)
    resident = step_resident(stages, roof, 0, weights_held)
    return [
        float(roof.kernel_time(float(s.flops), max(float(s.bytes), 1.0), dict(k.spec), float(r)))
        for k, s, r in zip(kernels, stages, resident, strict=True)
    ]


def placed(kernels: Sequence[Kernel], roof: Roof, weights_held: float) -> list[Placement]:
    """Each kernel on ``roof``, the one before it having written its inputs (the step's rule)."""
    stages = tuple(k.stage for k in kernels)
    resident = step_resident(stages, roof, 0, weights_held)
    return [
        place((float(s.flops), float(s.bytes)), roof, resident=float(r)) if s.bytes > 0 else _nothing(roof)
        for s, r in zip(stages, resident, strict=True)
    ]


def _nothing(roof: Roof) -> Placement:
    """A kernel that moves no bytes (its inputs and outputs stay in a fused run): charged one
    byte, so that it has a placement; its time is its FLOPs' at the peak."""
    return place((0.0, 1.0), roof)
