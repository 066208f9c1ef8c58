"""A pipeline stage's time from what it runs, on arrays: the formulas of
:mod:`attnroof.model.spread`'s table — a stage's bound and estimate, the pipeline over its
stages, each link's traffic over a step — written once, for one stage (:class:`StageResult`) or
for a plan search's hundred thousand stages at once (:mod:`attnroof.model.plan_table`).

A stage is reduced to its **parts**, sums by (pass, layer kind) ``k``::

    kernels_k        Σ count · time of its operators
    attention_k      the same, of its attention operators alone
    comm_k,link      Σ count · time of its collectives on that link, one micro-batch
    behind_k         the part of comm_k only attention's kernels can hide (the K/V ring)
    sync_what,link   the once-a-step collectives, by what they sync (gradients, weights)

and the parts of many stages lie side by side in arrays (:class:`Dense`: a row a stage, a
column a (pass, kind), links on their own axis). Row by row::

    compute       = Σ_k kernels_k                           (summed operator by operator)
    busy_link     = Σ_k comm_k,link                         (one micro-batch)
    bound         = max(compute, max_link busy_link)        (every collective hidden)
    estimate      = compute + Σ_k,link comm_k,link          (no overlap)
                  = Σ_k max(kernels_k + max(0, behind_k − attention_k), max_link comm_k,link)
                                                            (overlap: a pass's collectives behind
                                                             its own kernels, the ring behind
                                                             attention alone)
    sync exposed  = Σ sync                                  (no overlap)
                  = Σ_what,link max(0, sync_what,link − idle_link(the pass that hides it)),
                    idle_link(p) = Σ_k of pass p max(0, kernels_k − comm_k,link)

and over a plan's stages (its rows), m micro-batches::

    pipeline      = Σ_stages fill(t, w) + max_stages pace(t, w)    (the schedule's, :mod:`.schedules`)
    link traffic  = max_stages,link (m · busy_link + sync_link)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnroof.model.comms import SYNC_HIDDEN_BY, CommOp
from attnroof.model.schedules import Schedule

Key = tuple[str, str]
"""(pass, layer kind); the pass is "" outside training."""


def _add(into: dict[Any, float], key: Any, value: float) -> None:
    into[key] = into.get(key, 0.0) + value


@dataclass(frozen=True, slots=True)
class Parts:
    """A stage's (or a part of a stage's) sums by (pass, layer kind): the module's table."""

    kernels: dict[Key, float] = field(default_factory=dict)
    attention: dict[Key, float] = field(default_factory=dict)
    comm: dict[tuple[str, str, str], float] = field(default_factory=dict)
    """(pass, layer kind, link) → seconds a micro-batch."""
    behind: dict[Key, float] = field(default_factory=dict)
    sync: dict[tuple[str, str], float] = field(default_factory=dict)
    """(what it syncs, link) → seconds a step."""
    compute: float = 0.0
    """Σ kernels, summed operator by operator (as the single-device step sums them)."""

    def __add__(self, other: Parts) -> Parts:
        out = Parts(compute=self.compute + other.compute)
        for name in ("kernels", "attention", "comm", "behind", "sync"):
            mine = getattr(out, name)
            for part in (self, other):
                for k, v in getattr(part, name).items():
                    _add(mine, k, v)
        return out

    @property
    def links(self) -> set[str]:
        """The links its collectives ride."""
        return {k[2] for k in self.comm} | {k[1] for k in self.sync}


def kernel_parts(ops: Iterable[Any], passes: Sequence[str] = ()) -> Parts:
    """The kernels' parts of placed operators (:class:`attnroof.model.analysis.OpResult`), each
    in its pass (none given: "")."""
    ops = list(ops)
    out = Parts(compute=sum(o.count * o.time_s for o in ops))
    for o, p in zip(ops, passes or ("",) * len(ops), strict=True):
        t = o.count * o.time_s
        _add(out.kernels, (p, o.layer_kind), t)
        if o.attention:
            _add(out.attention, (p, o.layer_kind), t)
    return out


def comm_parts(comms: Iterable[CommOp], step_comms: Iterable[CommOp] = ()) -> Parts:
    """The collectives' parts: those of a micro-batch, and those once a step (``step_comms``)."""
    out = Parts()
    for c in comms:
        t = c.count * c.time_s
        _add(out.comm, (c.pass_name, c.layer_kind, c.link.kind), t)
        if c.behind:
            _add(out.behind, (c.pass_name, c.layer_kind), t)
    for c in step_comms:
        _add(out.sync, (c.layer_kind, c.link.kind), c.count * c.time_s)
    return out


@dataclass(frozen=True, slots=True)
class Axes:
    """The columns of a :class:`Dense`: its (pass, kind) keys, links and sync kinds, sorted."""

    keys: tuple[Key, ...]
    links: tuple[str, ...]
    syncs: tuple[str, ...]

    @classmethod
    def of(cls, parts: Iterable[Parts]) -> Axes:
        keys: set[Key] = set()
        links: set[str] = set()
        syncs: set[str] = set()
        for p in parts:
            keys |= p.kernels.keys() | p.behind.keys() | {k[:2] for k in p.comm}
            links |= p.links
            syncs |= {k[0] for k in p.sync}
        return cls(tuple(sorted(keys)), tuple(sorted(links)), tuple(sorted(syncs)))


@dataclass(frozen=True, slots=True)
class Dense:
    """The parts of many stages as arrays, a row a stage, on shared :class:`Axes`."""

    axes: Axes
    compute: np.ndarray
    """(rows,): Σ kernels, operator by operator."""
    kernels: np.ndarray
    """(rows, keys)"""
    attention: np.ndarray
    comm: np.ndarray
    """(rows, keys, links)"""
    behind: np.ndarray
    sync: np.ndarray
    """(rows, sync kinds, links)"""

    @classmethod
    def of(
        cls, parts: Sequence[Parts], axes: Axes | None = None, sizes: Sequence[int] | None = None
    ) -> Dense:
        """The rows of ``parts``, on ``axes`` (None: theirs): one row each, or, with ``sizes``,
        ``sizes[i]`` rows of parts whose sums are arrays of that length (a stage costed at many
        sizes at once; a sum that does not grow with the size stays a number)."""
        a = axes or Axes.of(parts)
        k = {key: i for i, key in enumerate(a.keys)}
        li = {x: i for i, x in enumerate(a.links)}
        s = {x: i for i, x in enumerate(a.syncs)}
        counts = [1] * len(parts) if sizes is None else list(sizes)
        n, nk, nl = sum(counts), len(a.keys), len(a.links)
        compute = np.zeros(n)
        kernels, attention, behind = np.zeros((n, nk)), np.zeros((n, nk)), np.zeros((n, nk))
        comm, sync = np.zeros((n, nk, nl)), np.zeros((n, len(a.syncs), nl))
        r = 0
        for p, size in zip(parts, counts, strict=True):
            rows = slice(r, r + size)
            compute[rows] = p.compute
            for key, v in p.kernels.items():
                kernels[rows, k[key]] = v
            for key, v in p.attention.items():
                attention[rows, k[key]] = v
            for key, v in p.behind.items():
                behind[rows, k[key]] = v
            for (pn, kind, link), v in p.comm.items():
                comm[rows, k[pn, kind], li[link]] = v
            for (what, link), v in p.sync.items():
                sync[rows, s[what], li[link]] = v
            r += size
        return cls(a, compute, kernels, attention, comm, behind, sync)

    def take(self, rows: Any) -> Dense:
        """The stages at ``rows`` (indices), in that order."""
        return Dense(
            self.axes, self.compute[rows], self.kernels[rows], self.attention[rows], self.comm[rows],
            self.behind[rows], self.sync[rows],
        )  # fmt: skip

    def __add__(self, other: Dense) -> Dense:
        """Row by row, the parts of two groups of one stage (its kernels, its collectives, …)."""
        assert self.axes == other.axes
        return Dense(
            self.axes,
            self.compute + other.compute,
            self.kernels + other.kernels,
            self.attention + other.attention,
            self.comm + other.comm,
            self.behind + other.behind,
            self.sync + other.sync,
        )


@dataclass(frozen=True, slots=True)
class Times:
    """Each stage's times (the module's table), a row a stage; seconds."""

    compute: np.ndarray
    busy: np.ndarray
    """(rows, links): each link's collectives, one micro-batch."""
    bound: np.ndarray
    estimate: np.ndarray
    sync: np.ndarray
    """(rows, links): each link's once-a-step collectives."""
    sync_exposed: np.ndarray


def stage_times(d: Dense, overlap: bool) -> Times:
    """The module's table, row by row."""
    compute = d.compute
    busy = d.comm.sum(axis=1)
    bound = np.maximum(compute, busy.max(axis=1, initial=0.0))
    sync = d.sync.sum(axis=1)
    if not overlap:
        estimate = compute + busy.sum(axis=1)
        return Times(compute, busy, bound, estimate, sync, sync.sum(axis=1))
    exposed = np.maximum(0.0, d.behind - d.attention)
    estimate = np.maximum(d.kernels + exposed, d.comm.max(axis=2, initial=0.0)).sum(axis=1)
    passes = np.array([k[0] for k in d.axes.keys], dtype=object)
    idle_by_pass: dict[str, np.ndarray] = {}
    sync_exposed = np.zeros(len(compute))
    for s, what in enumerate(d.axes.syncs):
        hidden_by = SYNC_HIDDEN_BY.get(what)
        if hidden_by is None:  # nothing hides it
            sync_exposed = sync_exposed + d.sync[:, s, :].sum(axis=1)
            continue
        if hidden_by not in idle_by_pass:
            of_pass = passes == hidden_by
            idle_by_pass[hidden_by] = np.maximum(
                0.0, d.kernels[:, of_pass, None] - d.comm[:, of_pass, :]
            ).sum(axis=1)
        sync_exposed = sync_exposed + np.maximum(0.0, d.sync[:, s, :] - idle_by_pass[hidden_by]).sum(axis=1)
    return Times(compute, busy, bound, estimate, sync, sync_exposed)


def link_traffic(m: Any, busy: np.ndarray, sync: np.ndarray) -> np.ndarray:
    """Each stage's busiest link over a step of ``m`` micro-batches: m · busy + sync, the
    largest over the links (0 without any)."""
    return (np.asarray(m)[..., None] * busy + sync).max(axis=-1, initial=0.0)


def pipelines(
    sched: Schedule, t: np.ndarray, w: np.ndarray, n: np.ndarray, m: np.ndarray, v: np.ndarray, starts: np.ndarray
) -> np.ndarray:  # fmt: skip
    """The schedule over many plans' stages at once: rows ``starts[j]`` up to the next start are
    plan j's stages, each standing for ``n`` devices alike (times ``t``, weight-gradient part
    ``w``), m micro-batches and v chunks given per row: Σ n · fill + max pace per plan."""
    fill = np.add.reduceat(n * sched.fill(t, w, v), starts)
    pace = np.maximum.reduceat(sched.pace(t, w, m, v), starts)
    return fill + pace
