"""A plan search's training plans costed on arrays (:mod:`attnroof.model.search`): the bound,
the estimate and the busiest device's memory of every plan at once, from the parts plans share.

A training plan's cost is built of a few parts, each the same for many plans::

    device class   the devices of one plan that hold the same (standing) shard and the same end
                   of the pipeline (the first, the last, neither) cost alike: a plan of 80 stages
                   is three or four classes, each with its multiplicity
    kernels        a class's placed operators at a micro-batch and a recomputation (and, for
                   ZB-H1, its weight gradients' time), the same under every sharding policy
    collectives    a class's per-micro-batch collectives but the sync (TP, EP, CP, the
                   pipeline's sends), the same under every sharding policy
    sync           a class's data-parallel sync under a sharding policy (ZeRO's stage, when it
                   gathers and reduces, its shard groups), the same at every micro-batch count
                   and recomputation
    memory         a class's states under a sharding policy, its activations at a micro-batch and
                   recomputation, and the micro-batches its schedule keeps in flight (the most
                   any device of the class holds)

Each part is built once, by the builders that cost one plan (:func:`attnroof.model.train_spread.
train_spread`'s), and laid out as a row of arrays (:class:`attnroof.model.busy.Dense`). A plan's
classes are rows gathered from those tables, and every formula of :mod:`attnroof.model.busy` —
each stage's bound and estimate, the schedule's pipeline, each link's traffic — runs over every
row of every plan at once. The figures are :func:`train_spread`'s, plan by plan, but for the last
bits of sums taken in another order (a test holds every plan of several searches to 1e-12).

Length: the device classes, the four tables (kernels, collectives, sync, memory) with the keys
that let plans share their rows, and the gathering of a plan's rows into the formulas: split,
each would need the others' keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from attnroof.devices.links import Links
from attnroof.errors import InputError
from attnroof.model.busy import Axes, Dense, Parts, comm_parts, link_traffic, pipelines, stage_times
from attnroof.model.parallel import Plan, group_link
from attnroof.model.schedules import SCHEDULES, schedule
from attnroof.model.search import NOT_FIT, NOT_SEQUENCE
from attnroof.model.shard import Shard, standing_for
from attnroof.model.sharding import check_sharding, zero_of
from attnroof.model.spec import ModelConfig
from attnroof.model.train_spread import (
    TrainLayout,
    micro_comms,
    stage_kernels,
    sync_comms,
    train_layout,
)
from attnroof.model.training_memory import (
    RECOMPUTE,
    TrainPrecision,
    held_activations,
    kept_activations,
    state_bytes,
)
from attnroof.roofline import Roof


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """Devices of one plan that cost alike: their standing shard, how many, which end of the
    pipeline they hold, and the most micro-batches any of them keeps in flight."""

    shard: Shard
    devices: int
    first: bool
    last: bool
    in_flight: float


@dataclass(frozen=True, slots=True)
class _Plans:
    """What every plan of one layout shares (all but its sharding policy and recomputation): the
    checked layout, its device classes, its row in the memory arrays, and what its collectives
    depend on in the plan (:func:`_comm_group`)."""

    layout: TrainLayout
    classes: tuple[DeviceClass, ...]
    index: int
    comm_group: tuple[Any, ...]
    cut: tuple[Any, ...]
    """What its shards hold: the degrees that cut the model."""


def device_classes(model: ModelConfig, layout: TrainLayout) -> tuple[DeviceClass, ...]:
    """A plan's devices grouped by what they cost: the same standing shard
    (:func:`attnroof.model.shard.standing_for`) at the same end of the pipeline."""
    return _classes(layout, members(model, layout.shards))


def members(model: ModelConfig, shards: tuple[Shard, ...]) -> list[tuple[Shard, bool, bool, list[int]]]:
    """(standing shard, holds the first stage, holds the last, the devices) of each class."""
    out: dict[tuple[Shard, bool, bool], list[int]] = {}
    for i, shard in enumerate(shards):
        out.setdefault((standing_for(model, shard), i == 0, i == len(shards) - 1), []).append(i)
    return [(*key, ii) for key, ii in out.items()]


def _classes(
    layout: TrainLayout, groups: list[tuple[Shard, bool, bool, list[int]]]
) -> tuple[DeviceClass, ...]:
    p, held = layout.plan, layout.sched.in_flight
    return tuple(
        DeviceClass(s, len(ii), first, last, max(held(i, p.pp, p.microbatches, p.virtual_stages) for i in ii))
        for s, first, last, ii in groups
    )  # fmt: skip


SHARDING_FIELDS = ("zero", "weight_gather", "grad_reduce", "dp_shard")
"""A plan's sharding policy (:mod:`attnroof.model.sharding`): its data-parallel sync and the
states a device keeps, nothing else."""
LAYOUT_FIELDS = tuple(f for f in Plan.__dataclass_fields__ if f not in SHARDING_FIELDS)
"""What makes a layout: every field of a plan but its sharding policy."""


def _layout_key(p: Plan) -> tuple[Any, ...]:
    return tuple(getattr(p, f) for f in LAYOUT_FIELDS)


def _cut(p: Plan) -> tuple[Any, ...]:
    """What a plan's shards hold: the degrees that cut the model."""
    return (p.tp, p.pp, p.virtual_stages, p.ep, p.etp, p.sp, p.expert_imbalance, p.cp)


def _policy(p: Plan) -> tuple[Any, ...]:
    return tuple(getattr(p, f) for f in SHARDING_FIELDS)


def _comm_group(plan: Plan, links: Links) -> tuple[Any, ...]:
    """What a device's per-micro-batch collectives depend on in its plan: every degree but its
    micro-batch count, sharding policy and schedule (but for the pipeline's sends), and of its DP
    degree only the link the sends ride (:func:`attnroof.model.parallel.group_link`: their
    group's stride is TP × CP × DP)."""
    send: Any = None
    if plan.pp > 1:
        try:
            send = group_link(links, plan.pp, plan.tp * plan.cp * plan.dp, f"--pp {plan.pp}").kind
        except InputError:  # no such link: the group its own, so that building it says so
            send = ("dp", plan.dp)
    return (
        schedule(plan.schedule).sends(plan.virtual_stages), plan.tp, plan.sp, plan.cp, plan.cp_comm, plan.ep,
        plan.etp, plan.expert_imbalance, plan.pp, send,
    )  # fmt: skip


class _Table:
    """Rows of parts, built in blocks (a block: one part whose sums are arrays of its rows'
    length, :meth:`attnroof.model.busy.Dense.of`), found by key."""

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}
        self.blocks: list[Parts] = []
        self.sizes: list[int] = []
        self.rows = 0

    def add(self, keys: Sequence[Any], parts: Parts) -> None:
        for i, key in enumerate(keys):
            self.index[key] = self.rows + i
        self.blocks.append(parts)
        self.sizes.append(len(keys))
        self.rows += len(keys)

    def dense(self, axes: Axes) -> Dense:
        return Dense.of(self.blocks, axes, self.sizes)


class PlanTable:
    """Training plans of one model, batch, context, roof, links and precision, judged on arrays
    (:meth:`judge`); the parts it builds are kept for the next plans it is handed."""

    def __init__(
        self, model: ModelConfig, batch: int, context: int, roof: Roof, links: Links, prec: TrainPrecision,
        *, fused: bool = True,
    ) -> None:  # fmt: skip
        self.model, self.batch, self.context = model, batch, context
        self.roof, self.links, self.prec, self.fused = roof, links, prec, fused
        self._plans: dict[tuple[Any, ...], _Plans | None] = {}
        self._members: dict[tuple[Any, ...], list[tuple[Shard, bool, bool, list[int]]]] = {}
        self._states: dict[tuple[Any, ...], list[float]] = {}
        self._most_states: dict[tuple[Any, ...], float] = {}
        self._state_index: dict[tuple[int, tuple[Any, ...]], int] = {}
        self._state_rows: list[list[float]] = []
        self._kept: dict[tuple[Any, ...], dict[str, list[float]]] = {}
        self._memory_rows: list[tuple[list[float], dict[str, list[float]]]] = []
        self._kernels, self._comms, self._syncs = _Table(), _Table(), _Table()
        self._weight_grads: list[np.ndarray] = []

    # ------------------------------------------------------------ parts, each built once

    def _of(self, plan: Plan) -> _Plans | None:
        """The layout's shared parts; None when sequence parallelism cannot cut its tokens."""
        key = _layout_key(plan)
        if key not in self._plans:
            self._plans[key] = self._new(plan)
        return self._plans[key]

    def _laid_out(self, plan: Plan) -> tuple[TrainLayout, tuple[Any, ...]] | None:
        """The plan's checked layout and its cut (the degrees that decide what the shards hold),
        its classes' members built once per cut; None when sequence parallelism cannot cut its
        tokens."""
        try:
            lay = train_layout(self.model, self.batch, self.context, plan, self.prec, self.fused)
        except InputError as e:
            if e.param != "--sp":
                raise
            return None
        cut = _cut(lay.plan)
        if cut not in self._members:
            self._members[cut] = members(self.model, lay.shards)
        return lay, cut

    def _new(self, plan: Plan) -> _Plans | None:
        laid = self._laid_out(plan)
        if laid is None:
            return None
        lay, cut = laid
        p = lay.plan
        classes = _classes(lay, self._members[cut])
        kept = self._kept.get((cut, lay.micro, lay.here))
        if kept is None:  # each class's activations of one micro-batch at each recomputation
            every = [
                kept_activations(self.model, lay.micro, lay.here, lay.prec.itemsize, self.fused, r, c.shard)
                for c in classes for r in RECOMPUTE
            ]  # fmt: skip
            kept = self._kept[cut, lay.micro, lay.here] = {
                part: [float(a[part]) for a in every] for part in ("total", "working", "head")
            }
        self._memory_rows.append(([c.in_flight for c in classes], kept))
        return _Plans(lay, classes, len(self._memory_rows) - 1, _comm_group(p, self.links), cut)

    def _state_row(self, ps: _Plans, policy: tuple[Any, ...]) -> int:
        """The states table's row of a layout under a sharding policy: each class's weights,
        gradients and optimizer (:func:`attnroof.model.training_memory.state_bytes`), the same
        for every layout of its cut and DP degree."""
        row = self._state_index.get((ps.index, policy))
        if row is None:
            lay = ps.layout
            states = self._states.get((ps.cut, lay.plan.dp, policy))
            if states is None:
                plan = replace(lay.plan, **dict(zip(SHARDING_FIELDS, policy, strict=True)))
                check_sharding(plan)
                z = zero_of(plan)
                states = [sum(state_bytes(self.model, lay.prec, c.shard, z)) for c in ps.classes]
                self._states[ps.cut, lay.plan.dp, policy] = states
            row = self._state_index[ps.index, policy] = len(self._state_rows)
            self._state_rows.append(states)
        return row

    def _memory(self, layouts: np.ndarray, states_at: np.ndarray, recomputes: np.ndarray) -> np.ndarray:
        """The busiest device's bytes of each plan (its layout's row, its states' row
        (:meth:`_state_row`), its recomputation's index in :data:`RECOMPUTE`), on arrays: the
        most over its classes of states and held activations
        (:func:`attnroof.model.training_memory.held_activations`)."""
        widest = max(len(row[0]) for row in self._memory_rows)
        n, nr = len(self._memory_rows), len(RECOMPUTE)
        states = np.full((len(self._state_rows), widest), -np.inf)
        for i, state in enumerate(self._state_rows):
            states[i, : len(state)] = state
        in_flight = np.zeros((n, widest))
        kept = {part: np.zeros((n, widest, nr)) for part in ("total", "working", "head")}
        for i, (flight, act) in enumerate(self._memory_rows):
            c = len(flight)
            in_flight[i, :c] = flight
            for part, values in act.items():
                kept[part][i, :c] = np.reshape(values, (c, nr))
        a = {part: v[layouts, :, recomputes] for part, v in kept.items()}
        held = states[states_at] + held_activations(a, in_flight[layouts])
        return held.max(axis=1)

    def _kernel_rows(self, keys: list[tuple[Shard, int, int, str]]) -> list[int]:
        """The kernel table's rows of (standing shard, micro-batch, tokens of a sequence,
        recomputation) keys, the missing ones built together: every micro-batch size of a shard
        at once (:func:`attnroof.model.train_spread.stage_kernels`)."""
        t = self._kernels
        missing: dict[tuple[Shard, int, str], set[int]] = {}
        for shard, micro, here, recompute in keys:
            if (shard, micro, here, recompute) not in t.index:
                missing.setdefault((shard, here, recompute), set()).add(micro)
        for (shard, here, recompute), micros in missing.items():
            sizes = sorted(micros)
            parts, w = stage_kernels(
                self.model, sizes, here, self.prec, self.fused, recompute, shard, self.roof
            )
            t.add([(shard, m, here, recompute) for m in sizes], parts)
            self._weight_grads.append(w)
        return [t.index[k] for k in keys]

    def _comm_rows(
        self, keys: list[tuple[tuple[Any, ...], int]], plans: dict[tuple[Any, ...], Any]
    ) -> list[int]:
        """The collectives table's rows of (group, tokens) keys — a group: a device class at a
        recomputation under a plan's degrees, whatever its micro-batch count (:func:`_comm_group`) — the
        missing ones built together, every micro-batch's tokens of a group at once (collectives
        of an array of sizes)."""
        t = self._comms
        missing: dict[tuple[Any, ...], set[int]] = {}
        for group, tokens in keys:
            if (group, tokens) not in t.index:
                missing.setdefault(group, set()).add(tokens)
        for group, sizes in missing.items():
            tokens = sorted(sizes)
            plan, cls, recompute = plans[group]
            comms = micro_comms(
                self.model, plan, cls.shard, np.array(tokens), self.prec.itemsize, self.links, first=cls.first,
                last=cls.last, recompute=recompute, sends=schedule(plan.schedule).sends(plan.virtual_stages),
            )  # fmt: skip
            t.add([(group, n) for n in tokens], comm_parts(comms))
        return [t.index[k] for k in keys]

    def _sync_row(self, plan: Plan, cls: DeviceClass, policy: tuple[Any, ...]) -> int:
        """The sync table's row of a device class under a sharding policy: the same for every
        plan of its degrees, whatever its micro-batches, schedule and recomputation."""
        t = self._syncs
        key = (cls.shard, cls.last, policy, plan.tp, plan.cp, plan.dp, plan.ep, plan.etp, plan.pp)
        row = t.index.get(key)
        if row is None:
            whole = replace(plan, **dict(zip(SHARDING_FIELDS, policy, strict=True)))
            micro, step = sync_comms(self.model, whole, cls.shard, self.prec, self.links, last=cls.last)
            t.add([key], comm_parts(micro, step))
            row = t.index[key]
        return row

    # ------------------------------------------------------------ the plans, on arrays

    def states_fit(self, plan: Plan, capacity_bytes: float | None) -> bool:
        """Whether the weights, gradients and optimizer state of the plan's busiest device fit
        ``capacity_bytes`` on their own: where they do not, no micro-batch count or recomputation
        of the plan fits (:meth:`judge` adds activations to the same states), and a search need
        not enumerate them (:func:`attnroof.model.search.options`). Worked out from the shards
        alone, once per cut, DP degree and policy; a layout that cannot be built (sequence
        parallelism) is left to :meth:`judge`."""
        if capacity_bytes is None:
            return True
        key = (_cut(plan), plan.dp, _policy(plan))  # the same at every micro-batch count and schedule
        if key not in self._most_states:
            laid = self._laid_out(plan)
            if laid is None:
                return True
            lay, cut = laid
            z = zero_of(replace(lay.plan, **dict(zip(SHARDING_FIELDS, _policy(plan), strict=True))))
            self._most_states[key] = max(
                sum(state_bytes(self.model, lay.prec, shard, z)) for shard, *_ in self._members[cut]
            )
        return self._most_states[key] <= capacity_bytes

    def judge(self, options: Sequence[Any], capacity_bytes: float | None) -> list[tuple[Any, ...]]:
        """Each option's verdict, in order, as :func:`attnroof.model.search._judge` gives it:
        (NOT_SEQUENCE,), (NOT_FIT, the busiest device's bytes), or ("fit", those bytes, whether
        they fit (None without a capacity), the bound, the estimate, 1) — its memory first, then,
        for those that fit, its bound and estimate, all on arrays."""
        verdicts: list[tuple[Any, ...] | None] = [None] * len(options)
        judged: list[tuple[int, _Plans, tuple[Any, ...], str]] = []
        for j, o in enumerate(options):
            ps = self._of(o.plan)
            if ps is None:
                verdicts[j] = (NOT_SEQUENCE,)
            else:
                judged.append((j, ps, _policy(o.plan), o.recompute))
        if not judged:
            return verdicts  # type: ignore[return-value]
        which = {r: i for i, r in enumerate(RECOMPUTE)}
        memory = self._memory(
            np.array([ps.index for _, ps, _, _ in judged]),
            np.array([self._state_row(ps, policy) for _, ps, policy, _ in judged]),
            np.array([which[r] for *_, r in judged]),
        )
        fits = np.ones(len(judged), dtype=bool) if capacity_bytes is None else memory <= capacity_bytes
        for (j, *_), held, ok in zip(judged, memory.tolist(), fits.tolist(), strict=True):
            if not ok:
                verdicts[j] = (NOT_FIT, held)
        fitting = [plan for plan, ok in zip(judged, fits.tolist(), strict=True) if ok]
        if fitting:
            fit = None if capacity_bytes is None else True
            times = zip(fitting, memory[fits].tolist(), *self._times(fitting), strict=True)
            for (j, *_), held, bound, estimate in times:
                verdicts[j] = ("fit", held, fit, float(bound), float(estimate), 1)
        return verdicts  # type: ignore[return-value]

    def _times(self, plans: list[tuple[int, _Plans, tuple[Any, ...], str]]) -> tuple[np.ndarray, np.ndarray]:
        """The bound and the estimate of each plan: its classes' rows gathered from the tables,
        each stage's times (:func:`attnroof.model.busy.stage_times`), then the schedule's
        pipeline and each link's traffic over the plan's rows."""
        kernel: list[tuple[Shard, int, int, str]] = []
        comm: list[tuple[tuple[Any, ...], int]] = []
        groups: dict[tuple[Any, ...], Any] = {}
        sync, devices, starts = [], [], []
        micro, chunks, sched, overlap = [], [], [], []
        for _, ps, policy, recompute in plans:
            starts.append(len(kernel))
            lay = ps.layout
            plan, tokens = lay.plan, lay.micro * lay.here
            for cls in ps.classes:
                kernel.append((cls.shard, lay.micro, lay.here, recompute))
                group = (cls.shard, cls.first, cls.last, recompute, *ps.comm_group)
                if group not in groups:
                    groups[group] = (plan, cls, recompute)
                comm.append((group, tokens))
                sync.append(self._sync_row(plan, cls, policy))
                devices.append(cls.devices)
            micro.append(plan.microbatches)
            chunks.append(plan.virtual_stages)
            sched.append(plan.schedule)
            overlap.append(plan.overlap)
        k = np.array(self._kernel_rows(kernel))
        c = np.array(self._comm_rows(comm, groups))
        tables = (self._kernels, self._comms, self._syncs)
        axes = Axes.of([p for t in tables for p in t.blocks])
        rows = (
            self._kernels.dense(axes).take(k) + self._comms.dense(axes).take(c)
            + self._syncs.dense(axes).take(np.array(sync))
        )  # fmt: skip
        start = np.array(starts)
        per_plan = np.diff(np.append(start, len(kernel)))
        m_rows = np.repeat(np.array(micro, dtype=float), per_plan)
        v_rows = np.repeat(np.array(chunks, dtype=float), per_plan)
        on = np.repeat(np.array(overlap), per_plan)
        times = {flag: stage_times(rows, flag) for flag in set(overlap)}  # a search has one, mostly
        pick = {
            name: np.where(on, getattr(times.get(True, times.get(False)), name),
                           getattr(times.get(False, times.get(True)), name))
            for name in ("bound", "estimate", "sync_exposed")
        }  # fmt: skip
        some = next(iter(times.values()))
        busy, step = some.busy, some.sync  # each link's traffic: overlap hides none of it
        w = np.concatenate(self._weight_grads)[k]
        n = np.array(devices, dtype=float)
        bound, estimate = np.empty(len(plans)), np.empty(len(plans))
        names = np.array(sched)
        for name, s in SCHEDULES.items():
            mine = names == name
            if not mine.any():
                continue
            r = np.repeat(mine, per_plan)
            first = np.concatenate(([0], np.cumsum(per_plan[mine])[:-1]))
            args = (w[r], n[r], m_rows[r], v_rows[r], first)
            bound[mine] = pipelines(s, pick["bound"][r], *args)
            estimate[mine] = pipelines(s, pick["estimate"][r], *args)
        links = np.maximum.reduceat(link_traffic(m_rows, busy, step), start)
        exposed = np.maximum.reduceat(pick["sync_exposed"], start)
        return np.maximum(bound, links), estimate + exposed
