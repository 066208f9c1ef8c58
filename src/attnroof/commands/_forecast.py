"""``--profile NAME|FILE|none``: the forecast beside the bound, from an efficiency profile
(:mod:`attnroof.profiles`): the package's profile for the device's family by default, a file of
one's own, or ``none`` for the bound alone."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from typing import Any

from attnroof.devices import Device
from attnroof.dtypes import DType
from attnroof.errors import InputError
from attnroof.roofline import Roof

NONE = "none"


def add_profile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile",
        metavar="NAME|FILE",
        default=None,
        help="efficiency profile for the forecast: a shipped family (h100, a100, ...), a profile "
        "file, or 'none' for the bound alone (default: the device's family, where one is shipped)",
    )


def profile_of(args: argparse.Namespace, dev: Device, dt: DType) -> Any:
    """The profile ``--profile`` names for this device and dtype, or ``None`` (no forecast)."""
    from attnroof.profiles import files

    given = getattr(args, "profile", None)
    if given == NONE:
        return None
    if given is None:
        return files.choose(dev.name, dev.vendor, dt.name)
    if given.endswith(".toml") or "/" in given:
        p = files.read(given)
        return replace(p, basis=f"profile file {given}")
    everything = files.shipped()
    named = [p for p in everything if p.name == given]
    if not named:
        known = ", ".join(sorted({p.name for p in everything})) or "none"
        raise InputError(f"--profile {given!r}: no such profile (shipped: {known}; or a .toml file, or none)")
    chosen = files.choose(dev.name, dev.vendor, dt.name, named) or named[0]
    if dev.name not in chosen.devices:
        chosen = replace(
            chosen, basis=f"profile {chosen.name} {chosen.dtype}, as asked (not {dev.name}'s family)"
        )
    return chosen


def forecast_roof(args: argparse.Namespace, dev: Device, dt: DType, roof: Roof, *, step: bool = True) -> Any:
    """``roof`` with ``--profile``'s efficiencies (a :class:`ForecastRoof`), or ``None``;
    ``step``: for a step's kernels (the ``model`` and ``plan`` commands), not one kernel timed
    alone (``attention``, ``decode``, ``linear``)."""
    p = profile_of(args, dev, dt)
    if p is None:
        return None
    from attnroof.profiles.kernels import ForecastRoof

    return ForecastRoof.over(roof, p, step=step)


def forecast_json(profile: Any, level: str, time_s: float, bound_s: float) -> dict[str, Any]:
    """The forecast's JSON: its time, the bound beside it, its basis and held-out error."""
    return {
        "time_s": time_s,
        "bound_time_s": bound_s,
        "basis": profile.basis,
        "level": level,
        "error_median": profile.error.median.get(level),
        "error_p90": profile.error.p90.get(level),
    }


def cost_forecast(roof: Any, cost: Any, **shape: Any) -> float:
    """One attention cost's forecast, stage by stage (:func:`attnroof.profiles.kernels.attention_kernels`)."""
    from attnroof.profiles.kernels import attention_kernels, cost_time

    return float(cost_time(roof, cost, attention_kernels(cost, **shape)))


def step_totals_json(totals: Any, batch: int, phase: str) -> dict[str, Any]:
    """A forecast step's figures for a step's ``totals``: its time and the rates from it."""
    return {
        "forecast_time_s": totals.time_s,
        "forecast_tokens_per_s": batch / totals.time_s if phase == "decode" else None,
        "forecast_ttft_s": totals.time_s if phase == "prefill" else None,
    }


def spread_totals_json(
    s: Any, time_s: float, model: Any, context: int, peak_flops_per_s: float
) -> dict[str, Any]:
    """A plan's forecast figures for its totals: the step's time, tokens/s, and for a training
    step the MFU over all its devices (PaLM's model FLOPs, as the bound's ``mfu`` counts them)."""
    out: dict[str, Any] = {"forecast_time_s": time_s}
    if s.phase != "train":
        return out | {
            "forecast_tokens_per_s": s.batch / time_s if s.phase == "decode" else None,
            "forecast_ttft_s": time_s if s.phase == "prefill" else None,
        }
    if s.phase == "train":
        from attnroof.model.training import model_flops

        tokens = s.batch * context
        out["forecast_tokens_per_s"] = tokens / time_s
        out["forecast_mfu"] = float(model_flops(model, s.batch, context)) / (
            s.plan.devices * time_s * peak_flops_per_s
        )
    elif s.phase == "decode":
        out["forecast_tokens_per_s"] = s.batch / time_s
    return out


def plan_forecast(job: Any, plan: Any, run: Any, links: Any) -> Any:
    """The plan's forecast (:mod:`attnroof.model.forecast`): its spread on the forecast's roof
    and links without overlap, and the step's time from it; ``None`` without a profile."""
    roof = forecast_roof(job.args, job.device, job.dt, job.roof)
    if roof is None:
        return None
    from dataclasses import replace

    from attnroof.model.forecast import forecast_links, forecast_time

    serial = run(replace(plan, overlap=False), roof, forecast_links(links, roof.profile))
    return roof.profile, serial, forecast_time(serial, roof.profile)


def _level(job: Any) -> str:
    return "train" if job.args.phase == "train" else "step"


def plan_forecast_json(out: dict[str, Any], ahead: Any, s: Any, job: Any) -> dict[str, Any]:
    """A plan's forecast into its JSON ``out`` (unchanged without one): the totals' forecast
    figures, each stage's forecast (its bound plus the unhidden share of what the serial
    estimate adds), the basis."""
    if ahead is None:
        return out
    profile, serial, t = ahead
    out["totals"] |= spread_totals_json(s, t, job.model, job.args.context, job.roof.peak_flops_per_s)
    from attnroof.model.forecast import stage_forecast

    for st, fst in zip(out["stages"], serial.stages, strict=True):
        st["forecast_time_s"] = stage_forecast(fst, profile)
    slow = max(serial.stages, key=lambda st: stage_forecast(st, profile))
    for op, fo in zip(out["ops"], slow.ops, strict=False):  # the kernels first, then the collectives
        op["forecast_time_s"] = fo.time_s
    out["forecast"] = forecast_json(profile, _level(job), t, s.bound_time_s)
    return out


def plan_forecast_line(ahead: Any, s: Any, job: Any) -> str:
    """``\n\nforecast step 15.1 s, profile h100 bf16 (±9% held out); bound ≥ 9.59 s; forecast MFU
    49.4%``, or nothing without a forecast."""
    if ahead is None:
        return ""
    from attnroof.text.forecast import forecast_line

    profile, _, t = ahead
    line = forecast_line(profile, _level(job), t, s.bound_time_s, "step")
    fig = spread_totals_json(s, t, job.model, job.args.context, job.roof.peak_flops_per_s)
    return "\n\n" + line + (f"; forecast MFU {fig['forecast_mfu']:.1%}" if "forecast_mfu" in fig else "")


@dataclass(frozen=True)
class Kernels:
    """One command's kernels forecast: each variant's (``unfused``, ``fused``; or the GEMM's,
    under ``""``) forecast and bound, with the profile that gave them."""

    profile: Any
    times: dict[str, tuple[float, float]]
    """label → (forecast, bound), seconds."""

    def into(self, out: dict[str, Any]) -> None:
        """Each variant's ``forecast_time_s`` and ``forecast`` into its JSON object."""
        for label, (t, bound) in self.times.items():
            out[label] |= {"forecast_time_s": t, "forecast": forecast_json(self.profile, "kernel", t, bound)}

    def json(self) -> dict[str, Any]:
        """The one variant's fields, for a command whose JSON has no variants (``linear``)."""
        ((t, bound),) = self.times.values()
        return {"forecast_time_s": t, "forecast": forecast_json(self.profile, "kernel", t, bound)}

    def text(self) -> str:
        from attnroof.text.forecast import forecast_line

        return "\n".join(
            forecast_line(self.profile, "kernel", t, b, label) for label, (t, b) in self.times.items()
        )


def comparison_forecast(
    args: Any, dev: Any, dt: Any, roof: Roof, cmp: Any, kind: str, causal: bool
) -> Kernels | None:
    """The ``attention``/``decode`` commands' unfused and fused costs forecast stage by stage."""
    on = forecast_roof(args, dev, dt, roof, step=False)
    if on is None:
        return None
    shape = dict(
        queries=1 if kind == "decode" else args.s,
        keys=args.s,
        d=args.d,
        units=args.batch * args.heads,
        causal=causal,
    )
    times = {
        label: (cost_forecast(on, v.cost, **shape), v.placement.time_s)
        for label, v in (("unfused", cmp.unfused), ("fused", cmp.fused))
    }
    return Kernels(on.profile, times)


def gemm_forecast(args: Any, dev: Any, dt: Any, roof: Roof, cost: Any, bound_s: float) -> Kernels | None:
    """The ``linear`` command's GEMM forecast."""
    from attnroof.profiles.kernels import cost_time

    on = forecast_roof(args, dev, dt, roof, step=False)
    if on is None:
        return None
    kernel = {"kernel": "gemm", "t": args.n, "k": args.k, "m": args.m}
    return Kernels(
        on.profile,
        {"": (float(cost_time(on, cost, [kernel] * len(cost.stages))), bound_s)},
    )


def missing_line(args: argparse.Namespace, dev: Device) -> str:
    """``\n\nno forecast: ...`` where no shipped profile covers a real device (a TPU, Gaudi,
    Trainium) and none was asked for; nothing otherwise (``--profile none`` asked for the bound
    alone, and device R is the specification's hypothetical part)."""
    if getattr(args, "profile", None) is not None or dev.kind == "reference" or not dev.vendor:
        return ""
    return (
        f"\n\nno forecast: no efficiency profile covers {dev.name} ({dev.vendor} has no family in"
        " src/attnroof/profiles/data); the bound alone, or --profile FILE for one of your own"
    )
