"""Stage and Cost: FLOPs and HBM traffic, kernel by kernel.

A :class:`Stage` is one kernel or pass: its FLOPs and the tensors it reads from and writes to
off-chip memory. A :class:`Cost` is a sequence of stages; costs add (concatenate) and scale (by a
batch or head count). Every field holds whatever number type the formulas were given: an int for
ints, a numpy array for arrays, a sympy expression for symbols.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

Num: TypeAlias = Any
"""int, float, Fraction, numpy array or sympy expression: whatever the formulas were fed."""


def _total(values: Iterable[Num]) -> Num:
    total: Num = 0
    for v in values:
        total = total + v
    return total


@dataclass(frozen=True, slots=True)
class Access:
    """One tensor crossing off-chip memory: its name, its size in bytes, and whether it is a
    weight (a parameter the step reads, not an activation or a cache it computed): the roofline's
    cache rules treat the two apart (:func:`attnroof.roofline.step_resident`)."""

    tensor: str
    bytes: Num
    weight: bool = False

    def scaled(self, k: Num) -> Access:
        return Access(self.tensor, self.bytes * k, self.weight)


@dataclass(frozen=True, slots=True)
class Stage:
    """One kernel: FLOPs done, tensors read from and written to off-chip memory (bytes)."""

    name: str
    flops: Num
    reads: tuple[Access, ...] = ()
    writes: tuple[Access, ...] = ()

    @property
    def bytes_read(self) -> Num:
        return _total(a.bytes for a in self.reads)

    @property
    def bytes_written(self) -> Num:
        return _total(a.bytes for a in self.writes)

    @property
    def bytes(self) -> Num:
        return self.bytes_read + self.bytes_written

    @property
    def weight_bytes_read(self) -> Num:
        """Bytes of the weights it reads (the reads marked ``weight``)."""
        return _total(a.bytes for a in self.reads if a.weight)

    def scaled(self, k: Num) -> Stage:
        """The same kernel run ``k`` times (over a batch, over heads)."""
        return Stage(
            self.name,
            self.flops * k,
            tuple(a.scaled(k) for a in self.reads),
            tuple(a.scaled(k) for a in self.writes),
        )


@dataclass(frozen=True, slots=True)
class Cost:
    """A sequence of stages with their totals. ``a + b`` runs both; ``k * a`` runs ``a`` k times."""

    stages: tuple[Stage, ...]

    @property
    def flops(self) -> Num:
        return _total(s.flops for s in self.stages)

    @property
    def bytes_read(self) -> Num:
        return _total(s.bytes_read for s in self.stages)

    @property
    def bytes_written(self) -> Num:
        return _total(s.bytes_written for s in self.stages)

    @property
    def bytes(self) -> Num:
        return _total(s.bytes for s in self.stages)

    @property
    def intensity(self) -> Num:
        """Arithmetic intensity, FLOP per byte of off-chip traffic."""
        return self.flops / self.bytes

    def __iter__(self) -> Iterator[Stage]:
        return iter(self.stages)

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(self.stages + other.stages)

    def __mul__(self, k: Num) -> Cost:
        return Cost(tuple(s.scaled(k) for s in self.stages))

    __rmul__ = __mul__
