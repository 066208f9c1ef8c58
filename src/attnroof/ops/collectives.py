"""Collectives: the bytes each device sends over its links, and their time on the link roof.

For ``n`` devices and a message of ``M`` bytes — ``M`` as nccl-tests counts its *size*: the
buffer each device holds (all-reduce: in = out; all-gather: the gathered output; reduce-scatter:
the input before scattering; all-to-all: each device's whole send buffer) — a ring or pairwise
schedule sends, per device:

    collective       bytes sent per device        steps        nccl-tests busbw factor
    all-reduce       2 (n − 1)/n · M              2 (n − 1)    2 (n − 1)/n
    reduce-scatter     (n − 1)/n · M                (n − 1)      (n − 1)/n
    all-gather         (n − 1)/n · M                (n − 1)      (n − 1)/n
    all-to-all         (n − 1)/n · M                (n − 1)      (n − 1)/n
    send/recv                    M                  1            1

    time  = α₀ + steps · α + bytes per device / β    α₀: per call, α: per step (s),
                                                     β: one-way bandwidth (bytes/s)
    algbw = M / time;   busbw = algbw · factor = bytes per device / time

So busbw is the rate each device's link actually carries, the figure to hold against the link's
one-way bandwidth β (the link roof), whatever ``n``; algbw is what the caller's message sees.
Reductions add (n − 1)/n · M/itemsize numbers per device, far below any compute roof: not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnroof.cost import Num
from attnroof.validate import nonnegative, size

if TYPE_CHECKING:
    from attnroof.devices.links import Link

ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL, SEND_RECV = (
    "all-reduce",
    "reduce-scatter",
    "all-gather",
    "all-to-all",
    "send/recv",
)
COLLECTIVES = (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL, SEND_RECV)


@dataclass(frozen=True, slots=True)
class Comm:
    """One collective over ``devices`` devices: the message (nccl-tests' size) and what each
    device sends. Bytes in bytes; ``steps`` are the ring's (or pairwise schedule's) rounds."""

    name: str
    collective: str
    devices: int
    message_bytes: Num
    bytes_per_device: Num
    steps: int

    @property
    def bus_factor(self) -> Num:
        """busbw / algbw, as nccl-tests reports it: bytes sent per device over the message."""
        return self.bytes_per_device / self.message_bytes if self.message_bytes else 0

    def time_s(self, bandwidth_bytes_per_s: float, latency_s: float, base_latency_s: float = 0.0) -> Num:
        """α₀ + steps · α + bytes per device / β: the collective on a link of one-way bandwidth β."""
        if self.devices <= 1:
            return 0.0
        return base_latency_s + self.steps * latency_s + self.bytes_per_device / bandwidth_bytes_per_s

    def on(self, link: Link) -> float:
        """Its time on ``link``: :meth:`time_s` with the link's bandwidth and latencies."""
        return float(self.time_s(link.bandwidth_bytes_per_s, link.latency_s, link.base_latency_s))

    def scaled(self, k: Num) -> Comm:
        return Comm(
            self.name,
            self.collective,
            self.devices,
            self.message_bytes * k,
            self.bytes_per_device * k,
            self.steps,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "collective": self.collective,
            "devices": self.devices,
            "message_bytes": self.message_bytes,
            "bytes_per_device": self.bytes_per_device,
            "steps": self.steps,
            "bus_factor": self.bus_factor,
        }


def _check(message_bytes: Num, devices: int) -> None:
    size("devices", devices)
    nonnegative("message_bytes", message_bytes)


def all_reduce(message_bytes: Num, devices: int, *, name: str = ALL_REDUCE) -> Comm:
    """Ring all-reduce: a reduce-scatter then an all-gather, 2 (n − 1)/n · M sent per device.

    >>> c = all_reduce(8 * 8192 * 2, 2)         # batch 8 × hidden 8192 × 2 B on 2 devices
    >>> c.bytes_per_device, c.steps, c.bus_factor  # 2 · 1/2 · 131072
    (131072.0, 2, 1.0)
    """
    _check(message_bytes, devices)
    n = devices
    return Comm(name, ALL_REDUCE, n, message_bytes, 2 * (n - 1) / n * message_bytes, 2 * (n - 1))


def _ring(collective: str, message_bytes: Num, devices: int, name: str) -> Comm:
    """Reduce-scatter, all-gather and all-to-all alike: (n − 1)/n · M sent in n − 1 steps."""
    _check(message_bytes, devices)
    n = devices
    return Comm(name, collective, n, message_bytes, (n - 1) / n * message_bytes, n - 1)


def reduce_scatter(message_bytes: Num, devices: int, *, name: str = REDUCE_SCATTER) -> Comm:
    """Ring reduce-scatter of an ``M``-byte input: each device ends with M/n reduced, (n − 1)/n · M sent.

    >>> reduce_scatter(1024, 4).bytes_per_device   # 3/4 · 1024
    768.0
    """
    return _ring(REDUCE_SCATTER, message_bytes, devices, name)


def all_gather(message_bytes: Num, devices: int, *, name: str = ALL_GATHER) -> Comm:
    """Ring all-gather into an ``M``-byte output (M/n from each device): (n − 1)/n · M sent.

    >>> all_gather(1024, 8).bytes_per_device       # 7/8 · 1024
    896.0
    """
    return _ring(ALL_GATHER, message_bytes, devices, name)


def all_to_all(message_bytes: Num, devices: int, *, name: str = ALL_TO_ALL) -> Comm:
    """Pairwise all-to-all of an ``M``-byte send buffer: M/n to each of the n − 1 others.

    >>> all_to_all(1024, 4).bytes_per_device       # 3 · 1024/4
    768.0
    """
    return _ring(ALL_TO_ALL, message_bytes, devices, name)


def all_to_all_split(
    message_bytes: Num, devices: int, local: int, *, name: str = ALL_TO_ALL
) -> tuple[Comm, Comm]:
    """A pairwise all-to-all of ``devices`` devices, ``local`` of them (this one included) in each
    scale-up domain: of the M/n it sends each other device, (local − 1)/n · M stays inside the
    domain and (n − local)/n · M leaves it — the share of a hierarchical system's all-to-all on
    its scale-out link (DeepSeek-V3 technical report, §3.2.2: cross-node all-to-all over
    InfiniBand, intra-node over NVLink). Returns (inside, across); the two links carry theirs at
    once. (DeepSeek-V3 also forwards each token once per node, not per expert: not modelled.)

    >>> up, out = all_to_all_split(1024, 16, 8)    # 16 devices, 8 a node: 7/16 and 8/16 of 1024
    >>> up.bytes_per_device, out.bytes_per_device, up.steps + out.steps
    (448.0, 512.0, 15)
    """
    _check(message_bytes, devices)
    size("local", local)
    n, k = devices, min(local, devices)
    return (
        Comm(f"{name} (in domain)", ALL_TO_ALL, n, message_bytes, (k - 1) / n * message_bytes, k - 1),
        Comm(f"{name} (across)", ALL_TO_ALL, n, message_bytes, (n - k) / n * message_bytes, n - k),
    )


def send_recv(message_bytes: Num, devices: int = 2, *, name: str = SEND_RECV) -> Comm:
    """Point to point: ``M`` bytes from one device to the next (a pipeline stage boundary).

    >>> send_recv(4096).bytes_per_device, send_recv(4096).steps
    (4096, 1)
    """
    _check(message_bytes, devices)
    return Comm(name, SEND_RECV, devices, message_bytes, message_bytes, 1)


COLLECTIVE_FN = {
    ALL_REDUCE: all_reduce,
    REDUCE_SCATTER: reduce_scatter,
    ALL_GATHER: all_gather,
    ALL_TO_ALL: all_to_all,
    SEND_RECV: send_recv,
}

CONJUGATE = {
    ALL_REDUCE: ALL_REDUCE,
    REDUCE_SCATTER: ALL_GATHER,
    ALL_GATHER: REDUCE_SCATTER,
    ALL_TO_ALL: ALL_TO_ALL,
    SEND_RECV: SEND_RECV,
}
"""The collective a backward pass runs where the forward ran this one: an all-gather's gradient
is a reduce-scatter and back; an all-to-all and a send return the way they came. A tensor-parallel
block's all-reduce pairs with an identity (Megatron's ``g`` and ``f``): the forward's all-reduce
has none in the backward, the identity's has one — one all-reduce each way per block."""
