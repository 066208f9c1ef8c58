"""Measured ceilings of the local device: memory bandwidth three ways and the best matmul rate
per dtype, and the device record they make.

    read   x.sum() over a buffer far larger than the last-level cache      bytes = buffer
           (on CUDA also the Triton read kernel, measure/stream.py: the best read stands)
    write  x.fill_(c)                                                     bytes = buffer
    copy   y.copy_(x)                                   bytes = 2 × buffer (STREAM: read + write)
    matmul a @ b, square n × n, a few large n per dtype                   FLOPs = 2n³

Each figure is the best repetition, as STREAM reports. The device's bandwidth roof is the best of
the three; its peak per dtype is the best matmul over the sizes tried. Inputs are random, never
zeros (zeros let some hardware skip work).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any

from attnroof import outfile
from attnroof.devices import MIN_MEASURED_RATE, Device, device_from_record
from attnroof.errors import InputError
from attnroof.measure.env import TorchDevice
from attnroof.measure.records import CEILING, OK, SKIP, new_record, place_record, set_time
from attnroof.measure.runner import is_out_of_memory, one_line
from attnroof.measure.stream import stream_readers
from attnroof.measure.timing import Budget, time_kernel
from attnroof.units import GiB, MiB, si

READ, WRITE, COPY, MATMUL = "read", "write", "copy", "matmul"
BANDWIDTHS = (READ, WRITE, COPY)

CPU_BUFFER_BYTES = 256 * MiB
"""Bandwidth buffer on a CPU: 8× a 32 MiB L3, small enough for a shared 24 GB machine."""
GPU_BUFFER_BYTES = 1 * GiB
"""Bandwidth buffer on a GPU: 20× the 50 MB L2 of an H100/H200."""

MATMUL_SIZES = {
    ("cuda", True): (4096, 8192),
    ("cuda", False): (4096, 8192, 16384),
    ("cpu", True): (256, 512, 1024),
    ("cpu", False): (512, 1024, 2048),
}
"""Square matmul sizes tried per device type and quick mode; the best rate is the ceiling."""
MATMUL_DTYPES = {"cuda": ("bf16", "fp16", "tf32", "fp32"), "cpu": ("bf16", "fp16", "fp32")}
MATMUL_MAX_CALL_S = {True: 0.3, False: 2.0}
"""A larger size is not tried when one call of it would take longer than this (s): fp16 matmul
on a CPU without a half-precision path runs at a few GFLOP/s."""

BANDWIDTH_BUDGET = Budget(seconds=0.2, min_reps=4, max_reps=20, warmup=1)
MATMUL_BUDGET = Budget(seconds=0.15, min_reps=3, max_reps=20, warmup=1)
FP32_BYTES = 4
FILE_FORMAT = "attnroof-ceilings/1"


def measure_ceilings(
    dev: TorchDevice,
    *,
    quick: bool = True,
    dtypes: Iterable[str] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    kept: Iterable[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Ceiling records (kind ``"ceiling"``): read, write, copy, then matmul per dtype and size,
    one record per key of :func:`ceiling_keys` (a size that is not tried is a ``skip`` with the
    reason, so that the keys do not depend on timing). ``on_record`` sees each new one as soon as
    it is measured (to write it before the next starts).

    ``kept``: records a resumed campaign already holds. Their keys are not measured again (a
    bandwidth kernel counts as done whatever its buffer size); they take their place in the
    returned list, and a kept matmul's time decides whether the next size is tried, as it did."""
    have = {r["key"]: r for r in kept if r.get("kind") == CEILING and "key" in r}
    records = []
    for rec, new in itertools.chain(_bandwidth(dev, have), _matmuls(dev, quick, dtypes, have)):
        if new and on_record:
            on_record(rec)
        records.append(rec)
    return records


def ceiling_keys(dev: TorchDevice, *, quick: bool = True, dtypes: Iterable[str] | None = None) -> list[str]:
    """The key of every record :func:`measure_ceilings` makes on ``dev``, in order."""
    n = _bandwidth_elements(dev)
    keys = [_bandwidth_key(impl, n) for impl in BANDWIDTHS]
    for dt in _matmul_dtypes(dev, dtypes):
        keys += [_matmul_key(dt, size) for size in MATMUL_SIZES[(dev.device.type, quick)]]
    return keys


def _bandwidth_elements(dev: TorchDevice) -> int:
    size: float = GPU_BUFFER_BYTES if dev.is_cuda else CPU_BUFFER_BYTES
    while 2 * size > dev.memory_limit_bytes and size > 16 * MiB:
        size /= 2
    return int(size) // FP32_BYTES


def _bandwidth_key(impl: str, n: int) -> str:
    return f"ceiling/{impl}/fp32/bytes={n * FP32_BYTES}"


def _matmul_key(dt: str, n: int) -> str:
    return f"ceiling/matmul/{dt}/n={n}"


def _matmul_dtypes(dev: TorchDevice, dtypes: Iterable[str] | None) -> list[str]:
    kind = dev.device.type
    wanted = list(dtypes) if dtypes is not None else list(MATMUL_DTYPES[kind])
    for dt in wanted:
        if dt not in MATMUL_DTYPES[kind]:
            raise InputError(
                f"no matmul ceiling for {dt} on {kind}; measured: {', '.join(MATMUL_DTYPES[kind])}"
            )
    return wanted


def _bandwidth(dev: TorchDevice, have: Mapping[str, dict[str, Any]]) -> Iterator[tuple[dict[str, Any], bool]]:
    torch = dev.torch
    n = _bandwidth_elements(dev)
    done = {r["impl"]: r for r in have.values() if r.get("impl") in BANDWIDTHS}
    if all(impl in done for impl in BANDWIDTHS):
        for impl in BANDWIDTHS:
            yield done[impl], False
        return
    x = torch.randn(n, device=dev.device)
    y = torch.empty_like(x)
    kernels = {READ: (x.sum, 1), WRITE: (partial(x.fill_, 1.5), 1), COPY: (partial(y.copy_, x), 2)}
    readers = stream_readers(torch, x) if dev.is_cuda else {}
    for impl, (fn, passes) in kernels.items():
        if impl in done:
            yield done[impl], False
            continue
        rec = new_record(_bandwidth_key(impl, n), CEILING, impl, {"bytes": n * FP32_BYTES}, "fp32", dev.label)
        t, name = time_kernel(fn, dev, BANDWIDTH_BUDGET, flush=False), "torch"
        skipped = []  # why a read kernel was not timed: said in the record, not swallowed
        if impl == READ and dev.is_cuda and not readers:
            skipped.append("triton stream: triton is not importable")
        for other, read in readers.items() if impl == READ else ():  # the best of every read kernel
            try:
                t2 = time_kernel(read, dev, BANDWIDTH_BUDGET, flush=False)
            except Exception as e:  # a triton that cannot compile here: x.sum() stands, and says why
                skipped.append(f"{other}: {one_line(e)}")
                continue
            if t2.best < t.best:
                t, name = t2, other
        set_time(rec, t.best, 0, passes * n * FP32_BYTES)
        rec["timing"] = t.method + ", best" + (f" ({name})" if impl == READ else "")
        if skipped:
            rec["skipped"] = "; ".join(skipped)
        yield rec, True
    fn = read = None  # the last kernel and reader tried hold x and y too
    del x, y, kernels, readers  # nothing holds the buffers now: free_memory() gives them back
    dev.free_memory()


def _matmuls(
    dev: TorchDevice, quick: bool, dtypes: Iterable[str] | None, have: Mapping[str, dict[str, Any]]
) -> Iterator[tuple[dict[str, Any], bool]]:
    torch = dev.torch
    kind = dev.device.type
    limit = MATMUL_MAX_CALL_S[quick]
    for dt in _matmul_dtypes(dev, dtypes):
        tdtype = (
            torch.float32
            if dt in ("fp32", "tf32")
            else getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[dt])
        )
        itemsize = torch.empty((), dtype=tdtype).element_size()
        last_call = 0.0
        stop = ""  # why no larger size is tried (one ran out of memory)
        for n in MATMUL_SIZES[(kind, quick)]:
            key = _matmul_key(dt, n)
            if key in have:  # measured (or skipped) before this run was resumed
                rec = have[key]
                if rec.get("status") == OK and rec.get("time_s"):
                    last_call = float(rec["time_s"])
                elif str(rec.get("reason", "")).startswith("out of memory"):
                    stop = f"not tried: n={n} ran out of memory"
                elif str(rec.get("reason", "")).startswith("not tried: one call"):
                    last_call *= 8
                yield rec, False
                continue
            rec = new_record(key, CEILING, MATMUL, {"n": n, "k": n, "m": n}, dt, dev.label)
            need = 3 * n * n * itemsize
            reason = stop
            if not reason and need > dev.memory_limit_bytes:
                allowed = dev.memory_limit_bytes / GiB
                reason = f"needs {need / GiB:.3g} GiB, over the {allowed:.3g} GiB this run may use"
            if not reason and last_call * 8 > limit:
                last_call *= 8  # the guess for this size: the next one is judged on it
                reason = (
                    f"not tried: one call would take about {last_call:.2g} s "
                    f"(8× the size before), over {limit:g} s"
                )
            if reason:
                rec.update(status=SKIP, reason=reason)
                yield rec, True
                continue
            try:
                with _tf32(torch, dt == "tf32"):
                    a, b = (torch.randn(n, n, device=dev.device, dtype=tdtype) for _ in range(2))
                    t = time_kernel(partial(torch.matmul, a, b), dev, MATMUL_BUDGET, flush=False)
            except Exception as e:
                if not is_out_of_memory(e):
                    raise
                rec.update(status=SKIP, reason=f"out of memory: {one_line(e)}")
                stop = f"not tried: n={n} ran out of memory"
                yield rec, True
                continue
            set_time(rec, t.best, 2 * n**3, 3 * n * n * itemsize)
            rec["timing"] = t.method + ", best"
            yield rec, True
            last_call = t.best
            del a, b
        dev.free_memory()


class _tf32:
    """Allow (or forbid) tf32 matmuls inside the block, so that fp32 ceilings are true fp32.

    ``torch.set_float32_matmul_precision`` ("high" = tf32, "highest" = ieee) is the one switch
    torch keeps consistent across its legacy (``allow_tf32``) and new (``fp32_precision``) APIs:
    setting only ``fp32_precision`` on torch ≥ 2.9 makes any legacy read inside the block (cuBLAS
    dispatch, a library) fail torch's "mix of the legacy and new APIs" check."""

    def __init__(self, torch: Any, on: bool) -> None:
        self.torch, self.on = torch, on

    def __enter__(self) -> None:
        self.saved = self.torch.get_float32_matmul_precision()
        self.torch.set_float32_matmul_precision("high" if self.on else "highest")

    def __exit__(self, *exc: object) -> None:
        self.torch.set_float32_matmul_precision(self.saved)


def best(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """The best record per ceiling: ``("read", "fp32")``, ``("matmul", "bf16")``, ..."""
    top: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in records:
        if r.get("kind") != CEILING or r.get("status") != OK:
            continue
        rate = "achieved_flops_per_s" if r["impl"] == MATMUL else "achieved_bytes_per_s"
        k = (r["impl"], r["dtype"])
        if k not in top or r[rate] > top[k][rate]:
            top[k] = r
    return top


def device_record(
    records: Iterable[Mapping[str, Any]],
    dev_label: str,
    capacity_bytes: float | None,
    torch_version: str = "",
) -> dict[str, Any]:
    """The catalog-style record of the measured device (what ``--device FILE.json`` reads)."""
    top = best(records)
    bws = {impl: top[(impl, "fp32")]["achieved_bytes_per_s"] for impl in BANDWIDTHS if (impl, "fp32") in top}
    if not bws:
        raise InputError("no bandwidth ceiling was measured")
    which = max(bws, key=lambda k: bws[k])
    peaks = {
        dt: r["achieved_flops_per_s"]
        for (impl, dt), r in top.items()
        if impl == MATMUL and r["achieved_flops_per_s"] >= MIN_MEASURED_RATE
    }
    if not peaks:
        raise InputError("no matmul ceiling was measured")
    day = datetime.now(UTC).date().isoformat()
    figures = ", ".join(f"{k} {v / 1e9:.1f} GB/s" for k, v in bws.items())
    rec: dict[str, Any] = {
        "name": f"measured {dev_label}",
        "kind": "measured",
        "peak_flops_per_s": peaks,
        "bandwidth_bytes_per_s": bws[which],
        "source": (
            f"measured by attnroof on {day} (torch {torch_version}): bandwidth = best of read/write/copy "
            f"= {which} ({figures}; copy counts read + written bytes, as STREAM); "
            "peaks = best square matmul over the sizes tried"
        ),
        "notes": f"bandwidth ceiling from the {which} kernel",
    }
    if capacity_bytes:
        rec["capacity_bytes"] = float(capacity_bytes)
    return rec


def measured_device(records: Iterable[Mapping[str, Any]], dev: TorchDevice) -> Device:
    """The measured ceilings as a :class:`Device`, and the ceiling records placed on it."""
    records = list(records)
    device = device_from_record(device_record(records, dev.label, dev.capacity_bytes, dev.torch.__version__))
    for r in records:
        place_record(r, device)  # type: ignore[arg-type]
    return device


def write_ceilings(path: str | os.PathLike[str], device: Device, records: list[dict[str, Any]]) -> None:
    """The ceilings file: ``{"format", "device": {catalog record}, "ceilings": [records]}``."""
    rec = {k: v for k, v in device.to_json().items() if v not in (None, "", [])}
    rec.pop("aliases", None)
    doc = {"format": FILE_FORMAT, "device": rec, "ceilings": records}
    outfile.write_text(path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def ceiling_rows(records: list[dict[str, Any]], catalog: Device | None = None) -> list[dict[str, Any]]:
    """The best ceiling per (kind, dtype), beside the catalog's figure for it where one is given:
    what ``attnroof measure ceilings`` prints and puts under ``"ceilings"``."""
    rows = []
    for (what, dt), r in best(records).items():
        matmul = what == "matmul"
        value = r["achieved_flops_per_s"] if matmul else r["achieved_bytes_per_s"]
        cat = None
        if catalog is not None:
            cat = catalog.peak_flops_per_s.get(dt) if matmul else catalog.bandwidth_bytes_per_s
        rows.append(
            {
                "what": what,
                "dtype": dt if matmul else None,
                "size": si(r["shape"]["bytes"], "B") if "bytes" in r["shape"] else f"{r['shape']['n']}³",
                "measured": value,
                "catalog": cat,
                "fraction": value / cat if cat else None,
                "key": r["key"],
            }
        )
    return rows
