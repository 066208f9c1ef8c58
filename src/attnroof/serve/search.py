"""The highest arrival rate a deployment sustains while a percentile of its latencies meets the
SLOs: a bisection over the rate, each point a whole simulation of the same seeded requests.

A rate is *sustained* only in steady state: the queue must not grow. A finite run at a rate the
engine cannot keep up with still meets a latency SLO if it ends before its queue has built up,
and a longer run at the same rate would not — so each simulated rate is judged three ways:

    SLO        the chosen percentile of each SLO'd metric within its limit
    kept up    over the second half of the arrivals (the first half fills the engine),
               admitted/s ≥ (1 − ε) · arrivals/s: the requests taken in (to their first
               token) a second, arrivals/s less the least-squares slope of the queue — the
               requests arrived and still without a first token (a regression over the half,
               not a difference of its two ends, which the queue's swings would swamp)
    no trend   the least-squares slope of TTFT against arrival time over that half ≤ ε
               (an engine that serves a fraction μ/λ of what comes queues each request
               λ/μ − 1 seconds longer per second of the run: the same ε read from the waits)

with ε = :data:`STEADY_TOLERANCE`. And the run must be long enough to tell a filling engine from
a falling-behind one: it has at least :data:`STEADY_SPANS` × the engine's concurrency when full
(the all-at-once run's mean running sequences) requests, more than the traffic's own when those
are too few (synthetic requests drawn on with the same seed; a file's requests cycled).

    capacity  = the request throughput of that many requests all at once (the engine full,
                its batch limited by max_num_seqs or by the KV blocks, whichever binds)
    max rate  = min(the largest offered rate in (0, capacity] that meets all three, to a
                relative precision ``tolerance``; the departures/s achieved at it)

A queue is stable only below its full throughput, so the capacity bounds the search: a rate
above it can pass a finite run (fewer preemptions while the engine fills) and fails a longer
one. The reported rate is never above what the run at it achieved.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from attnroof.errors import InputError
from attnroof.serve.engine import Run
from attnroof.serve.metrics import Summary
from attnroof.serve.workload import RATE

DEFAULT_TOLERANCE = 0.01
MAX_SIMULATIONS = 40
STEADY_TOLERANCE = 0.05
"""ε: departures within 5% of arrivals, and waits growing by under 5% of the run's time."""
STEADY_SPANS = 10
"""Requests in a judging run, in multiples of the engine's concurrency when full: the run's
arrivals span about that many end-to-end latencies at capacity, so the fill is its first fifth."""


@dataclass(frozen=True)
class Steadiness:
    """Over the second half of a run's arrivals (the requests counted, after any warm-up)."""

    offered: float
    """Arrivals a second."""
    achieved: float
    """Requests admitted a second, over the same window: arrivals a second less the slope of
    the queue (arrived, no first token yet). The running batch is bounded (``max_num_seqs``,
    the KV blocks), so in steady state what is admitted departs; while the batch still grows
    toward its balance, departures lag and this does not."""
    wait_slope: float
    """TTFT's least-squares slope against arrival time (seconds per second)."""

    @property
    def kept_up(self) -> bool:
        return self.achieved >= (1 - STEADY_TOLERANCE) * self.offered

    @property
    def trending(self) -> bool:
        return self.wait_slope > STEADY_TOLERANCE

    @property
    def steady(self) -> bool:
        return self.kept_up and not self.trending

    def to_json(self) -> dict[str, Any]:
        return {
            "offered_per_s": self.offered,
            "achieved_per_s": self.achieved,
            "ttft_slope_s_per_s": self.wait_slope,
            "kept_up": self.kept_up,
            "trending": self.trending,
        }


def steadiness(run: Run, warmup: int = 0) -> Steadiness:
    """Arrivals, admissions and the TTFT trend over the second half of the counted arrivals;
    the queue read at each arrival of that half.

    >>> import numpy as np
    >>> a = np.arange(101.0)                     # one a second, each served in 3 s, first token at 1 s
    >>> r = Run(a, a + 1, a + 3, *(np.zeros(101),) * 4, *(np.zeros(0),) * 8, blocks=1)
    >>> s = steadiness(r)
    >>> (round(s.offered, 2), round(s.achieved, 2), abs(round(s.wait_slope, 6)), s.steady)
    (1.0, 1.0, 0.0, True)
    >>> late = Run(a, 2 * a + 1, 2 * a + 3, *(np.zeros(101),) * 4, *(np.zeros(0),) * 8, blocks=1)
    >>> s = steadiness(late)                     # taken in at half the rate: each waits 1 s more a second
    >>> (round(s.achieved / s.offered, 2), round(s.wait_slope, 6), s.steady)
    (0.5, 1.0, False)
    """
    import numpy as np

    order = np.argsort(run.arrival_s, kind="stable")[warmup:]
    arrival, first = run.arrival_s[order], run.first_token_s[order]
    start, end = float(arrival[0]), float(arrival[-1])
    mid = (start + end) / 2
    window = end - mid
    late = arrival > mid
    if window <= 0 or late.sum() < 2:  # every request at once: no arrivals to keep up with
        return Steadiness(math.inf, math.inf, 0.0)
    offered = int(late.sum()) / window
    at = arrival[late]
    queue = np.arange(len(arrival))[late] + 1 - np.searchsorted(np.sort(first), at, side="right")
    growth = float(np.polyfit(at, queue, 1)[0])
    slope = float(np.polyfit(at, (first - arrival)[late], 1)[0])
    return Steadiness(offered, offered - growth, slope)


@dataclass(frozen=True)
class Trial:
    """One simulated rate: its summary, its run, whether it met the SLOs and held steady."""

    rate: float
    summary: Summary
    run: Run | None
    """The simulation, kept for the best rate only (its cost and energy are read from it): a run
    of every rate tried would hold 40 of them at once."""
    slo_met: bool
    latency: dict[str, float]
    """The percentile of each SLO'd metric."""
    steady: Steadiness

    @property
    def met(self) -> bool:
        return self.slo_met and self.steady.steady

    def to_json(self) -> dict[str, Any]:
        return {
            "rate_per_s": self.rate,
            "met": self.met,
            "slo_met": self.slo_met,
            "latency_s": self.latency,
            "steady": self.steady.to_json(),
        }


@dataclass(frozen=True)
class RateSearch:
    rate: float | None
    """Requests/s sustained: the best offered rate, or the departures/s achieved at it where
    fewer; None when even the lowest rate tried misses the SLO or falls behind."""
    percentile: int
    slo: dict[str, float]
    capacity: float
    requests: int
    """Requests in each judging run (the traffic's own, or more: :data:`STEADY_SPANS`)."""
    best: Trial | None
    tried: tuple[Trial, ...]
    """Every simulation, in order."""

    @property
    def at_rate(self) -> Summary | None:
        return None if self.best is None else self.best.summary

    @property
    def offered(self) -> float | None:
        return None if self.best is None else self.best.rate

    def to_json(self) -> dict[str, Any]:
        b = self.best
        return {
            "max_rate_per_s": self.rate,
            "offered_rate_per_s": self.offered,
            "achieved_rate_per_s": None if b is None else b.steady.achieved,
            "percentile": self.percentile,
            "slo_s": self.slo,
            "capacity_per_s": self.capacity,
            "requests_per_simulation": self.requests,
            "steady_state": {
                "window": "the second half of the arrivals",
                "tolerance": STEADY_TOLERANCE,
                "spans": STEADY_SPANS,
            },
            "at_max_rate": None if b is None else b.summary.to_json(),
            "tried": [t.to_json() for t in self.tried],
        }


def meets(summary: Summary, slo: dict[str, float], percentile: int) -> tuple[bool, dict[str, float]]:
    values = {name: summary.latency[name][f"p{percentile}"] for name in slo}
    return all(values[n] <= slo[n] for n in slo), values


def judging_requests(requests: int, full: Summary) -> int:
    """Requests a judging run needs: the traffic's own, or :data:`STEADY_SPANS` × the engine's
    concurrency when full (its all-at-once run's mean running sequences) where more."""
    return max(requests, math.ceil(STEADY_SPANS * full.mean_running))


def max_rate(
    run_at: Callable[[float, int], tuple[Summary, Run]],
    *,
    requests: int,
    slo: dict[str, float],
    percentile: int,
    warmup: int = 0,
    tolerance: float = DEFAULT_TOLERANCE,
) -> RateSearch:
    """``run_at(rate, n)``: a summary and the run of ``n`` requests at ``rate`` (∞: all at once).
    From the capacity, halve until a rate holds (down to the lowest rate a simulation takes,
    :data:`attnroof.serve.workload.RATE`), then bisect (geometrically) to ``tolerance``."""
    if not slo:
        raise InputError("--max-rate needs an SLO: --slo-ttft and/or --slo-tpot", param="slo")
    full, _ = run_at(math.inf, requests)
    n = judging_requests(requests, full)
    if n > requests:
        full, _ = run_at(math.inf, n)
    capacity = full.request_throughput
    tried: list[Trial] = []

    def check(rate: float) -> Trial:
        s, r = run_at(rate, n)
        ok, values = meets(s, slo, percentile)
        steady = steadiness(r, warmup)
        t = Trial(rate, s, r if ok and steady.steady else None, ok, values, steady)
        for i, old in enumerate(tried):  # a rate that holds is the best yet: the earlier best's run goes
            if t.met and old.run is not None:
                tried[i] = replace(old, run=None)
        tried.append(t)
        return t

    def found(best: Trial | None) -> RateSearch:
        rate = None if best is None else min(best.rate, best.steady.achieved)
        return RateSearch(rate, percentile, slo, capacity, n, best, tuple(tried))

    if capacity < RATE.low:  # no rate a simulation takes is one the engine can keep up with
        return found(None)
    t = check(capacity)
    if t.met:  # the ceiling holds: a stable queue cannot take more
        return found(t)
    hi, best = capacity, None
    while best is None and len(tried) < MAX_SIMULATIONS // 2 and hi / 2 >= RATE.low:
        t = check(hi / 2)
        if t.met:
            best = t
        else:
            hi = t.rate
    if best is None:
        return found(None)
    lo = best.rate
    while hi / lo > 1 + tolerance and len(tried) < MAX_SIMULATIONS:
        t = check(math.sqrt(lo * hi))
        if t.met:
            lo, best = t.rate, t
        else:
            hi = t.rate
    return found(best)
