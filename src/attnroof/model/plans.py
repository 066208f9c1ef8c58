"""Choosing and reporting plans across devices: the fewest devices that hold a model (``--fit``),
and one spread step as JSON (the whole-model memory beside each device's).

The search tries device counts n = 1, 2, 4, … and at each every split of n into tensor-parallel
degree T (a power of two up to the scale-up domain and the heads, dividing or divided by the KV
heads; or only the degrees ``tps`` lists), data-parallel replicas D (a power of two dividing the
batch) and pipeline stages P = n / (T · D) (at most the layers), with as many micro-batches as
each replica's batch allows up to P. A training step's replicas shard its state with ZeRO 1, 2
and 3 (or the one stage asked for); data parallelism holds no less per device than a pipeline
stage does without ZeRO, so it helps a fit only with ZeRO, or by splitting the batch's
activations and KV cache. The first n with a plan that fits answers, the fastest of its plans
by the estimate (:attr:`Spread.time_s`) the choice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from attnroof.devices.links import Links
from attnroof.errors import InputError
from attnroof.model.parallel import Plan
from attnroof.model.spec import ModelConfig
from attnroof.model.spread import Spread

MAX_FIT_DEVICES = 4096
"""``--fit`` searches device counts (powers of two) up to this many."""


@dataclass(frozen=True, slots=True)
class Fit:
    """The fewest devices that hold the step, the fastest plan on them, and every plan tried."""

    devices: int
    best: Spread
    tried: tuple[Spread, ...]

    def to_json(self) -> dict[str, Any]:
        tried = [
            {
                "parallel": s.plan.to_json(),
                "fits": s.fits,
                "time_s": s.bound_time_s,
                "estimate_time_s": s.time_s,
            }
            for s in self.tried
        ]
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
    *,
    train: bool = False,
    tps: Sequence[int] | None = None,
    zero: int | None = None,
) -> Fit:
    """The smallest power-of-two device count whose best plan fits (see the module's text);
    ``run`` costs one plan. :class:`InputError` when none up to ``max_devices`` does."""
    domain = links.scaleup_domain or max_devices
    tried: list[Spread] = []
    n = 1
    while n <= max_devices:
        fits = []
        for p in candidates(model, batch, n, domain, tps, train=train, zero=zero):
            s = run(replace(plan, **p))
            tried.append(s)
            if s.fits:
                fits.append(s)
        if fits:
            return Fit(n, min(fits, key=lambda s: s.time_s), tuple(tried))
        n *= 2
    within = "" if tps is None else f" at TP {', '.join(map(str, tps))}"
    raise InputError(
        f"{model.name} does not fit on {max_devices} devices{within} at --batch {batch}", param="--batch"
    )


def candidates(
    model: ModelConfig,
    batch: int,
    n: int,
    domain: int,
    tps: Sequence[int] | None,
    *,
    train: bool,
    zero: int | None,
) -> list[dict[str, Any]]:
    """The plans on exactly ``n`` devices the fit tries, as :class:`Plan` fields (the module's text).

    >>> from attnroof.model.config import builtin
    >>> [(p["tp"], p["pp"], p["dp"], p["zero"]) for p in candidates(builtin("llama-3.1-8b"), 8, 2, 8,
    ...  None, train=True, zero=None)]
    [(1, 2, 1, 0), (1, 1, 2, 1), (1, 1, 2, 2), (1, 1, 2, 3), (2, 1, 1, 0)]
    """
    out = []
    for tp in tps or powers_of_two(min(n, domain, model.heads)):
        if n % tp or model.heads % tp:
            continue
        if model.latent is None and model.kv_heads % tp and tp % model.kv_heads:
            continue
        for dp in powers_of_two(n // tp):
            pp = n // (tp * dp)
            if batch % dp or pp > model.layers:
                continue
            m = max(d for d in range(1, pp + 1) if (batch // dp) % d == 0)
            stages = (zero,) if zero is not None and dp > 1 else (1, 2, 3) if train and dp > 1 else (0,)
            out += [{"tp": tp, "pp": pp, "dp": dp, "ep": 1, "microbatches": m, "zero": z} for z in stages]
    return out


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
    (:attr:`Spread.max_batch`, what ``--batch`` counts), and the busiest device's own figures
    (``per_device``, its ``max_batch`` a replica's or a micro-batch's)."""
    slow = s.slowest
    per = s.busiest_memory.to_json()
    memory = {
        **whole_memory,
        "capacity_bytes": None if capacity_bytes is None else capacity_bytes * s.plan.devices,
        "fits": s.fits,
        "max_batch": s.max_batch,
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
                **({"chunks": [list(r) for r in st.ranges]} if st.more else {}),  # interleaved
            }
            for st in s.stages
        ],
        "totals": totals,
        "memory": memory,
        "notes": list(s.notes),
    }
