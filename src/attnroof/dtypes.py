"""Data types: how many bytes one element takes, and which peak FLOP/s applies."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from attnroof.errors import InputError

BF16_BYTES = 2
"""Bytes per bf16 element: the default element size of every formula (the spec's device R runs
bf16)."""


@dataclass(frozen=True, slots=True)
class DType:
    """A numeric type: ``name`` keys a device's peak table; ``itemsize`` is bytes per element."""

    name: str
    itemsize: float
    aliases: tuple[str, ...] = ()

    @property
    def rate_unit(self) -> str:
        """The unit of a peak rate in this type: ``OP/s`` for integers (an int8 MAC is not a
        floating-point operation), ``FLOP/s`` otherwise. Printed text only; JSON keys stay
        ``peak_flops_per_s`` for every dtype."""
        return rate_unit(self.name)


def rate_unit(dtype_name: str) -> str:
    """``OP/s`` for an integer type's rate, ``FLOP/s`` for the rest (any name, known or not).

    >>> rate_unit("int8"), rate_unit("bf16")
    ('OP/s', 'FLOP/s')
    """
    return "OP/s" if dtype_name.strip().lower().startswith("int") else "FLOP/s"


# tf32 is stored as fp32 (4 bytes) but multiplied on the matrix cores at the tf32 rate.
# fp4 packs two elements per byte.
DTYPES: dict[str, DType] = {
    t.name: t
    for t in (
        DType("fp64", 8, ("float64", "double", "f64")),
        DType("fp32", 4, ("float32", "float", "f32")),
        DType("tf32", 4, ("tensorfloat32",)),
        DType("bf16", BF16_BYTES, ("bfloat16",)),
        DType("fp16", 2, ("float16", "half", "f16")),
        DType("fp8", 1, ("float8", "e4m3", "e5m2", "fp8e4m3", "fp8e5m2")),
        DType("int8", 1, ("i8",)),
        DType("fp4", 0.5, ("float4", "e2m1", "fp4e2m1")),
    )
}

_BY_ALIAS = {alias: t for t in DTYPES.values() for alias in (t.name, *t.aliases)}


def dtype(name: str | DType) -> DType:
    """Look a dtype up by name or alias, case-insensitively.

    >>> dtype("bfloat16").itemsize
    2
    """
    if isinstance(name, DType):
        return name
    key = name.strip().lower().replace("-", "").replace("_", "")
    try:
        return _BY_ALIAS[key]
    except KeyError:
        known = ", ".join(DTYPES)
        close = difflib.get_close_matches(key, list(_BY_ALIAS), n=1)
        hint = f"; did you mean {_BY_ALIAS[close[0]].name}?" if close else ""
        raise InputError(f"unknown dtype {name!r}{hint} (known: {known})") from None
