"""The collectives a step adds, as rows beside its operators: :class:`CommOp` (one collective of
a stage on its link, how many times a micro-batch runs it, the layer kind and pass it belongs to)
and the builders a prefill or decode step uses (:func:`stage_comms`) and a training step shares
(:func:`block_reduce`, :func:`expert_exchange`, :func:`stage_send`, :func:`context_ring`; the rest
of training's sit in :mod:`attnroof.model.train_spread`). The layout of the groups is
:mod:`attnroof.model.parallel`'s.

Context parallelism's ring (Megatron-LM's context parallelism, TransformerEngine's
``AttnFuncWithCPAndKVP2P`` in transformer_engine/pytorch/attention/dot_product_attention/
context_parallel.py, its "p2p" communication type)::

    forward    cp − 1 steps, each sending the device's K and V to the next device while the
               attention of the block it holds runs: tokens/cp · 2 · kv_heads/t · head_dim · a
               bytes a step (GQA: the few KV heads), per attention layer
    backward   K and V go round again and the partial dK, dV (accumulated for every block's
               owner) come back: twice the forward's bytes, 2(cp − 1) messages' worth (TE sends
               K, V alone first, K, V with dK, dV in the middle steps, dK, dV alone last)
    recompute  full recomputation runs the forward's ring again

Each step hides behind the attention kernels only (the ring feeds attention): with
``--overlap`` the estimate hides it behind the pass's attention, the bound behind all the
stage's kernels, as it does every collective.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnroof import arrays
from attnroof.devices.links import Link, Links
from attnroof.model.architectures import Experts
from attnroof.model.layers import EMBEDDING, HEAD, LAYER, MOE, Step, layer_table, mlp_row_kind
from attnroof.model.parallel import Plan, Shard, group_link, local_members
from attnroof.model.schedules import schedule
from attnroof.model.spec import ModelConfig
from attnroof.model.train_options import BACKWARD, FORWARD
from attnroof.operators import ATTENTION, rule
from attnroof.ops import collectives as coll
from attnroof.ops.collectives import Comm

GRADIENT_SYNC, WEIGHT_GATHER = "gradient sync", "weight gather"
"""The kinds of a training step's once-a-step collectives: the gradients' reduction, and the
all-gather of the weights (ZeRO 1 and 2's updated weights; ZeRO 3's, gathered once a step)."""
SYNC_HIDDEN_BY = {GRADIENT_SYNC: BACKWARD, WEIGHT_GATHER: FORWARD}
"""The pass each can hide behind with ``--overlap``."""

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
    behind: str = ""
    """The operator kind whose kernels alone can hide it (the K/V ring: attention); "" for any."""
    sync: bool = False
    """Training: one of the data-parallel sync's, what the sharding policy sends
    (:mod:`attnroof.model.sharding`)."""
    time_s: Any = field(init=False, repr=False, compare=False)
    """One run's time on its link under the fastest algorithm the link allows
    (:func:`attnroof.ops.collectives.fastest`, which also replaces ``comm`` by that algorithm's),
    worked out once: a float, or an array for a collective of an array of sizes (the serving
    engine's tables, a search's)."""

    def __post_init__(self) -> None:
        comm, t = coll.fastest(self.comm, self.link)
        object.__setattr__(self, "comm", comm)
        object.__setattr__(self, "time_s", float(t) if arrays.is_scalar(t) else t)

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
            "algorithm": self.comm.algorithm,
            **(
                {"devices_per_node": self.comm.per_node, "network_bytes": float(self.comm.network_bytes)}
                if self.comm.per_node
                else {}
            ),
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
    stage: each routed token's hidden vector to its expert's device and back; and where the
    expert-TP group does not already hold the same tokens (EP > 1, or ETP ≠ TP), its all-gather of
    the tokens its experts received and reduce-scatter of their outputs (Megatron-LM's
    MoEAlltoAllTokenDispatcher, megatron/core/transformer/moe/token_dispatcher.py:
    dispatch_postprocess and combine_preprocess, over the expert-TP group).

        routed = tokens · top_k · hidden · itemsize / tp · F   (each device its 1/tp of the
                                                                replica's tokens; the busiest
                                                                device receives, then sends, F ×)
        EP all-to-all of ``routed`` over ep devices etp apart: inside a scale-up domain, or split
                      by destination, (local − 1)/ep on scale-up and (ep − local)/ep on scale-out
        node-limited  a group-limited router (DeepSeek-V3: ``topk_group`` of ``n_group``) whose
                      EP group spans N = ep/local nodes: each token crosses to at most m of them
                      once (:func:`nodes_per_token`), then NVLink forwards it to its experts'
                      devices there (DeepSeek-V3 §3.2.2): scale-out carries routed · m/k ·
                      (N − 1)/N, scale-up routed · (local − 1)/local
        ETP all-gather and reduce-scatter of etp · routed over etp adjacent devices

    The TP group's all-reduce of the MoE block's output stays as for a dense MLP
    (:func:`stage_comms`), standing for the exchange that gives each TP rank its tokens back."""
    if model.experts is None:
        return []
    moe = sum(
        kind.moe * n for first, stop in shard.ranges for kind, n in model.layer_kinds(first, stop).items()
    )
    e, ep = plan.expert_tp, plan.ep
    if not moe:
        return []
    routed = tokens * model.experts.top_k * model.hidden * itemsize / plan.tp * plan.expert_imbalance
    kind = next(i.layer_kind for i in layer_table(model) if rule(i).routed)
    out: list[CommOp] = []
    if ep > 1:
        local = local_members(links, ep, e)
        for name in ("expert dispatch", "expert combine"):
            if local == ep:
                link = group_link(links, ep, e, f"--ep {ep}")
                out.append(CommOp(coll.all_to_all(routed, ep, name=name), moe, link, kind, pass_name))
                continue
            inside, across = coll.all_to_all_split(routed, ep, local, name=name)
            nodes = nodes_per_token(model.experts, ep, local)
            if nodes is not None:  # once per node over scale-out, then forwarded inside the node
                inside = coll.all_to_all_split(routed * ep / local, ep, local, name=name)[0]
                across = coll.all_to_all_split(routed * nodes / model.experts.top_k, ep, local, name=name)[1]
            if local > 1:
                out.append(CommOp(inside, moe, group_link(links, local, e, f"--ep {ep}"), kind, pass_name))
            nic = group_link(links, ep, e, f"--ep {ep}").nic  # the share leaving the node, on its own NIC
            out.append(CommOp(across, moe, nic, kind, pass_name))
    if e > 1 and (ep > 1 or e != plan.tp):
        link = group_link(links, e, 1, f"--etp {e}")
        out += [
            CommOp(coll.all_gather(e * routed, e, name="expert-TP all-gather"), moe, link, kind, pass_name),
            CommOp(
                coll.reduce_scatter(e * routed, e, name="expert-TP reduce-scatter"),
                moe,
                link,
                kind,
                pass_name,
            ),
        ]
    return out


def nodes_per_token(experts: Experts, ep: int, local: int) -> int | None:
    """The most nodes one token's experts sit on under group-limited routing, its experts E/ep a
    device in order and ``local`` devices a node: min(k, nodes, topk_group × the most nodes one
    group's experts span). None where the router is not group-limited or the EP group is one node
    (or the layout is irregular): then each token-expert pair is sent on its own, as Megatron-LM's
    dispatcher sends it.

    >>> from attnroof.model.config import builtin
    >>> ex = builtin("deepseek-v3").experts        # 8 groups of 32, 4 a token, top-8
    >>> nodes_per_token(ex, 64, 8), nodes_per_token(ex, 16, 8), nodes_per_token(ex, 8, 8)
    (4, 2, None)
    """
    if not experts.groups_per_token or local >= ep or ep % local:
        return None
    nodes = ep // local
    per_node = experts.experts // nodes  # contiguous: node j holds experts [j·per_node, (j+1)·per_node)
    size = experts.experts // experts.groups
    span = max((g * size + size - 1) // per_node - g * size // per_node + 1 for g in range(experts.groups))
    return min(experts.top_k, nodes, experts.groups_per_token * span)


def stage_send(
    model: ModelConfig,
    plan: Plan,
    tokens: float,
    itemsize: float,
    links: Links,
    name: str,
    pass_name: str = "",
    count: int = 1,
) -> CommOp:
    """A pipeline stage's activations (or their gradients) to its neighbour, ``count`` times a
    micro-batch (an interleaved device: once from each of its model chunks but the model's last,
    or, for the gradients, its first)."""
    link = group_link(links, plan.pp, plan.tp * plan.cp * plan.dp, f"--pp {plan.pp}")
    activations = tokens * model.hidden * itemsize / (plan.tp if plan.sp else 1)
    return CommOp(coll.send_recv(activations, 2, name=name), count, link, PIPELINE, pass_name)


RING_PASSES = {FORWARD: ("K/V ring step", 1), BACKWARD: ("K/V, dK/dV ring step", 2)}
"""Per pass, the ring's row name and its messages in local K/V's (the module's table)."""
GATHER_PASSES = {FORWARD: (("K/V all-gather", "all_gather"),),
                 BACKWARD: (("K/V all-gather", "all_gather"), ("dK/dV reduce-scatter", "reduce_scatter"))}  # fmt: skip
"""Per pass, the all-gather form's collectives (the Llama 3 paper, §3.3.2; TransformerEngine's
``all_gather`` communication type): the forward gathers every device's K and V before attention;
the backward gathers them again and reduce-scatters their gradients."""


def context_ring(
    model: ModelConfig, plan: Plan, shard: Shard, tokens: float, itemsize: float, links: Links,
    pass_name: str = "",
) -> list[CommOp]:  # fmt: skip
    """Context parallelism's exchange of K and V over the ``plan.cp`` devices of a CP group (the
    module's table). The ring: cp − 1 steps per attention layer, each sending K and V of the
    device's ``tokens`` (a micro-batch's sequences × context/cp; the TP-cut KV heads), twice that
    in the backward, hidden behind attention. The all-gather: the same bytes as one all-gather
    (and, backward, a second and a reduce-scatter of the gradients), run before attention, so
    only the rest of the pass can hide it. ``pass_name`` "" is a prefill's forward."""
    c = plan.cp
    if c == 1:
        return []
    link = group_link(links, c, plan.tp, f"--cp {c}")
    which = BACKWARD if pass_name == BACKWARD else FORWARD
    out = []
    for row in layer_table(model, shard):
        if "context_shards" not in row.shape:  # only the attention rows the shard cut for CP
            continue
        local_kv = tokens * row.kv_elements_per_token * itemsize
        if plan.cp_comm == "allgather":  # the whole sequence's K/V, c × the local, before attention
            for name, collective in GATHER_PASSES[which]:
                comm = getattr(coll, collective)(c * local_kv, c, name=name)
                out.append(CommOp(comm, row.count, link, row.layer_kind, pass_name))
            continue
        name, messages = RING_PASSES[which]
        ring = coll.send_recv(local_kv * messages, c, name=name)
        out.append(CommOp(ring, (c - 1) * row.count, link, row.layer_kind, pass_name, ATTENTION))
    return out


def tp_blocks(model: ModelConfig, shard: Shard) -> tuple[int, dict[str, int]]:
    """The device's layers with a mixer block, and its layers with an MLP block by the kind their
    MLP rows are filed under (:func:`attnroof.model.layers.mlp_row_kind`): each block ends in a
    row-parallel GEMM and its all-reduce, which belongs with that block's kernels (every layer has
    both, but a hybrid's: Nemotron-H's blocks are one or the other, Mamba-2's have no MLP; issue 23).

    >>> from attnroof.model.config import builtin
    >>> from attnroof.model.parallel import Shard
    >>> tp_blocks(builtin("nemotron-h-8b"), Shard(tp=2, ep=1, first=0, stop=52))   # 24 Mamba-2 + 4 attention; 24 MLP
    (28, {'layer': 24})
    >>> tp_blocks(builtin("deepseek-v3"), Shard(tp=8, ep=1, first=0, stop=61))     # MLP of 3 dense layers, 58 MoE
    (61, {'dense MLP': 3, 'MoE': 58})
    """
    mixers = 0
    mlps: dict[str, int] = {}
    for first, stop in shard.ranges:
        for kind, n in model.layer_kinds(first, stop).items():
            mixers += n * (kind.mixer != "none")
            if kind.mlp:
                row_kind = mlp_row_kind(model, kind)
                mlps[row_kind] = mlps.get(row_kind, 0) + n
    return mixers, mlps


def mlp_block_name(kind: str) -> str:
    """The MLP block of ``kind``, as its collectives' names say it: MoE where its rows are filed
    under MoE (a model with dense and expert layers), else MLP."""
    return "MoE" if kind == MOE else "MLP"


def stage_comms(
    model: ModelConfig, plan: Plan, shard: Shard, step: Step, links: Links, *, last: bool
) -> list[CommOp]:
    """The collectives one device of ``shard`` runs in one micro-batch's ``step``."""
    out: list[CommOp] = []
    n, item = step.tokens(), step.prec.itemsize
    t = plan.tp
    if t > 1:
        link = group_link(links, t, 1, f"--tp {t}")
        block = n * model.hidden * item  # a block's output, summed over the TP group
        if shard.first == 0:
            out += block_reduce(block, t, link, EMBEDDING, 1, sp=plan.sp, name="embedding all-reduce")
        mixers, mlps = tp_blocks(model, shard)
        out += block_reduce(block, t, link, LAYER, mixers, sp=plan.sp, name="attention all-reduce")
        for kind, count in mlps.items():
            out += block_reduce(
                block, t, link, kind, count, sp=plan.sp, name=f"{mlp_block_name(kind)} all-reduce"
            )
        if last:  # the last tokens' logits, V/t of them on each device, gathered whole
            logits = step.tokens("last") * model.vocab * item
            out.append(CommOp(coll.all_gather(logits, t, name="logits all-gather"), 1, link, HEAD))
    out += expert_exchange(model, plan, shard, n, item, links)
    out += context_ring(model, plan, shard, n, step.prec.kv_itemsize, links)
    sends = schedule(plan.schedule).sends(plan.virtual_stages) - last  # not from the model's last chunk
    if plan.pp > 1 and sends:
        out.append(stage_send(model, plan, n, item, links, "stage send", count=sends))
    return out
