"""One spread step as JSON (the whole-model memory beside each device's). The fewest devices
that hold a model (``--fit``) is :func:`attnroof.model.search.fit`.
"""

from __future__ import annotations

from typing import Any

from attnroof.devices.links import Links
from attnroof.model.sharding import sharding_json
from attnroof.model.spread import Spread
from attnroof.model.train_options import TRAIN


def plan_json(s: Spread) -> dict[str, Any]:
    """A step's plan as JSON, a training step's with its sharding policy named
    (:func:`attnroof.model.sharding.sharding_json`)."""
    return s.plan.to_json() | ({"sharding": sharding_json(s.plan)} if s.phase == TRAIN else {})


def spread_json(
    s: Spread,
    whole_memory: dict[str, Any],
    capacity_bytes: float | None,
    links: Links,
    totals: dict[str, Any],
) -> dict[str, Any]:
    """One spread step as JSON: the plan (a training step's with its sharding policy), links,
    the slowest stage's operators and collectives,
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
        **{k: v for k, v in per.items() if k.startswith("max_context")},
        "per_device": per,
    }
    ops = [o.to_json() for o in slow.ops]
    if slow.passes:
        ops = [{"pass": p, **o} for o, p in zip(ops, slow.passes, strict=True)]
    parallel = plan_json(s)
    if s.phase == TRAIN:  # with what its sharding policy sends from the busiest device
        parallel["sharding"]["sent_bytes_per_step"] = totals["dp_sync_bytes_per_device"]
    return {
        "parallel": parallel,
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
