"""A model cut across devices: tensor (TP), pipeline (PP), expert (EP) and data (DP) parallelism.

One device holds one pipeline stage's layers (``L/pp`` of them, the input tables on the first
stage and the head on the last) and one tensor-parallel slice of each (:func:`attnroof.model.shard.shard_row`):

    row split     per device                                collective it needs (TP > 1)
    column        output width m/t (QKV, gate/up)           —
    row           input width k/t (output, down proj.)     one all-reduce per block, of the
                                                            block's output: tokens × hidden
    heads         heads/t; KV heads max(1, kv/t)            —  (KV heads fewer than t: replicated)
    vocab         vocabulary rows V/t                       embedding: an all-reduce of its
                                                            output; LM head: an all-gather of
                                                            the last tokens' logits
    replicated    everything (norms, adds, the router,      —  (sequence parallelism: tokens/t,
                  latent down-projections and cache)           and each all-reduce becomes a
                                                               reduce-scatter + an all-gather)

Experts are cut like a dense MLP, over ``etp`` devices (expert tensor parallelism; default the
TP degree), and spread over ``ep`` devices, ``E/ep`` each; an all-to-all sends each routed token's
hidden vector to its expert (dispatch) and back (combine), and with ``etp`` > 1 the expert-TP group
all-gathers the tokens its experts received and reduce-scatters their outputs. The experts follow
Megatron-LM's expert grid ("MoE parallel folding", megatron/core/parallel_state.py): a stage's
tp × dp devices are regrouped as ETP × EP × EDP (EDP: the expert data-parallel replicas), ETP
innermost, then EP; each device dispatches its 1/tp of its replica's tokens, so an expert group
pools etp · ep / tp replicas' tokens. With etp = tp this is expert parallelism carved from data
parallelism (as DeepSeek-V3 deploys it): ``ep`` divides ``dp``. Devices = tp × pp × dp; each
replica takes batch/dp sequences.

Context parallelism (``cp``, Megatron-LM's ``context_parallel_size``; its
docs/source/api-guide/context_parallel.rst) cuts every sequence into 2·cp chunks and gives
device i chunks i and 2·cp − 1 − i: every row runs on context/cp tokens of each sequence, and
attention runs the device's queries against the whole sequence's keys and values, passed round
the CP group in a ring (:func:`attnroof.model.comms.context_ring`). The CP ranks hold the same
weights: their gradients are summed with the data-parallel replicas', over dp · cp devices
(Megatron's ``get_data_parallel_group(with_context_parallel=True)``), ZeRO shards over those
dp · cp too, and expert parallelism is carved from them (Megatron's expert grid: tp · cp · dp =
etp · ep · edp, with etp = tp here), so ``ep`` divides ``dp · cp``. Devices = tp × cp × pp × dp.

Groups are laid out TP innermost, then CP, then DP (with EP inside CP × DP), then PP
(Megatron's ``tp-cp-ep-dp-pp``): a group of ``n`` devices ``stride`` apart rides the scale-up
link when ``stride · n`` fits in one scale-up domain, else scale-out (a NIC a device, NVLink in a node).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, TypeVar

from attnroof.devices.links import Link, Links
from attnroof.errors import InputError
from attnroof.model.schedules import chunks
from attnroof.model.shard import Shard, shard_row
from attnroof.model.spec import ModelConfig
from attnroof.model.train_options import EVERY_MICROBATCH, EVERY_PASS
from attnroof.row import DECODE

M = TypeVar("M")
"""A device's memory: :class:`attnroof.model.memory.Memory` or a training step's."""

__all__ = [
    "Plan",
    "Shard",
    "batch_split",
    "check_context_split",
    "check_degrees",
    "check_plan",
    "check_sequence_split",
    "context_memory",
    "group_link",
    "local_members",
    "shard_row",
    "stages",
]  # Shard and shard_row live in attnroof.model.shard, below the layer table


@dataclass(frozen=True, slots=True)
class Plan:
    """How a step is spread: degrees of each parallelism and how the work is scheduled."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1
    sp: bool = False
    """Sequence parallelism: replicated element-wise rows on tokens/t; RS + AG for each AR."""
    microbatches: int = 1
    """Micro-batches a pipeline splits each replica's batch into (the bubble is (p − 1)/(m + p − 1))."""
    overlap: bool = False
    """Collectives overlapped with computation: a layer takes max(compute, communication)."""
    zero: int = 0
    """Training: ZeRO stage (1 optimizer states, 2 + gradients, 3 + weights sharded over DP)."""
    weight_gather: str = EVERY_PASS
    """ZeRO 3: when the weights are all-gathered (:data:`attnroof.model.train_options.WEIGHT_GATHERS`)."""
    grad_reduce: str = EVERY_MICROBATCH
    """ZeRO 2 and 3: when the gradients are reduce-scattered (every micro-batch, or once a step)."""
    dp_shard: int = 0
    """Hybrid sharding: ZeRO shards over ``dp_shard`` × CP of the replicas and the ``dp/dp_shard``
    groups hold copies (torchtitan's ``data_parallel_shard_degree``; 0: all of DP)."""
    etp: int = 0
    """Expert-tensor-parallel degree: each expert cut over ``etp`` devices (0: equal to ``tp``,
    Megatron-LM's default for ``--expert-tensor-parallel-size``)."""
    expert_imbalance: float = 1.0
    """The busiest device's routed tokens over the mean (1: uniform routing)."""
    schedule: str = "1f1b"
    """The pipeline schedule (:mod:`attnroof.model.schedules`): 1f1b, interleaved, zb-h1."""
    virtual_stages: int = 1
    """Interleaved: model chunks per device."""
    cp: int = 1
    """Context parallelism: each sequence's tokens over ``cp`` devices, K/V passed in a ring."""
    cp_comm: str = "ring"
    """How the CP group shares K and V: ``ring`` (TransformerEngine's p2p, overlapped with
    attention) or ``allgather`` (the Llama 3 paper's, §3.3.2: gathered before attention)."""

    @property
    def devices(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def replicas(self) -> int:
        """The devices that hold the same weights and sum their gradients: dp · cp."""
        return self.dp * self.cp

    @property
    def dp_replicate(self) -> int:
        """Hybrid sharding's copies of each shard group: dp / dp_shard (1: fully sharded)."""
        return self.dp // (self.dp_shard or self.dp)

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def edp(self) -> int:
        """Expert data-parallel degree: the replicas of each expert, tp · cp · dp / (etp · ep)
        (Megatron's expert grid folds the TP × CP × DP devices)."""
        return self.tp * self.cp * self.dp // (self.expert_tp * self.ep)

    def shard(self, first: int, stop: int, more: tuple[tuple[int, int], ...] = ()) -> Shard:
        """What one device of the stage holding layers ``first`` to ``stop − 1`` holds (and, in
        an interleaved schedule, the further chunks ``more``)."""
        return Shard(
            self.tp, self.ep, first, stop, self.sp, etp=self.etp, imbalance=self.expert_imbalance, more=more,
            cp=self.cp,
        )  # fmt: skip

    @property
    def single(self) -> bool:
        """One device, nothing split: the single-device analysis, unchanged."""
        return self.devices == 1 and self.ep == 1

    def to_json(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "pp": self.pp,
            "ep": self.ep,
            "dp": self.dp,
            "cp": self.cp,
            "cp_comm": self.cp_comm,
            "devices": self.devices,
            "sequence_parallel": self.sp,
            "microbatches": self.microbatches,
            "overlap": self.overlap,
            "zero": self.zero,
            "etp": self.expert_tp,
            "edp": self.edp,
            "expert_imbalance": self.expert_imbalance,
            "schedule": self.schedule,
            "virtual_stages": self.virtual_stages,
        }


def check_plan(model: ModelConfig, plan: Plan, batch: int) -> None:
    """:class:`InputError`, naming the flag, for a plan the model or batch cannot take."""
    check_degrees(model, plan)
    if batch % (plan.dp * plan.microbatches):
        raise InputError(f"--batch {batch} is not a multiple of {batch_split(plan)}", param="--batch")


def check_degrees(model: ModelConfig, plan: Plan) -> None:
    """:class:`InputError`, naming the flag, for degrees the model cannot take (whatever the batch)."""
    for flag, v in (
        ("--tp", plan.tp),
        ("--pp", plan.pp),
        ("--ep", plan.ep),
        ("--dp", plan.dp),
        ("--cp", plan.cp),
    ):
        if v < 1:
            raise InputError(f"{flag} {v} must be a whole number ≥ 1", param=flag)
    heads = model.heads
    if heads % plan.tp:
        raise InputError(f"--tp {plan.tp} does not divide the model's {heads} attention heads", param="--tp")
    kv = model.kv_heads
    if model.latent is None and kv % plan.tp and plan.tp % kv:
        raise InputError(
            f"--tp {plan.tp} and the model's {kv} KV heads: one must divide the other", param="--tp"
        )
    if plan.pp > model.layers:
        raise InputError(f"--pp {plan.pp} exceeds the model's {model.layers} layers", param="--pp")
    if plan.ep > 1:
        if model.experts is None:
            raise InputError(f"--ep {plan.ep}: {model.name} has no experts", param="--ep")
        if model.experts.experts % plan.ep:
            raise InputError(
                f"--ep {plan.ep} does not divide the model's {model.experts.experts} experts", param="--ep"
            )
    check_experts(model, plan)


def batch_split(plan: Plan) -> str:
    """The degrees a batch is cut by, in words, naming only those above 1 (each a flag given).

    >>> batch_split(Plan(dp=2, microbatches=4)), batch_split(Plan(microbatches=4))
    ('--dp 2 × --microbatches 4 = 8', '--microbatches 4')
    """
    parts = [(f, v) for f, v in (("--dp", plan.dp), ("--microbatches", plan.microbatches)) if v > 1]
    words = " × ".join(f"{f} {v}" for f, v in parts)
    return words if len(parts) == 1 else f"{words} = {plan.dp * plan.microbatches}"


def check_experts(model: ModelConfig, plan: Plan) -> None:
    """Megatron-LM's expert grid (parallel_state.py: ETP × EP × EDP × PP = the world): ETP × EP
    divides a stage's TP × CP × DP devices; ETP divides the expert width (its linear layers' cut);
    the imbalance F is ≥ 1 and at most EP (the busiest device takes at most every token)."""
    e, ep, f = plan.expert_tp, plan.ep, plan.expert_imbalance
    if plan.etp and model.experts is None:
        raise InputError(f"--etp {plan.etp}: {model.name} has no experts", param="--etp")
    if not (f >= 1):  # also NaN
        raise InputError(
            f"--expert-imbalance {f} must be ≥ 1 (1: uniform routing)", param="--expert-imbalance"
        )
    if f != 1 and ep == 1:
        raise InputError(
            f"--expert-imbalance {f}: the imbalance is across expert-parallel devices; give --ep 2 or more",
            param="--expert-imbalance",
        )
    if f > ep:
        raise InputError(
            f"--expert-imbalance {f} exceeds --ep {ep}: the busiest device takes at most all the tokens",
            param="--expert-imbalance",
        )
    if model.experts is None:
        return
    if model.experts.width % e:
        raise InputError(
            f"--etp {e} does not divide the model's expert width {model.experts.width}", param="--etp"
        )
    stage = plan.tp * plan.cp * plan.dp
    if stage % (e * ep):
        flag = "--ep" if plan.etp in (0, plan.tp) else "--etp"
        grid, replicas = ("--tp × --dp", "--dp") if plan.cp == 1 else ("--tp × --cp × --dp", "--dp × --cp")
        raise InputError(
            f"--etp {e} × --ep {ep} = {e * ep} must divide {grid} = {stage}, a stage's devices "
            f"(Megatron's expert grid ETP × EP × EDP; with --etp = --tp: --ep must divide {replicas})",
            param=flag,
        )


def check_sequence_split(plan: Plan, tokens: int) -> None:
    """Sequence parallelism cuts a micro-batch's ``tokens`` over the TP group: they must divide."""
    if plan.sp and tokens % plan.tp:
        raise InputError(
            f"--sp: a micro-batch's {tokens:,} tokens do not split evenly over --tp {plan.tp} devices",
            param="--sp",
        )


CP_COMMS = ("ring", "allgather")
"""How a CP group can share K and V (:attr:`Plan.cp_comm`)."""


def check_context_split(plan: Plan, phase: str, context: int, *, fused: bool) -> None:
    """Context parallelism cuts each prompt into 2·cp chunks (two a device, Megatron's load
    balance): the context must divide; decode (one new token a sequence) has nothing to cut, and
    the ring runs fused attention kernels (TransformerEngine's flash and cuDNN backends)."""
    c = plan.cp
    if plan.cp_comm not in CP_COMMS:
        raise InputError(f"--cp-comm {plan.cp_comm!r} is not one of {', '.join(CP_COMMS)}", param="--cp-comm")
    if c == 1:
        if plan.cp_comm != "ring":
            raise InputError(f"--cp-comm {plan.cp_comm} applies to --cp 2 or more", param="--cp-comm")
        return
    if phase == DECODE:
        raise InputError(
            f"--cp {c}: context parallelism splits a prompt's tokens; decode runs one token a "
            "sequence (use --phase prefill or train)",
            param="--cp",
        )
    if context % (2 * c):
        raise InputError(
            f"--cp {c}: --context {context:,} does not split into 2 × {c} = {2 * c} equal chunks",
            param="--cp",
        )
    if not fused:
        raise InputError(
            f"--cp {c} runs fused attention (TransformerEngine's context parallelism has no unfused "
            "backend): not with --unfused",
            param="--cp",
        )


def context_memory(mem: M, cp: int) -> M:
    """A device's memory under context parallelism, computed at its context/cp tokens of each
    sequence, with the largest context as ``--context`` counts it: cp times the device's, down to
    whole 2·cp chunks. The ring's K/V blocks in flight (two of the device's own size) are left out."""
    c = mem.max_context_by_memory
    if cp == 1 or not c:
        return mem
    return replace(mem, max_context_by_memory=c * cp // (2 * cp) * (2 * cp))


def stages(layers: int, pp: int) -> list[tuple[int, int]]:
    """Contiguous layer ranges of ``pp`` stages, the first ``layers mod pp`` one layer longer.

    >>> stages(80, 3)
    [(0, 27), (27, 54), (54, 80)]
    """
    return chunks(layers, pp, 1)


def group_link(links: Links, n: int, stride: int, what: str) -> Link:
    """The link a group of ``n`` devices ``stride`` apart communicates over: the NVLink bridge when
    the ``stride · n`` devices it spans are one bridged set (a pair), scale-up when they fit in one
    scale-up domain (or it is unknown), else scale-out: its :func:`local_members` in each node on
    their own NICs, scale-up between them. :class:`InputError` when the device lacks the figure."""
    bridge = links.bridge
    if bridge is not None and stride * n <= links.bridge_devices:
        return bridge
    domain = links.scaleup_domain
    if domain is None or stride * n <= domain:
        if links.scaleup is None:
            raise InputError(
                f"{what} needs the device's scale-up link bandwidth; the catalog has none: give "
                "--link-bandwidth BYTES_PER_S",
                param="--link-bandwidth",
            )
        return links.scaleup
    if links.scaleout is None:
        raise InputError(
            f"{what} spans {stride * n} devices, beyond a scale-up domain of {domain}, and the device "
            "has no scale-out bandwidth: give --scaleout-bandwidth BYTES_PER_S",
            param="--scaleout-bandwidth",
        )
    return replace(links.scaleout, per_node=local_members(links, n, stride), inner=links.scaleup)


def local_members(links: Links, n: int, stride: int) -> int:
    """How many of a group of ``n`` devices ``stride`` apart share one scale-up domain: all of
    them when ``stride · n`` fits (or the domain is unknown), else domain/stride, at least one
    (a regular layout: the stride divides the domain, or the domain the stride).

    >>> from attnroof.devices.links import Links
    >>> links = Links(scaleup_bytes_per_s=450e9, scaleout_bytes_per_s=50e9, scaleup_domain=8)
    >>> local_members(links, 8, 1), local_members(links, 64, 1), local_members(links, 16, 2), local_members(links, 4, 8)
    (8, 8, 4, 1)
    """
    domain = links.scaleup_domain
    if domain is None or stride * n <= domain:
        return n
    return max(1, min(n, domain // stride))
