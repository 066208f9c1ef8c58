"""Collectives: the bytes each device sends over its links, and their time on the link roof.

Length: the one place collectives are costed: the tables of the algorithms a fabric allows in a
node and across nodes, each a short function, and the choice among them.

For ``n`` devices and a message of ``M`` bytes — ``M`` as nccl-tests counts its *size*: the
buffer each device holds (all-reduce: in = out; all-gather: the gathered output; reduce-scatter:
the input before scattering; all-to-all: each device's whole send buffer) — NCCL's ring or
pairwise schedule sends, per device:

    collective       bytes sent per device        steps        nccl-tests busbw factor
    all-reduce       2 (n − 1)/n · M              2 (n − 1)    2 (n − 1)/n
    reduce-scatter     (n − 1)/n · M                (n − 1)      (n − 1)/n
    all-gather         (n − 1)/n · M                (n − 1)      (n − 1)/n
    all-to-all         (n − 1)/n · M                (n − 1)      (n − 1)/n
    send/recv                    M                  1            1

    time  = α₀ + steps · α + bytes per device / β    α₀: per call, α: per step (s),
                                                     β: one-way bandwidth (bytes/s)
    algbw = M / time;   busbw = algbw · 2 (n − 1)/n (all-reduce; the factor above)

An all-reduce has faster algorithms where the fabric allows them (:func:`algorithms`; the
bound takes the fastest, :func:`fastest`):

    algorithm   fabric                            bytes per device    steps   α₀
    ring        any                               2 (n − 1)/n · M     2(n−1)  yes
    one-shot    every peer's memory reachable     (n − 1) · M         1       no
    two-shot    (NVSwitch, xGMI mesh, a bridge)   2 (n − 1)/n · M     2       no
    NVLS        the switch reduces (NVSwitch 3+)  M                   2       no

One-shot (vLLM's ``cross_device_reduce_1stage``, csrc/custom_all_reduce.cuh): each device reads
the whole M of each of its n − 1 peers and sums them, after one flag write to every peer ("Latency
= 1 p2p write"). Two-shot (``cross_device_reduce_2stage``, TensorRT-LLM's TWOSHOT): reduce-scatter
then all-gather through peer memory, each a 1/n slice from each peer, with one flag exchange
between them. NVLS (NVLink SHARP, NCCL ≥ 2.17): each device sends its M into the switch, which
adds the n copies (``multimem.ld_reduce``) and multicasts the sum back: M out and M in per device,
whatever n. The peer-memory kernels pay no α₀, NCCL's per-call software cost (its ``baseLat``):
they are one kernel captured in a CUDA graph; each of their steps is one hop of the link (α).

busbw for NVLS: nccl-tests reports every all-reduce with the ring's factor 2 (n − 1)/n, whatever
algorithm NCCL ran, so its busbw is "the link rate a ring would have needed". NVLS sends M, not
1.75 M, over each link on 8 devices: at the full one-way β its algbw is β and its busbw 1.75 β,
above the link's own figure. Eight H200s measure up to 475 GB/s busbw (NVIDIA/nccl-tests#272) and
eight H100s about 480 (NVIDIA/nccl-tests#212, NVIDIA/nccl#1455) against NVLink 4's 450 GB/s one
way: more than a ring could reach, less than NVLS's 787.5 GB/s bound.

Elsewhere busbw is the rate each device's link actually carries, the figure to hold against the
link's one-way bandwidth β (the link roof), whatever ``n``; algbw is what the caller's message
sees. Reductions add (n − 1)/n · M/itemsize numbers per device, far below any compute roof: not
counted.

Across nodes (:func:`across_nodes`, the algorithm ``hierarchical``): a group of n devices over k
nodes, g in each (n = k · g), each device with its own NIC of one-way β (an HGX board's eight,
rail-optimised; the other devices' NICs carry their own groups) and the scale-up link β↑ between
the g of a node. NCCL runs one ring or tree per NIC and moves inside a node over NVLink, so only
what must leave a node crosses the network. Two limits no algorithm escapes:

    out of a node    each node sends at least X over its g NICs:          ≥ X / (g · β)
    one device       each device takes in (or sends) at least D, over its
                     NIC and its scale-up link at once:                   ≥ D / (β + β↑)

    collective       X (a node, out)        D (a device)         hops across    hops in a node
    all-reduce       2 (k − 1)/k · M        M in: the sum        2 ⌊log₂ k⌋     2 h
    reduce-scatter     (k − 1)/k · M        (n − 1)/n · M out      ⌊log₂ k⌋       h
    all-gather         (k − 1)/k · M        (n − 1)/n · M in       ⌊log₂ k⌋       h
    all-to-all       g (k − 1)/k · M        (n − 1)/n · M out    n − g          g − 1
    send/recv        M on the one NIC (one device to one device, as on any link)

    time = α₀ + hops across · α + hops in a node · α↑ + max(X / (g · β), D / (β + β↑))
    h    = 1 where the scale-up fabric reaches peers' memory or reduces (one-shot, NVLS), else g − 1

X: a node's share of another node's reduce-scatter needs its contribution to each of those
(k − 1)/k · M elements, and an all-gather brings in the (k − 1)/k · M others hold; an all-reduce
sends 2 (k − 1)/k · M (Patarasuk and Yuan's lower bound, J. Parallel Distrib. Comput. 69(2),
2009, with a node as one party), which a hierarchical ring reaches: a reduce-scatter in the node,
an all-reduce of M/g on each NIC's ring of k, an all-gather in the node. An all-to-all's
(k − 1)/k of each buffer leaves the node on its own device's NIC. D: an all-reduce's device must
receive the M-byte sum; a reduce-scatter sends its part of each other device's share, an
all-to-all its buffer's others' parts, an all-gather receives the others' parts. The hops are the
fewest NCCL's algorithms take (``src/graph/tuning.cc``: its tree's 2 · log2i(nNodes) network hops
and a chain of g − 1 in each node, each way), at the ring's LL latencies α₀, α, α↑ (the tree's own
are higher: 4.4 µs a call, 5.0 µs a network hop). Not modelled: in-network reduction (InfiniBand
SHARP, NCCL's CollNet), with which a node sends M.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from attnroof import arrays
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

RING, PAIRWISE, P2P, ONE_SHOT, TWO_SHOT, NVLS = "ring", "pairwise", "p2p", "one-shot", "two-shot", "NVLS"
"""The algorithms (the module's tables): NCCL's ring (all-reduce, reduce-scatter, all-gather),
pairwise exchange (all-to-all), point to point (send/recv); and the peer-memory all-reduces."""
HIERARCHICAL = "hierarchical"
"""A collective across nodes (:func:`across_nodes`): NVLink inside each node, every NIC between."""
PEER_MEMORY = (ONE_SHOT, TWO_SHOT, NVLS)
"""The algorithms that pay no per-call α₀: one kernel reading and writing peers' memory."""


@dataclass(frozen=True, slots=True)
class Comm:
    """One collective over ``devices`` devices: the message (nccl-tests' size) and what each
    device sends under ``algorithm``. Bytes in bytes; ``steps`` are the algorithm's rounds."""

    name: str
    collective: str
    devices: int
    message_bytes: Num
    bytes_per_device: Num
    steps: Any
    algorithm: str = RING
    per_node: int = 0
    """Across nodes (:func:`across_nodes`): its devices in each node, g, and ``steps`` the hops
    across; 0: one link carries it all."""
    network_bytes: Num = 0
    """Across nodes: the part of ``bytes_per_device`` that leaves the node on the device's NIC
    (X/g); the rest rides the scale-up link."""
    least_bytes: Num = 0
    """Across nodes: what each device must at least take in or send, D, over its NIC and its
    scale-up link together."""
    local_steps: Any = 0
    """Across nodes: the hops inside a node."""

    @property
    def bus_factor(self) -> Num:
        """busbw / algbw, as nccl-tests reports it: bytes sent per device over the message."""
        return self.bytes_per_device / self.message_bytes if self.message_bytes else 0

    def time_s(self, bandwidth_bytes_per_s: float, latency_s: float, base_latency_s: float = 0.0) -> Num:
        """α₀ + steps · α + bytes per device / β: the collective on a link of one-way bandwidth β
        (α₀ only for NCCL's algorithms: a peer-memory kernel has no per-call cost of its own)."""
        if self.devices <= 1:
            return 0.0
        base = 0.0 if self.algorithm in PEER_MEMORY else base_latency_s
        return base + self.steps * latency_s + self.bytes_per_device / bandwidth_bytes_per_s

    def time_on(self, link: Any) -> Num:
        """Its time on ``link``: :meth:`time_s` on the link's figures, or, across nodes, α₀ +
        hops · α + hops in a node · α↑ + max(X / (g · β), D / (β + β↑)) (the module's last table;
        the device's limit only where the group has peers in its node on a known scale-up link)."""
        beta = link.bandwidth_bytes_per_s
        if not self.per_node or self.devices <= 1:
            return self.time_s(beta, link.latency_s, link.base_latency_s)
        inner = link.inner
        up_latency = inner.latency_s if inner is not None else 0.0
        wire = self.network_bytes / beta  # X/g over each NIC
        if self.per_node > 1 and inner is not None:
            wire = arrays.maximum(wire, self.least_bytes / (beta + inner.bandwidth_bytes_per_s))
        return link.base_latency_s + self.steps * link.latency_s + self.local_steps * up_latency + wire

    def on(self, link: Link) -> float:
        """Its time on ``link`` under the fastest algorithm the link allows (:func:`fastest`)."""
        return float(fastest(self, link)[1])

    def scaled(self, k: Num) -> Comm:
        return replace(
            self,
            message_bytes=self.message_bytes * k,
            bytes_per_device=self.bytes_per_device * k,
            network_bytes=self.network_bytes * k,
            least_bytes=self.least_bytes * k,
        )

    def to_json(self) -> dict[str, Any]:
        across = {
            "devices_per_node": self.per_node,
            "network_bytes_per_device": self.network_bytes,
            "least_bytes_per_device": self.least_bytes,
            "local_steps": self.local_steps,
        }
        return {
            "collective": self.collective,
            "algorithm": self.algorithm,
            "devices": self.devices,
            "message_bytes": self.message_bytes,
            "bytes_per_device": self.bytes_per_device,
            "steps": self.steps,
            "bus_factor": self.bus_factor,
            **(across if self.per_node else {}),
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
    algorithm = PAIRWISE if collective == ALL_TO_ALL else RING
    return Comm(name, collective, n, message_bytes, (n - 1) / n * message_bytes, n - 1, algorithm)


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
    inside, across = (k - 1) / n * message_bytes, (n - k) / n * message_bytes
    return (
        Comm(f"{name} (in domain)", ALL_TO_ALL, n, message_bytes, inside, k - 1, PAIRWISE),
        Comm(f"{name} (across)", ALL_TO_ALL, n, message_bytes, across, n - k, PAIRWISE),
    )


def send_recv(message_bytes: Num, devices: int = 2, *, name: str = SEND_RECV) -> Comm:
    """Point to point: ``M`` bytes from one device to the next (a pipeline stage boundary).

    >>> send_recv(4096).bytes_per_device, send_recv(4096).steps
    (4096, 1)
    """
    _check(message_bytes, devices)
    return Comm(name, SEND_RECV, devices, message_bytes, message_bytes, 1, P2P)


def one_shot_all_reduce(message_bytes: Num, devices: int, *, name: str = ALL_REDUCE) -> Comm:
    """One-shot all-reduce: each device reads the whole M of each of its n − 1 peers, one step.

    >>> c = one_shot_all_reduce(8 * 8192 * 2, 8)   # decode: 8 tokens × hidden 8192 × 2 B
    >>> c.bytes_per_device, c.steps                # 7 × 131072
    (917504, 1)
    """
    _check(message_bytes, devices)
    return Comm(name, ALL_REDUCE, devices, message_bytes, (devices - 1) * message_bytes, 1, ONE_SHOT)


def two_shot_all_reduce(message_bytes: Num, devices: int, *, name: str = ALL_REDUCE) -> Comm:
    """Two-shot all-reduce: a reduce-scatter and an all-gather through peer memory, the ring's
    2 (n − 1)/n · M in two steps.

    >>> two_shot_all_reduce(1024, 8).bytes_per_device   # 2 · 7/8 · 1024
    1792.0
    """
    _check(message_bytes, devices)
    n = devices
    return Comm(name, ALL_REDUCE, n, message_bytes, 2 * (n - 1) / n * message_bytes, 2, TWO_SHOT)


def nvls_all_reduce(message_bytes: Num, devices: int, *, name: str = ALL_REDUCE) -> Comm:
    """NVLS all-reduce: each device's M into the switch, which sums the n copies and multicasts
    the result back: M each way per device, in two steps (reduce, then multicast).

    >>> nvls_all_reduce(2**30, 8).bytes_per_device   # 1 GiB, whatever n
    1073741824
    """
    _check(message_bytes, devices)
    return Comm(name, ALL_REDUCE, devices, message_bytes, message_bytes if devices > 1 else 0, 2, NVLS)


def across_nodes(comm: Comm, link: Any) -> Comm:
    """``comm`` over a group that spans nodes, ``link.per_node`` of its devices in each (g; k =
    n/g nodes, a fraction where the layout is uneven), each on its own NIC (``link``) with the
    scale-up link ``link.inner`` between them: what each NIC sends (X/g), what each device must
    move (D), the hops across and inside a node (the module's last table). Its bytes per device
    are the hierarchical ring's in all, the flat ring's figure (an all-reduce: 2 (g − 1)/g · M in
    the node and 2 (k − 1)/k · M/g on the NIC, 2 (n − 1)/n · M), of which X/g cross the network.
    A send stays a send.

    >>> from attnroof.devices.links import Link
    >>> nvlink = Link("scale-up", 450e9, 0.47e-6, peer_access=True)
    >>> nic = Link("scale-out", 50e9, 2.7e-6, per_node=8, inner=nvlink)   # 2 HGX nodes of 8
    >>> c = across_nodes(all_reduce(2**30, 16), nic)   # 1 GiB: X = 2 · 1/2 · M, an eighth a NIC
    >>> c.bytes_per_device, c.network_bytes, c.least_bytes, c.steps, c.local_steps
    (2013265920.0, 134217728.0, 1073741824, 2, 2)
    """
    n, m = comm.devices, comm.message_bytes
    g = min(link.per_node, n)
    if comm.collective == SEND_RECV or g < 1 or g >= n:
        return comm
    k = n / g
    hops = (-(-n // g)).bit_length() - 1  # ⌊log₂ k⌋ of the nodes it touches
    inner = link.inner
    reach = inner is not None and (inner.peer_access or inner.switch_reduction)
    h = 0 if g == 1 else 1 if reach else g - 1
    share = (n - 1) / n * m  # what a device sends in all (and D, but for an all-reduce)
    if comm.collective == ALL_REDUCE:
        sent, out, least, steps, local = 2 * share, 2 * (k - 1) / k * m / g, m, 2 * hops, 2 * h
    elif comm.collective == ALL_TO_ALL:
        sent, out, least, steps, local = share, (k - 1) / k * m, share, n - g, g - 1
    else:  # reduce-scatter, all-gather
        sent, out, least, steps, local = share, (k - 1) / k * m / g, share, hops, h
    return Comm(comm.name, comm.collective, n, m, sent, steps, HIERARCHICAL, g, out, least, local)


def algorithms(comm: Comm, link: Any) -> tuple[Comm, ...]:
    """The algorithms ``link``'s fabric allows for ``comm`` (the module's second table): NCCL's
    always; for an all-reduce, one-shot and two-shot where every device reaches every peer's
    memory over the link (``link.peer_access``), and NVLS where the switch reduces
    (``link.switch_reduction``). Across nodes (``link.per_node``), the hierarchical form alone
    (:func:`across_nodes`: no algorithm sends less out of a node, nor in fewer hops). A
    collective another algorithm already chose stays as it is."""
    if getattr(link, "per_node", 0) and comm.algorithm in (RING, PAIRWISE) and comm.devices > 1:
        return (across_nodes(comm, link),)
    if comm.collective != ALL_REDUCE or comm.algorithm != RING or comm.devices <= 1:
        return (comm,)
    m, n, name = comm.message_bytes, comm.devices, comm.name
    out = [comm]
    if getattr(link, "peer_access", False):
        out += [one_shot_all_reduce(m, n, name=name), two_shot_all_reduce(m, n, name=name)]
    if getattr(link, "switch_reduction", False):
        out.append(nvls_all_reduce(m, n, name=name))
    return tuple(out)


def fastest(comm: Comm, link: Any) -> tuple[Comm, Any]:
    """The algorithm with the least time on ``link`` and that time (the bound's choice): a
    float for one message; for an array of sizes, the least time of each, and a Comm whose
    bytes and steps are each size's choice, its algorithm the candidates' names joined by "|".

    >>> from attnroof.devices.links import Link
    >>> nvswitch = Link("scale-up", 450e9, 0.47e-6, peer_access=True, switch_reduction=True)
    >>> c, t = fastest(all_reduce(2**30, 8), nvswitch)   # 1 GiB: NVLS, 2 · 0.47 µs + 2^30 B / 450e9 B/s
    >>> c.algorithm, round(t * 1e6, 2)
    ('NVLS', 2387.03)
    """
    choices = algorithms(comm, link)
    times = [c.time_on(link) for c in choices]
    if len(choices) == 1:
        return choices[0], times[0]
    if all(arrays.is_scalar(t) for t in times):
        best = min(range(len(times)), key=lambda i: times[i])  # ties: the earlier, NCCL's first
        return choices[best], times[best]
    np = arrays.numpy()
    stacked = np.stack(np.broadcast_arrays(*times))
    pick = stacked.argmin(axis=0)
    sent = np.choose(pick, [np.broadcast_to(c.bytes_per_device, pick.shape) for c in choices])
    steps = np.choose(pick, [np.full(pick.shape, c.steps) for c in choices])
    names = "|".join(c.algorithm for c in choices)
    chosen = Comm(comm.name, comm.collective, comm.devices, comm.message_bytes, sent, steps, names)
    return chosen, stacked.min(axis=0)


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
