"""The campaign: ceilings, a prefill sweep, decode and linear, one JSON line per measurement.

Sizes fill the device: on a GPU the prefill sweep keeps batch × s = 16k tokens and
heads × d = 2048 (the FlashAttention benchmarks' convention); on a CPU they stay small enough
for two cores. Every case estimates its memory first and is skipped, with the reason, when it
would not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from attnroof.devices import Device
from attnroof.measure.ceilings import ceiling_keys, measure_ceilings, measured_device
from attnroof.measure.env import TorchDevice
from attnroof.measure.kernels import IMPLS, Case, attention_case, decode_case, linear_case
from attnroof.measure.records import CEILING, ERROR, OK, ResultsFile, place_record
from attnroof.measure.runner import measure_case
from attnroof.measure.timing import FULL, QUICK

TOKENS_PER_BATCH = 16384
"""Prefill on a GPU: batch = 16k / s sequences (at least one)."""
HEAD_WIDTH = 2048
"""Prefill on a GPU: heads = 2048 / d."""


@dataclass(frozen=True)
class Plan:
    """Sizes of one campaign."""

    prefill_s: Sequence[int]
    prefill_d: Sequence[int]
    decode_s: Sequence[int]
    decode_groups: Sequence[int]
    decode_heads: int
    decode_batch: int
    decode_d: int
    linear_n: Sequence[int]
    linear_km: int
    cpu_heads: int = 2


PLANS = {
    ("cpu", True): Plan((256, 512), (64,), (1024, 4096), (1, 4), 4, 1, 64, (1, 32, 256), 1024),
    ("cpu", False): Plan(
        (256, 512, 1024, 2048),
        (64, 128),
        (1024, 8192, 32768),
        (1, 4, 8),
        8,
        1,
        128,
        (1, 8, 64, 512, 2048),
        2048,
        cpu_heads=4,
    ),
    ("cuda", True): Plan(
        (1024, 4096, 16384), (128,), (4096, 32768, 131072), (1, 8), 32, 8, 128, (1, 16, 128, 1024, 8192), 8192
    ),
    ("cuda", False): Plan(
        (512, 1024, 2048, 4096, 8192, 16384, 32768),
        (64, 128),
        (1024, 4096, 16384, 65536, 131072),
        (1, 4, 8),
        32,
        8,
        128,
        (1, 4, 16, 64, 256, 1024, 4096, 16384),
        8192,
    ),
}


def plan_cases(
    dev_type: str, *, quick: bool, dt: str = "bf16", impls: Iterable[str] | None = None
) -> list[Case]:
    """Every case of the campaign, in order: prefill (s × d × causal × impl), decode, linear."""
    plan = PLANS[(dev_type, quick)]
    keep = set(impls) if impls is not None else None
    cases: list[Case] = []
    for s in plan.prefill_s:
        for d in plan.prefill_d:
            if dev_type == "cuda":
                batch, heads = max(1, TOKENS_PER_BATCH // s), max(1, HEAD_WIDTH // d)
            else:
                batch, heads = 1, plan.cpu_heads
            for causal in (False, True):
                cases += [
                    attention_case(i, s, d, batch=batch, heads=heads, causal=causal, dt=dt)
                    for i in IMPLS["attention"]
                ]
    for s in plan.decode_s:
        for g in plan.decode_groups:
            cases += [
                decode_case(
                    i, s, plan.decode_d, batch=plan.decode_batch, heads=plan.decode_heads, group=g, dt=dt
                )
                for i in IMPLS["decode"]
            ]
    cases += [linear_case(n, plan.linear_km, plan.linear_km, dt=dt) for n in plan.linear_n]
    return [c for c in cases if keep is None or c.impl in keep]


def campaign_keys(
    dev: TorchDevice,
    *,
    quick: bool,
    dt: str = "bf16",
    impls: Iterable[str] | None = None,
    ceilings: bool = True,
) -> list[str]:
    """The key of every record a complete campaign holds, in order: the ceilings (unless they come
    from a file: ``ceilings=False``), then :func:`plan_cases`. Nothing is measured."""
    keys = ceiling_keys(dev, quick=quick) if ceilings else []
    return keys + [c.key for c in plan_cases(dev.device.type, quick=quick, dt=dt, impls=impls)]


def _unplaced(rec: dict[str, Any]) -> bool:
    """A timed ceiling written before the roof it makes was known (the run stopped there)."""
    return rec.get("status") == OK and rec.get("time_s") is not None and rec.get("bound_time_s") is None


def run_suite(
    results: ResultsFile,
    dev: TorchDevice,
    *,
    quick: bool,
    dt: str = "bf16",
    catalog: Device | None = None,
    ceilings: Device | None = None,
    ceiling_records: Sequence[dict[str, Any]] = (),
    cases: Sequence[Case] | None = None,
    memory_limit_bytes: float | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[list[dict[str, Any]], Device]:
    """Run the campaign into ``results`` (skipping keys already there) and return all its
    records and the measured device. ``ceilings`` (a device, e.g. from a ceilings file) replaces
    measuring them; its ``ceiling_records`` are copied into the results. A case that ended in an
    error is tried again (its error record is replaced); ok, skipped and wrong cases are kept.

    Resuming measures whatever is missing, ceilings included (a run stopped while they were being
    measured), so that the file ends with every key of :func:`campaign_keys` once."""
    failed = [r for r in results.records if r.get("status") == ERROR]
    if failed:
        results.rewrite([r for r in results.records if r.get("status") != ERROR])
    done = results.done

    def emit(rec: dict[str, Any]) -> None:
        results.append(rec)
        if progress:
            progress(rec)

    if ceilings is None:
        kept = [r for r in results.records if r.get("kind") == CEILING]
        stale = any(_unplaced(r) for r in kept)
        before = len(results.records)
        records = measure_ceilings(dev, quick=quick, kept=kept, on_record=emit)  # each on disk as made
        ceilings = measured_device(records, dev)
        for rec in records:
            place_record(rec, ceilings, catalog)
        if stale or len(results.records) > before:
            results.rewrite(results.records)  # the same records, now placed on the roof they make
    else:
        for rec in ceiling_records:
            if rec.get("key") not in done:
                emit(place_record(dict(rec), ceilings, catalog))
    todo = plan_cases(dev.device.type, quick=quick, dt=dt) if cases is None else list(cases)
    budget = QUICK if quick else FULL
    for case in todo:
        if case.key in done:
            continue
        emit(
            measure_case(
                case,
                dev,
                measured=ceilings,
                catalog=catalog,
                budget=budget,
                memory_limit_bytes=memory_limit_bytes,
            )
        )
    dev.drop_inputs()  # the last shape's inputs, kept for the implementations that shared them
    dev.free_memory()
    return results.records, ceilings
