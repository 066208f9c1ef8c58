"""A training step on many devices: each pipeline stage's forward, recomputation and backward
operators (:mod:`attnroof.model.training`, on the device's shard) on the device roof, the
collectives each pass adds on the link roof, the data-parallel sync its sharding policy sends, and
the memory one device holds.

Collectives of one device, per micro-batch unless marked *step* (once, after the last one)::

    parallelism  pass                what                                   message (bytes)
    TP           forward             2 per layer: after the attention and   tokens · hidden · a
                                     the MLP block (Megatron-LM's g)
                 backward            2 per layer: before each block (f, g's
                                     conjugate)
                 recompute (full)    the forward's again
                 sequence parallel   each all-reduce a reduce-scatter + an
                                     all-gather, both passes; the backward
                                     gathers each block's input once more
                                     (only its 1/t is kept, for dW)
                 forward, stage 0    the vocab-parallel embedding's sum     tokens · hidden · a
                 forward, last       the vocab-parallel loss: row max, Σ    tokens · 4, three times
                                     exp, the target's logit (fp32)
                 backward, last      the LM head input's gradient           tokens · hidden · a
    EP           every pass          all-to-all dispatch and combine per    tokens · top_k · hidden · a / t
                                     MoE layer
    CP           forward, recompute  K/V ring: cp − 1 sends per attention   tokens · 2 · kv_heads/t · d · a
                                     layer (:func:`attnroof.model.comms.
                                     context_ring`)
                 backward            K/V and dK/dV: cp − 1 sends            twice that
    PP           forward / backward  activations to the next stage (all     tokens · hidden · a
                                     but the last) / their gradients to
                                     the previous (all but the first)
                 step                a tied embedding: the first and last   V/t · hidden · g
                                     stages' gradients summed
    DP           micro-batch, step   the sharding policy's gathers and      N · w, N · g
                                     reductions (:mod:`attnroof.model.
                                     sharding`'s table)

(``a`` the activation bytes, ``N`` the device's parameters of its TP/PP shard, ``g`` and ``w`` the
gradient and weight bytes; ``tokens`` a micro-batch's on the device, context/cp of each sequence.
Under context parallelism "DP" is the dp · cp devices that hold the same weights.) What each
policy sends, and when, is :mod:`attnroof.model.sharding`'s table (at one micro-batch ZeRO 1
and 2 send what an all-reduce sends, and ZeRO 3 half as much again, the ZeRO paper's 1.5×).
With ``--overlap`` a pass's collectives hide behind that pass's kernels, the gradients' sync
behind the last backward, and a once-a-step weight all-gather behind the next step's forward.

Memory per device: the shard's parameters with the policy's cuts (:class:`Zero`), and the activations
of the micro-batches a stage holds under the 1F1B schedule — stage ``i`` of ``p`` keeps
min(m, p − i) of them (Narayanan et al. 2021), so the first stage holds the most.

Length: the training step's collectives by parallelism (the table above), its layout and stage
memory shared with the plan search's memory check, and the cache of placed stages: one module,
so that a plan's memory and its cost cannot drift apart.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from attnroof.devices.links import Links
from attnroof.model.analysis import OpResult, kernel_time, place_op
from attnroof.model.busy import Parts, kernel_parts
from attnroof.model.comms import (
    GRADIENT_SYNC,
    CommOp,
    block_reduce,
    context_ring,
    expert_exchange,
    mlp_block_name,
    stage_send,
    tp_blocks,
)
from attnroof.model.costs import Op
from attnroof.model.layers import EMBEDDING, HEAD, LAYER
from attnroof.model.parallel import (
    Plan,
    Shard,
    check_context_split,
    check_plan,
    check_sequence_split,
    context_memory,
    group_link,
)
from attnroof.model.schedules import ZB_H1, check_schedule, device_chunks, schedule
from attnroof.model.shard import standing_for
from attnroof.model.sharding import STEP, ZERO_STAGES, check_sharding, dp_comms, zero_of  # noqa: F401 (re-exported)
from attnroof.model.spec import ModelConfig
from attnroof.model.spread import Spread, StageResult
from attnroof.model.train_options import BACKWARD, FORWARD, PASS_NAMES, RECOMPUTE_PASS, TRAIN
from attnroof.model.training import model_flops, train_notes, train_ops
from attnroof.model.training_memory import (
    FULL,
    NONE,
    TrainMemory,
    TrainPrecision,
    Zero,
    train_memory,
)
from attnroof.operators import operator
from attnroof.ops import collectives as coll
from attnroof.ops.backward import FP32_BYTES
from attnroof.roofline import Roof

LOSS_REDUCTIONS = 3
"""Vocab-parallel cross-entropy's all-reduces per token: the row max, Σ exp, the target's logit."""


def layer_passes(recompute: str) -> tuple[str, ...]:
    """The passes a micro-batch runs its layers in: the forward, again with full recomputation,
    and the backward."""
    return (FORWARD, RECOMPUTE_PASS, BACKWARD) if recompute == FULL else (FORWARD, BACKWARD)


def tp_comms(
    model: ModelConfig, plan: Plan, shard: Shard, tokens: float, itemsize: float, links: Links, *,
    last: bool, recompute: str,
) -> list[CommOp]:  # fmt: skip
    """Tensor parallelism's collectives of one micro-batch, by pass (the module's table)."""
    t = plan.tp
    if t == 1:
        return []
    link = group_link(links, t, 1, f"--tp {t}")
    block = tokens * model.hidden * itemsize
    out: list[CommOp] = []

    if shard.first == 0:
        if plan.sp:  # the embedding's output leaves sequence-split: a reduce-scatter; back, a gather
            out.append(
                CommOp(coll.reduce_scatter(block, t, name="embedding (RS)"), 1, link, EMBEDDING, FORWARD)
            )
            out.append(CommOp(coll.all_gather(block, t, name="embedding (AG)"), 1, link, EMBEDDING, BACKWARD))
        else:
            out.append(
                CommOp(coll.all_reduce(block, t, name="embedding all-reduce"), 1, link, EMBEDDING, FORWARD)
            )
    mixers, mlps = tp_blocks(model, shard)
    # (name, kind its kernels are filed under, blocks): each block's sum goes with its kernels
    blocks = [("attention", LAYER, mixers), *((mlp_block_name(k), k, n) for k, n in mlps.items())]
    for pass_name in layer_passes(recompute):  # Megatron-LM's g forward, f (its conjugate) backward
        for what, kind, count in blocks:
            name = f"{what} all-reduce"
            out += block_reduce(block, t, link, kind, count, sp=plan.sp, name=name, pass_name=pass_name)
    if plan.sp:  # each column GEMM's input kept as its 1/t, gathered again for dW
        for what, kind, count in blocks:
            gather = coll.all_gather(block, t, name=f"{what} input again (AG)")
            out.append(CommOp(gather, count, link, kind, BACKWARD))
    if last:
        loss = coll.all_reduce(tokens * FP32_BYTES, t, name="loss all-reduce")
        out.append(CommOp(loss, LOSS_REDUCTIONS, link, HEAD, FORWARD))
        if (
            plan.sp
        ):  # the head's input gathered from its sequence shards, again for dW; its gradient scattered
            out.append(CommOp(coll.all_gather(block, t, name="LM head input (AG)"), 1, link, HEAD, FORWARD))
            again = coll.all_gather(block, t, name="LM head input again (AG)")
            out.append(CommOp(again, 1, link, HEAD, BACKWARD))
            out.append(
                CommOp(coll.reduce_scatter(block, t, name="LM head input (RS)"), 1, link, HEAD, BACKWARD)
            )
        else:
            out.append(
                CommOp(coll.all_reduce(block, t, name="LM head input all-reduce"), 1, link, HEAD, BACKWARD)
            )
    return out


def tied_embedding_sync(
    model: ModelConfig, plan: Plan, shard: Shard, prec: TrainPrecision, links: Links, *, last: bool
) -> list[CommOp]:
    """A tied embedding across a pipeline: the first stage's table and the last stage's copy (as
    Megatron-LM keeps one) sum their gradients once a step, an all-reduce between the two."""
    if not model.tied or plan.pp == 1 or not (shard.first == 0 or last):
        return []
    link = group_link(links, plan.pp, plan.tp * plan.cp * plan.dp, f"--pp {plan.pp}")
    if link.per_node:  # a pipeline across nodes: its first and last stages each in its own node
        link = replace(link, per_node=1)
    grads = -(-model.vocab // plan.tp) * model.hidden * prec.grad_itemsize
    return [CommOp(coll.all_reduce(grads, 2, name="tied embedding all-reduce"), 1, link, GRADIENT_SYNC, STEP)]


def micro_comms(
    model: ModelConfig, plan: Plan, shard: Shard, tokens: Any, itemsize: float, links: Links, *, first: bool,
    last: bool, recompute: str, sends: int,
) -> list[CommOp]:  # fmt: skip
    """A device's collectives of one micro-batch, but the data-parallel sync's: tensor
    parallelism's, the experts' exchange and the K/V ring by pass, and the pipeline's ``sends``
    each way (but from the model's last chunk forward and its first backward)."""
    comms = tp_comms(model, plan, shard, tokens, itemsize, links, last=last, recompute=recompute)
    for pass_name in layer_passes(recompute):
        comms += expert_exchange(model, plan, shard, tokens, itemsize, links, pass_name)
        comms += context_ring(model, plan, shard, tokens, itemsize, links, pass_name)
    for name, pass_name, n in (
        ("activations send", FORWARD, sends - last),
        ("gradients send", BACKWARD, sends - first),
    ):
        if plan.pp > 1 and n:
            comms.append(stage_send(model, plan, tokens, itemsize, links, name, pass_name, n))
    return comms


def sync_comms(
    model: ModelConfig, plan: Plan, shard: Shard, prec: TrainPrecision, links: Links, *, last: bool
) -> tuple[list[CommOp], list[CommOp]]:
    """The data-parallel sync (:func:`dp_comms`) and, once a step, a tied embedding's."""
    micro, step = dp_comms(model, plan, shard, prec, links)
    return micro, step + tied_embedding_sync(model, plan, shard, prec, links, last=last)


def train_spread(
    model: ModelConfig,
    batch: int,
    context: int,
    roof: Roof,
    links: Links,
    plan: Plan,
    prec: TrainPrecision | None = None,
    *,
    capacity_bytes: float | None = None,
    fused: bool = True,
    recompute: str = NONE,
) -> Spread:
    """One training step of ``batch`` sequences of ``context`` tokens on ``plan.devices`` devices.

    >>> from attnroof.devices.links import Links
    >>> from attnroof.model.config import builtin
    >>> links = Links(scaleup_bytes_per_s=450e9, scaleup_domain=8)
    >>> s = train_spread(builtin("llama-3.1-8b"), 8, 4096, Roof(989e12, 4.8e12), links, Plan(dp=8))
    >>> from attnroof.model.layers import params
    >>> s.totals()["comm_bytes_per_device"] == 2 * 7 / 8 * params(builtin("llama-3.1-8b")) * 2
    True
    """
    layout = train_layout(model, batch, context, plan, prec, fused)
    p, micro, here, sched = layout.prec, layout.micro, layout.here, layout.sched
    out = []
    for i, shard in enumerate(layout.shards):
        last = i == len(layout.shards) - 1
        placed, passes, weight_grad_s = placed_stage(
            model, micro, here, p, fused, recompute, shard, roof, weight_grads=plan.schedule == ZB_H1
        )
        comms = micro_comms(model, plan, shard, micro * here, p.itemsize, links, first=i == 0, last=last,
                            recompute=recompute, sends=sched.sends(plan.virtual_stages))  # fmt: skip
        micro_sync, step_sync = sync_comms(model, plan, shard, p, links, last=last)
        mem = _stage_memory(model, layout, i, capacity_bytes, fused, recompute)
        comms += micro_sync
        stage = StageResult(
            shard.first, shard.stop, placed, tuple(comms), mem, plan.overlap, passes, tuple(step_sync),
            more=shard.more, weight_grad_s=weight_grad_s,
        )  # fmt: skip
        out.append(stage)
    notes = train_notes(model, batch, context, p, fused, recompute)
    return Spread(plan, TRAIN, batch, tuple(out), recompute, p.optimizer, notes)


@dataclass(frozen=True, slots=True)
class TrainLayout:
    """What every stage of a training plan shares: its checked precision, a micro-batch's
    sequences and each device's tokens of a sequence, the schedule, ZeRO's cut, and each
    device's shard (its layer chunks)."""

    plan: Plan
    prec: TrainPrecision
    micro: int
    here: int
    sched: Any
    zero: Zero
    shards: tuple[Shard, ...]


def train_layout(
    model: ModelConfig, batch: int, context: int, plan: Plan, prec: TrainPrecision | None, fused: bool
) -> TrainLayout:
    """The plan checked (one line naming the flag for what cannot run) and laid out."""
    check_sharding(plan)
    check_plan(model, plan, batch)
    check_schedule(plan.schedule, plan.virtual_stages, plan.pp, plan.microbatches, training=True)
    check_context_split(plan, TRAIN, context, fused=fused)
    micro = batch // plan.dp // plan.microbatches
    here = context // plan.cp  # context parallelism: the device's tokens of each sequence
    check_sequence_split(plan, micro * here)
    zero = zero_of(plan)  # the states sharded over dp · cp, or a hybrid's shard group
    devices = device_chunks(model.layers, plan.pp, plan.virtual_stages)
    shards = tuple(plan.shard(first, stop, tuple(more)) for (first, stop), *more in devices)
    return TrainLayout(plan, prec or TrainPrecision(), micro, here, schedule(plan.schedule), zero, shards)


def _stage_memory(
    model: ModelConfig, layout: TrainLayout, i: int, capacity_bytes: float | None, fused: bool, recompute: str
) -> TrainMemory:
    """What device ``i`` of the pipeline holds: its shard's states (ZeRO's cut) and the
    activations of the micro-batches its schedule keeps in flight."""
    plan = layout.plan
    in_flight = layout.sched.in_flight(i, plan.pp, plan.microbatches, plan.virtual_stages)
    shard = standing_for(model, layout.shards[i])
    return _device_memory(
        model, layout.micro, layout.here, layout.prec, capacity_bytes, fused, recompute, shard, layout.zero,
        in_flight, plan.cp,
    )  # fmt: skip


@functools.lru_cache(maxsize=65536)
def _device_memory(
    model: ModelConfig, micro: int, here: int, prec: TrainPrecision, capacity_bytes: float | None, fused: bool,
    recompute: str, shard: Shard, zero: Zero, in_flight: int, cp: int,
) -> TrainMemory:  # fmt: skip
    """:func:`_stage_memory`'s figures, the same for every plan whose device holds an equal
    shard (:func:`standing_for`) at the same micro-batch, ZeRO cut and micro-batches in flight:
    a plan search meets each of them again and again."""
    mem = train_memory(
        model, micro, here, prec, capacity_bytes, fused=fused, recompute=recompute, shard=shard, zero=zero,
        in_flight=in_flight,
    )  # fmt: skip
    return context_memory(mem, cp)


def train_plan_memory(
    model: ModelConfig,
    batch: int,
    context: int,
    plan: Plan,
    prec: TrainPrecision | None = None,
    *,
    fused: bool = True,
    recompute: str = NONE,
    stop_above: float = math.inf,
) -> float:
    """The busiest device's bytes under ``plan`` — what :func:`train_spread` reports as its
    memory, without costing a kernel or a collective: a plan search rejects what does not fit
    before it costs it (:mod:`attnroof.model.search`). The first stage is looked at first (it
    keeps the most micro-batches in flight), then the last (the LM head); the first device over
    ``stop_above`` ends the look, its bytes returned: the plan's are at least that."""
    layout = train_layout(model, batch, context, plan, prec, fused)
    n = len(layout.shards)
    busiest = 0.0
    for i in (0, *range(n - 1, 0, -1)):
        held = _stage_memory(model, layout, i, None, fused, recompute).total_bytes
        if held > stop_above:
            return held
        busiest = max(busiest, held)
    return busiest


def placed_stage(
    model: ModelConfig, micro: int, context: int, prec: TrainPrecision, fused: bool, recompute: str,
    shard: Shard, roof: Roof, *, weight_grads: bool = True,
) -> tuple[tuple[OpResult, ...], tuple[str, ...], float]:  # fmt: skip
    """A stage's training operators on the roof, the pass of each, and its weight gradients'
    time (:func:`weight_grad_time`; 0 unless ``weight_grads``: only a zero-bubble schedule reads
    it): the same for every plan that runs this shard at this
    micro-batch — and, when every layer is of one kind and the device holds one chunk, for every
    stage of as many layers that holds the same end of the model (the embedding, the head or
    neither) — which a plan search asks for once per ZeRO stage, data-parallel degree and
    micro-batch count (:mod:`attnroof.model.search`)."""
    shard = standing_for(model, shard)
    return _placed_stage(model, micro, context, prec, fused, recompute, shard, roof, weight_grads)


@functools.lru_cache(maxsize=65536)
def _placed_stage(
    model: ModelConfig, micro: int, context: int, prec: TrainPrecision, fused: bool, recompute: str,
    shard: Shard, roof: Roof, weight_grads: bool,
) -> tuple[tuple[OpResult, ...], tuple[str, ...], float]:  # fmt: skip
    ops = train_ops(model, micro, context, prec, fused=fused, recompute=recompute, shard=shard)
    placed = tuple(place_op(o, roof) for _, o in ops)
    return placed, tuple(name for name, _ in ops), weight_grad_time(ops, roof) if weight_grads else 0.0


def weight_grad_time(ops: list[tuple[str, Op]], roof: Roof) -> Any:
    """The kernel time of a micro-batch's weight gradients: each backward row's W part, as its
    operator's entry draws it (``weight_gradient``: a GEMM's dW, half its backward), on the roof
    (an array for operators costed on arrays of micro-batches)."""
    return sum(
        o.count * kernel_time(replace(o, cost=operator(o.operator).weight_part(o.cost)), roof)
        for name, o in ops
        if name == BACKWARD
    )


@dataclass(frozen=True, slots=True)
class _Timed:
    """An operator's figures :func:`attnroof.model.busy.kernel_parts` reads, its time an array."""

    count: int
    time_s: Any
    attention: bool
    layer_kind: str


def stage_kernels(
    model: ModelConfig, micros: Sequence[int], context: int, prec: TrainPrecision, fused: bool, recompute: str,
    shard: Shard, roof: Roof,
) -> tuple[Parts, np.ndarray]:  # fmt: skip
    """:func:`placed_stage`'s kernels at many micro-batch sizes at once — the stage's operators
    costed on an array of micro-batches (of Python ints, so that no count wraps as an int64's
    would at a long context: the same numbers as one size at a time), as :mod:`attnroof.model.grid`
    costs a step on a grid —
    as their parts (:func:`attnroof.model.busy.kernel_parts`, each sum an array over the sizes)
    and their weight gradients' time (an array)."""
    batch = np.array([int(m) for m in micros], dtype=object)  # Python ints: exact, never wrapping
    ops = train_ops(
        model, batch, context, prec, fused=fused, recompute=recompute, shard=standing_for(model, shard)
    )
    timed = [
        _Timed(o.count, np.broadcast_to(kernel_time(o, roof), batch.shape), o.attention, o.layer_kind)
        for _, o in ops
    ]
    w = np.broadcast_to(weight_grad_time(ops, roof), batch.shape)
    return kernel_parts(timed, [name for name, _ in ops]), w


def dp_sync_bytes(stage: StageResult, microbatches: int) -> float:
    """What the sharding policy sends from one device of ``stage`` over a step: its collectives
    of each micro-batch ``microbatches`` times, and its once-a-step ones."""

    def sent(comms: tuple[CommOp, ...]) -> float:
        return sum((c.count * float(c.comm.bytes_per_device) for c in comms if c.sync), 0.0)

    return microbatches * sent(stage.comms) + sent(stage.step_comms)


def step_totals(s: Spread, model: ModelConfig, context: int, peak_flops_per_s: float) -> dict[str, Any]:
    """A spread step's totals: :func:`train_totals` for a training step, else :meth:`Spread.totals`."""
    return train_totals(s, model, context, peak_flops_per_s) if s.phase == TRAIN else s.totals()


def train_totals(s: Spread, model: ModelConfig, context: int, peak_flops_per_s: float) -> dict[str, Any]:
    """:meth:`Spread.totals` with a training step's own figures: FLOPs by pass (per device, the
    slowest stage's), PaLM's model FLOPs of the whole step, the bytes the sharding policy sends
    from the busiest device (:func:`dp_sync_bytes`), tokens/s, and MFU over all the
    devices (model FLOPs / (devices · step time · peak)); HFU is the slowest device's. Each rate
    twice: at the bound (``mfu``, ``tokens_per_s``: ceilings no flag raises) and at the estimate
    (``estimate_mfu``, …: the schedule as the flags describe it)."""
    t = s.totals()
    slow, m = s.slowest, s.plan.microbatches
    by_pass = {
        p: m * sum(o.count * o.flops for o, q in zip(slow.ops, slow.passes, strict=True) if q == p)
        for p in PASS_NAMES
    }
    tokens = s.batch * context
    mf = float(model_flops(model, s.batch, context))
    t.update(
        forward_flops=by_pass[FORWARD],
        backward_flops=by_pass[BACKWARD],
        recompute_flops=by_pass[RECOMPUTE_PASS],
        hardware_flops=t["flops"],
        model_flops=mf,
        tokens=tokens,
        sync_time_s=max(st.sync_time_s for st in s.stages),
        sync_exposed_s=max(st.sync_exposed_s for st in s.stages),
        dp_sync_bytes_per_device=max(dp_sync_bytes(st, m) for st in s.stages),
    )
    for prefix, time in (("", t["time_s"]), ("estimate_", t["estimate_time_s"])):
        t[prefix + "tokens_per_s"] = tokens / time
        t[prefix + "mfu"] = mf / (s.plan.devices * time * peak_flops_per_s)
        t[prefix + "hfu"] = t["flops"] / (time * peak_flops_per_s)
    del t["ttft_s"]
    return t
