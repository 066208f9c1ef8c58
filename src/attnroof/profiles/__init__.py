"""Efficiency profiles: how close real kernels and collectives come to their roofs, as data.

A bound says what no kernel can beat; a forecast says what a real one takes. attnroof's forecast
is the bound's own arithmetic with a profile's figures applied (:mod:`attnroof.profiles.kernels`):
fractions of a roof real kernels reach, the fixed cost of a launch, the share of communication
frameworks hide, an engine's host time per step. A profile is one TOML file per device family and
dtype under ``profiles/data/``, and **every number in it names where it came from**: a public
source (``[sources]`` of the same file: title, address, date, where in it) or the fit that produced
it (``scripts/fit_profiles.py``: which rows of ``data/public/``, what was minimised, the held-out
error). A figure is a table ``{ value = 0.71, source = "mamf", note = "..." }``; a bare number is
refused when the file is read, so no figure can arrive without its origin.

The identity profile (:data:`IDENTITY`: every fraction 1, every fixed cost 0, every collective
hidden, no tile or wave rounding) turns each forecast back into its bound, to the last digit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Source:
    """Where figures came from: a publication (title, url, date, where in it) or a fit."""

    id: str
    title: str
    url: str = ""
    date: str = ""
    where: str = ""
    notes: str = ""

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "title": self.title, "url": self.url, "date": self.date, "where": self.where}


@dataclass(frozen=True, slots=True)
class Figure:
    """One number of a profile and its origin (a source id of the file)."""

    value: float
    source: str
    note: str = ""


@dataclass(frozen=True, slots=True)
class Gemm:
    """A dense GEMM C[t×m] = A[t×k]·B[k×m] (t the tokens): ``ceiling`` of the matmul peak at
    large shapes, ``k_half`` the depth at which half of it is lost to each tile's prologue and
    epilogue (η = ceiling · k/(k + k_half)), output tiles ``tile_t × tile_m`` rounded up over the
    SMs in whole waves, and ``launch_s`` per call."""

    ceiling: float = 1.0
    k_half: float = 0.0
    tile_t: int = 1
    tile_m: int = 1
    memory: float = 1.0
    """Fraction of the memory roof a GEMM's operand stream reaches (a memory-bound, skinny GEMM)."""
    launch_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Attention:
    """Fused attention (prefill, training): ``ceiling`` per head dimension (log-interpolated
    between those given), ``s_half`` the key length at which half of it is lost (short sequences
    fill few tiles), causal diagonal tiles of ``block`` rows computed whole; ``decode`` the
    fraction of the memory roof split-KV decode reaches; ``launch_s`` per call."""

    ceiling: Mapping[int, float] = field(default_factory=lambda: {0: 1.0})
    s_half: float = 0.0
    block: int = 0
    """0: the causal mask's exact half (no whole tiles)."""
    memory: float = 1.0
    decode: float = 1.0
    backward: float = 1.0
    """The backward kernel's ceiling over the forward's (FlashAttention's backward reaches less)."""
    launch_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Memory:
    """Memory-bound kernels (norms, activations, adds, copies): ``fraction`` of the memory roof,
    ``cache`` of the cache's (bytes the bound charges at the cache bandwidth), ``launch_s`` per
    call."""

    fraction: float = 1.0
    cache: float = 1.0
    launch_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Link:
    """Collectives on one link class: ``fraction`` of the link roof's bandwidth a large message
    reaches (nccl-tests' bus bandwidth over the one-way link figure), ``latency`` a factor on
    the bound's per-call and per-step latencies (≥ 1)."""

    fraction: float = 1.0
    latency: float = 1.0


@dataclass(frozen=True, slots=True)
class Overlap:
    """The share of communication real frameworks hide behind compute, per kind of collective
    (1: all of it, as the bound assumes; 0: none)."""

    tensor: float = 1.0
    """Tensor (and sequence, expert) parallel collectives inside a layer."""
    data: float = 1.0
    """The data-parallel gradient (and ZeRO weight) sync."""
    pipeline: float = 1.0
    """Pipeline sends between stages."""
    context: float = 1.0
    """The context-parallel K/V ring, behind attention."""


@dataclass(frozen=True, slots=True)
class Host:
    """A serving engine's host time per scheduler step (s), per engine; ``default`` for others."""

    step_s: Mapping[str, float] = field(default_factory=dict)
    default_s: float = 0.0

    def step(self, engine: str = "") -> float:
        return self.step_s.get(engine, self.default_s)


@dataclass(frozen=True, slots=True)
class Error:
    """The profile's held-out error per level (fractions: 0.18 = ±18%), median and p90."""

    median: Mapping[str, float] = field(default_factory=dict)
    p90: Mapping[str, float] = field(default_factory=dict)

    def of(self, level: str) -> float | None:
        return self.median.get(level)


@dataclass(frozen=True, slots=True, eq=False)
class Profile:
    """One device family at one dtype: every efficiency the forecasts apply. Compared and hashed
    as itself (a forecast's roof is a cache key)."""

    name: str
    dtype: str
    vendor: str = ""
    nearest: tuple[str, ...] = ()
    """Catalog devices with no family of their own that this family stands in for (an H800 for
    the H100's), each said so where it is used."""
    vendor_default: bool = False
    """The family that stands in for any other device of its vendor."""
    devices: Mapping[str, int] = field(default_factory=dict)
    """Member devices (catalog names) and their SM/CU counts (0: not known)."""
    gemm: Gemm = Gemm()
    attention: Attention = Attention()
    memory: Memory = Memory()
    scaleup: Link = Link()
    scaleout: Link = Link()
    overlap: Overlap = Overlap()
    host: Host = Host()
    step_launch_s: float | None = None
    """A kernel's fixed cost inside a step of many (launched back to back: the driver's launch,
    which a kernel shorter than it waits for), in place of the fitted ``launch_s`` of a kernel
    timed alone (whose benchmark harness pays more); ``None``: the fitted ones."""
    error: Error = Error()
    sources: Mapping[str, Source] = field(default_factory=dict)
    figures: Mapping[str, Figure] = field(default_factory=dict)
    """Every number read, by its dotted path (``gemm.ceiling``), with its origin."""
    basis: str = ""
    """How the profile was chosen for this device ("profile h100", "nearest family h100")."""

    def in_step(self) -> Profile:
        """This profile for the kernels of a step: each kind's launch cost at most
        :attr:`step_launch_s`."""
        if self.step_launch_s is None:
            return self
        from dataclasses import replace

        cap = self.step_launch_s
        return replace(
            self,
            gemm=replace(self.gemm, launch_s=min(self.gemm.launch_s, cap)),
            attention=replace(self.attention, launch_s=min(self.attention.launch_s, cap)),
            memory=replace(self.memory, launch_s=min(self.memory.launch_s, cap)),
        )

    def sms(self, device: str) -> int:
        """The SM/CU count of ``device`` (0 where the profile does not know it: no wave rounding)."""
        return self.devices.get(device, 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "basis": self.basis,
            "error": {"median": dict(self.error.median), "p90": dict(self.error.p90)},
        }


IDENTITY = Profile("identity", "any", basis="identity (every efficiency 1: the bound)")
"""Every fraction 1, every fixed cost 0, everything hidden: each forecast equals its bound."""
