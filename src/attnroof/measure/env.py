"""The local torch device: which one, what it is called, how much memory a case may take, and how
to push the caches out between timed repetitions."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnroof.measure import require_torch
from attnroof.units import GiB, MiB

CPU_THREADS = 2
"""Most threads torch may use on the CPU: the test machines have two cores, shared."""
THREADS_ENV = "ATTNROOF_CPU_THREADS"
"""Set to pin the CPU thread count (otherwise: the idle cores, at most CPU_THREADS)."""

GPU_FLUSH_BYTES = 256 * MiB
"""Read between CUDA repetitions to evict L2 (the size triton.testing.do_bench uses; it writes
its buffer, this reads it, leaving no dirty lines)."""

CPU_FLUSH_DEFAULT_BYTES = 64 * MiB
"""Read between CPU repetitions when the last-level cache size cannot be found."""
CPU_FLUSH_MAX_BYTES = 512 * MiB

FLUSH_WORD_BYTES = 8
"""The flush buffer is int64: read a word at a time, at the memory's speed."""

MEMORY_SHARE = 0.8
"""Share of the free device memory (CUDA) or available RAM (CPU) one case may plan to use."""


@dataclass
class TorchDevice:
    """The torch device the measurements run on, with what they need from it."""

    torch: Any
    device: Any
    name: str
    memory_limit_bytes: float
    capacity_bytes: float
    _flush: Any = field(default=None, repr=False)
    _sink: Any = field(default=None, repr=False)
    inputs: dict[Any, Any] = field(default_factory=dict, repr=False)
    """Tensors kept from one case to the next: the inputs of the shape being measured, drawn once
    and read by every implementation of it (``kernels.py``)."""

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def label(self) -> str:
        """``"cuda:0 (NVIDIA H200)"`` or ``"cpu (AMD EPYC)"``: the record's ``device`` field."""
        return f"{self.device} ({self.name})"

    def sync(self) -> None:
        if self.is_cuda:
            self.torch.cuda.synchronize(self.device)

    def flush_caches(self) -> None:
        """Read a buffer larger than the last-level cache, so that the next run starts cold.

        Read, not written: a write (``zero_()``, ``fill_()``) leaves the cache full of dirty lines
        that the timed kernel then pays to write back. The sum is kept (``_sink``) so that the
        read is not work without a result; the buffer is zeroed once, when it is made. It is
        summed as 8-byte words: a sum of int8 widens every byte to int64 on the CPU, ~1.5 s for
        64 MiB against ~2 ms for the same bytes read as int64 (the suite went from 85 s to over
        15 minutes)."""
        if self._flush is None:
            size = GPU_FLUSH_BYTES if self.is_cuda else cpu_flush_bytes()
            words = int(size) // FLUSH_WORD_BYTES
            self._flush = self.torch.zeros(words, dtype=self.torch.int64, device=self.device)
        self._sink = self._flush.sum()

    def drop_inputs(self) -> None:
        """Let the kept inputs go (the next free_memory() gives their memory back)."""
        self.inputs.clear()

    def free_memory(self) -> None:
        """Give cached allocations back after a case (CUDA): only what nothing holds any more."""
        if self.is_cuda:
            self.torch.cuda.empty_cache()


def local_device(prefer: str = "auto") -> TorchDevice:
    """CUDA if present (and not ``prefer="cpu"``), else the CPU."""
    torch = require_torch()
    if prefer != "cpu" and torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
        props = torch.cuda.get_device_properties(dev)
        free, total = torch.cuda.mem_get_info(dev)
        return TorchDevice(torch, dev, props.name, free * MEMORY_SHARE, float(total))
    threads = cpu_threads()
    torch.set_num_threads(threads)
    total, available = ram_bytes()
    name = f"{_cpu_name()}, {threads} thread{'s' if threads > 1 else ''}"
    return TorchDevice(torch, torch.device("cpu"), name, available * MEMORY_SHARE, total)


def cpu_threads() -> int:
    """``$ATTNROOF_CPU_THREADS``, else the cores left idle by the load average (1 to CPU_THREADS).

    On a busy machine a two-thread kernel waits at every barrier for a core another process
    holds, which turns 80 µs into 8 ms; one thread measures the kernel instead of the scheduler.
    """
    value = os.environ.get(THREADS_ENV, "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    cores = os.cpu_count() or 1
    try:
        idle = cores - os.getloadavg()[0]
    except OSError:
        idle = cores
    return max(1, min(CPU_THREADS, cores, round(idle)))


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def ram_bytes() -> tuple[float, float]:
    """Total and available RAM in bytes (``/proc/meminfo``, else ``sysconf``)."""
    try:
        info = {}
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            info[key] = float(rest.split()[0]) * 1024  # kB (KiB) in /proc/meminfo
        return info["MemTotal"], info.get("MemAvailable", info["MemFree"])
    except (OSError, KeyError, ValueError, IndexError):
        total = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        return total, total / 2


def cpu_flush_bytes() -> float:
    """Twice the largest CPU cache (sysfs), between 64 MiB and 512 MiB."""
    largest = 0.0
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = f.read_text().strip()
            scale = {"K": 1024, "M": MiB, "G": GiB}.get(text[-1], 1)
            largest = max(largest, float(text.rstrip("KMG")) * scale)
        except (OSError, ValueError, IndexError):
            continue
    if not largest:
        return CPU_FLUSH_DEFAULT_BYTES
    return min(max(2 * largest, CPU_FLUSH_DEFAULT_BYTES), CPU_FLUSH_MAX_BYTES)
