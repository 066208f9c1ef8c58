"""``--calibration FILE`` and ``--impl NAME``: the forecast beside the bound (attention, decode,
linear, model)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from attnroof.commands._common import path_arg
from attnroof.devices import Device
from attnroof.dtypes import DType


def add_calibration_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("forecast")
    g.add_argument(
        "--calibration",
        type=path_arg,
        metavar="FILE",
        help="a calibration (attnroof calibrate -o): forecast beside the bound",
    )
    g.add_argument(
        "--impl", metavar="NAME", help="forecast this implementation only (default: every calibrated one)"
    )


def load(args: argparse.Namespace, dev: Device, dt: DType) -> Any:
    """The calibration of ``--calibration`` for this device and dtype, or ``None`` without one."""
    if getattr(args, "calibration", None) is None:
        if getattr(args, "impl", None) is not None:
            from attnroof.errors import InputError

            raise InputError("--impl needs --calibration FILE (attnroof calibrate -o FILE)")
        return None
    from attnroof import calibration
    from attnroof.calibration.forecast import select

    return select(calibration.read(args.calibration), dev, dt.name)


def predicted(args: argparse.Namespace, cal: Any, kind: str, shape: Mapping[str, Any]) -> Any:
    """The forecasts: one :class:`Forecast` with ``--impl``, else the list, fastest first."""
    from attnroof.calibration.forecast import forecast

    return forecast(cal, kind, shape, args.impl)


def predicted_json(args: argparse.Namespace, forecasts: Any) -> Any:
    out = [f.to_json() for f in forecasts]
    return out[0] if args.impl else out


def predicted_text(forecasts: Any, bound_s: float, cal: Any) -> str:
    from attnroof.text.calibration import forecast_lines

    return forecast_lines(forecasts, bound_s, cal)


def step(args: argparse.Namespace, cal: Any, model: Any, prec: Any, fused: bool, a: Any) -> dict[str, Any]:
    """The calibrated forecast of a model step: per operator and in total (JSON-ready)."""
    from attnroof.calibration.forecast import step_forecast
    from attnroof.model.costs import model_ops

    ops = model_ops(
        model,
        args.phase,
        args.batch,
        args.context,
        prec,
        fused=fused,
        routing=args.routing,
        latent_form=args.mla,
    )
    fcs = step_forecast(
        cal,
        ops,
        phase=args.phase,
        context=args.context,
        head_dim=model.head_dim,
        impl=args.impl,
        decode_shape={"batch": args.batch, "heads": model.heads, "group": model.group},
    )
    total = sum(o.count * o.time_s for o in fcs)
    low = sum(o.count * o.low_s for o in fcs)
    high = sum(o.count * o.high_s for o in fcs)
    decode = args.phase == "decode"
    return {
        "time_s": total,
        "low_s": low,
        "high_s": high,
        "tokens_per_s": args.batch / total if decode else None,
        "bound_time_s": a.totals.time_s,
        "ops": [o.to_json() for o in fcs],
    }


def step_text(pred: dict[str, Any], bound_s: float, batch: int, decode: bool) -> str:
    from attnroof.calibration.forecast import OpForecast
    from attnroof.text.calibration import step_forecast_text

    ops = [
        OpForecast(o["name"], o["count"], o["time_s"], o["low_s"], o["high_s"], o["by"]) for o in pred["ops"]
    ]
    return step_forecast_text(ops, bound_s, batch, decode)


def spread_step(
    args: argparse.Namespace, cal: Any, model: Any, s: Any, prec: Any, fused: bool
) -> dict[str, Any]:
    """The calibrated forecast of a plan (:class:`attnroof.model.spread.Spread`): each stage's
    kernels forecast on that device's shard (its heads, its cut GEMMs), the collectives at their
    link-roof time (links are not calibrated: an NCCL measurement would be), and the pipeline's
    schedule over the stages: Σ stages + (m − 1) · the slowest, each layer kind's kernels and
    collectives added, or the larger of the two with ``--overlap``."""
    from attnroof.calibration.forecast import step_forecast
    from attnroof.model.costs import model_ops
    from attnroof.model.layers import layer_table
    from attnroof.model.schedules import schedule
    from attnroof.operators import rule

    plan = s.plan
    if plan.cp > 1:
        from attnroof.errors import InputError

        raise InputError(
            f"--calibration with --cp {plan.cp}: a calibration measures attention over whole "
            "sequences, not a context-parallel device's queries against the whole sequence's keys",
            param="--calibration",
        )
    micro = args.batch // plan.dp // plan.microbatches
    stages: list[dict[str, Any]] = []
    ops_json: list[dict[str, Any]] = []
    for st in s.stages:
        shard = plan.shard(st.first, st.stop, st.more)
        ops = model_ops(
            model, args.phase, micro, args.context, prec, fused=fused, routing=args.routing,
            latent_form=args.mla, shard=shard,
        )  # fmt: skip
        attn = next((i for i in layer_table(model, shard) if rule(i).measured_as == "attention"), None)
        heads = model.heads if attn is None else rule(attn).query_heads(attn)
        group = model.group if attn is None else attn.shape["group"]
        fcs = step_forecast(
            cal, ops, phase=args.phase, context=args.context, head_dim=model.head_dim, impl=args.impl,
            decode_shape={"batch": micro, "heads": heads, "group": group},
        )  # fmt: skip
        times = {a: _stage_time(ops, fcs, st.comms, plan.overlap, a) for a in ("time_s", "low_s", "high_s")}
        stages.append({"layers": [st.first, st.stop], **times})
        if st is s.slowest:
            ops_json = [f.to_json() for f in fcs]

    def step(attr: str) -> float:  # the plan's pipeline schedule over the stages' forecasts
        times = [st[attr] for st in stages]
        no_weights = [0.0] * len(times)  # prefill and decode: no backward
        return schedule(plan.schedule).time(times, no_weights, plan.microbatches, plan.virtual_stages)

    total = step("time_s")
    return {
        "time_s": total,
        "low_s": step("low_s"),
        "high_s": step("high_s"),
        "tokens_per_s": args.batch / total if args.phase == "decode" else None,
        "bound_time_s": s.bound_time_s,
        "comm_time_s": s.totals()["comm_time_s"],
        "comm_by": "link roof (links not calibrated)",
        "stages": stages,
        "ops": ops_json,
    }


def _stage_time(ops: Any, fcs: Any, comms: Any, overlap: bool, attr: str) -> float:
    """One stage's forecast (``attr``: the expected time or an end of its band): per layer kind,
    the kernels' forecast and the collectives' link time added, or the larger with overlap."""
    total = 0.0
    for k in dict.fromkeys([o.layer_kind for o in ops] + [c.layer_kind for c in comms]):
        kernels = sum(f.count * getattr(f, attr) for o, f in zip(ops, fcs, strict=True) if o.layer_kind == k)
        links = sum(c.count * c.time_s for c in comms if c.layer_kind == k)
        total += max(kernels, links) if overlap else kernels + links
    return total
