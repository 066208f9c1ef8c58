"""Measure one case: check the output, time it, place it; any failure becomes a record, never a
crash (an out-of-memory error is a skip, a wrong output has no time)."""

from __future__ import annotations

import re
from typing import Any

from attnroof.devices import Device
from attnroof.measure.env import TorchDevice
from attnroof.measure.kernels import (
    TOLERANCE,
    UNFUSED,
    Case,
    Unavailable,
    estimate_bytes,
    model_cost,
    prepare,
)
from attnroof.measure.records import ERROR, SKIP, WRONG, new_record, place_record, set_time
from attnroof.measure.timing import FULL, Budget, time_kernel
from attnroof.units import si


def is_out_of_memory(e: BaseException) -> bool:
    """torch.OutOfMemoryError, or a RuntimeError that says the allocator ran out."""
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def one_line(e: BaseException, limit: int = 240) -> str:
    text = re.sub(r"\s+", " ", f"{type(e).__name__}: {e}").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def measure_case(
    case: Case,
    dev: TorchDevice,
    *,
    measured: Device | None = None,
    catalog: Device | None = None,
    budget: Budget = FULL,
    memory_limit_bytes: float | None = None,
) -> dict[str, Any]:
    """The record of one case on ``dev``, placed on ``measured`` (and ``catalog``) when given."""
    rec = new_record(case.key, case.kind, case.impl, case.shape, case.dtype, dev.label)
    cost = model_cost(case)
    rec.update(model="unfused" if case.impl in UNFUSED else "fused", rel_error=None, timing=None)
    rec.update(flops=float(cost.flops), bytes=float(cost.bytes), intensity=float(cost.intensity))
    limit = dev.memory_limit_bytes if memory_limit_bytes is None else memory_limit_bytes
    need = estimate_bytes(case)
    if need > limit:
        rec.update(
            status=SKIP, reason=f"needs about {si(need, 'B')}, over the {si(limit, 'B')} this device allows"
        )
        return rec
    prepared = out = None
    try:
        prepared = prepare(case, dev)
        out = prepared.run()
        dev.sync()
        err = prepared.error(out)
        out = None
        rec["rel_error"] = err
        tol = TOLERANCE[case.dtype]
        if not err <= tol:  # NaN is wrong too
            rec.update(
                status=WRONG,
                reason=f"relative error {err:.3g} against the float32 reference (allowed {tol:g})",
            )
            return rec
        timing = time_kernel(prepared.run, dev, budget)
        set_time(rec, timing.seconds, cost.flops, cost.bytes)
        rec["timing"] = timing.method
    except Unavailable as e:
        rec.update(status=SKIP, reason=str(e))
    except Exception as e:
        if is_out_of_memory(e):
            dev.drop_inputs()  # the next case draws its own on an emptied device
            rec.update(status=SKIP, reason=f"out of memory: {one_line(e)}")
        else:
            rec.update(status=ERROR, reason=one_line(e))
    finally:
        prepared = out = None
        dev.free_memory()
    return place_record(rec, measured, catalog)
