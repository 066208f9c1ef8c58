"""``model --routing FORM``: how the router spreads tokens over experts (:mod:`attnroof.ops.routing`),
read once the model is known: a trace's file read and checked against its experts, and under
expert parallelism the trace's busiest device made the plan's imbalance."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from attnroof.commands._common import require
from attnroof.ops.routing import FORMS, TRACE_LIMIT, UNIFORM_KIND, Routing, parse_routing

if TYPE_CHECKING:
    from attnroof.model import ModelConfig


def add_routing_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--routing",
        default=UNIFORM_KIND,
        metavar="FORM",
        help=f"how the router spreads tokens over experts, which sets the experts a batch touches: {FORMS}; "
        "a trace file holds one token count per expert, a line each; with --ep its busiest device sets "
        "--expert-imbalance (default uniform)",
    )


def routing_of(args: argparse.Namespace, model: ModelConfig) -> Routing:
    """``--routing``, read and checked against ``model``; under ``--ep`` a trace's busiest device
    over the mean becomes ``args.expert_imbalance`` (its experts E/ep a device, in order)."""
    from attnroof.errors import InputError, read_text
    from attnroof.model.train_options import TRAIN

    text = args.routing
    routing = parse_routing(
        text, read=lambda path: read_text(path, "routing trace", InputError, limit=TRACE_LIMIT)
    )
    ex = model.experts
    require(
        ex is not None or not routing.counts, f"--routing {text}: {model.name} has no experts to route to"
    )
    require(
        routing.kind == UNIFORM_KIND or args.phase != TRAIN,
        f"--routing {text}: a training step is costed at uniform routing (its batches touch every expert)",
    )
    if ex is None:
        return routing
    routing.check(ex.experts, ex.top_k)
    ep = getattr(args, "ep", None) or 1
    if routing.counts and ep > 1:
        require(
            args.expert_imbalance == 1,
            f"--expert-imbalance {args.expert_imbalance} with --routing {text}: the trace already says how busy "
            "each expert-parallel device is; give one of them",
        )
        if ex.experts % ep == 0:  # else the plan's check refuses --ep
            args.expert_imbalance = routing.busiest_device(ep)
    return routing
