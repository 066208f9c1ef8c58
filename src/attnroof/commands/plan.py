"""plan: every parallel plan of a model on up to N devices, costed, and the Pareto front of those
that fit (:mod:`attnroof.model.search`)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from attnroof.commands._common import (
    Command,
    add_device_args,
    add_json_arg,
    emit_json,
    positive_int,
    require,
    roof_from_args,
)
from attnroof.commands._parallel import add_link_args, links_of
from attnroof.commands._train import SHARDING_FLAGS, add_sharding_args, sharding_choices
from attnroof.model import get_model
from attnroof.model.train_options import MEMORY_HEADROOM, TRAIN

DEFAULT_TOP = 10


def _setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", required=True, metavar="NAME|config.json|org/name", help="built-in model or a config.json"
    )
    p.add_argument("--devices", type=positive_int, required=True, metavar="N", help="devices at most")
    p.add_argument(
        "--phase",
        choices=("prefill", "decode", "train"),
        default="train",
        help="step to plan (default train)",
    )
    p.add_argument(
        "--context",
        type=positive_int,
        required=True,
        metavar="C",
        help="tokens in each sequence (8192 or 8k)",
    )
    p.add_argument("--batch", type=positive_int, metavar="B", help="sequences in the (global) batch")
    p.add_argument(
        "--global-batch",
        type=positive_int,
        metavar="TOKENS",
        help="training: tokens a step (4M = 4·2^20), a whole number of --context sequences",
    )
    p.add_argument(
        "--top",
        type=positive_int,
        default=DEFAULT_TOP,
        metavar="K",
        help=f"plans shown (default {DEFAULT_TOP})",
    )
    p.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="COND",
        help="keep plans where COND holds, e.g. tp<=8, pp=1, zero>=1, recompute!=full (repeatable)",
    )
    p.add_argument(
        "--memory-headroom", type=_headroom, default=MEMORY_HEADROOM, metavar="F",
        help=f"share of each device's memory a plan leaves free (default {MEMORY_HEADROOM * 100:.0f}%%: CUDA's "
        "context, NCCL's buffers, the allocator's fragmentation; 0 uses it all)",
    )  # fmt: skip
    p.add_argument(
        "--virtual-stages", type=_chunk_counts, default="2,4", metavar="LIST|all",
        help="model chunks a device an interleaved plan is tried with (default 2,4; all: every count the "
        "layers allow, some 1.7 times the plans)",
    )  # fmt: skip
    p.add_argument(
        "--sp", choices=tuple(SEQUENCE_PARALLEL), default="on",
        help="sequence parallelism for TP > 1: on (default, as Megatron-LM runs it; off for decode), off, or "
        "both tried (it never costs more time and holds less, so plans without it are never on the front)",
    )  # fmt: skip
    p.add_argument("--unfused", action="store_true", help="unfused attention (S and P go through memory)")
    p.add_argument(
        "--expert-imbalance", type=float, default=1.0, metavar="F",
        help="mixture of experts: the busiest expert-parallel device's routed tokens over the mean, for every "
        "plan with EP > 1 (at most its EP; default 1 = uniform routing)",
    )  # fmt: skip
    add_sharding_args(
        p.add_argument_group("training's sharding policy (ZeRO 1–3 plans; --where zero=3 picks a stage)"),
        many=True,
    )
    add_link_args(p.add_argument_group("links"))
    add_device_args(p)
    from attnroof.commands._forecast import add_profile_args

    add_profile_args(p)
    add_json_arg(p)


def _headroom(text: str) -> float:
    """A share of memory left free: 0 ≤ F < 1, a fraction (0.1) or a percentage (10%)."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share (0.1 or 10%)") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 0 and below 1 (100%)")
    return value


SEQUENCE_PARALLEL: dict[str, tuple[bool, ...] | None] = {"on": None, "off": (False,), "both": (True, False)}
"""``--sp``'s words as :class:`attnroof.model.search.Choices`'s ``sps`` (None: on, off for decode)."""


def _chunk_counts(text: str) -> tuple[int, ...] | str:
    """``2,4``, ``5,12`` or ``all`` (:data:`attnroof.model.search.EVERY_COUNT`)."""
    from attnroof.model.search import EVERY_COUNT

    if text.strip() == EVERY_COUNT:
        return EVERY_COUNT
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words or not all(w.isdigit() and 2 <= int(w) <= 1024 for w in words):
        raise argparse.ArgumentTypeError(f"{text!r}: expected chunk counts from 2 (2,4) or all")
    return tuple(dict.fromkeys(int(w) for w in words))


def batch_of(args: argparse.Namespace) -> int:
    """Sequences a step: ``--batch``, or ``--global-batch`` tokens over ``--context``."""
    require(
        args.batch is None or args.global_batch is None, "give --batch (sequences) or --global-batch (tokens)"
    )
    if args.global_batch is None:
        return args.batch or 1
    require(
        args.global_batch % args.context == 0,
        f"--global-batch {args.global_batch:,} tokens is not a whole number of --context {args.context:,} "
        "sequences",
    )
    return args.global_batch // args.context


def _run(args: argparse.Namespace) -> int:
    from attnroof.commands._forecast import forecast_roof
    from attnroof.model.notes import past_positions
    from attnroof.model.planner import PlanQuery, search_plans
    from attnroof.model.search import Choices, parse_where
    from attnroof.progress import Progress

    batch = batch_of(args)
    where = tuple(parse_where(w) for w in args.where)
    model = get_model(args.model)
    dev, dt, roof = roof_from_args(args)
    links = links_of(args, dev)
    fused = not args.unfused
    train = args.phase == TRAIN
    require(
        args.expert_imbalance >= 1 and math.isfinite(args.expert_imbalance),
        f"--expert-imbalance {args.expert_imbalance} must be ≥ 1 (1: uniform routing)",
    )
    require(
        args.expert_imbalance == 1 or model.experts is not None,
        f"--expert-imbalance: {model.name} has no experts",
    )
    given = [f"--{f.replace('_', '-')}" for f in SHARDING_FLAGS if getattr(args, f) is not None]
    require(train or not given, f"{', '.join(given)} applies to --phase train only")
    choices = Choices(
        expert_imbalance=args.expert_imbalance,
        virtual_stages=args.virtual_stages,
        sps=SEQUENCE_PARALLEL[args.sp],
        **sharding_choices(args, many=True),
    )
    query = PlanQuery(
        model, args.phase, batch, args.context, args.devices, roof, links, dev.capacity_bytes,
        itemsize=dt.itemsize, fused=fused, choices=choices, where=where, memory_headroom=args.memory_headroom,
        forecast=forecast_roof(args, dev, dt, roof),
    )  # fmt: skip
    with Progress(enabled=not args.json) as progress:  # a bar on a terminal, for a long search
        answer = search_plans(query, progress)
    found, usable = answer.found, query.usable_bytes
    ranked = None if answer.ranking is None else _Ranked(answer)
    if args.json:
        emit_json(
            {
                "model": model.name,
                "device": dev.name,
                "dtype": dt.name,
                "phase": args.phase,
                "context": args.context,
                "context_beyond_model_limit": bool(past_positions(model, [args.context])),
                "batch": batch,
                "devices": args.devices,
                "memory_headroom": args.memory_headroom,
                "usable_memory_bytes": usable,
                "considered": found.tried + sum(found.refused.values()),
                "refused": dict(found.refused),
                "tried": found.tried,
                "costed": found.costed,
                "fit": len(found.rows),
                "rejected": dict(found.rejected),
                "front": [r.to_json() for r in found.front],
                **({} if ranked is None else ranked.to_json()),
                "plans": [r.to_json(full=False) for r in found.rows],
            },
            row_per_line="plans",
        )
        return 0
    from attnroof.text.model import Setting, header, past_positions_lines
    from attnroof.text.parallel import links_line
    from attnroof.text.search import search_text

    setting = Setting(model, dev, roof, "prefill" if train else args.phase, args.context, fused, dt, dt, dt)
    what = (
        f"training step of {batch:,} × {args.context:,} tokens ({batch * args.context:,} a step)"
        if train
        else header(setting, batch)[2]
    )
    head = [
        *header(setting, None)[:2],
        *past_positions_lines(model, [args.context]),
        f"{what}; on up to {args.devices:,} devices",
        links_line(links),
        *([] if usable is None else [_headroom_line(dev.capacity_bytes, usable, args.memory_headroom)]),
    ]
    print(search_text(head, found, args.top, train, args.phase == "decode"))
    if ranked is not None:
        from attnroof.text.search import forecast_text

        print("\n" + forecast_text(ranked, args.top, train))
    return 0


def _headroom_line(capacity: float, usable: float, headroom: float) -> str:
    from attnroof.text.render import nbytes

    return (
        f"a plan fits in {nbytes(usable)} a device: {1 - headroom:.0%} of its {nbytes(capacity)}, "
        f"{headroom:.0%} left for what attnroof does not count (--memory-headroom)"
    )


@dataclass(frozen=True)
class _Ranked:
    """The search's plans by forecast (:class:`attnroof.model.planner.PlanAnswer`), with what the
    JSON and text say of them."""

    answer: Any

    @property
    def profile(self) -> Any:
        return self.answer.query.forecast.profile

    @property
    def ranking(self) -> Any:
        return self.answer.ranking

    @property
    def front(self) -> list[tuple[Any, float]]:
        return self.answer.front_by_forecast

    def mfu(self, r: Any, f: float) -> float | None:
        return self.answer.mfu(r, f)

    def row_json(self, r: Any, f: float) -> dict[str, Any]:
        return {**r.to_json(), "forecast_time_s": f, "forecast_mfu": self.mfu(r, f)}

    def to_json(self) -> dict[str, Any]:
        from attnroof.commands._forecast import forecast_json

        best = self.ranking.best
        return {
            "forecast": {
                **forecast_json(self.profile, "train", best[1], best[0].time_s),
                "ranked": self.ranking.looked_at,
                "settled": self.ranking.settled,
            },
            "front_by_forecast": [self.row_json(r, f) for r, f in self.front],
        }


COMMANDS = (Command("plan", _setup, _run),)
