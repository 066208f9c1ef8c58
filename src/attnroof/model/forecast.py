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

from dataclasses import replace
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
