"""A device's links to its peers: the second roofline, for bytes that cross between devices.

Every bandwidth here is **one direction, per device**: the bytes one device can send (and, at the
same time, receive) per second. That is the figure nccl-tests' *bus bandwidth* approaches on a
ring, so a measured busbw compares with it directly. Vendors quote NVLink and ICI both ways
together (H100: "900 GB/s" = 450 GB/s each way); such a headline is halved once, on entry.

    scale-up    the fast domain: NVLink / NVSwitch, Infinity Fabric, ICI; ``domain`` devices
                (8 on an HGX board, 72 in an NVL72 rack, a TPU slice)
    scale-out   between domains: the NICs of one device (e.g. one 400 Gb/s NIC = 50e9 B/s)
    bridge      an NVLink bridge joining ``bridge_devices`` PCIe cards (a pair), used for a group
                that lies within one bridged set (H100 NVL, A100 PCIe: 600 GB/s both ways)
    latency     a collective's fixed cost per call plus one per step (one hop between
                neighbours), s: NCCL's own cost model (``src/graph/tuning.cc``) in its low-latency
                ring protocol, which small messages (decode's all-reduces) take

A group wider than one domain rides the scale-out link with ``per_node`` of its devices in each
node and the scale-up link between them (``inner``): every device has its own NIC (an HGX board's
eight, rail-optimised), and the collective crosses the network only with what must leave a node
(:func:`attnroof.ops.collectives.across_nodes`).

What the scale-up fabric can do beyond a ring (:func:`attnroof.ops.collectives.algorithms`):

    scaleup_peer_access        every device loads and stores every peer's memory over the link
                               (NVSwitch, a fully connected xGMI board): one-shot and two-shot
                               all-reduce; a bridge always has it
    scaleup_switch_reduction   the switch adds what the devices send (NVLink SHARP, NVSwitch 3
                               and later): NVLS all-reduce

A device file's links::

    [device.links]
    scaleup_bytes_per_s = 450e9
    scaleup_domain = 8
    scaleup_peer_access = true
    scaleup_switch_reduction = true
    scaleout_bytes_per_s = 50e9
    source = "..."

``interconnect_bytes_per_s`` (a vendor's both-ways headline, from earlier device files) is still
read: it becomes ``scaleup_bytes_per_s`` at half its value.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attnroof.devices.checks import _check_figure, check_rate
from attnroof.errors import DeviceFileError

SCALE_UP, SCALE_OUT, BRIDGE = "scale-up", "scale-out", "bridge"
BASE_LATENCY_S = 3.6e-6
"""Fixed cost of one collective call: NCCL's ``baseLat`` for the ring with the LL protocol."""
DEFAULT_SCALEUP_LATENCY_S = 0.47e-6
"""Per-step latency on a scale-up link when the catalog has none: NCCL's ``hwLat`` for NVLink,
ring, LL protocol (an 8-device all-reduce: 3.6 + 14 × 0.47 = 10.2 µs before any byte moves)."""
DEFAULT_SCALEOUT_LATENCY_S = 2.7e-6
"""Per-step latency across the network when the catalog has none: NCCL's ``hwLat`` for the
network, ring, LL protocol."""

_FIELDS = {
    "scaleup_bytes_per_s": "bytes/s",
    "scaleup_domain": "devices",
    "scaleup_latency_s": "s",
    "scaleup_name": "",
    "scaleup_peer_access": "bool",
    "scaleup_switch_reduction": "bool",
    "scaleout_bytes_per_s": "bytes/s",
    "scaleout_latency_s": "s",
    "scaleout_name": "",
    "bridge_bytes_per_s": "bytes/s",
    "bridge_devices": "devices",
    "bridge_latency_s": "s",
    "bridge_name": "",
    "source": "",
    "notes": "",
}


@dataclass(frozen=True, slots=True)
class Link:
    """One link class as the collectives see it: one-way bandwidth per device and step latency."""

    kind: str
    bandwidth_bytes_per_s: float
    latency_s: float
    """Per step (hop) of a collective."""
    name: str = ""
    base_latency_s: float = BASE_LATENCY_S
    """Per collective call."""
    peer_access: bool = False
    """Every device reaches every peer's memory: one-shot and two-shot all-reduce."""
    switch_reduction: bool = False
    """The switch reduces: NVLS all-reduce."""
    per_node: int = 0
    """A group that spans nodes: its devices in each node, each with its own NIC (this link), the
    group's collectives costed across nodes (:func:`attnroof.ops.collectives.across_nodes`); 0: a
    link inside one domain, or one device's NIC alone."""
    inner: Link | None = None
    """A group that spans nodes: the scale-up link between its devices in one node."""

    @property
    def nic(self) -> Link:
        """This link as each device's NIC alone, for bytes already cut per device (the share of
        an all-to-all that leaves its node)."""
        return Link(self.kind, self.bandwidth_bytes_per_s, self.latency_s, self.name, self.base_latency_s)


@dataclass(frozen=True, slots=True)
class Links:
    """A device's scale-up and scale-out links (SI units; bandwidths one direction per device)."""

    scaleup_bytes_per_s: float | None = None
    scaleup_domain: int | None = None
    """Devices one scale-up domain joins; ``None``: unknown (every group is taken to fit)."""
    scaleup_latency_s: float | None = None
    scaleup_name: str = ""
    scaleup_peer_access: bool = False
    scaleup_switch_reduction: bool = False
    scaleout_bytes_per_s: float | None = None
    scaleout_latency_s: float | None = None
    scaleout_name: str = ""
    bridge_bytes_per_s: float | None = None
    bridge_devices: int = 2
    """Devices one bridge (or set of bridges) joins: a pair of cards."""
    bridge_latency_s: float | None = None
    bridge_name: str = ""
    source: str = ""
    notes: str = ""

    @property
    def scaleup(self) -> Link | None:
        if self.scaleup_bytes_per_s is None:
            return None
        lat = DEFAULT_SCALEUP_LATENCY_S if self.scaleup_latency_s is None else self.scaleup_latency_s
        return Link(
            SCALE_UP,
            self.scaleup_bytes_per_s,
            lat,
            self.scaleup_name,
            peer_access=self.scaleup_peer_access,
            switch_reduction=self.scaleup_switch_reduction,
        )

    @property
    def scaleout(self) -> Link | None:
        if self.scaleout_bytes_per_s is None:
            return None
        lat = DEFAULT_SCALEOUT_LATENCY_S if self.scaleout_latency_s is None else self.scaleout_latency_s
        return Link(SCALE_OUT, self.scaleout_bytes_per_s, lat, self.scaleout_name)

    @property
    def bridge(self) -> Link | None:
        """The NVLink bridge of a set of ``bridge_devices`` cards: a direct link, so each card
        reaches its peer's memory (one-shot and two-shot all-reduce); NVLink's step latency."""
        if self.bridge_bytes_per_s is None:
            return None
        lat = DEFAULT_SCALEUP_LATENCY_S if self.bridge_latency_s is None else self.bridge_latency_s
        return Link(BRIDGE, self.bridge_bytes_per_s, lat, self.bridge_name, peer_access=True)

    def each(self) -> list[tuple[Link, int | None]]:
        """Each link the device has, with the devices it joins: scale-up and its domain, the
        bridge and the cards it joins, scale-out (None)."""
        pairs = (
            (self.scaleup, self.scaleup_domain),
            (self.bridge, self.bridge_devices),
            (self.scaleout, None),
        )
        return [(link, n) for link, n in pairs if link is not None]

    def to_json(self) -> dict[str, Any]:
        return {
            "scaleup_bytes_per_s": self.scaleup_bytes_per_s,
            "scaleup_domain": self.scaleup_domain,
            "scaleup_latency_s": self.scaleup_latency_s,
            "scaleup_name": self.scaleup_name,
            "scaleup_peer_access": self.scaleup_peer_access,
            "scaleup_switch_reduction": self.scaleup_switch_reduction,
            "scaleout_bytes_per_s": self.scaleout_bytes_per_s,
            "scaleout_latency_s": self.scaleout_latency_s,
            "scaleout_name": self.scaleout_name,
            "bridge_bytes_per_s": self.bridge_bytes_per_s,
            "bridge_devices": self.bridge_devices,
            "bridge_latency_s": self.bridge_latency_s,
            "bridge_name": self.bridge_name,
            "source": self.source,
            "notes": self.notes,
        }


def links_from_record(record: Mapping[str, Any], at: str) -> Links:
    """The ``links`` table of a device record (and a legacy ``interconnect_bytes_per_s``)."""
    raw = record.get("links", {})
    if not isinstance(raw, Mapping):
        raise DeviceFileError(f"{at}'links' must be a table ([device.links])")
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(_FIELDS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise DeviceFileError(f"{at}unknown field 'links.{unknown[0]}'{hint}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:  # JSON null: how Links.to_json writes a figure it lacks (a ceilings file)
            continue
        unit, what = _FIELDS[key], f"links.{key}"
        try:
            if unit == "bytes/s":
                check_rate(what, value, unit, "450e9")
                values[key] = float(value)
            elif unit == "s":
                _check_figure(what, value, unit)
                if value > 1:
                    raise DeviceFileError(f"{what} = {value!r} s is implausibly large for a link latency")
                values[key] = float(value)
            elif unit == "bool":
                if not isinstance(value, bool):
                    raise DeviceFileError(f"{what} = {value!r} must be true or false")
                values[key] = value
            elif unit == "devices":
                if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
                    raise DeviceFileError(f"{what} = {value!r} must be a whole number of devices ≥ 1")
                values[key] = value
            elif not isinstance(value, str):
                raise DeviceFileError(f"{what} must be a string")
            else:
                values[key] = value
        except DeviceFileError as e:
            raise DeviceFileError(at + str(e)) from None
    legacy = record.get("interconnect_bytes_per_s")
    if legacy is not None and "scaleup_bytes_per_s" not in values:
        try:
            check_rate("interconnect_bytes_per_s", legacy, "bytes/s", "900e9")
        except DeviceFileError as e:
            raise DeviceFileError(at + str(e)) from None
        values["scaleup_bytes_per_s"] = float(legacy) / 2  # a both-ways headline: one way is half
        values.setdefault("notes", "scale-up bandwidth: half of interconnect_bytes_per_s (both ways)")
    return Links(**values)
