"""``model --tp/--pp/--ep/--dp``: a step spread over devices; ``--fit``: the fewest that hold it;
``--sweep-tp``: step time and per-device memory over tensor-parallel degrees."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from attnroof.commands import _forecast
from attnroof.commands._common import device_figure, emit_json, int_list, positive_int
from attnroof.commands._train import SHARDING_FLAGS, recompute_of, sharding_choices, sharding_of
from attnroof.errors import InputError
from attnroof.model.train_options import TRAIN

if TYPE_CHECKING:  # the many-devices code is loaded only when a parallel flag is given
    from attnroof.devices import Device
    from attnroof.devices.links import Links
    from attnroof.model import ModelConfig
    from attnroof.model.parallel import Plan
    from attnroof.model.spread import Spread
    from attnroof.model.training_memory import TrainPrecision


def add_parallel_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("many devices")
    for flag, what in (
        ("--tp", "tensor-parallel degree: heads and MLP width cut over T devices"),
        ("--pp", "pipeline stages: layers cut into P contiguous stages"),
        (
            "--ep",
            "expert-parallel degree: experts spread over E devices (--etp × E divides --tp × --dp; "
            "--dp defaults to the least that does)",
        ),
        ("--dp", "data-parallel replicas, each with batch/D sequences"),
        ("--cp", "context-parallel degree: each sequence's tokens over C devices, K/V in a ring"),
    ):
        g.add_argument(flag, type=positive_int, metavar=flag[2:].upper(), help=f"{what} (default 1)")
    g.add_argument(
        "--cp-comm",
        choices=("ring", "allgather"),
        default="ring",
        help="how the CP group shares K and V: ring (TransformerEngine's p2p, default) or allgather "
        "(the Llama 3 paper's)",
    )
    g.add_argument(
        "--etp",
        type=positive_int,
        metavar="N",
        help="expert-tensor-parallel degree: each expert cut over N devices (default --tp, as Megatron-LM's "
        "--expert-tensor-parallel-size; MoE runs often use 1)",
    )
    g.add_argument(
        "--expert-imbalance",
        type=float,
        default=1.0,
        metavar="F",
        help="the busiest expert-parallel device's routed tokens over the mean, 1 ≤ F ≤ --ep: its expert "
        "GEMMs and all-to-all carry F× (default 1 = uniform routing)",
    )
    g.add_argument("--sp", action="store_true", help="sequence parallelism: each TP all-reduce as RS + AG")
    g.add_argument(
        "--microbatches", type=positive_int, default=1, metavar="M", help="pipeline micro-batches (default 1)"
    )
    g.add_argument(
        "--schedule",
        choices=("1f1b", "interleaved", "zb-h1"),
        default="1f1b",
        help="pipeline schedule: 1f1b (default), interleaved (with --virtual-stages), zb-h1 (training)",
    )
    g.add_argument(
        "--virtual-stages",
        type=positive_int,
        metavar="V",
        help="interleaved schedule: model chunks per device (layers split into --pp × V chunks)",
    )
    g.add_argument("--overlap", action="store_true", help="overlap collectives with computation")
    g.add_argument("--fit", action="store_true", help="the fewest devices that hold the model at this batch")
    g.add_argument(
        "--sweep-tp", type=int_list, metavar="LIST", help="tensor-parallel degrees to compare: 1,2,4,8"
    )
    add_link_args(g)


def add_link_args(g: Any) -> None:
    """The link overrides: a plan and a plan search take the same."""
    g.add_argument(
        "--link-bandwidth",
        type=device_figure("--link-bandwidth", "B/s", "450G"),
        metavar="B/s",
        help="override the scale-up link, one way per device (e.g. 450e9 or 450G)",
    )
    g.add_argument(
        "--scaleout-bandwidth",
        type=device_figure("--scaleout-bandwidth", "B/s", "50G"),
        metavar="B/s",
        help="override the scale-out link, one way per device (e.g. 50e9)",
    )
    g.add_argument("--domain", type=positive_int, metavar="N", help="override the scale-up domain size")


def wants_parallel(args: argparse.Namespace) -> bool:
    """Any flag of this group given (``--tp 1`` alone still asks for the parallel form)."""
    flags = ("tp", "pp", "ep", "dp", "cp", "etp", "fit", "sweep_tp", "zero", "virtual_stages", *SHARDING_FLAGS)  # fmt: skip
    return (
        any(getattr(args, f) not in (None, False) for f in flags)
        or args.sp
        or args.overlap
        or args.expert_imbalance != 1
        or args.schedule != "1f1b"
        or args.cp_comm != "ring"
    )


def plan_of(args: argparse.Namespace) -> Plan:
    from attnroof.model.parallel import Plan

    tp, ep, etp, cp = args.tp or 1, args.ep or 1, args.etp or 0, args.cp or 1
    # by default the fewest replicas the expert grid needs: etp · ep divides tp · cp · dp
    dp = args.dp if args.dp is not None else math.lcm(tp * cp, (etp or tp) * ep) // (tp * cp)
    return Plan(
        tp=tp, pp=args.pp or 1, ep=ep, dp=dp, sp=args.sp, microbatches=args.microbatches,
        overlap=args.overlap, zero=args.zero or 0, etp=etp, expert_imbalance=args.expert_imbalance,
        schedule=args.schedule, virtual_stages=args.virtual_stages or 1, cp=cp, cp_comm=args.cp_comm,
        **sharding_of(args),
    )  # fmt: skip


def check_implied_dp(model: ModelConfig, args: argparse.Namespace, plan: Plan) -> None:
    """The batch against the data-parallel replicas that ``--ep`` implied (no ``--dp`` given): an
    error that says where the replicas came from, naming only the flags given (after the errors
    of degrees the model cannot take, which come first whatever the batch)."""
    if args.dp is not None or plan.dp == 1 or args.batch % (plan.dp * plan.microbatches) == 0:
        return
    from attnroof.model.parallel import check_degrees

    check_degrees(model, plan)
    given = [f"--{f} {getattr(args, f)}" for f in ("ep", "etp", "tp", "cp") if getattr(args, f) is not None]
    degrees = [("TP", plan.tp), ("CP", plan.cp)] if plan.cp > 1 else [("TP", plan.tp)]
    names = " × ".join(n for n, _ in degrees)
    values = " × ".join(str(v) for _, v in degrees)
    etp = "" if args.etp is not None else " (ETP: the TP degree unless --etp is given)"
    split = plan.dp * plan.microbatches
    multiple = (
        f"{split}" if plan.microbatches == 1 else f"{plan.dp} × --microbatches {plan.microbatches} = {split}"
    )
    raise InputError(
        f"--batch {args.batch} does not split over {plan.dp} data-parallel replicas: with {', '.join(given)} "
        f"and no --dp, DP defaults to {plan.dp}, the fewest for which the expert grid's {names} × DP = "
        f"{values} × {plan.dp} is a multiple of ETP × EP = {plan.expert_tp} × {plan.ep}{etp}; give a --batch "
        f"that is a multiple of {multiple}",
        param="--batch",
    )


def links_of(args: argparse.Namespace, dev: Device) -> Links:
    """The device's links with the command line's overrides."""
    changes: dict[str, Any] = {}
    if args.link_bandwidth is not None:
        changes["scaleup_bytes_per_s"] = float(args.link_bandwidth)
    if args.scaleout_bandwidth is not None:
        changes["scaleout_bytes_per_s"] = float(args.scaleout_bandwidth)
    if args.domain is not None:
        changes["scaleup_domain"] = args.domain
    return replace(dev.links, **changes)


def run_parallel(job: Any) -> int:
    """Dispatch ``model`` with parallel flags: one plan, a TP sweep or the smallest fit."""
    from attnroof.model.spread import spread
    from attnroof.model.train_spread import train_spread

    args = job.args
    if args.sweep_batch:
        raise InputError(
            "--sweep-batch and the parallel flags cannot be combined; use --sweep-tp", param="--sweep-batch"
        )
    links = links_of(args, job.device)
    plan = plan_of(args)
    if not args.fit:  # --fit chooses the degrees itself
        check_implied_dp(job.model, args, plan)
    if plan.zero and plan.replicas == 1 and not args.fit:
        raise InputError(
            f"--zero {plan.zero} shards over data-parallel replicas: give --dp 2 or more (or --fit)",
            param="--zero",
        )

    def run(
        p: Plan, roof: Any = None, on: Links | None = None
    ) -> Spread:  # a forecast's roof and links, or the bound's
        roof, on = roof or job.roof, on or links
        if args.phase == TRAIN:
            return train_spread(
                job.model, args.batch, args.context, roof, on, p, _train_prec(job),
                capacity_bytes=job.device.capacity_bytes, fused=job.fused, recompute=recompute_of(args),
            )  # fmt: skip
        return spread(
            job.model, args.phase, args.batch, args.context, roof, on, p, job.prec,
            capacity_bytes=job.device.capacity_bytes, fused=job.fused, **job.options,
        )  # fmt: skip

    if args.fit:
        if plan.schedule != "1f1b":
            raise InputError(
                f"--fit tries 1F1B pipelines: not with --schedule {plan.schedule}", param="--fit"
            )
        chosen = [f"--{f}" for f in ("tp", "pp", "dp", "ep", "cp", "etp") if getattr(args, f) is not None]
        if chosen:
            raise InputError(
                f"--fit chooses the degrees itself: not with {', '.join(chosen)} "
                "(--sweep-tp LIST limits the TP degrees it tries)",
                param="--fit",
            )
        return _fit(job, plan, run, links)
    if args.sweep_tp:
        runs = [run(replace(plan, tp=t)) for t in args.sweep_tp]
        return _emit_sweep(job, runs)
    return _emit(job, run(plan), links, _forecast.plan_forecast(job, plan, run, links))


def _train_prec(job: Any) -> TrainPrecision:
    from attnroof.commands._train import train_precision

    return train_precision(job.args, job.dt, job.wdt)[0]


def _whole_memory(job: Any) -> dict[str, Any]:
    """The whole model's memory on one device, as the single-device answer gives it."""
    a = job.args
    if a.phase == TRAIN:
        from attnroof.model.training_memory import train_memory

        return train_memory(
            job.model, a.batch, a.context, _train_prec(job), job.device.capacity_bytes,
            fused=job.fused, recompute=recompute_of(a),
        ).to_json()  # fmt: skip
    from attnroof.model.analysis import analyse

    return analyse(
        job.model, a.phase, a.batch, a.context, job.roof, job.prec,
        capacity_bytes=job.device.capacity_bytes, fused=job.fused, **job.options,
    ).memory.to_json()  # fmt: skip


def totals_of(job: Any, s: Spread) -> dict[str, Any]:
    """The step's totals: a training step's with its passes, model FLOPs and MFU."""
    from attnroof.model.train_spread import step_totals

    return step_totals(s, job.model, job.args.context, job.roof.peak_flops_per_s)


def spread_json(job: Any, s: Spread, links: Links) -> dict[str, Any]:
    from attnroof.model.plans import spread_json as to_json

    return to_json(s, _whole_memory(job), job.device.capacity_bytes, links, totals_of(job, s))


def head_of(job: Any) -> dict[str, Any]:
    """The JSON fields that say which step this is."""
    if job.args.phase == TRAIN:
        from attnroof.commands._train import train_head

        return train_head(job.model, job.args, job.device, job.roof, job.dt, job.wdt)
    return {**job.json_head(), "batch": job.args.batch}


def _emit(job: Any, s: Spread, links: Links, ahead: Any = None) -> int:
    from attnroof.commands import _calibration

    a = job.args
    cal = _calibration.load(a, job.device, job.dt)
    pred = None if cal is None else _calibration.spread_step(a, cal, job.model, s, job.prec, job.fused)
    if a.json:
        out = {**head_of(job), **spread_json(job, s, links)} | ({} if pred is None else {"predicted": pred})
        emit_json(_forecast.plan_forecast_json(out, ahead, s, job))
        return 0
    from attnroof.text.parallel import forecast_text, spread_text

    print(spread_text(job.setting, s, links, text_setting(job)) + _forecast.plan_forecast_line(ahead, s, job))
    if pred is not None:
        print("\n" + forecast_text(pred, a.batch, a.phase == "decode"))
    return 0


def _emit_sweep(job: Any, runs: list[Spread]) -> int:
    from attnroof.model.spread import sweep_summary

    summary = sweep_summary(runs)
    if job.args.json:
        from attnroof.model.plans import plan_json

        rows = [{"parallel": plan_json(r), "totals": totals_of(job, r), "fits": r.fits,
                 "memory_per_device": r.busiest_memory.to_json()} for r in runs]  # fmt: skip
        emit_json({**head_of(job), "rows": rows, **summary})
        return 0
    from attnroof.text.parallel import sweep_text

    print(sweep_text(job.setting, runs, summary, text_setting(job)))
    return 0


def _fit(job: Any, plan: Plan, run: Any, links: Links) -> int:
    """The plan search on 1, 2, 4, … devices until one fits, holding what the flags fix (the
    recomputation, ``--zero`` and the sharding policy's flags, ``--sp``, ``--overlap``;
    ``--sweep-tp``: the TP degrees tried)."""
    from attnroof.model.search import Choices, Option, fit
    from attnroof.model.spread import spread
    from attnroof.model.train_spread import train_spread

    a = job.args
    train = a.phase == TRAIN
    choices = Choices(
        tps=None if a.sweep_tp is None else tuple(a.sweep_tp),
        cps=(1,),
        schedules=("1f1b",),
        zeros=None if a.zero is None else (a.zero,),
        **sharding_choices(a),
        recomputes=(recompute_of(a),),
        sp=a.sp,
        overlap=a.overlap,
    )

    def cost(o: Option) -> Spread:  # memory without its capacity: no largest batch searched per plan
        if train:
            return train_spread(
                job.model, a.batch, a.context, job.roof, links, o.plan, _train_prec(job), fused=job.fused,
                recompute=o.recompute,
            )  # fmt: skip
        return spread(job.model, a.phase, a.batch, a.context, job.roof, links, o.plan, job.prec,
                      fused=job.fused, **job.options)  # fmt: skip

    judge = None
    if train:  # training plans judged on arrays (model/plan_table.py)
        from attnroof.model.plan_table import PlanTable

        table = PlanTable(job.model, a.batch, a.context, job.roof, links, _train_prec(job), fused=job.fused)

        def judge(options: list[Option]) -> list[tuple[Any, ...]]:
            return table.judge(options, job.device.capacity_bytes)

    found = fit(job.model, a.phase, a.batch, cost, lambda s: totals_of(job, s), job.device.capacity_bytes,
                choices, context=a.context, judge=judge)  # fmt: skip
    best = run(found.best.option.plan)  # again with the capacity: its largest batch and context
    if job.args.json:
        emit_json({**head_of(job), "fit": found.to_json(), **spread_json(job, best, links)})
        return 0
    from attnroof.text.parallel import fit_text

    print(fit_text(job.setting, found, best, links, text_setting(job)))
    return 0


def text_setting(job: Any) -> list[str] | None:
    """A training step's first lines (its own header); None for prefill and decode."""
    if job.args.phase != TRAIN:
        return None
    from attnroof.commands._train import train_header

    return train_header(job.model, job.args, job.device, job.roof, job.dt, job.wdt)
