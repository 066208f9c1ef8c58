"""The highest arrival rate a deployment takes while a percentile of its latencies meets the
SLOs: a bisection over the rate, each point a whole simulation of the same seeded requests.

    capacity  = the request throughput with every request arriving at once (the engine full:
                its batch limited by max_num_seqs or by the KV blocks, whichever binds)
    max rate  = the largest rate in (0, capacity] whose chosen percentile of each SLO'd metric
                is within its limit, to a relative precision ``tolerance``

Latency rises with the rate almost everywhere, but not strictly (a seeded arrival process at a
different rate batches differently), so the answer is the bisection's and is checked at the rate
it reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnroof.errors import InputError
from attnroof.serve.metrics import Summary

DEFAULT_TOLERANCE = 0.01
MAX_SIMULATIONS = 40


@dataclass(frozen=True)
class RateSearch:
    rate: float | None
    """Requests/s; None when even the lowest rate tried misses the SLO."""
    percentile: int
    slo: dict[str, float]
    capacity: float
    at_rate: Summary | None
    tried: tuple[tuple[float, bool, dict[str, float]], ...]
    """(rate, met, the percentile of each SLO'd metric) for every simulation, in order."""

    def to_json(self) -> dict[str, Any]:
        return {
            "max_rate_per_s": self.rate,
            "percentile": self.percentile,
            "slo_s": self.slo,
            "capacity_per_s": self.capacity,
            "at_max_rate": None if self.at_rate is None else self.at_rate.to_json(),
            "tried": [{"rate_per_s": r, "met": m, "latency_s": v} for r, m, v in self.tried],
        }


def meets(summary: Summary, slo: dict[str, float], percentile: int) -> tuple[bool, dict[str, float]]:
    values = {name: summary.latency[name][f"p{percentile}"] for name in slo}
    return all(values[n] <= slo[n] for n in slo), values


def max_rate(
    run_at: Callable[[float], Summary],
    *,
    slo: dict[str, float],
    percentile: int,
    tolerance: float = DEFAULT_TOLERANCE,
) -> RateSearch:
    """Bracket the rate from the capacity (``run_at(math.inf)``'s throughput) by doubling or
    halving, then bisect it (geometrically) to ``tolerance``."""
    if not slo:
        raise InputError("--max-rate needs an SLO: --slo-ttft and/or --slo-tpot", param="slo")
    full = run_at(math.inf)
    capacity = full.request_throughput
    tried: list[tuple[float, bool, dict[str, float]]] = []

    def check(rate: float) -> tuple[bool, Summary]:
        s = run_at(rate)
        ok, values = meets(s, slo, percentile)
        tried.append((rate, ok, values))
        return ok, s

    # the all-at-once throughput is not a ceiling for arrivals spread out (less preemption,
    # prefills spread): from it, double until the SLO breaks, or halve until it holds
    ok, s = check(capacity)
    lo, hi, best = (capacity, None, s) if ok else (None, capacity, None)
    while (lo is None or hi is None) and len(tried) < MAX_SIMULATIONS // 2:
        rate = lo * 2 if hi is None else hi / 2
        ok, s = check(rate)
        if ok:
            lo, best = rate, s
        else:
            hi = rate
    if lo is None or hi is None or best is None:
        return RateSearch(lo, percentile, slo, capacity, best, tuple(tried))
    while hi / lo > 1 + tolerance and len(tried) < MAX_SIMULATIONS:
        mid = math.sqrt(lo * hi)
        ok, s = check(mid)
        if ok:
            lo, best = mid, s
        else:
            hi = mid
    return RateSearch(lo, percentile, slo, capacity, best, tuple(tried))
