"""Choosing and reporting plans across devices: the fewest devices that hold a model (``--fit``),
and one spread step as JSON (the whole-model memory beside each device's).

The search tries device counts n = 1, 2, 4, … and at each every split of n into tensor-parallel
degree T (a power of two up to the scale-up domain and the heads, dividing or divided by the KV
heads) and pipeline stages P = n / T (at most the layers), with as many micro-batches as the
batch allows up to P; the first n with a plan that fits answers, its fastest plan the choice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from attnroof.devices.links import Links
from attnroof.errors import InputError
from attnroof.model.parallel import Plan
from attnroof.model.spec import ModelConfig
from attnroof.model.spread import Spread
from attnroof.model.train_options import TRAIN

MAX_FIT_DEVICES = 4096
"""``--fit`` searches device counts (powers of two) up to this many."""


@dataclass(frozen=True, slots=True)
class Fit:
    """The fewest devices that hold the step, the fastest plan on them, and every plan tried."""

    devices: int
    best: Spread
    tried: tuple[Spread, ...]

    def to_json(self) -> dict[str, Any]:
        tried = [{"parallel": s.plan.to_json(), "fits": s.fits, "time_s": s.time_s} for s in self.tried]
        return {"devices": self.devices, "tried": tried}


def powers_of_two(limit: int) -> list[int]:
    """1, 2, 4, … up to ``limit``.

    >>> powers_of_two(10)
    [1, 2, 4, 8]
    """
    out, p = [], 1
    while p <= limit:
        out.append(p)
        p *= 2
    return out


def fit(
    model: ModelConfig,
    batch: int,
    plan: Plan,
    run: Callable[[Plan], Spread],
    links: Links,
    max_devices: int = MAX_FIT_DEVICES,
) -> Fit:
    """The smallest power-of-two device count whose best plan fits (see the module's text);
    ``run`` costs one plan. :class:`InputError` when none up to ``max_devices`` does."""
    domain = links.scaleup_domain or max_devices
    tried: list[Spread] = []
    n = 1
    while n <= max_devices:
        fits = []
        for tp in powers_of_two(min(n, domain, model.heads)):
            pp = n // tp
            if n % tp or pp > model.layers or model.heads % tp:
                continue
            if model.latent is None and model.kv_heads % tp and tp % model.kv_heads:
                continue
            m = max(d for d in range(1, pp + 1) if batch % d == 0)
            s = run(replace(plan, tp=tp, pp=pp, dp=1, ep=1, microbatches=m))
            tried.append(s)
            if s.fits:
                fits.append(s)
        if fits:
            return Fit(n, min(fits, key=lambda s: s.time_s), tuple(tried))
        n *= 2
    raise InputError(
        f"{model.name} does not fit on {max_devices} devices at --batch {batch}", param="--batch"
    )


def spread_json(
    s: Spread,
    whole_memory: dict[str, Any],
    capacity_bytes: float | None,
    links: Links,
    totals: dict[str, Any],
) -> dict[str, Any]:
    """One spread step as JSON: the plan, links, the slowest stage's operators and collectives,
    each stage, the ``totals``, and ``memory``: the whole model's memory on one device
    (``whole_memory``) beside the plan's — capacity over all devices, the largest global batch
    (each stage's largest times the replicas and, in training, the micro-batches), and the
    busiest device's own figures (``per_device``)."""
    slow = s.slowest
    per = s.busiest_memory.to_json()
    per_step = s.plan.dp * (s.plan.microbatches if s.phase == TRAIN else 1)  # a stage's batch is per replica
    memory = {
        **whole_memory,
        "capacity_bytes": None if capacity_bytes is None else capacity_bytes * s.plan.devices,
        "fits": s.fits,
        "max_batch": None
        if per["max_batch"] is None
        else min(st.memory.max_batch or 0 for st in s.stages) * per_step,
        "max_context": per["max_context"],
        "per_device": per,
    }
    ops = [o.to_json() for o in slow.ops]
    if slow.passes:
        ops = [{"pass": p, **o} for o, p in zip(ops, slow.passes, strict=True)]
    return {
        "parallel": s.plan.to_json(),
        "links": links.to_json(),
        "ops": ops + [c.to_json() for c in slow.comms + slow.step_comms],
        "layer_kinds": slow.kinds(),
        "stages": [
            {
                "layers": [st.first, st.stop],
                "time_s": st.time_s,
                "compute_time_s": st.compute_time_s,
                "comm_time_s": st.comm_time_s,
                "fits": st.memory.fits,
                "total_bytes": st.memory.total_bytes,
            }
            for st in s.stages
        ],
        "totals": totals,
        "memory": memory,
    }
