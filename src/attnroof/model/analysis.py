"""A model's prefill or decode step on a device: every operator placed on the roofline, then
summed.

An operator of several kernels (unfused attention: Q·Kᵀ, softmax, P·V) is timed kernel by
kernel, since one kernel finishes before the next starts:

    time bound of an op   = Σ over its kernels of max(F/P, (bytes − R)/B + R/B_c)
    time bound of a step  = Σ over ops of count × time bound
    memory-bound share    = the part of that sum spent in kernels whose limiter is memory
    decode tokens/s       ≤ batch / step time;   prefill time to first token ≥ step time

R is a kernel's bytes that may be in the last-level cache, by the model step's rule
(:func:`attnroof.roofline.step_resident`: what the kernel before it wrote, the weights where
they all fit); 0 on a single-level roof, where each kernel's bound is max(F/P, bytes/B).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnroof.model.costs import Op, model_ops
from attnroof.model.layers import DECODE, PREFILL, Precision
from attnroof.model.memory import Memory, memory
from attnroof.model.notes import step_notes
from attnroof.model.spec import ModelConfig
from attnroof.ops.experts import FEWEST, UNIFORM, Routing, as_routing
from attnroof.ops.latent import ABSORBED
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT
from attnroof.roofline import COMPUTE, MEMORY, Roof, place


@dataclass(frozen=True, slots=True)
class OpResult:
    """One operator placed on the roof; figures are for a single run, ``count`` runs per step."""

    name: str
    count: int
    flops: float
    bytes: float
    time_s: float
    memory_time_s: float
    """The part of ``time_s`` spent in memory-limited kernels."""
    attention: bool
    layer_kind: str = "layer"
    operator: str = ""
    """The operator table's name for it (``linear``, ``experts``, ``attention``, ...)."""
    resident_bytes: float = 0.0
    """Of ``bytes``, those charged at the last-level cache's bandwidth (0 on a single-level roof)."""

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    @property
    def limiter(self) -> str:
        return MEMORY if self.memory_time_s * 2 >= self.time_s else COMPUTE

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "count": self.count,
            "flops": self.flops,
            "bytes": self.bytes,
            "intensity": self.intensity,
            "time_s": self.time_s,
            "limiter": self.limiter,
            "total_time_s": self.count * self.time_s,
            "layer_kind": self.layer_kind,
            "operator": self.operator,
            "resident_bytes": self.resident_bytes,
        }


def kernel_time(op: Op, roof: Roof) -> Any:
    """One run's time bound, Σ over ``op``'s kernels of max(F/P, (bytes − R)/B + R/B_c) (on a
    forecast's roof, the time each kernel takes): a number, or an array for an operator costed on
    arrays of shapes (:func:`place_op`'s ``time_s``, element by element)."""
    resident = op.resident(roof)
    return sum(
        roof.kernel_time(st.flops, st.bytes, op.kernel, r) for st, r in zip(op.cost, resident, strict=True)
    )


def place_op(op: Op, roof: Roof) -> OpResult:
    """Place each kernel of ``op`` on ``roof`` and add their time bounds."""
    time = mem_time = cached = 0.0
    for stage, r in zip(op.cost, op.resident(roof), strict=True):
        f, b = stage.flops, stage.bytes
        if type(f) in (int, float) and type(b) in (int, float) and type(r) in (int, float) and b > 0:
            # a number: the roof's own time and limiter, without a whole Placement
            t = roof.kernel_time(float(f), float(b), op.kernel, r)
            time += t
            mem_time += t if roof.limiter(float(f) / roof.hbm_bytes(float(b), r)) == MEMORY else 0.0
            cached += r
            continue
        p = place((f, b), roof, r)
        t = roof.kernel_time(f, b, op.kernel, r) if roof.forecasts else p.time_s
        time += t
        mem_time += t if p.limiter == MEMORY else 0.0
        cached += p.resident_bytes
    flops, nbytes = float(op.cost.flops), float(op.cost.bytes)
    return OpResult(
        op.name, op.count, flops, nbytes, time, mem_time, op.attention, op.layer_kind, op.operator,
        float(cached),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Totals:
    """One step, summed over operators (SI: FLOPs, bytes, seconds)."""

    flops: float
    bytes: float
    time_s: float
    memory_bound_share: float
    attention_share: float
    tokens_per_s: float | None
    """Decode: upper bound on generated tokens per second, batch / step time."""
    ttft_s: float | None
    """Prefill: lower bound on the time to first token."""
    resident_bytes: float = 0.0
    """Of ``bytes``, those charged at the last-level cache's bandwidth."""
    any_routing_time_s: float | None = None
    """A mixture of experts: the step with the fewest experts a batch can touch (its top-k, every
    token sending to the same ones: :data:`~attnroof.ops.routing.FEWEST`), the bound whatever
    the router does; ``time_s`` is at the routing asked for. None for a dense model."""

    @property
    def limiter(self) -> str:
        return MEMORY if self.memory_bound_share >= 0.5 else COMPUTE

    @property
    def bound_s(self) -> float:
        """The step's bound whatever the router does: the fewest experts' step for a mixture of
        experts (its operators' rows are at the routing asked for, which a router may beat), the
        step itself for a dense model."""
        return self.time_s if self.any_routing_time_s is None else min(self.time_s, self.any_routing_time_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "flops": self.flops,
            "bytes": self.bytes,
            "intensity": self.flops / self.bytes,
            "time_s": self.time_s,
            "tokens_per_s": self.tokens_per_s,
            "ttft_s": self.ttft_s,
            "attention_share": self.attention_share,
            "memory_bound_share": self.memory_bound_share,
            "limiter": self.limiter,
            "resident_bytes": self.resident_bytes,
            "bound_s": self.bound_s,
            **({} if self.any_routing_time_s is None else {"any_routing_time_s": self.any_routing_time_s}),
        }


@dataclass(frozen=True, slots=True)
class ModelAnalysis:
    model: ModelConfig
    phase: str
    batch: int
    context: int
    fused: bool
    roof: Roof
    ops: tuple[OpResult, ...]
    totals: Totals
    memory: Memory
    notes: tuple[str, ...] = field(default=())
    routing: Routing | str = UNIFORM
    """The routing the operators' rows are at (a mixture of experts'; ``totals.bound_s`` is over any)."""

    def op(self, name: str) -> OpResult:
        return next(o for o in self.ops if o.name == name)


def analyse(
    model: ModelConfig,
    phase: str,
    batch: int,
    context: int,
    roof: Roof,
    prec: Precision | None = None,
    *,
    capacity_bytes: float | None = None,
    fused: bool = True,
    softmax_flops_per_element: float = SOFTMAX_FLOPS_PER_ELEMENT,
    routing: Routing | str = UNIFORM,
    latent_form: str = ABSORBED,
) -> ModelAnalysis:
    """Place every operator of one ``phase`` step of ``model`` on ``roof`` and add them up.

    >>> from attnroof.model.config import builtin
    >>> a = analyse(builtin("llama-3.1-8b"), "decode", 1, 8192, Roof(989e12, 4.8e12))
    >>> round(a.totals.time_s * 1e3, 2), round(a.totals.tokens_per_s)
    (3.35, 298)

    That is (15.0 GB of weights read, the untied embedding table only gathered, + 1.07 GB of
    KV cache) / 4.8 TB/s.
    """
    p = prec or Precision()

    def placed(routing: Routing | str) -> tuple[OpResult, ...]:
        ops = model_ops(
            model, phase, batch, context, p, fused=fused, softmax_flops_per_element=softmax_flops_per_element,
            routing=routing, latent_form=latent_form,
        )  # fmt: skip
        return tuple(place_op(op, roof) for op in ops)

    results = placed(routing)
    time = sum(r.count * r.time_s for r in results)
    floor = None
    if model.experts is not None:  # the bound over every routing: the top-k experts alone
        fewest = results if as_routing(routing) == FEWEST else placed(FEWEST)
        floor = sum(r.count * r.time_s for r in fewest)
    totals = Totals(
        flops=sum(r.count * r.flops for r in results),
        bytes=sum(r.count * r.bytes for r in results),
        time_s=time,
        memory_bound_share=sum(r.count * r.memory_time_s for r in results) / time,
        attention_share=sum(r.count * r.time_s for r in results if r.attention) / time,
        tokens_per_s=batch / time if phase == DECODE else None,
        ttft_s=time if phase == PREFILL else None,
        resident_bytes=sum(r.count * r.resident_bytes for r in results),
        any_routing_time_s=floor,
    )
    mem = memory(model, phase, batch, context, p, capacity_bytes, fused=fused, routing=routing)
    notes = step_notes(model, phase, batch, context, p, routing=routing, latent_form=latent_form)
    return ModelAnalysis(model, phase, batch, context, fused, roof, results, totals, mem, notes, routing)
