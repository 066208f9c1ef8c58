"""How long one kernel takes: the median over repetitions, each starting with cold caches.

On CUDA, ``triton.testing.do_bench`` when triton is importable (it flushes L2 between
repetitions and times with CUDA events); otherwise CUDA events around each call, with a 256 MB
buffer read between calls (read, not written: no dirty lines left for the timed kernel to write
back). On the CPU, ``time.perf_counter`` around each call after a warm-up, with a buffer larger
than the last-level cache read between calls. Times are in
seconds.
"""

from __future__ import annotations

import statistics
import subprocess
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnroof.measure.env import TorchDevice
from attnroof.units import MILLISECOND


@dataclass(frozen=True, slots=True)
class Budget:
    """How hard to time: a wall-clock budget for the repetitions and bounds on their count."""

    seconds: float = 0.25
    min_reps: int = 5
    max_reps: int = 100
    warmup: int = 2


QUICK = Budget(seconds=0.06, min_reps=3, max_reps=15, warmup=1)
FULL = Budget()


@dataclass(frozen=True, slots=True)
class Timing:
    """Median seconds per call, the fastest call (what STREAM reports), the repetitions and how
    they were timed."""

    seconds: float
    reps: int
    method: str
    best: float = 0.0


def time_kernel(
    fn: Callable[[], Any], dev: TorchDevice, budget: Budget = FULL, *, flush: bool = True
) -> Timing:
    """Median seconds of ``fn()`` on ``dev``; ``flush=False`` keeps caches warm (the ceilings'
    buffers are far larger than any cache anyway)."""
    if dev.is_cuda:
        timing = _do_bench(fn, budget) if flush else None
        return timing or _cuda_events(fn, dev, budget, flush)
    return _cpu(fn, dev, budget, flush)


def _cpu(fn: Callable[[], Any], dev: TorchDevice, budget: Budget, flush: bool) -> Timing:
    for _ in range(budget.warmup):
        fn()
    times: list[float] = []
    spent = 0.0
    while len(times) < budget.max_reps and (len(times) < budget.min_reps or spent < budget.seconds):
        if flush:
            dev.flush_caches()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        spent += t1 - t0
    method = "perf_counter, cold cache" if flush else "perf_counter"
    return Timing(statistics.median(times), len(times), method, min(times))


_DO_BENCH_BROKEN: str | None = None
"""Why ``do_bench`` failed, once it has: it is not tried again in this process."""


def _do_bench(fn: Callable[[], Any], budget: Budget) -> Timing | None:
    """``triton.testing.do_bench``'s timing, or ``None`` (CUDA events then). do_bench builds a
    helper with the host C compiler on first use: without one it raises RuntimeError (or
    CalledProcessError); without libcuda where Triton looks, an AssertionError ("libcuda.so
    cannot found"), raised again when the median is asked for. That is said once, as a warning,
    and CUDA events time every case. (An AssertionError from ``return_mode="all"`` alone is an
    old triton without that mode: the median is asked for instead.)"""
    global _DO_BENCH_BROKEN
    if _DO_BENCH_BROKEN is not None:
        return None
    try:
        try:
            from triton.testing import do_bench
        except ImportError:
            return None
        kw = {"warmup": budget.seconds / MILLISECOND / 4, "rep": budget.seconds / MILLISECOND}
        try:
            ms = do_bench(fn, return_mode="all", **kw)  # every repetition (triton ≥ 3)
        except (TypeError, ValueError, AssertionError):
            try:
                ms = do_bench(fn, return_mode="median", **kw)
            except TypeError:  # an old triton without return_mode
                return None
    except (RuntimeError, OSError, AssertionError, subprocess.CalledProcessError) as e:
        _DO_BENCH_BROKEN = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
        warnings.warn(
            f"triton's do_bench failed ({_DO_BENCH_BROKEN}); timing with CUDA events instead",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    times = [float(x) * MILLISECOND for x in (ms if isinstance(ms, list | tuple) else [ms])]
    return Timing(statistics.median(times), len(times), "triton.testing.do_bench", min(times))


def _cuda_events(fn: Callable[[], Any], dev: TorchDevice, budget: Budget, flush: bool) -> Timing:
    torch = dev.torch
    for _ in range(budget.warmup):
        fn()
    dev.sync()
    t0 = time.perf_counter()
    fn()
    dev.sync()
    estimate = max(time.perf_counter() - t0, 1e-6)
    reps = int(min(budget.max_reps * 10, max(budget.min_reps * 2, budget.seconds / estimate)))
    pairs = []
    for _ in range(reps):
        if flush:
            dev.flush_caches()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    dev.sync()
    times = [s.elapsed_time(e) * MILLISECOND for s, e in pairs]
    method = "CUDA events, L2 flushed" if flush else "CUDA events"
    return Timing(statistics.median(times), reps, method, min(times))
