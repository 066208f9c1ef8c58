"""A prefill or decode step on many devices: each pipeline stage's operators on the device roof,
its collectives on the link roof, and the pipeline's schedule over them.

Two times, named apart. The **bound** is the least time the plan can take, what every "≤" and
"≥" quotes (tokens/s, MFU): no flag can raise it above what full overlap gives. The
**estimate** is the schedule as the flags describe it: collectives in series with the kernels,
or with ``--overlap`` hidden only behind their own pass's kernels.

    stage bound (one micro-batch) = max(Σ ops max(F/P, bytes/B), each link's Σ collectives)
                                    (every collective hidden behind kernels)
    step bound                    = max(the schedule's pipeline over the stage bounds (1F1B:
                                        Σ stage bounds + (m − 1) · the largest),
                                        each link's traffic over the step: m micro-batches'
                                        collectives and the once-a-step sync)
    stage estimate                = Σ ops max(F/P, bytes/B) + Σ collectives (steps·α + sent/β)
                      overlapped  = Σ over layer kinds (and passes) the longest of the kernels
                                    and each link's collectives
    step estimate                 = the schedule's pipeline over the stages (1F1B: Σ stages
                                    + (m − 1) · slowest stage)
                                    + the once-a-step collectives left exposed (training's
                                    data-parallel sync; overlapped: what outlasts the idle
                                    link time of the pass that can hide it)
    pipeline bubble               = 1F1B: (p − 1)/(m + p − 1) of the pipeline, for equal stages

The pipeline runs the plan's schedule (``--schedule``, :mod:`attnroof.model.schedules`: 1F1B by
default, interleaved 1F1B, ZB-H1): its bubble is in the bound, because no overlap of collectives
removes it; a device holding v model chunks (interleaved) is costed on the layers of all of them.

Per-device figures are the slowest stage's device (the one that sets the pace). The collectives
a stage adds are built in :mod:`attnroof.model.comms` (:mod:`attnroof.model.train_spread` for a
training step's), on :mod:`attnroof.model.parallel`'s layout.

Length: a stage's and a step's times, bound and estimate side by side (each through the same
schedule), and the totals read from both; splitting them would part the two meanings.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from attnroof.devices.links import Links
from attnroof.model.analysis import OpResult, place_op
from attnroof.model.busy import Dense, Parts, Times, comm_parts, kernel_parts, link_traffic, stage_times
from attnroof.model.comms import LINK, CommOp, stage_comms
from attnroof.model.costs import model_ops
from attnroof.model.layers import DECODE, PREFILL, Precision, Step
from attnroof.model.memory import Memory, memory
from attnroof.model.notes import step_notes
from attnroof.model.parallel import (
    Plan,
    check_context_split,
    check_plan,
    check_sequence_split,
    context_memory,
)
from attnroof.model.schedules import check_schedule, device_chunks, schedule
from attnroof.model.shard import standing_for
from attnroof.model.spec import ModelConfig
from attnroof.model.train_options import TRAIN
from attnroof.model.training_memory import TrainMemory
from attnroof.ops.experts import UNIFORM, Routing
from attnroof.ops.latent import ABSORBED
from attnroof.roofline import COMPUTE, MEMORY, Roof


def _kept(fn: Callable[[Any], Any]) -> Any:
    """A property worked out once per object and kept in its ``_known`` (a frozen, slotted
    dataclass cannot hold :func:`functools.cached_property`): a step reads its stages' times
    many times — for its bound, its estimate, its totals, and a plan search for every plan."""
    key = fn.__name__

    def get(self: Any) -> Any:
        known = self._known
        if key not in known:
            known[key] = fn(self)
        return known[key]

    get.__doc__ = fn.__doc__
    return property(get)


@dataclass(frozen=True, slots=True)
class StageResult:
    """One pipeline stage on one device, for one micro-batch."""

    first: int
    stop: int
    ops: tuple[OpResult, ...]
    comms: tuple[CommOp, ...]
    memory: Memory | TrainMemory
    overlap: bool
    passes: tuple[str, ...] = ()
    """Training: the pass of each of ``ops``."""
    step_comms: tuple[CommOp, ...] = ()
    """Collectives run once a step, after the last micro-batch (the data-parallel sync)."""
    more: tuple[tuple[int, int], ...] = ()
    """An interleaved schedule's further model chunks on this device (layer ranges)."""
    weight_grad_s: float = 0.0
    """Training: the kernel time of its weight gradients, one micro-batch (the W that zb-h1 defers)."""
    _known: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Times already worked out (a stage is read many times: by its step, its totals, a search)."""

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        """The layer ranges the device holds."""
        return ((self.first, self.stop), *self.more)

    @_kept
    def parts(self) -> Parts:
        """Its kernels and collectives summed by pass and layer kind (:mod:`attnroof.model.busy`)."""
        return kernel_parts_of(self.ops, self.passes) + comm_parts(self.comms, self.step_comms)

    @_kept
    def _dense(self) -> Dense:
        return Dense.of([self.parts])

    @_kept
    def _times(self) -> Times:
        return stage_times(self._dense, self.overlap)

    @_kept
    def compute_time_s(self) -> float:
        return float(self._times.compute[0])

    @property
    def comm_time_s(self) -> float:
        return sum(c.count * c.time_s for c in self.comms)

    def link_times(self) -> dict[str, float]:
        """Each link's busy time for one micro-batch: the collectives that ride it (a copy)."""
        return self._on_links(self._times.busy, {k[2] for k in self.parts.comm})

    def sync_link_times(self) -> dict[str, float]:
        """Each link's busy time for the once-a-step collectives (a copy)."""
        return self._on_links(self._times.sync, {k[1] for k in self.parts.sync})

    def _on_links(self, row: Any, used: set[str]) -> dict[str, float]:
        links = self._dense.axes.links
        return {link: float(row[0, i]) for i, link in enumerate(links) if link in used}

    @_kept
    def bound_s(self) -> float:
        """The least time one micro-batch can take here: its kernels or one link's traffic,
        whichever is longer — every collective hidden behind the kernels (no schedule does
        better; links work at once)."""
        return float(self._times.bound[0])

    @property
    def link_bound(self) -> bool:
        """A link, not the kernels, sets :attr:`bound_s`."""
        return self.bound_s > self.compute_time_s

    @_kept
    def time_s(self) -> float:
        """The estimate: compute then communication, or, overlapped, per layer kind and pass the
        longest of the kernels and each link's collectives (a forward's collectives hide behind the forward's
        kernels, a backward's behind the backward's; two links carry their traffic at once); a
        collective only attention can hide (the K/V ring) adds what outlasts the attention kernels."""
        return float(self._times.estimate[0])

    @property
    def sync_time_s(self) -> float:
        """The once-a-step collectives, in full."""
        return sum(c.count * c.time_s for c in self.step_comms)

    @_kept
    def sync_exposed_s(self) -> float:
        """What the step waits for them: all of it, or, overlapped, what outlasts the time their
        link idles during the pass that can hide them: the gradients' sync (sent in buckets as
        the backward pass produces them) the last micro-batch's backward; the updated weights'
        all-gather, which waits for the optimizer, the next step's first forward (Megatron-LM's
        overlapped parameter gather)."""
        return float(self._times.sync_exposed[0])

    def _compute(self, kind: str) -> float:
        return sum(o.count * o.time_s for o in self.ops if o.layer_kind == kind)

    def _comm(self, kind: str) -> float:
        return sum(c.count * c.time_s for c in self.comms if c.layer_kind == kind)

    def kinds(self) -> list[dict[str, Any]]:
        """Per layer kind: compute time against communication time, and which bounds it."""
        out = []
        for kind in dict.fromkeys([o.layer_kind for o in self.ops] + [c.layer_kind for c in self.comms]):
            c, m = self._compute(kind), self._comm(kind)
            flops = sum(o.count * o.flops for o in self.ops if o.layer_kind == kind)
            sent = sum(x.count * float(x.comm.bytes_per_device) for x in self.comms if x.layer_kind == kind)
            out.append(
                {
                    "layer_kind": kind,
                    "compute_time_s": c,
                    "comm_time_s": m,
                    "comm_bytes": sent,
                    "flops_per_link_byte": flops / sent if sent else None,
                    "limiter": LINK if m > c else (MEMORY if self._memory(kind) * 2 >= c else COMPUTE),
                }
            )
        return out

    def _memory(self, kind: str) -> float:
        return sum(o.count * o.memory_time_s for o in self.ops if o.layer_kind == kind)


@dataclass(frozen=True, slots=True)
class Spread:
    """A step on ``plan.devices`` devices: every stage, and the step they make together."""

    plan: Plan
    phase: str
    batch: int
    stages: tuple[StageResult, ...]
    recompute: str = ""
    """Training: the recomputation, and the optimizer whose state the devices hold."""
    optimizer: str = ""
    notes: tuple[str, ...] = ()
    """What the numbers leave out or assume, as the single-device answer notes them."""
    _known: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Figures already worked out (the slowest stage, the bound and the estimate)."""

    @_kept
    def slowest(self) -> StageResult:
        return max(self.stages, key=lambda s: s.time_s)

    def _pipeline(self, times: list[float]) -> float:
        """The plan's schedule over stages taking ``times`` a micro-batch (:mod:`.schedules`)."""
        p = self.plan
        w = [s.weight_grad_s for s in self.stages]
        return schedule(p.schedule).time(times, w, p.microbatches, p.virtual_stages)

    @property
    def pipeline_time_s(self) -> float:
        return self._pipeline([s.time_s for s in self.stages])

    @_kept
    def time_s(self) -> float:
        """The estimate: the schedule as the flags describe it (the module's table)."""
        return self.pipeline_time_s + max(s.sync_exposed_s for s in self.stages)

    @_kept
    def bound_time_s(self) -> float:
        """The bound: the least time the plan can take (the module's table). It never exceeds
        :attr:`time_s`, with or without ``--overlap``."""
        return max(self._pipeline_bound_s, self._busiest_link_s)

    @property
    def _pipeline_bound_s(self) -> float:
        return self._pipeline([s.bound_s for s in self.stages])

    @property
    def _busiest_link_s(self) -> float:
        """The most any one device's link is busy over the step."""
        m = self.plan.microbatches
        return max(float(link_traffic(m, s._times.busy, s._times.sync)[0]) for s in self.stages)

    @property
    def link_bound(self) -> bool:
        """A link, not the kernels, sets the bound."""
        return self._busiest_link_s >= self._pipeline_bound_s or any(s.link_bound for s in self.stages)

    @property
    def bubble_share(self) -> float:
        """The pipeline's share the slowest device idles under the plan's schedule at the bound:
        1 − m · its stage bound / the pipeline's bound."""
        return 1 - self.plan.microbatches * max(s.bound_s for s in self.stages) / self._pipeline_bound_s

    @property
    def fits(self) -> bool | None:
        fits = [s.memory.fits for s in self.stages]
        return None if None in fits else all(fits)

    @property
    def stage_max_batch(self) -> int | None:
        """The largest batch every stage holds at this context, as a stage counts it: a
        replica's sequences (training: a micro-batch's). None without a capacity figure."""
        per = [s.memory.max_batch for s in self.stages]
        return None if None in per else min(b or 0 for b in per)

    @property
    def max_batch(self) -> int | None:
        """The largest global batch — what ``--batch`` gives — the plan holds at this context:
        :attr:`stage_max_batch` times the replicas (and, training, the micro-batches)."""
        per = self.stage_max_batch
        micro = self.plan.microbatches if self.phase == TRAIN else 1
        return None if per is None else per * self.plan.dp * micro

    @property
    def busiest_memory(self) -> Memory | TrainMemory:
        return max((s.memory for s in self.stages), key=lambda mem: mem.total_bytes)

    def totals(self) -> dict[str, Any]:
        """Per device (the slowest stage's), over the whole step of m micro-batches: ``time_s``
        (and the rates and shares from it) the bound, ``estimate_time_s`` the estimate."""
        s, m = self.slowest, self.plan.microbatches
        flops = m * sum(o.count * o.flops for o in s.ops)
        nbytes = m * sum(o.count * o.bytes for o in s.ops)
        time, estimate = self.bound_time_s, self.time_s
        mem_time = sum(o.count * o.memory_time_s for o in s.ops)
        decode = self.phase == DECODE
        return {
            "flops": flops,
            "bytes": nbytes,
            "intensity": flops / nbytes,
            "time_s": time,
            "bound_s": time,  # at the routing given: a plan's experts are not searched over routings
            "estimate_time_s": estimate,
            "tokens_per_s": self.batch / time if decode else None,
            "estimate_tokens_per_s": self.batch / estimate if decode else None,
            "ttft_s": time if self.phase == PREFILL else None,
            "attention_share": m * sum(o.count * o.time_s for o in s.ops if o.attention) / time,
            "memory_bound_share": m * mem_time / time,
            "limiter": LINK if self.link_bound else (MEMORY if mem_time * 2 >= s.compute_time_s else COMPUTE),
            "compute_time_s": m * s.compute_time_s,
            "comm_time_s": m * s.comm_time_s + s.sync_time_s,
            "comm_bytes_per_device": m * _sent(s.comms) + _sent(s.step_comms),
            "bubble_share": self.bubble_share,
            "resident_bytes": m * sum(o.count * o.resident_bytes for o in s.ops),
        }


_KERNEL_PARTS: dict[int, tuple[Any, Parts]] = {}
"""The kernels' parts of a placed stage's operators, by the identity of their tuple: the tuples
come from :func:`attnroof.model.train_spread.placed_stage`'s cache, so every plan that runs the
same stage hands over the same tuple (kept here beside its parts, so that its identity cannot
be reused)."""


def kernel_parts_of(ops: tuple[OpResult, ...], passes: tuple[str, ...]) -> Parts:
    """:func:`attnroof.model.busy.kernel_parts`, kept per tuple of placed operators."""
    key = id(ops)
    hit = _KERNEL_PARTS.get(key)
    if hit is not None and hit[0][0] is ops and hit[0][1] == passes:
        return hit[1]
    parts = kernel_parts(ops, passes)
    if len(_KERNEL_PARTS) > 65536:
        _KERNEL_PARTS.clear()
    _KERNEL_PARTS[key] = ((ops, passes), parts)
    return parts


def _sent(comms: tuple[CommOp, ...]) -> float:
    return sum(c.count * float(c.comm.bytes_per_device) for c in comms)


def spread(
    model: ModelConfig,
    phase: str,
    batch: int,
    context: int,
    roof: Roof,
    links: Links,
    plan: Plan,
    prec: Precision | None = None,
    *,
    capacity_bytes: float | None = None,
    **options: Any,
) -> Spread:
    """One ``phase`` step of ``batch`` sequences on ``plan.devices`` devices."""
    check_plan(model, plan, batch)
    check_schedule(plan.schedule, plan.virtual_stages, plan.pp, plan.microbatches, training=False)
    check_context_split(plan, phase, context, fused=options.get("fused", True))
    p = prec or Precision()
    replica = batch // plan.dp
    micro = replica // plan.microbatches
    here = context // plan.cp  # context parallelism: the device's tokens of each sequence
    check_sequence_split(plan, micro if phase == DECODE else micro * here)
    devices = device_chunks(model.layers, plan.pp, plan.virtual_stages)
    out = []
    for i, ((first, stop), *more) in enumerate(devices):
        shard = plan.shard(first, stop, tuple(more))
        last = i == len(devices) - 1
        placed = placed_ops(model, phase, micro, here, p, shard, roof, tuple(sorted(options.items())))
        step = Step(phase, micro, here, p)
        comms = stage_comms(model, plan, shard, step, links, last=last)
        mem = context_memory(_stage_memory(
            model, phase, replica, here, p, capacity_bytes, options.get("fused", True),
            options.get("routing", UNIFORM), standing_for(model, shard),
        ), plan.cp)  # fmt: skip
        out.append(StageResult(first, stop, placed, tuple(comms), mem, plan.overlap, more=tuple(more)))
    notes = step_notes(
        model, phase, batch, context, p, routing=options.get("routing", UNIFORM),
        latent_form=options.get("latent_form", ABSORBED),
    )  # fmt: skip
    return Spread(plan, phase, batch, tuple(out), notes=notes)


def placed_ops(
    model: ModelConfig, phase: str, micro: int, here: int, prec: Precision, shard: Any, roof: Roof,
    options: tuple[tuple[str, Any], ...],
) -> tuple[OpResult, ...]:  # fmt: skip
    """A prefill or decode stage's operators on the roof: the same for every plan that runs this
    shard (or one standing for it, :func:`attnroof.model.shard.standing_for`) at this micro-batch,
    which a plan search asks for once per DP degree, micro-batch count and schedule."""
    shard = standing_for(model, shard)
    try:
        hash(options)
    except TypeError:  # an option that cannot be a key (an array): worked out afresh
        return tuple(
            place_op(o, roof)
            for o in model_ops(model, phase, micro, here, prec, shard=shard, **dict(options))
        )
    return _placed_ops(model, phase, micro, here, prec, shard, roof, options)


@functools.lru_cache(maxsize=65536)
def _placed_ops(
    model: ModelConfig, phase: str, micro: int, here: int, prec: Precision, shard: Any, roof: Roof,
    options: tuple[tuple[str, Any], ...],
) -> tuple[OpResult, ...]:  # fmt: skip
    return tuple(
        place_op(o, roof) for o in model_ops(model, phase, micro, here, prec, shard=shard, **dict(options))
    )


@functools.lru_cache(maxsize=65536)
def _stage_memory(
    model: ModelConfig, phase: str, replica: int, here: int, prec: Precision, capacity_bytes: float | None,
    fused: bool, routing: Routing | str, shard: Any,
) -> Memory:  # fmt: skip
    """:func:`attnroof.model.memory.memory` of a stage, kept: the same for every plan whose
    device holds an equal (standing) shard at the same replica batch."""
    return memory(
        model, phase, replica, here, prec, capacity_bytes, fused=fused, routing=routing, shard=shard
    )


def sweep_summary(runs: list[Spread]) -> dict[str, Any]:
    """Over plans that differ in their TP degree, by their estimates (the schedule the flags
    describe): the fastest of those that fit (None when none does), the first degree whose step
    is slower than the one before (its collectives cost more than the cut saves), and the first
    whose communication outlasts its computation.
    """
    fitting = [r for r in runs if r.fits is not False]
    best = min(fitting, key=lambda r: r.time_s) if fitting else None
    slower = next((b.plan.tp for a, b in itertools.pairwise(runs) if b.time_s > a.time_s), None)
    link_bound = next((r.plan.tp for r in runs if r.slowest.comm_time_s > r.slowest.compute_time_s), None)
    return {
        "best_tp": None if best is None else best.plan.tp,
        "slower_from_tp": slower,
        "link_bound_from_tp": link_bound,
    }
