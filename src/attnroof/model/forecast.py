"""A plan's forecast: the same spread as its bound, on a forecast's roof and links, with the
share of each kind of communication real frameworks hide.

The bound of a step hides every collective (``bound = max(pipeline of stage bounds, busiest
link)``); the serial estimate hides none. Real frameworks sit between, and the profile says
where (:class:`attnroof.profiles.Overlap`): a share ``h`` hidden for each kind of collective —
``data`` for what the sharding policy sends (ZeRO and FSDP's gathers and reduce-scatters, the
gradient sync), ``pipeline`` for the stages' sends, ``context`` for the K/V ring, ``tensor`` for
the rest (TP, SP and EP inside a layer). On the forecast's kernels and links::

    stage     = max( its bound,  kernels + Σ_collectives count · time · (1 − h) )
    forecast  = max( the bound,  the schedule over the stages + (1 − h_data) · the step's sync )

With the identity profile (kernels at their roofs, links at theirs, everything hidden) both
maxima fall to the bound: the forecast is the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from attnroof.devices.links import DEFAULT_SCALEOUT_LATENCY_S, DEFAULT_SCALEUP_LATENCY_S, Links
from attnroof.model.comms import PIPELINE
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
    if links.bridge_bytes_per_s is not None:
        changes["bridge_bytes_per_s"] = links.bridge_bytes_per_s * up.fraction
    if up.fraction == out.fraction == up.latency == out.latency == 1:
        return links  # the identity: the links as they are, to the last digit
    return replace(links, **changes)


def hidden(c: Any, h: Any) -> float:
    """The share of collective ``c`` (a :class:`attnroof.model.comms.CommOp`) the profile's
    overlap ``h`` hides, by what it is."""
    if c.sync:
        return h.data
    if c.layer_kind == PIPELINE:
        return h.pipeline
    if c.behind:
        return h.context
    return h.tensor


def stage_forecast(st: Any, profile: Profile) -> float:
    """One stage's forecast a micro-batch: its kernels and the share of its collectives left
    exposed, never below its bound."""
    h = profile.overlap
    exposed = sum(c.count * float(c.time_s) * (1 - hidden(c, h)) for c in st.comms)
    return max(st.bound_s, st.compute_time_s + exposed)


def forecast_time(serial: Any, profile: Profile) -> float:
    """The forecast step of a spread ``serial`` costed on a forecast's roof and links (the
    module's formula)."""
    stages = [stage_forecast(st, profile) for st in serial.stages]
    sync = max(st.sync_time_s for st in serial.stages)
    return max(serial.bound_time_s, serial._pipeline(stages) + (1 - profile.overlap.data) * sync)


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
    rows: Sequence[Any],
    forecast_of: Callable[[Any], float],
    front: Sequence[Any] = (),
    most: int = RANKED,
    progress: Callable[[str, int, int | None], None] | None = None,
) -> Ranking:
    """The plans of a search (each with its bound ``time_s``) ranked by forecast. A forecast is
    never below its bound, so going through the plans by bound, fastest first, a plan whose bound
    is above the best forecast so far cannot win and neither can any after it: the search stops
    there (``settled``), or after ``most`` forecasts. The bound's Pareto front is forecast too, so
    the front by forecast is drawn from both; ``progress(stage, done, total)`` hears each."""
    tell = progress or (lambda stage, done, total: None)
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
        tell("forecasting plans", len(done), None)
    else:
        settled = True
    for r in front:
        if id(r) not in done:
            done[id(r)] = (r, forecast_of(r))
            tell("forecasting plans", len(done), None)
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
