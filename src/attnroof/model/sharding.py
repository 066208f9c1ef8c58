"""The data-parallel sharding policies of a training step: what each sends over a step and what
each device keeps, the one place for both (:mod:`attnroof.model.train_spread` costs the sends,
:class:`attnroof.model.training_memory.Zero` the keeping).

Per device, for the ``N`` parameters of its TP/PP shard held by ``d`` replicas (dp · cp), ``w``
and ``g`` the weight and gradient bytes, ``o`` the optimizer's bytes a parameter (AdamW: 12),
``M`` micro-batches a step, each collective as :mod:`attnroof.ops.collectives` counts it (a ring:
an all-gather or reduce-scatter of B bytes over n devices sends (n − 1)/n · B, an all-reduce
twice that)::

    policy   flags                          sends                                     keeps
    ddp      --zero 0                       step: all-reduce N·g over d               N·(w + g + o)
    zero-1   --zero 1                       step: reduce-scatter N·g, all-gather of   N·(w + g) + N·o/d
                                            the updated weights N·w
    zero-2   --zero 2                       micro-batch: reduce-scatter N·g; step:    N·w + N·(g + o)/d
                                            all-gather N·w
             --grad-reduce step             step: zero-1's (accumulated whole)        zero-1's
    fsdp     --zero 3                       micro-batch: all-gather N·w before the    N·(w + g + o)/d
                                            forward and again before the backward
                                            (reshard after forward), reduce-scatter
                                            N·g after it
             --weight-gather microbatch     micro-batch: the forward's gather only    + N·w, the gathered
                                            (no reshard after forward)                copy kept
             --weight-gather step           step: one all-gather N·w, kept through    + N·w
                                            every micro-batch (nor after backward)
             --grad-reduce step             the reduce-scatter once a step, the       gradients N·g whole
                                            gradients accumulated unsharded
    hsdp     --dp-shard S (with --zero      each all-gather and reduce-scatter over   cut s ways, not d
             1, 2 or 3)                     the s = S·cp devices of a shard group;
                                            each gradient reduction then an
                                            all-reduce of the device's N·g/s across
                                            the r = d/s groups

Over a step, a ring over ``d`` (f = (d − 1)/d): ddp 2f·N·g; zero-1 f·(N·g + N·w); zero-2
f·(M·N·g + N·w); fsdp M·f·(2·N·w + N·g) (at M = 1, with w = g, 1.5× ddp: the ZeRO paper's
figure, Rajbhandari et al. 2020, section 7); fsdp gathering once a micro-batch M·f·(N·w + N·g),
ddp's volume at M = 1 (the ZeRO paper's 2Ψ for P_os+g); once a step f·(N·w + M·N·g), and once a
step with the gradients reduced once a step f·(N·w + N·g), zero-1's traffic. ``--grad-reduce
step`` with ZeRO 2 is ZeRO 1 in traffic and in memory: what Megatron-LM's distributed optimizer
runs (its gradient buffer is whole on each device, reduce-scattered once a step).

The policies by their frameworks' names: ``--weight-gather microbatch`` is FSDP2's
``reshard_after_forward=False`` (FSDP1's ``SHARD_GRAD_OP``: "unshards before the forward, does
not reshard them after the forward, and only reshards them after the backward computation",
PyTorch's ``ShardingStrategy`` docs; DeepSpeed's ``stage3_max_reuse_distance`` and
``stage3_max_live_parameters`` set above the shard's parameters keep each gathered from its
forward to its backward the same way); ``--weight-gather step --grad-reduce step`` is what
PyTorch's pipeline schedules set on an FSDP2 stage (``set_reshard_after_backward(False)`` and
``set_requires_gradient_sync(False)`` until the last backward, torch/distributed/pipelining/
stage.py) with torchtitan's default under pipeline parallelism, ``reshard_after_forward=False``
("to avoid per-microbatch all-gathers"). ``--grad-reduce step`` alone is FSDP2's
``set_requires_gradient_sync(False)`` on all but the last micro-batch. HSDP (``--dp-shard S``:
FSDP1's ``HYBRID_SHARD``, "FULL_SHARD within a node, and replicate parameters across nodes";
Zhao et al. 2023, "PyTorch FSDP", section 3.2, hybrid sharding; torchtitan's
``data_parallel_shard_degree`` × ``data_parallel_replicate_degree``, its CP ranks inside the
shard group; Megatron's ``--num-distributed-optimizer-instances`` for ZeRO 1) puts the
all-gathers and reduce-scatters on the shard group's link — a node's, where s fits in one
scale-up domain — and leaves the scale-out link an all-reduce of 1/s of the gradients. Expert
weights sync over their own EDP group, cut the same way: shard groups of EDP/r devices, r copies.

A collective of a micro-batch runs in its pass (the gathers before the forward and the backward,
the gradients' reductions in the backward), a once-a-step one after the last micro-batch: the
gradients behind its backward, the weights' gather (ZeRO 1 and 2's updated weights, ZeRO 3's once
a step) behind the next step's first forward. Not counted: the transient gathered layer that
resharding frees (a layer's worth, as the training memory leaves out buffers in flight).
"""

from __future__ import annotations

from typing import Any

from attnroof.devices.links import Link, Links
from attnroof.errors import InputError
from attnroof.model.comms import GRADIENT_SYNC, WEIGHT_GATHER, CommOp
from attnroof.model.layers import LAYER, params
from attnroof.model.parallel import Plan, Shard, group_link
from attnroof.model.spec import ModelConfig
from attnroof.model.train_options import (
    BACKWARD,
    EVERY_MICROBATCH,
    EVERY_PASS,
    FORWARD,
    GRAD_REDUCES,
    ONCE_A_STEP,
    WEIGHT_GATHERS,
)
from attnroof.model.training_memory import TrainPrecision, Zero, expert_params
from attnroof.ops import collectives as coll
from attnroof.ops.collectives import Comm

STEP = "step"
"""The pass name of the once-a-step collectives."""
ZERO_STAGES = (0, 1, 2, 3)


def check_sharding(plan: Plan) -> None:
    """:class:`InputError`, naming the flag, for a policy the plan cannot run."""
    z, gather, reduce_, s = plan.zero, plan.weight_gather, plan.grad_reduce, plan.dp_shard
    if z not in ZERO_STAGES:
        raise InputError(f"--zero {z} is not one of 0, 1, 2, 3", param="--zero")
    for flag, value, allowed in (
        ("--weight-gather", gather, WEIGHT_GATHERS),
        ("--grad-reduce", reduce_, GRAD_REDUCES),
    ):
        if value not in allowed:
            raise InputError(f"{flag} {value!r} is not one of {', '.join(allowed)}", param=flag)
    if gather != EVERY_PASS and z != 3:
        raise InputError(
            f"--weight-gather {gather} applies to --zero 3 (the one stage that shards the weights)",
            param="--weight-gather",
        )
    if reduce_ != EVERY_MICROBATCH and z < 2:
        raise InputError(
            f"--grad-reduce {reduce_} applies to --zero 2 or 3 (ZeRO {z} reduces the gradients once a "
            "step already)",
            param="--grad-reduce",
        )
    if not s:
        return
    if s < 0 or plan.dp % s:
        raise InputError(f"--dp-shard {s} does not divide --dp {plan.dp}", param="--dp-shard")
    if z == 0 and s != plan.dp:
        raise InputError(
            f"--dp-shard {s} shards ZeRO's states within groups: give --zero 1, 2 or 3", param="--dp-shard"
        )
    if plan.edp % plan.dp_replicate:
        raise InputError(
            f"--dp-shard {s} makes {plan.dp_replicate} copies of each shard group, which must divide the "
            f"experts' data-parallel degree EDP = --tp × --cp × --dp / (--etp × --ep) = {plan.edp}",
            param="--dp-shard",
        )


def zero_of(plan: Plan) -> Zero:
    """What a device keeps under the plan's policy: ZeRO's cut over a shard group's devices (all
    the dp · cp replicas unless hybrid), and when its gradients and gathered weights stay whole."""
    r = plan.dp_replicate
    return Zero(plan.zero, plan.replicas // r, plan.ep, plan.edp // r, plan.weight_gather, plan.grad_reduce)


def when_sent(plan: Plan) -> tuple[str | None, str]:
    """(when the weights are all-gathered — None: never —, when the gradients are reduced)
    under the plan's policy: ZeRO 1 and 2 gather the updated weights once a step, ZeRO 0 and 1
    reduce the gradients once a step, whatever the flags that apply to the later stages say."""
    z = plan.zero
    gather = None if z == 0 else plan.weight_gather if z == 3 else ONCE_A_STEP
    return gather, plan.grad_reduce if z >= 2 else ONCE_A_STEP


def policy_name(plan: Plan) -> str:
    """ddp, zero-1, zero-2, fsdp; hybrid: zero-1-hybrid, zero-2-hybrid, hsdp."""
    if plan.zero == 0:
        return "ddp"
    hybrid = plan.dp_replicate > 1
    if plan.zero == 3:
        return "hsdp" if hybrid else "fsdp"
    return f"zero-{plan.zero}" + ("-hybrid" if hybrid else "")


def sharding_json(plan: Plan) -> dict[str, Any]:
    """The plan's policy named, with when it sends what and over how many devices."""
    gather, reduce_ = when_sent(plan)
    return {
        "policy": policy_name(plan),
        "zero": plan.zero,
        "weight_gather": gather,
        "grad_reduce": reduce_,
        "shard_group": plan.replicas // plan.dp_replicate if plan.zero else 1,
        "copies": plan.dp_replicate if plan.zero else plan.replicas,
    }


def dp_comms(
    model: ModelConfig, plan: Plan, shard: Shard, prec: TrainPrecision, links: Links
) -> tuple[list[CommOp], list[CommOp]]:
    """The data-parallel sync of one device's parameters under the plan's policy (the module's
    table): (per micro-batch, once a step)."""
    micro: list[CommOp] = []
    step: list[CommOp] = []
    experts = expert_params(model, shard)
    groups = (  # (parameters, replicas that hold them, stride between those replicas, whose)
        (params(model, shard) - experts, plan.replicas, plan.tp, ""),  # dp · cp (Megatron's dp_cp)
        (experts, plan.edp, plan.expert_tp * plan.ep, "expert "),  # ETP, EP inside each EDP group
    )
    gather_when, reduce_when = when_sent(plan)
    for n_params, d, stride, whose in groups:
        if d == 1 or n_params == 0:
            continue
        grads, weights = n_params * prec.grad_itemsize, n_params * prec.weight_itemsize
        if plan.zero == 0:
            link = group_link(links, d, stride, _sync_group(plan, d, whose))
            step.append(
                _op(coll.all_reduce(grads, d, name=f"{whose}gradient all-reduce"), link, GRADIENT_SYNC, STEP)
            )
            continue
        r = plan.dp_replicate
        s = d // r  # a shard group's devices
        reductions: list[tuple[Comm, Link]] = []
        gathers: list[tuple[Comm, Link]] = []
        if s > 1:
            link = group_link(links, s, stride, _sync_group(plan, s, whose))
            reductions.append((coll.reduce_scatter(grads, s, name=f"{whose}gradient reduce-scatter"), link))
            gathers.append((coll.all_gather(weights, s, name=f"{whose}weight all-gather"), link))
        if r > 1:  # hybrid: each device's 1/s of the gradients summed across the copies
            across = group_link(
                links, r, stride * s, f"--dp {plan.dp} / --dp-shard {plan.dp_shard} = {r} copies"
            )
            name = f"{whose}gradient all-reduce across {r} copies"
            reductions.append((coll.all_reduce(grads / s, r, name=name), across))
        if reduce_when == ONCE_A_STEP:
            step += [_op(c, link, GRADIENT_SYNC, STEP) for c, link in reductions]
        if gather_when == ONCE_A_STEP:
            step += [_op(c, link, WEIGHT_GATHER, STEP) for c, link in gathers]
        else:  # ZeRO 3: before the forward, and (resharded after it) again before the backward
            passes = (FORWARD, BACKWARD) if gather_when == EVERY_PASS else (FORWARD,)
            micro += [_op(c, link, LAYER, p) for c, link in gathers for p in passes]
        if reduce_when == EVERY_MICROBATCH:
            micro += [_op(c, link, LAYER, BACKWARD) for c, link in reductions]
    return micro, step


def _op(comm: Comm, link: Link, kind: str, pass_name: str) -> CommOp:
    return CommOp(comm, 1, link, kind, pass_name, sync=True)


def _sync_group(plan: Plan, d: int, whose: str) -> str:
    """The flags that make a sync group of ``d`` devices, for an error naming them."""
    if whose:
        return f"expert data parallelism (EDP {d})"
    if plan.dp_replicate > 1:
        return f"--dp-shard {plan.dp_shard}" + ("" if plan.cp == 1 else f" × --cp {plan.cp}")
    return f"--dp {d}" if plan.cp == 1 else f"--dp × --cp = {d}"
