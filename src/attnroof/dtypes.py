"""Data types: how many bytes one element takes, and which peak FLOP/s applies."""

from __future__ import annotations

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
        raise InputError(f"unknown dtype {name!r}; known: {known}") from None
