"""Weight formats: how many bits one weight takes in HBM, its scales included, and what the
kernel multiplies it at. One record per format; a plain dtype is a format without scales.

    format       element  scale, per how many weights                  bits per weight
    int8         int8     fp16 per output channel (k weights)          8 (+16/k: left out)
    int8-g128    int8     fp16 per 128                                 8 + 16/128 = 8.125
    int4-g128    int4     fp16 per 128 (symmetric: no zero point)      4 + 16/128 = 4.125
    awq, gptq    int4     fp16 scale and a packed 4-bit zero per 128   4 + (16 + 4)/128 = 4.15625
    fp8          e4m3     one fp32 per tensor                          8
    fp8-block    e4m3     fp32 per 128 × 128 block (DeepSeek-V3)       8 + 32/16384 = 8.001953125
    mxfp4        e2m1     e8m0 per 32 (OCP MX v1.0)                    4 + 8/32 = 4.25
    nvfp4        e2m1     e4m3 per 16, and one fp32 per tensor         4 + 8/16 = 4.5

A scaled format is dequantized inside the GEMM kernel and multiplied at the activations' dtype
(``--dtype``): W4A16 at bf16 reads 4.125 bits a weight and runs at the bf16 peak. Only where
``--dtype`` is the format's own element type (fp8 weights with ``--dtype fp8``: W8A8) does the
kernel run at that type's peak; either way the peak is ``--dtype``'s, so no format changes it.

Sources: OCP Microscaling Formats (MX) Specification v1.0 (2023), §5.1 (MXFP4: k = 32 E2M1
elements share one E8M0 scale); NVIDIA, "Introducing NVFP4 for Efficient and Accurate
Low-Precision Inference" (2025: 16 E2M1 elements share one E4M3 scale, plus an FP32 scale per
tensor); Lin et al., AWQ (MLSys 2024) and AutoAWQ's GEMM layout (``qweight``, ``qzeros`` packed
eight 4-bit zeros to an int32, ``scales`` fp16, one per group and output channel); Frantar et
al., GPTQ (ICLR 2023) and AutoGPTQ's layout (the same three tensors, plus ``g_idx``: one int32
per input row, 32/m bits a weight, left out); DeepSeek-V3's ``weight_block_size`` [128, 128]
with an fp32 ``weight_scale_inv`` per block (transformers' ``FineGrainedFP8Config``).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from fractions import Fraction

from attnroof.dtypes import DTYPES, DType
from attnroof.errors import InputError

BITS_PER_BYTE = 8
FP16_SCALE_BITS = 16
"""AWQ's and GPTQ's group scales are fp16."""
FP32_SCALE_BITS = 32
"""DeepSeek-V3's block scales (``weight_scale_inv``) are fp32."""
E8M0_SCALE_BITS = 8
"""MX's shared scale: an 8-bit power of two (OCP MX v1.0, §5.3)."""
E4M3_SCALE_BITS = 8
"""NVFP4's block scale: an fp8 E4M3 number."""
MX_BLOCK = 32
"""MXFP4's block: 32 elements share one scale (OCP MX v1.0, §5.1)."""
NVFP4_BLOCK = 16
"""NVFP4's block: 16 elements share one scale."""
DEFAULT_GROUP = 128
"""AWQ's and GPTQ's default group size (AutoAWQ ``q_group_size``, transformers' ``group_size``)."""
FP8_BLOCK = (128, 128)
"""DeepSeek-V3's ``weight_block_size``: one scale per 128 × 128 weights."""


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """A way to store weights: ``bits`` per weight, its scales (and zero points) included;
    ``element``: the dtype of the stored values; ``layout``: what the scales are, in words."""

    name: str
    bits: Fraction
    element: str
    layout: str
    aliases: tuple[str, ...] = ()

    @property
    def itemsize(self) -> float:
        """Bytes per weight, scales included: ``bits / 8``.

        >>> weight_format("mxfp4").itemsize     # 4.25 / 8
        0.53125
        """
        return float(self.bits / BITS_PER_BYTE)

    @property
    def scaled(self) -> bool:
        """A quantized layout (scales, blocks, zero points), not a plain dtype: a serving format."""
        return self.name not in DTYPES

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "bits_per_weight": float(self.bits), "element": self.element}


def plain(t: DType) -> WeightFormat:
    """A dtype as a format: its own bits, no scales (``bf16``: 16 bits)."""
    return WeightFormat(
        t.name, Fraction(t.itemsize).limit_denominator() * BITS_PER_BYTE, t.name, "", t.aliases
    )


def int_grouped(bits: int, group: int, *, zero_bits: int = 0, name: str = "") -> WeightFormat:
    """``bits``-bit integers in groups of ``group`` along the input, one fp16 scale per group and
    output channel, and (asymmetric: ``zero_bits``) a zero point packed at ``zero_bits``.

    >>> float(int_grouped(4, 128).bits)                  # 4 + 16/128
    4.125
    >>> float(int_grouped(4, 128, zero_bits=4).bits)     # AWQ, GPTQ: 4 + (16 + 4)/128
    4.15625
    >>> float(int_grouped(3, 64, zero_bits=3).bits)      # GPTQ 3-bit, group 64: 3 + 19/64
    3.296875
    """
    bits_per = bits + Fraction(FP16_SCALE_BITS + zero_bits, group)
    zero = f" and a {zero_bits}-bit zero point" if zero_bits else ""
    return WeightFormat(
        name or f"int{bits}-g{group}", bits_per, f"int{bits}", f"one fp16 scale{zero} per {group} weights"
    )


def fp8_block(rows: int, cols: int) -> WeightFormat:
    """fp8 E4M3 with one fp32 scale per ``rows × cols`` block.

    >>> float(fp8_block(128, 128).bits)     # 8 + 32/(128·128)
    8.001953125
    """
    name = "fp8-block" if (rows, cols) == FP8_BLOCK else f"fp8-block{rows}x{cols}"
    bits = 8 + Fraction(FP32_SCALE_BITS, rows * cols)
    return WeightFormat(name, bits, "fp8", f"one fp32 scale per {rows}×{cols} block")


MXFP4 = WeightFormat("mxfp4", 4 + Fraction(E8M0_SCALE_BITS, MX_BLOCK), "fp4", "one e8m0 scale per 32 weights")
"""MXFP4: 4 + 8/32 = 4.25 bits a weight."""
NVFP4 = WeightFormat(
    "nvfp4", 4 + Fraction(E4M3_SCALE_BITS, NVFP4_BLOCK), "fp4",
    "one e4m3 scale per 16 weights, plus one fp32 per tensor not counted",
)  # fmt: skip
"""NVFP4: 4 + 8/16 = 4.5 bits a weight."""

FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        *(plain(t) for t in DTYPES.values()),
        WeightFormat("int8", Fraction(8), "int8", "one scale per output channel, 16/k bits a weight, left out", ("i8",)),
        int_grouped(8, DEFAULT_GROUP),
        int_grouped(4, DEFAULT_GROUP),
        int_grouped(4, DEFAULT_GROUP, zero_bits=4, name="awq"),
        int_grouped(4, DEFAULT_GROUP, zero_bits=4, name="gptq"),
        WeightFormat("fp8", Fraction(8), "fp8", "one fp32 scale per tensor", DTYPES["fp8"].aliases),
        fp8_block(*FP8_BLOCK),
        MXFP4,
        NVFP4,
    )
}  # fmt: skip
"""The formats ``--weight-dtype`` names; ``int4``, ``w4a16`` and ``int4-gN``, ``int8-gN``,
``awq-gN``, ``gptq-gN`` (any group) are read too."""

_ALIASES = {
    "int4": "int4-g128",
    "w4a16": "int4-g128",
    "w8a16": "int8-g128",
    "w8a8": "int8",
    "fp8-per-tensor": "fp8",
}
_GROUPED = re.compile(r"(int4|int8|awq|gptq)-?g([0-9]{1,12})")
"""``int4-g128`` and its kind: a group of at most 12 digits (the largest allowed, 2²⁰, has 7; a
longer one is named as unknown, never handed to ``int()``, which refuses 4,300 digits)."""


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def weight_format(name: str | WeightFormat) -> WeightFormat:
    """A format by name (a dtype, a format of :data:`FORMATS`, ``int4-g64``, ...), case-blind.

    >>> weight_format("int4").name, float(weight_format("gptq-g32").bits)    # 4 + 20/32
    ('int4-g128', 4.625)
    """
    if isinstance(name, WeightFormat):
        return name
    key = _key(name)
    key = _ALIASES.get(key, key)
    if key in FORMATS:
        return FORMATS[key]
    by_alias = {a: f for f in FORMATS.values() for a in f.aliases}
    squashed = key.replace("-", "")
    for k in (key, squashed):
        if k in by_alias:
            return by_alias[k]
    if squashed in FORMATS:
        return FORMATS[squashed]
    if (m := _GROUPED.fullmatch(key)) and 0 < (group := int(m[2])) <= 1 << 20:
        kind = m[1]
        bits = 8 if kind == "int8" else 4
        zero = bits if kind in ("awq", "gptq") else 0
        return int_grouped(bits, group, zero_bits=zero, name=f"{kind}-g{group}")
    close = difflib.get_close_matches(key, [*FORMATS, *_ALIASES], n=1)
    hint = f"; did you mean {_ALIASES.get(close[0], close[0])}?" if close else ""
    raise InputError(
        f"weight_dtype {name!r} is not a weight format attnroof knows{hint} "
        f"(known: {', '.join(FORMATS)}, int4-gN, int8-gN, awq-gN, gptq-gN)",
        param="weight_dtype",
    ) from None
