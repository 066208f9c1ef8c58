"""Every plan on up to N devices, costed, and the ones worth running: the inverse of
:func:`attnroof.model.spread.spread` (one plan a user spells out).

For a device count n dividing N, the search takes every split n = TP × CP × PP × DP in which

    TP   divides the attention heads, and divides or is divided by the KV heads (latent: any);
         sequence parallelism on whenever TP > 1 (what Megatron-LM runs; it never costs more here),
         or off, or both (``sps``)
    CP   1, or (prefill and training, an attention the K/V ring runs) any degree that cuts the
         context into 2·CP equal chunks
    PP   is at most the layers
    DP   divides the batch (training: ``--global-batch`` tokens / context sequences)
    EP   (mixture of experts) divides the experts and, each expert cut as its TP (ETP = TP,
         Megatron's default), DP × CP; or, each expert whole on a device (ETP 1, what large MoE
         runs use), TP × DP × CP; a plan with EP > 1 carries ``--expert-imbalance`` F (at most
         its EP: the busiest device takes at most every token)
    M    micro-batches per replica: every divisor of the replica's batch (prefill and training)
    the pipeline's schedule: 1F1B; interleaved with 2 or 4 chunks a device (or each count the
         layers allow, ``virtual_stages="all"``); ZB-H1 (training),
         each where Megatron's rules allow it (:mod:`attnroof.model.schedules`)
    ZeRO 0, 1, 2, 3 when DP × CP > 1 (training), under the sharding policies the user names
         (:mod:`attnroof.model.sharding`: when ZeRO 3 gathers the weights and ZeRO 2 and 3
         reduce the gradients, each value given tried; the hybrid shard degrees dividing DP)
    recomputation none, selective, full (training)

and costs each with the whole model's arithmetic on one device of each stage, the collectives
on the link roof (:mod:`attnroof.model.spread`, :mod:`attnroof.model.train_spread`). A plan is
rejected, with its reason counted, when a degree does not divide what it cuts or the busiest
device's memory exceeds its capacity (a training plan on its memory alone, before it is
costed). What is left is ranked by its **bound** — the least time the plan can take (every
collective hidden behind kernels, the schedule's fill and drain); its estimate with the
collectives hidden only behind their own pass (``--overlap``) is kept beside — and reduced to
its **Pareto front** over step time, memory per device and devices used: a plan stays unless
another is no slower, needs no more memory and no more devices, and is better in one of the
three. Training plans are judged on arrays, many at once, from the parts they share
(:mod:`attnroof.model.plan_table`); prefill and decode plans one by one. A search of many plans
is judged over the machine's cores in forked processes (the answer is the same bit for bit).

Length: the candidates, the filters, the costing and the front, and ``--fit`` (the same search
on one device count at a time), in one place, so that every dimension a plan has is enumerated
and checked once.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import operator
import os
import re
import signal
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from attnroof.errors import InputError
from attnroof.model.layers import layer_table
from attnroof.model.parallel import Plan
from attnroof.model.schedules import INTERLEAVED, ONE_F_ONE_B, ZB_H1, check_schedule, chunks, splits
from attnroof.model.sharding import ZERO_STAGES, sharding_json, when_sent
from attnroof.model.spec import ModelConfig
from attnroof.model.spread import Spread
from attnroof.model.train_options import EVERY_MICROBATCH, EVERY_PASS, GRAD_REDUCES, TRAIN, WEIGHT_GATHERS
from attnroof.model.training_memory import FULL, NONE, SELECTIVE
from attnroof.operators import ATTENTION, rule

RECOMPUTES = (NONE, SELECTIVE, FULL)
MAX_PLANS = 500_000
"""The most plans one search tries when they are judged on arrays (training,
:mod:`attnroof.model.plan_table`: some 10,000 a second on this project's two-core machine for a
model whose layers differ, as DeepSeek-V3's dense and MoE layers do, to 35,000 for one whose
layers are alike, so from a quarter of a minute to a minute); more is refused in one line —
narrow the search with ``--where`` — rather than left running."""
MAX_PLANS_ONE_BY_ONE = 100_000
"""The same for plans costed one by one (prefill and decode: some 1,000 to 3,000 a second here,
each stage's operators and memory kept for the plans that share them; a search of them is a
twelfth the size of a training one: no ZeRO stage, recomputation or ZB-H1)."""
MAX_DEVICES = 1 << 20
"""The most devices a search takes: the largest clusters announced hold some 10⁵ GPUs."""

WHERE_DIGITS = 18
"""The most digits a number in ``--where`` may have: every field of a plan is a count below
:data:`MAX_DEVICES` (or a micro-batch count of the same order), so 18 digits (an int64) hold any
comparison that means something; a 5,000-digit one is beyond what ``int()`` converts."""
NOT_HEADS = "TP does not divide the heads (or the KV heads)"
NOT_LAYERS = "PP exceeds the layers"
NOT_BATCH = "DP does not divide the batch"
NOT_SEQUENCE = "the micro-batch's tokens do not split over TP (sequence parallelism)"
NOT_FIT = "does not fit in memory"
NOT_STATES = "its weights, gradients and optimizer state alone do not fit in memory"
NOT_SCHEDULE = "the pipeline schedule's rules (micro-batches, layer chunks) do not hold"
NOT_CP = (
    "CP cannot run this step (decode; windowed, latent, chunked, sparse, linear or state-space attention)"
)
NOT_CONTEXT = "the context does not cut into 2·CP chunks"
NOT_EXPERT_WIDTH = "ETP does not divide the expert width"
NOT_SHARD = "no --dp-shard degree divides DP (and its copies the experts' EDP)"
FILTERED = "left out by --where"


@dataclass(frozen=True, slots=True)
class Option:
    """One candidate: a plan and, for training, its recomputation."""

    plan: Plan
    recompute: str = NONE

    def fields(self) -> dict[str, Any]:
        """The values ``--where`` compares (the plan's degrees, its sharding policy as it sends
        (:func:`attnroof.model.sharding.when_sent`), micro-batches, recompute)."""
        p = self.plan
        gather, reduce_ = when_sent(p)
        return {
            "tp": p.tp,
            "pp": p.pp,
            "cp": p.cp,
            "dp": p.dp,
            "ep": p.ep,
            "etp": p.expert_tp,
            "devices": p.devices,
            "microbatches": p.microbatches,
            "virtual_stages": p.virtual_stages,
            "zero": p.zero,
            "weight_gather": gather or "none",
            "grad_reduce": reduce_,
            "dp_shard": (p.dp_shard or p.dp) if p.zero else 1,
            "recompute": self.recompute,
            "schedule": p.schedule,
        }


@dataclass(frozen=True, slots=True)
class Row:
    """A costed plan that fits: its bound and estimate and its memory per device. Its step
    (:class:`Spread`), totals and limiter are worked out again when asked (for the plans shown:
    the front), not kept for every plan: a search may run in several processes."""

    option: Option
    time_s: float
    """The bound: the least time the plan can take."""
    estimate_time_s: float
    memory_bytes: float
    fits: bool | None
    cost_of: Callable[[Option], Spread] = field(repr=False, compare=False)
    totals_of: Callable[[Spread], dict[str, Any]] = field(repr=False, compare=False)
    train: bool = False
    """A training plan: its JSON names its sharding policy."""
    _known: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def spread(self) -> Spread:
        if "spread" not in self._known:
            self._known["spread"] = self.cost_of(self.option)
        return self._known["spread"]

    @property
    def totals(self) -> dict[str, Any]:
        if "totals" not in self._known:
            self._known["totals"] = self.totals_of(self.spread)
        return self._known["totals"]

    @property
    def limiter(self) -> str:
        return limiter(self.spread, self.totals)

    def to_json(self, *, full: bool = True) -> dict[str, Any]:
        """The plan, its times and memory; ``full`` adds its rates, bubble and limiter."""
        plan = self.option.plan
        out = {
            "parallel": plan.to_json() | ({"sharding": sharding_json(plan)} if self.train else {}),
            "recompute": self.option.recompute,
            "time_s": self.time_s,
            "estimate_time_s": self.estimate_time_s,
            "memory_per_device_bytes": self.memory_bytes,
            "fits": self.fits,
        }
        if full:
            t = self.totals
            out.update(
                limiter=self.limiter,
                tokens_per_s=t.get("tokens_per_s"),
                mfu=t.get("mfu"),
                bubble_share=t["bubble_share"],
            )
        return out


@dataclass
class Search:
    """What a search tried: every costed plan that fits, the Pareto front of them (best first),
    and the count of plans rejected for each reason."""

    rows: list[Row] = field(default_factory=list)
    front: list[Row] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    tried: int = 0
    """Plans looked at (after ``--where``): those that fit, and those rejected for not fitting."""
    costed: int = 0
    """Plans costed in full (the rest were rejected on their memory alone)."""
    least_misfit_bytes: float | None = None
    """The least memory per device of the plans that did not fit."""

    @property
    def refused(self) -> Counter[str]:
        """The rejections before a plan is tried (the rules, ``--where``): every reason but not
        fitting and not splitting over sequence parallelism, which only trying finds."""
        return Counter({why: n for why, n in self.rejected.items() if why not in (NOT_FIT, NOT_SEQUENCE)})


def divisors(n: int) -> list[int]:
    """Every d that divides ``n``, smallest first (pairs d, n/d up to √n).

    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


VIRTUAL_STAGES = (2, 4)
"""The chunk counts a search tries by default: 2 and 4, the counts most runs use; every count
the layers allow is some 1.7 times the plans (NeMo's 5, 6, 12 and 20 and MegaScale's 12 among
them), asked for with :data:`EVERY_COUNT`."""
EVERY_COUNT = "all"


@dataclass(frozen=True, slots=True)
class Choices:
    """What a search varies beyond the degrees, and what it holds as the user gave it: the TP
    and CP degrees (None: every divisor that can run), ZeRO stages, recomputations and pipeline
    schedules (None: all of them that apply), sequence parallelism (None: whenever TP > 1,
    except decode) and overlap (the estimate's)."""

    tps: tuple[int, ...] | None = None
    cps: tuple[int, ...] | None = None
    zeros: tuple[int, ...] | None = None
    recomputes: tuple[str, ...] | None = None
    schedules: tuple[str, ...] | None = None
    sp: bool | None = None
    sps: tuple[bool, ...] | None = None
    """Sequence parallelism's settings tried for TP > 1, each (None: ``sp``'s one): ``(True,
    False)`` searches plans with it and without, as BLOOM and MT-NLG ran."""
    overlap: bool = True
    expert_imbalance: float = 1.0
    gathers: tuple[str, ...] = (EVERY_PASS,)
    """When ZeRO 3 plans gather the weights, each tried."""
    grad_reduces: tuple[str, ...] = (EVERY_MICROBATCH,)
    """When ZeRO 2 and 3 plans reduce the gradients, each tried."""
    dp_shards: tuple[int, ...] | None = None
    """Hybrid sharding's shard degrees, each that divides a plan's DP tried (None: fully sharded)."""
    virtual_stages: tuple[int, ...] | str = VIRTUAL_STAGES
    """The model chunks per device an interleaved schedule is tried with, or :data:`EVERY_COUNT`:
    each count the layers allow (:func:`every_chunk_count`)."""


@functools.lru_cache(maxsize=4096)
def every_chunk_count(layers: int, pp: int) -> tuple[int, ...]:
    """Every count of model chunks a device of ``pp`` stages can hold under the interleaved
    schedule: each v ≥ 2 by which the layers cut into pp × v equal chunks or, counting the
    embedding and the loss as a layer each as Megatron-LM can, layers + 2 into chunks of at least
    two (:func:`attnroof.model.schedules.chunks`).

    >>> every_chunk_count(80, 2), every_chunk_count(126, 16)
    ((2, 4, 5, 8, 10, 20, 40), (2, 4))
    """
    return tuple(v for v in range(2, layers // pp + 2) if splits(layers, pp, v))


def _pipelines(
    model: ModelConfig, pp: int, m: int, train: bool, c: Choices, rejected: Counter[str]
) -> Iterator[tuple[str, int]]:
    """(schedule, virtual stages) a pipeline of ``pp`` stages and ``m`` micro-batches can run:
    1F1B; interleaved with each chunk count of ``c`` that Megatron's rules allow; ZB-H1
    when training. One stage has no schedule to choose."""
    if pp == 1:
        yield ONE_F_ONE_B, 1
        return
    counts = every_chunk_count(model.layers, pp) if c.virtual_stages == EVERY_COUNT else c.virtual_stages
    tried = [(ONE_F_ONE_B, 1), *((INTERLEAVED, int(v)) for v in counts), *([(ZB_H1, 1)] if train else [])]
    for name, v in tried:
        if c.schedules is not None and name not in c.schedules:
            continue
        try:
            check_schedule(name, v, pp, m, training=train)
            chunks(model.layers, pp, v)
        except InputError:
            rejected[NOT_SCHEDULE] += 1
            continue
        yield name, v


def _cp_runs(model: ModelConfig) -> bool:
    """Whether every attention-kind row's entry runs under context parallelism (a linear-attention
    or state-space mixer does not: its state would pass from device to device; issue 23)."""
    return all(rule(r).context_parallel for r in layer_table(model) if rule(r).kind == ATTENTION)


def _context_splits(
    model: ModelConfig, phase: str, context: int, room: int, allowed: tuple[int, ...] | None,
    rejected: Counter[str],
) -> Iterator[int]:  # fmt: skip
    """The CP degrees dividing ``room`` (the devices left after TP and PP) that can run: one, or
    (prefill and training) any that cuts the context into 2·CP equal chunks of an attention
    context parallelism runs (not windows, not latent: TransformerEngine's ring refuses both)."""
    for c in divisors(room):
        if allowed is not None and c not in allowed:
            continue
        if c == 1:
            yield 1
        elif phase == "decode" or model.latent is not None or model.windowed_layers or not _cp_runs(model):
            rejected[NOT_CP] += 1
        elif context % (2 * c):
            rejected[NOT_CONTEXT] += 1
        else:
            yield c


def options(
    model: ModelConfig,
    phase: str,
    batch: int,
    devices: int,
    rejected: Counter[str],
    choices: Choices = Choices(),
    *,
    context: int = 1,
    exact: bool = False,
    states_fit: Callable[[Plan], bool] | None = None,
) -> Iterator[Option]:
    """Every candidate on n devices, n dividing ``devices`` (only ``devices`` itself when
    ``exact``), as the module's table says, within ``choices``; the splits that cannot be run
    are counted in ``rejected``. With ``states_fit`` (whether a plan's weights, gradients and
    optimizer state alone fit its busiest device, which no micro-batch count, schedule or
    recomputation changes), a sharding policy whose states do not is never enumerated further:
    its plans are counted under :data:`NOT_STATES`, before ``--where``."""
    c = choices
    for n in [devices] if exact else divisors(devices):
        for tp in divisors(n):
            if c.tps is not None and tp not in c.tps:
                continue
            if model.heads % tp or (model.latent is None and model.kv_heads % tp and tp % model.kv_heads):
                rejected[NOT_HEADS] += 1
                continue
            one = phase != "decode" if c.sp is None else c.sp
            for sp in (False,) if tp == 1 else (c.sps if c.sps is not None else (one,)):
                yield from _below_tp(model, phase, batch, n, tp, sp, context, c, rejected, states_fit)


def _below_tp(
    model: ModelConfig, phase: str, batch: int, n: int, tp: int, sp: bool, context: int, c: Choices,
    rejected: Counter[str], states_fit: Callable[[Plan], bool] | None,
) -> Iterator[Option]:  # fmt: skip
    """:func:`options` under one TP degree and sequence-parallel setting."""
    train = phase == TRAIN
    for pp in divisors(n // tp):
        if pp > model.layers:
            rejected[NOT_LAYERS] += 1
            continue
        for cp in _context_splits(model, phase, context, n // (tp * pp), c.cps, rejected):
            dp = n // (tp * pp * cp)
            if batch % dp:
                rejected[NOT_BATCH] += 1
                continue
            for etp, ep in _expert_splits(model, tp, dp * cp, rejected):
                f = min(c.expert_imbalance, ep) if ep > 1 else 1.0
                ms = divisors(batch // dp) if phase != "decode" or pp > 1 else [1]
                pipes = [(m, list(_pipelines(model, pp, m, train, c, rejected))) for m in ms]
                pipes = [(m, pipe) for m, pipe in pipes if pipe]
                under = sum(len(pipe) for _, pipe in pipes)  # plans under each policy, per recompute
                if not under:
                    continue
                rs = (c.recomputes or RECOMPUTES) if train else (NONE,)
                chunked = {v: (m, name) for m, pipe in reversed(pipes) for name, v in reversed(pipe)}
                for zero in (c.zeros or ZERO_STAGES) if train and dp * cp > 1 else (0,):
                    base = Plan(
                        tp=tp, pp=pp, ep=ep, dp=dp, sp=sp, microbatches=pipes[0][0], overlap=c.overlap,
                        zero=zero, cp=cp, schedule=pipes[0][1][0][0], virtual_stages=pipes[0][1][0][1],
                        etp=etp, expert_imbalance=f,
                    )  # fmt: skip
                    for policy in _policies(base, c, rejected, under):
                        if states_fit is not None and not any(
                            states_fit(replace(policy, microbatches=m, schedule=name, virtual_stages=v))
                            for v, (m, name) in chunked.items()
                        ):  # no chunk count's states fit: none of its plans can
                            rejected[NOT_STATES] += under * len(rs)
                            continue
                        for m, pipe in pipes:
                            for name, v in pipe:
                                plan = replace(policy, microbatches=m, schedule=name, virtual_stages=v)
                                for r in rs:
                                    yield Option(plan, r)


def _policies(plan: Plan, c: Choices, rejected: Counter[str], under: int = 1) -> Iterator[Plan]:
    """The plan under each sharding policy of ``c`` its ZeRO stage takes: each weight gather
    (ZeRO 3), each gradient reduction (ZeRO 2 and 3), each hybrid shard degree that divides DP
    and whose copies divide the experts' replicas (ZeRO 1 and up). None: ``under`` rejections
    counted (the micro-batch counts and schedules the plan stands for)."""
    z = plan.zero
    shards: Sequence[int] = (0,)
    if c.dp_shards is not None and z:
        shards = [0 if s == plan.dp else s for s in c.dp_shards if plan.dp % s == 0]
        shards = [s for s in dict.fromkeys(shards) if plan.edp % (plan.dp // (s or plan.dp)) == 0]
        if not shards:
            rejected[NOT_SHARD] += under
            return
    for s in shards:
        for gather in c.gathers if z == 3 else (EVERY_PASS,):
            for reduce_ in c.grad_reduces if z >= 2 else (EVERY_MICROBATCH,):
                yield replace(plan, weight_gather=gather, grad_reduce=reduce_, dp_shard=s)


def _expert_splits(
    model: ModelConfig, tp: int, replicas: int, rejected: Counter[str]
) -> Iterator[tuple[int, int]]:
    """(ETP, EP) pairs of a mixture of experts on TP × ``replicas`` devices: ETP = TP (0, the
    default) with EP dividing the replicas, and, when TP > 1, ETP 1 with EP dividing TP × the
    replicas; EP always divides the experts. A dense model: (0, 1)."""
    if model.experts is None:
        yield 0, 1
        return
    experts, width = model.experts.experts, model.experts.width
    if width % tp:
        rejected[NOT_EXPERT_WIDTH] += 1
    else:
        yield from ((0, e) for e in divisors(replicas) if experts % e == 0)
    if tp > 1:
        yield from ((1, e) for e in divisors(tp * replicas) if experts % e == 0)


Where = Callable[[Option], bool]

_CONDITION = re.compile(r"^\s*([a-z_]+)\s*(<=|>=|==|!=|<|>|=)\s*([A-Za-z0-9_]+)\s*$")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
}


def parse_where(text: str) -> Where:
    """``tp<=8``, ``pp=1``, ``recompute!=full``, ``schedule=interleaved``: one condition on a plan's field (see
    :meth:`Option.fields`); :class:`InputError` naming the text otherwise.

    >>> parse_where("tp<=8")(Option(Plan(tp=8)))
    True
    """
    match = _CONDITION.match(text)
    known = sorted(Option(Plan()).fields())
    if match is None:
        raise InputError(
            f"--where {text!r}: expected FIELD OP VALUE, e.g. tp<=8 (fields: {', '.join(known)})"
        )
    name, op, raw = match.groups()
    if name not in known:
        raise InputError(f"--where {text!r}: no field {name!r} (fields: {', '.join(known)})")
    value: Any = raw
    words = {
        "recompute": RECOMPUTES,
        "schedule": (ONE_F_ONE_B, INTERLEAVED, ZB_H1),
        "weight_gather": (*WEIGHT_GATHERS, "none"),
        "grad_reduce": GRAD_REDUCES,
    }.get(name)
    if words is None:
        if not raw.isdigit():
            raise InputError(f"--where {text!r}: {name} is compared with a whole number")
        if len(raw) > WHERE_DIGITS:
            raise InputError(
                f"--where {text!r}: a number of {len(raw):,} digits; {name} is compared with at most "
                f"{WHERE_DIGITS} (a search takes at most {MAX_DEVICES:,} devices)"
            )
        value = int(raw)
    elif raw not in words or op not in ("=", "==", "!="):
        raise InputError(f"--where {text!r}: {name} is = or != one of {', '.join(words)}")
    compare = _OPS[op]
    return lambda o: bool(compare(o.fields()[name], value))


def limiter(s: Spread, totals: dict[str, Any]) -> str:
    """What the plan's bound spends most of its time on: the kernels' arithmetic, their memory
    traffic, a link (named), or the pipeline's bubble."""
    time = totals["time_s"]
    m = s.plan.microbatches
    slow = s.slowest
    memory = m * sum(o.count * o.memory_time_s for o in slow.ops)
    shares = {
        "compute": m * slow.compute_time_s - memory,
        "memory": memory,
        "bubble": totals["bubble_share"] * time,
    }
    for st in s.stages:
        for link, busy in st.link_times().items():
            total = m * busy + st.sync_link_times().get(link, 0.0)
            shares[f"{link} link"] = max(shares.get(f"{link} link", 0.0), total)
    return max(shares, key=lambda k: shares[k])


def pareto(rows: Sequence[Row]) -> list[Row]:
    """The rows no other row beats on step time, memory per device and devices used at once,
    fastest first: in order of (time, memory, devices), a row stays unless an earlier one needs
    no more memory and no more devices (on arrays: for each device count, the least memory of
    the earlier rows on at most that many devices). Rows equal on all three are ordered by their
    estimate, then by their fields (:meth:`Option.fields`), so that the one kept is the same
    whatever order the search found them in.

    >>> from types import SimpleNamespace as N
    >>> r = lambda t, mem, d: N(time_s=t, estimate_time_s=t, memory_bytes=mem, option=N(plan=N(devices=d), fields=dict))
    >>> [(x.time_s, x.memory_bytes) for x in pareto([r(1, 9, 8), r(2, 5, 8), r(2, 9, 8), r(3, 5, 4)])]
    [(1, 9), (2, 5), (3, 5)]
    """
    ordered = sorted(
        rows,
        key=lambda r: (
            r.time_s, r.memory_bytes, r.option.plan.devices, r.estimate_time_s, tuple(r.option.fields().items())
        ),
    )  # fmt: skip
    if not ordered:
        return []
    memory = np.array([r.memory_bytes for r in ordered], dtype=float)
    devices = np.array([r.option.plan.devices for r in ordered])
    beaten = np.zeros(len(ordered), dtype=bool)
    for d in np.unique(devices):
        earlier = np.minimum.accumulate(np.where(devices <= d, memory, np.inf))  # through each row
        before = np.concatenate(([np.inf], earlier[:-1]))
        beaten |= (devices == d) & (before <= memory)
    return [r for r, out in zip(ordered, beaten, strict=True) if not out]


def search(
    model: ModelConfig,
    phase: str,
    batch: int,
    devices: int,
    cost: Callable[[Option], Spread],
    totals: Callable[[Spread], dict[str, Any]],
    capacity_bytes: float | None,
    where: Sequence[Where] = (),
    choices: Choices = Choices(),
    *,
    context: int = 1,
    exact: bool = False,
    memory: Callable[[Option, float], float] | None = None,
    judge: Callable[[Sequence[Option]], list[tuple[Any, ...]]] | None = None,
    states_fit: Callable[[Plan], bool] | None = None,
    progress: Callable[[str, int, int | None], None] | None = None,
) -> Search:
    """Cost every candidate (``cost``: an option's :class:`Spread`, memory without its capacity
    so that no largest batch is searched per plan; ``totals``: its totals), keep those that fit
    ``capacity_bytes``, and their Pareto front. With ``memory`` (an option's busiest device's
    bytes, as ``cost`` would report them), a plan that cannot fit is rejected before it is
    costed. With ``judge`` (many options' verdicts at once, as :func:`_judge` gives them one by
    one: :class:`attnroof.model.plan_table.PlanTable`, training plans on arrays), the plans are
    judged by it; ``cost`` then works out only the plans shown. ``states_fit``: see
    :func:`options` (the plans it rules out are never tried)."""
    if devices > MAX_DEVICES:
        raise InputError(
            f"--devices {devices:,}: more than {MAX_DEVICES:,}, beyond any cluster built", param="--devices"
        )
    out = Search()
    chosen = []
    most = MAX_PLANS if judge is not None else MAX_PLANS_ONE_BY_ONE
    every = options(
        model,
        phase,
        batch,
        devices,
        out.rejected,
        choices,
        context=context,
        exact=exact,
        states_fit=states_fit,
    )
    tell = progress or (lambda stage, done, total: None)
    for i, o in enumerate(every):
        if i % PROGRESS_EVERY == 0:
            tell("enumerating plans", i, None)
        if not all(w(o) for w in where):
            out.rejected[FILTERED] += 1
            continue
        chosen.append(o)
        if len(chosen) > most:
            raise InputError(
                f"more than {most:,} plans to try: narrow them with --where (e.g. tp<=8, cp=1)",
                param="--where",
            )
    out.tried = len(chosen)
    job = _Job(cost, memory, capacity_bytes, judge)
    for o, (what, *figures) in zip(chosen, _judged(job, chosen, tell), strict=True):
        if what == NOT_SEQUENCE:
            out.rejected[NOT_SEQUENCE] += 1
            continue
        if what == NOT_FIT:
            out.rejected[NOT_FIT] += 1
            out.least_misfit_bytes = min(out.least_misfit_bytes or figures[0], figures[0])
            continue
        held, fits, bound, estimate, costed = figures
        out.costed += costed
        out.rows.append(Row(o, bound, estimate, held, fits, cost, totals, train=phase == TRAIN))
    out.front = pareto(out.rows)
    return out


@dataclass(frozen=True, slots=True)
class _Job:
    """What judging a plan needs: its cost, its memory (None: from the cost), the capacity."""

    cost: Callable[[Option], Spread]
    memory: Callable[[Option, float], float] | None
    """An option's busiest device's bytes; given a limit, it may stop at the first device over
    it and return that device's bytes (the plan's are at least as many)."""
    capacity_bytes: float | None
    judge: Callable[[Sequence[Option]], list[tuple[Any, ...]]] | None = None
    """Many options' verdicts at once (None: each by :func:`_judge`)."""


PROGRESS_EVERY = 4096
"""Candidates enumerated between two reports to ``progress``."""
PARALLEL_FROM = 2_000
"""Plans from which a search spreads over the machine's cores (forked processes, each with the
caches built so far); fewer are not worth a process's start."""
_JOB: tuple[_Job, Sequence[Option]] | None = None
"""The job the forked processes judge and its options (set before they fork: closures do not
pickle, and the options need not be: a process is handed the indices of its share)."""


def _judge(job: _Job, o: Option, least_misfit: float = math.inf) -> tuple[Any, ...]:
    """One plan's verdict: (NOT_SEQUENCE,), (NOT_FIT, bytes), or ("fit", bytes, fits, bound,
    estimate, costed: 1 when costed in full). A plan that does not fit is looked at only until
    its bytes pass both the capacity and ``least_misfit`` (the least of the misfits judged so
    far): past that it can be neither costed nor the least misfit, so the search's answer is the
    same as when every device is counted."""
    if job.memory is not None and job.capacity_bytes is not None:  # what cannot fit is not costed
        try:
            held = job.memory(o, max(job.capacity_bytes, least_misfit))
        except InputError as e:
            if e.param != "--sp":
                raise
            return (NOT_SEQUENCE,)
        if held > job.capacity_bytes:
            return (NOT_FIT, held)
    try:
        s = job.cost(o)
    except InputError as e:
        if e.param == "--sp":
            return (NOT_SEQUENCE,)
        raise
    mem = s.busiest_memory.total_bytes
    fits = None if job.capacity_bytes is None else mem <= job.capacity_bytes
    if fits is False:
        return (NOT_FIT, mem)
    return ("fit", mem, fits, s.bound_time_s, s.time_s, 1)


def _judge_block(share: Sequence[int]) -> list[tuple[Any, ...]]:
    """A forked process's share (the options' indices): its verdicts, or the one-line error that
    stopped it."""
    assert _JOB is not None
    job, chosen = _JOB
    try:
        return _judge_all(job, [chosen[i] for i in share])
    except InputError as e:
        return [("error", str(e), e.param)]


def _judge_all(job: _Job, options: Sequence[Option]) -> list[tuple[Any, ...]]:
    """Each option's verdict, in order, the least misfit so far handed on."""
    if job.judge is not None:
        return job.judge(options)
    out, least = [], math.inf
    for o in options:
        verdict = _judge(job, o, least)
        if verdict[0] == NOT_FIT:
            least = min(least, verdict[1])
        out.append(verdict)
    return out


WORKERS_ENV = "ATTNROOF_WORKERS"
"""Processes a large search spreads over (default: the machine's cores, at most 8; 1: none)."""


def search_workers() -> int:
    """The processes a large search uses: ``$ATTNROOF_WORKERS``, else the cores (at most 8).
    :class:`InputError` for a value that is not a whole number ≥ 1."""
    raw = os.environ.get(WORKERS_ENV)
    if raw is None:
        return min(os.cpu_count() or 1, 8)
    if not raw.strip().isdigit() or int(raw) < 1:
        raise InputError(f"{WORKERS_ENV}={raw!r} must be a whole number ≥ 1 (1: one process)")
    return int(raw)


def _judged(
    job: _Job, chosen: Sequence[Option], tell: Callable[[str, int, int | None], None]
) -> list[tuple[Any, ...]]:
    """Every plan's verdict, in order: here, or over the cores in forked processes when there
    are many (:func:`_shares`, each share handed out as a process comes free, so that ``tell``
    hears each as it is done). A process ignores ^C: the search's own process stops the rest and
    leaves nothing half done (nothing is written before the search ends)."""
    workers = search_workers()
    n = len(chosen)
    if n < PARALLEL_FROM or workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        tell("judging plans", 0, n)
        return _judge_all(job, chosen)
    global _JOB
    _JOB = (job, chosen)
    shares = _shares(job, chosen, workers)
    done: list[list[tuple[Any, ...]]] = [[] for _ in shares]
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_quiet)
    try:
        futures = {pool.submit(_judge_block, share): i for i, share in enumerate(shares)}
        finished = 0
        tell("judging plans", 0, n)
        for f in as_completed(futures):
            done[futures[f]] = f.result()
            finished += len(shares[futures[f]])
            tell("judging plans", finished, n)
    except BaseException:  # ^C: the processes stopped now, not after their shares
        processes = list((getattr(pool, "_processes", None) or {}).values())  # no public way to stop them
        for process in processes:
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        _JOB = None
    pool.shutdown()
    failed = [(share, v[0]) for share, v in zip(shares, done, strict=True) if v and v[0][0] == "error"]
    if failed:  # the error one process would meet first: its plans judged again here, in order
        _judge_all(job, [chosen[i] for i in sorted(i for share, _ in failed for i in share)])
        raise InputError(failed[0][1][1], param=failed[0][1][2])
    out: list[tuple[Any, ...]] = [()] * n
    for share, verdicts in zip(shares, done, strict=True):
        for i, v in zip(share, verdicts, strict=True):
            out[i] = v
    return out


def _quiet() -> None:
    """A judging process leaves ^C to the search's own (which stops it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _shares(job: _Job, chosen: Sequence[Option], workers: int) -> list[list[int]]:
    """The shares the processes judge, by index, handed out in this order as each process comes
    free: contiguous blocks, so that a process meets the same shards again; or, judged on arrays,
    the plans of one TP and CP degree together (they share their shards, kernels, collectives and
    layouts, which a process builds once), the largest first (each next share to the first
    process free balances the load as well as a fixed split into one share a process did)."""
    n = len(chosen)
    if job.judge is None:
        size = -(-n // (4 * workers))
        return [list(range(i, min(i + size, n))) for i in range(0, n, size)]
    groups: dict[tuple[int, int], list[int]] = {}
    for i, o in enumerate(chosen):
        groups.setdefault((o.plan.tp, o.plan.cp), []).append(i)
    return sorted(groups.values(), key=len, reverse=True)


MAX_FIT_DEVICES = 4096
"""``model --fit`` searches device counts (powers of two) up to this many."""


@dataclass(frozen=True, slots=True)
class Fit:
    """The fewest devices (a power of two) on which a plan fits, the fastest plan there by its
    bound, and the search at each count tried."""

    devices: int
    best: Row
    searches: dict[int, Search]

    def to_json(self) -> dict[str, Any]:
        return {
            "devices": self.devices,
            "searched": [
                {"devices": n, "tried": f.tried, "fit": len(f.rows), "rejected": dict(f.rejected)}
                for n, f in self.searches.items()
            ],
            "plans": [r.to_json(full=False) for r in self.searches[self.devices].rows],
        }


def fit(
    model: ModelConfig,
    phase: str,
    batch: int,
    cost: Callable[[Option], Spread],
    totals: Callable[[Spread], dict[str, Any]],
    capacity_bytes: float | None,
    choices: Choices = Choices(),
    max_devices: int = MAX_FIT_DEVICES,
    *,
    context: int = 1,
    memory: Callable[[Option], float] | None = None,
    judge: Callable[[Sequence[Option]], list[tuple[Any, ...]]] | None = None,
) -> Fit:
    """The search (:func:`search`) on exactly 1, 2, 4, … devices until a plan fits; the fastest
    of those plans answers. :class:`InputError` when none up to ``max_devices`` does."""
    searches: dict[int, Search] = {}
    n = 1
    while n <= max_devices:
        found = searches[n] = search(
            model,
            phase,
            batch,
            n,
            cost,
            totals,
            capacity_bytes,
            choices=choices,
            context=context,
            exact=True,
            memory=memory,
            judge=judge,
        )
        if found.front:
            return Fit(n, found.front[0], searches)
        n *= 2
    within = "" if choices.tps is None else f" at TP {', '.join(map(str, choices.tps))}"
    raise InputError(
        f"{model.name} does not fit on {max_devices} devices{within} at --batch {batch}", param="--batch"
    )
