"""A prefill or decode step on many devices: each pipeline stage's operators on the device roof,
its collectives on the link roof, and the pipeline's schedule over them.

    stage time (one micro-batch)  = Σ ops max(F/P, bytes/B) + Σ collectives (steps·α + sent/β)
                      overlapped  = Σ over layer kinds max(compute, communication)
    step time                     = Σ stages + (m − 1) · slowest stage        (m micro-batches)
                                    + the once-a-step collectives left exposed (training's
                                    data-parallel gradient sync; overlapped: what outlasts one
                                    micro-batch's backward pass)
    pipeline bubble               = (p − 1)/(m + p − 1) of the pipeline, for equal stages

Per-device figures are the slowest stage's device (the one that sets the pace). The collectives
a stage adds (:func:`stage_comms`) follow :mod:`attnroof.model.parallel`'s layout.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from attnroof.devices.links import Link, Links
from attnroof.model.analysis import OpResult, place_op
from attnroof.model.config import ModelConfig
from attnroof.model.costs import model_ops
from attnroof.model.layers import DECODE, EMBEDDING, HEAD, LAYER, PREFILL, Precision, Step, layer_table
from attnroof.model.memory import Memory, memory
from attnroof.model.parallel import Plan, Shard, check_plan, group_link, stages
from attnroof.model.train_options import BACKWARD
from attnroof.model.training_memory import TrainMemory
from attnroof.ops import collectives as coll
from attnroof.ops.collectives import Comm
from attnroof.roofline import COMPUTE, MEMORY, Roof

LINK = "link"
PIPELINE = "pipeline"


@dataclass(frozen=True, slots=True)
class CommOp:
    """One collective of a stage: a run's bytes, how many runs a micro-batch makes, its link."""

    comm: Comm
    count: int
    link: Link
    layer_kind: str
    pass_name: str = ""
    """Training: the pass that runs it (forward, recompute, backward, or once a step)."""

    @property
    def time_s(self) -> float:
        link = self.link
        return float(self.comm.time_s(link.bandwidth_bytes_per_s, link.latency_s, link.base_latency_s))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.comm.name,
            "count": self.count,
            "flops": 0.0,
            "bytes": 0.0,
            "comm_bytes": float(self.comm.bytes_per_device),
            "message_bytes": float(self.comm.message_bytes),
            "devices": self.comm.devices,
            "link": self.link.kind,
            "time_s": self.time_s,
            "limiter": LINK,
            "total_time_s": self.count * self.time_s,
            "layer_kind": self.layer_kind,
            "operator": self.comm.collective,
            **({"pass": self.pass_name} if self.pass_name else {}),
        }


def block_reduce(
    block: float, t: int, link: Link, kind: str, count: int, *, sp: bool, name: str, pass_name: str = ""
) -> list[CommOp]:
    """A tensor-parallel block's sum over its ``t`` devices: an all-reduce of ``block`` bytes,
    or, with sequence parallelism, a reduce-scatter and an all-gather of the same size."""
    if sp:
        return [
            CommOp(coll.reduce_scatter(block, t, name=f"{name} (RS)"), count, link, kind, pass_name),
            CommOp(coll.all_gather(block, t, name=f"{name} (AG)"), count, link, kind, pass_name),
        ]
    return [CommOp(coll.all_reduce(block, t, name=name), count, link, kind, pass_name)]


def expert_exchange(
    model: ModelConfig,
    plan: Plan,
    shard: Shard,
    tokens: float,
    itemsize: float,
    links: Links,
    pass_name: str = "",
) -> list[CommOp]:
    """Expert parallelism's all-to-all dispatch and combine, once each per MoE layer of the
    stage: each routed token's hidden vector to its expert's device and back."""
    moe = sum(model.layer_is_moe()[shard.first : shard.stop])
    if plan.ep == 1 or not moe or model.experts is None:
        return []
    link = group_link(links, plan.ep, plan.tp, f"--ep {plan.ep}")
    routed = tokens * model.experts.top_k * model.hidden * itemsize / plan.tp  # 1/t per TP rank
    kind = next(i.layer_kind for i in layer_table(model) if i.operator == "experts")
    return [
        CommOp(coll.all_to_all(routed, plan.ep, name=name), moe, link, kind, pass_name)
        for name in ("expert dispatch", "expert combine")
    ]


def stage_send(
    model: ModelConfig,
    plan: Plan,
    tokens: float,
    itemsize: float,
    links: Links,
    name: str,
    pass_name: str = "",
) -> CommOp:
    """A pipeline stage's activations (or their gradients) to its neighbour."""
    link = group_link(links, plan.pp, plan.tp * plan.dp, f"--pp {plan.pp}")
    activations = tokens * model.hidden * itemsize / (plan.tp if plan.sp else 1)
    return CommOp(coll.send_recv(activations, 2, name=name), 1, link, PIPELINE, pass_name)


def stage_comms(
    model: ModelConfig, plan: Plan, shard: Shard, step: Step, links: Links, *, last: bool
) -> list[CommOp]:
    """The collectives one device of ``shard`` runs in one micro-batch's ``step``."""
    out: list[CommOp] = []
    n, item = step.tokens(), step.prec.itemsize
    layers = shard.stop - shard.first
    t = plan.tp
    if t > 1:
        link = group_link(links, t, 1, f"--tp {t}")
        block = n * model.hidden * item  # a block's output, summed over the TP group
        if shard.first == 0:
            out += block_reduce(block, t, link, EMBEDDING, 1, sp=plan.sp, name="embedding all-reduce")
        out += block_reduce(block, t, link, LAYER, layers, sp=plan.sp, name="attention all-reduce")
        out += block_reduce(block, t, link, LAYER, layers, sp=plan.sp, name="MLP all-reduce")
        if last:  # the last tokens' logits, V/t of them on each device, gathered whole
            logits = step.tokens("last") * model.vocab * item
            out.append(CommOp(coll.all_gather(logits, t, name="logits all-gather"), 1, link, HEAD))
    out += expert_exchange(model, plan, shard, n, item, links)
    if plan.pp > 1 and not last:
        out.append(stage_send(model, plan, n, item, links, "stage send"))
    return out


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

    @property
    def compute_time_s(self) -> float:
        return sum(o.count * o.time_s for o in self.ops)

    @property
    def comm_time_s(self) -> float:
        return sum(c.count * c.time_s for c in self.comms)

    @property
    def time_s(self) -> float:
        """Compute then communication, or, overlapped, the larger of the two per layer kind."""
        if not self.overlap:
            return self.compute_time_s + self.comm_time_s
        kinds = {o.layer_kind for o in self.ops} | {c.layer_kind for c in self.comms}
        return sum(max(self._compute(k), self._comm(k)) for k in kinds)

    @property
    def sync_time_s(self) -> float:
        """The once-a-step collectives, in full."""
        return sum(c.count * c.time_s for c in self.step_comms)

    @property
    def sync_exposed_s(self) -> float:
        """What the step waits for them: all of it, or, overlapped (gradients sent in buckets as
        the backward pass produces them), what outlasts the last micro-batch's backward pass."""
        if not self.overlap or not self.step_comms:
            return self.sync_time_s
        backward = sum(
            o.count * o.time_s for o, p in zip(self.ops, self.passes, strict=True) if p == BACKWARD
        )
        return max(0.0, self.sync_time_s - backward)

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

    @property
    def slowest(self) -> StageResult:
        return max(self.stages, key=lambda s: s.time_s)

    @property
    def pipeline_time_s(self) -> float:
        m = self.plan.microbatches
        return sum(s.time_s for s in self.stages) + (m - 1) * self.slowest.time_s

    @property
    def time_s(self) -> float:
        return self.pipeline_time_s + max(s.sync_exposed_s for s in self.stages)

    @property
    def bubble_share(self) -> float:
        """The pipeline's share the slowest device idles: 1 − m · its stage time / pipeline time."""
        return 1 - self.plan.microbatches * self.slowest.time_s / self.pipeline_time_s

    @property
    def fits(self) -> bool | None:
        fits = [s.memory.fits for s in self.stages]
        return None if None in fits else all(fits)

    @property
    def busiest_memory(self) -> Memory | TrainMemory:
        return max((s.memory for s in self.stages), key=lambda mem: mem.total_bytes)

    def totals(self) -> dict[str, Any]:
        """Per device (the slowest stage's), over the whole step of m micro-batches."""
        s, m = self.slowest, self.plan.microbatches
        flops = m * sum(o.count * o.flops for o in s.ops)
        nbytes = m * sum(o.count * o.bytes for o in s.ops)
        time = self.time_s
        mem_time = sum(o.count * o.memory_time_s for o in s.ops)
        return {
            "flops": flops,
            "bytes": nbytes,
            "intensity": flops / nbytes,
            "time_s": time,
            "tokens_per_s": self.batch / time if self.phase == DECODE else None,
            "ttft_s": time if self.phase == PREFILL else None,
            "attention_share": m * sum(o.count * o.time_s for o in s.ops if o.attention) / time,
            "memory_bound_share": m * mem_time / time,
            "limiter": LINK
            if s.comm_time_s > s.compute_time_s
            else (MEMORY if mem_time * 2 >= s.compute_time_s else COMPUTE),
            "compute_time_s": m * s.compute_time_s,
            "comm_time_s": m * s.comm_time_s + s.sync_time_s,
            "comm_bytes_per_device": m * _sent(s.comms) + _sent(s.step_comms),
            "bubble_share": self.bubble_share,
        }


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
    p = prec or Precision()
    replica = batch // plan.dp
    micro = replica // plan.microbatches
    ranges = stages(model.layers, plan.pp)
    out = []
    for i, (first, stop) in enumerate(ranges):
        shard = Shard(plan.tp, plan.ep, first, stop, plan.sp)
        last = i == len(ranges) - 1
        ops = model_ops(model, phase, micro, context, p, shard=shard, **options)
        step = Step(phase, micro, context, p)
        comms = stage_comms(model, plan, shard, step, links, last=last)
        mem = memory(
            model, phase, replica, context, p, capacity_bytes, fused=options.get("fused", True),
            routing=options.get("routing", "uniform"), shard=shard,
        )  # fmt: skip
        out.append(
            StageResult(first, stop, tuple(place_op(o, roof) for o in ops), tuple(comms), mem, plan.overlap)
        )
    return Spread(plan, phase, batch, tuple(out))


def sweep_summary(runs: list[Spread]) -> dict[str, Any]:
    """Over plans that differ in their TP degree: the fastest, the first degree whose step is
    slower than the one before (its collectives cost more than the cut saves), and the first whose
    communication outlasts its computation.

    ``best_tp`` considers only plans that fit when memory is known.
    """
    fitting = [r for r in runs if r.fits is not False] or runs
    best = min(fitting, key=lambda r: r.time_s)
    slower = next((b.plan.tp for a, b in itertools.pairwise(runs) if b.time_s > a.time_s), None)
    link_bound = next((r.plan.tp for r in runs if r.slowest.comm_time_s > r.slowest.compute_time_s), None)
    return {"best_tp": best.plan.tp, "slower_from_tp": slower, "link_bound_from_tp": link_bound}
