"""``--profile NAME|FILE|none``: the forecast beside the bound, from an efficiency profile
(:mod:`attnroof.profiles`): the package's profile for the device's family by default, a file of
one's own, or ``none`` for the bound alone."""

from __future__ import annotations

import argparse
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
    from attnroof import profiles

    given = getattr(args, "profile", None)
    if given == NONE:
        return None
    if given is None:
        return profiles.choose(dev.name, dev.vendor, dt.name)
    if given.endswith(".toml") or "/" in given:
        p = profiles.read(given)
        return profiles.replace(p, basis=f"profile file {given}")
    everything = profiles.shipped()
    named = [p for p in everything if p.name == given]
    if not named:
        known = ", ".join(sorted({p.name for p in everything})) or "none"
        raise InputError(f"--profile {given!r}: no such profile (shipped: {known}; or a .toml file, or none)")
    chosen = profiles.choose(dev.name, dev.vendor, dt.name, named) or named[0]
    if dev.name not in chosen.devices:
        chosen = profiles.replace(
            chosen, basis=f"profile {chosen.name} {chosen.dtype}, as asked (not {dev.name}'s family)"
        )
    return chosen


def forecast_roof(args: argparse.Namespace, dev: Device, dt: DType, roof: Roof) -> Any:
    """``roof`` with ``--profile``'s efficiencies (a :class:`ForecastRoof`), or ``None``."""
    p = profile_of(args, dev, dt)
    if p is None:
        return None
    from attnroof.profiles.kernels import ForecastRoof

    return ForecastRoof.over(roof, p)


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
