"""A plan's forecast: the same spread as its bound, on a forecast's roof and links, with the
share of communication real frameworks hide.

The bound of a step hides every collective (``bound = max(pipeline of stage bounds, busiest
link)``); the serial estimate hides none (``serial = pipeline of kernels + collectives, then the
once-a-step sync``). Real frameworks sit between, and the profile says where
(:class:`attnroof.profiles.Overlap`)::

    gap       = serial − bound                         ≥ 0, both on the forecast's kernels and links
    gap_sync  = min(gap, sync)                         the once-a-step (data-parallel) collectives
    gap_stage = gap − gap_sync                         collectives inside the step (TP, EP, PP, CP)
    forecast  = bound + (1 − h_tensor) · gap_stage + (1 − h_data) · gap_sync

With the identity profile (kernels at their roofs, links at theirs, everything hidden) the
forecast is the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from attnroof.devices.links import DEFAULT_SCALEOUT_LATENCY_S, DEFAULT_SCALEUP_LATENCY_S, Links
from attnroof.profiles import Profile


def forecast_links(links: Links, profile: Profile) -> Links:
    """``links`` as real collectives use them: each link's bandwidth at the profile's fraction of
    it (nccl-tests' bus bandwidth over the link figure), its per-step latency times the profile's
    factor."""
    up, out = profile.scaleup, profile.scaleout
    changes: dict[str, Any] = {}
    if links.scaleup_bytes_per_s is not None:
        lat = DEFAULT_SCALEUP_LATENCY_S if links.scaleup_latency_s is None else links.scaleup_latency_s
        changes |= {
            "scaleup_bytes_per_s": links.scaleup_bytes_per_s * up.fraction,
            "scaleup_latency_s": lat * up.latency,
        }
    if links.scaleout_bytes_per_s is not None:
        lat = DEFAULT_SCALEOUT_LATENCY_S if links.scaleout_latency_s is None else links.scaleout_latency_s
        changes |= {
            "scaleout_bytes_per_s": links.scaleout_bytes_per_s * out.fraction,
            "scaleout_latency_s": lat * out.latency,
        }
    if up.fraction == out.fraction == up.latency == out.latency == 1:
        return links  # the identity: the links as they are, to the last digit
    return replace(links, **changes)


def forecast_time(serial: Any, profile: Profile) -> float:
    """The forecast step of a spread ``serial`` costed on a forecast's roof and links without
    overlap (the module's formula)."""
    bound = serial.bound_time_s
    gap = max(0.0, serial.time_s - bound)
    sync = max(st.sync_time_s for st in serial.stages)
    gap_sync = min(gap, sync)
    h = profile.overlap
    return bound + (1 - h.tensor) * (gap - gap_sync) + (1 - h.data) * gap_sync


RANKED = 64
"""The most plans a search forecasts (each costed again on the forecast's roof): enough that
the best by forecast is almost always settled by the bounds first."""


@dataclass(frozen=True)
class Ranking:
    """A search's plans by forecast: ``rows`` (row, forecast seconds), best first; ``settled``
    when every plan left out has a bound above the best forecast (so none can beat it)."""

    rows: list[tuple[Any, float]]
    settled: bool
    looked_at: int

    @property
    def best(self) -> tuple[Any, float] | None:
        return self.rows[0] if self.rows else None


def rank(
    rows: Sequence[Any], forecast_of: Callable[[Any], float], front: Sequence[Any] = (), most: int = RANKED
) -> Ranking:
    """The plans of a search (each with its bound ``time_s``) ranked by forecast. A forecast is
    never below its bound, so going through the plans by bound, fastest first, a plan whose bound
    is above the best forecast so far cannot win and neither can any after it: the search stops
    there (``settled``), or after ``most`` forecasts. The bound's Pareto front is forecast too, so
    the front by forecast is drawn from both."""
    done: dict[int, tuple[Any, float]] = {}
    best, settled = float("inf"), False
    for r in sorted(rows, key=lambda r: (r.time_s, r.estimate_time_s, r.memory_bytes)):
        if r.time_s > best:
            settled = True
            break
        if len(done) >= most:
            break
        f = forecast_of(r)
        done[id(r)] = (r, f)
        best = min(best, f)
    else:
        settled = True
    for r in front:
        if id(r) not in done:
            done[id(r)] = (r, forecast_of(r))
    out = sorted(done.values(), key=lambda rf: (rf[1], rf[0].time_s, rf[0].memory_bytes))
    return Ranking(out, settled, len(done))


def pareto_by_forecast(ranked: Sequence[tuple[Any, float]]) -> list[tuple[Any, float]]:
    """The plans no other beats on forecast, memory per device and devices at once (best first)."""
    front: list[tuple[Any, float]] = []
    for r, f in ranked:
        dominated = any(
            g <= f
            and q.memory_bytes <= r.memory_bytes
            and q.option.plan.devices <= r.option.plan.devices
            and (g < f or q.memory_bytes < r.memory_bytes or q.option.plan.devices < r.option.plan.devices)
            for q, g in ranked
        )
        if not dominated:
            front.append((r, f))
    return front
