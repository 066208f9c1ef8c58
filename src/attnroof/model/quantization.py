"""A checkpoint's ``quantization_config``: the format its weights are stored in, and which of
them. Read as strictly as the rest of a config; each row of the layer table then carries its own
format (:func:`stored_formats`), which the binders and memory read through
:meth:`attnroof.row.Precision.weight_bytes`.

    quant_method   fields read                                   format of the converted rows
    mxfp4          modules_to_not_convert                        mxfp4 (4.25 bits; gpt-oss's experts)
    fp8            weight_block_size [r, c], fmt (e4m3, e5m2)    fp8-block (DeepSeek-V3), else fp8
    fbgemm_fp8     modules_to_not_convert                        fp8 (a scale per channel: left out)
    awq            bits (4 only), group_size, zero_point         4 + (16 + 4)/g (no zero: 4 + 16/g)
    gptq           bits (2, 3, 4, 8), group_size (−1: per        b + (16 + b)/g: packed zeros are
                   channel), lm_head                             stored even when symmetric
    bitsandbytes   load_in_4bit, bnb_4bit_use_double_quant,      nf4: 4 + 32/64, double-quantized
                   load_in_8bit                                  4 + 8/64 + 32/(64·256); int8: 8

Which weights: those a quantizer converts, nn.Linear layers (a row whose operator is a matrix
product: :attr:`attnroof.operators.Operator.matmul`) — never the embedding, norms, router (every
quantizer leaves it: gpt-oss names it, DeepSeek-V3's is a bare parameter, AutoAWQ's Mixtral
lists ``gate``) or, unless GPTQ's ``lm_head`` says so, the LM head — less the modules that
``modules_to_not_convert`` names. A pattern names modules as transformers does, dotted with
``*`` for a layer number (``model.layers.*.self_attn``); it matches whole components, so
``gate`` excludes a router called ``gate`` and not ``gate_proj``. Rows are per layer kind, not
per layer: a pattern naming one layer by number is read as that module in every layer.

A ``quant_method`` attnroof does not read (``compressed-tensors``, ``torchao``, ``hqq``, ...:
real checkpoints use dozens of names, each with its own fields) is accepted: its weights are
counted at ``--weight-dtype`` (default ``--dtype``) and a note says so. A name that is no
quantizer's (:data:`KNOWN_METHODS`: ``banana``) is refused. Fields of a method it
reads that cannot be right (AWQ at 3 bits, a group of 0, a block of [128]) are refused in one
line naming the field.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from attnroof.formats import DEFAULT_GROUP, FORMATS, MXFP4, WeightFormat, fp8_block, int_grouped
from attnroof.model.fields import ModelConfigError, read_bool, read_int, show
from attnroof.operators import rule
from attnroof.row import HEAD, OpInstance

GPTQ_BITS = (2, 3, 4, 8)
"""The widths GPTQ packs (transformers' ``GPTQConfig``: "bits must be one of 2, 3, 4, 8")."""
AWQ_BITS = 4
"""AWQ checkpoints are 4-bit (AutoAWQ's kernels; vLLM refuses any other width)."""
PER_CHANNEL = -1
"""GPTQ's ``group_size`` −1: one scale per output channel over the whole input (16/k bits: left out)."""
NF4_BLOCK, NF4_DOUBLE_BLOCK = 64, 256
"""bitsandbytes' 4-bit blocks: an fp32 absmax per 64 weights, or (double quantization) an 8-bit
absmax per 64 and an fp32 per 256 of those (Dettmers et al., QLoRA, 2023, §3)."""
FP8_FMTS = ("e4m3", "e5m2")

NEVER_CONVERTED = ("router", "shared expert gate")
"""Matrix products no quantizer converts: the router and Qwen2-MoE's one-column shared-expert gate."""

LAYER_PREFIX = "model.layers.*."
HF_MODULES: dict[str, tuple[str, ...]] = {
    "QKV projection": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.qkv_proj", "attn.c_attn"),
    "Q projection": ("self_attn.q_proj",),
    "Q down-projection": ("self_attn.q_a_proj",),
    "Q up-projection": ("self_attn.q_b_proj",),
    "KV down-projection": ("self_attn.kv_a_proj_with_mqa",),
    "attention (latent)": ("self_attn.kv_b_proj",),
    "output projection": ("self_attn.o_proj", "attn.c_proj"),
    "gate/up projection": ("mlp.gate_proj", "mlp.up_proj", "mlp.gate_up_proj"),
    "up projection": ("mlp.up_proj", "mlp.c_fc"),
    "down projection": ("mlp.down_proj", "mlp.c_proj"),
    "expert gate/up": ("mlp.experts", "block_sparse_moe.experts"),
    "expert down": ("mlp.experts", "block_sparse_moe.experts"),
    "shared expert gate/up projection": ("mlp.shared_experts", "mlp.shared_expert"),
    "shared expert up projection": ("mlp.shared_experts", "mlp.shared_expert"),
    "shared expert down projection": ("mlp.shared_experts", "mlp.shared_expert"),
}  # fmt: skip
"""Each weight row's modules in a Hugging Face checkpoint (under ``model.layers.N.``; the LM head
is ``lm_head``), for matching ``modules_to_not_convert``."""


@dataclass(frozen=True, slots=True)
class Quantization:
    """A checkpoint's ``quantization_config``: its ``method``, the ``format`` of the weights it
    converts (None: a method attnroof does not read), the modules it leaves alone, and whether
    the LM head is converted too."""

    method: str
    format: WeightFormat | None
    not_converted: tuple[str, ...] = ()
    lm_head: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "quant_method": self.method,
            "format": None if self.format is None else self.format.to_json(),
            "modules_to_not_convert": list(self.not_converted),
        }


def read_quantization(cfg: Mapping[str, Any], where: str) -> Quantization | None:
    """The ``quantization_config`` of a config, if any.

    >>> read_quantization({"quantization_config": {"quant_method": "awq", "bits": 4}}, "x").format.name
    'awq'
    >>> read_quantization({"quantization_config": {"quant_method": "awq", "bits": 3}}, "x")
    Traceback (most recent call last):
    ...
    attnroof.model.fields.ModelConfigError: x: quantization_config.bits = 3: AWQ stores 4-bit weights
    """
    q = cfg.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, Mapping):
        raise ModelConfigError(f"{where}: quantization_config = {show(q)} is not an object")
    here = f"{where}: quantization_config"
    method = q.get("quant_method")
    if not isinstance(method, str) or not method.strip():
        raise ModelConfigError(f"{here}.quant_method = {show(method)} is not a method's name")
    skip = q.get("modules_to_not_convert")
    if skip is not None and (not isinstance(skip, list) or not all(isinstance(s, str) for s in skip)):
        raise ModelConfigError(f"{here}.modules_to_not_convert = {show(skip)} is not a list of names")
    if _method_key(method) not in {_method_key(m) for m in KNOWN_METHODS}:
        close = difflib.get_close_matches(method.strip().lower(), KNOWN_METHODS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ModelConfigError(
            f"{here}.quant_method = {show(method)} is no quantizer's name{hint} (known: {', '.join(KNOWN_METHODS)})"
        )
    reader = next((r for name, r in _READERS.items() if _method_key(name) == _method_key(method)), None)
    fmt = None if reader is None else reader(q, where)
    lm_head = _bool(q, "lm_head", where, False) if method == "gptq" else False
    return Quantization(method, fmt, tuple(skip or ()), lm_head)


KNOWN_METHODS = (
    "bitsandbytes", "gptq", "awq", "aqlm", "vptq", "quanto", "eetq", "higgs", "hqq", "compressed-tensors",
    "fbgemm_fp8", "torchao", "gguf", "bitnet", "spqr", "fp8", "quark", "fp_quant", "auto-round", "mxfp4",
    "nvfp4", "mxfp8", "metal", "fouroversix", "sinq", "gemma",
    "modelopt", "modelopt_fp4", "marlin", "gptq_marlin", "gptq_marlin_24", "awq_marlin", "bitblas",
    "gptq_bitblas", "deepspeedfp", "tpu_int8", "ptpc_fp8", "experts_int8", "moe_wna16", "qqq", "ipex",
    "inc", "rtn", "petit_nvfp4", "neuron_quant",
)  # fmt: skip
"""The ``quant_method`` names real checkpoints carry: transformers' ``QuantizationMethod``
(5.25, ``utils/quantization_config.py``) and the further ones vLLM reads (0.11,
``model_executor/layers/quantization/__init__.py``: ModelOpt's, the Marlin and BitBLAS kernels').
Those without a reader here are counted at ``--weight-dtype`` with a note; any other name is no
quantizer's and is refused, rather than read as unquantized."""


def _method_key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def _int(q: Mapping[str, Any], key: str, where: str, default: Any = ...) -> Any:
    """A positive integer field of ``quantization_config``, named in full in an error."""
    full = f"quantization_config.{key}"
    return read_int({full: q.get(key)}, full, where, default)


def _bool(q: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    full = f"quantization_config.{key}"
    return read_bool({full: q.get(key)}, full, where, default)


def _mxfp4(q: Mapping[str, Any], where: str) -> WeightFormat:
    return MXFP4


def _fp8(q: Mapping[str, Any], where: str) -> WeightFormat:
    fmt = q.get("fmt")
    if fmt is not None and fmt not in FP8_FMTS:
        raise ModelConfigError(
            f"{where}: quantization_config.fmt = {show(fmt)} is not an fp8 format ({', '.join(FP8_FMTS)})"
        )
    block = q.get("weight_block_size")
    if block is None:
        return FORMATS["fp8"]
    if not isinstance(block, list) or len(block) != 2:
        raise ModelConfigError(
            f"{where}: quantization_config.weight_block_size = {show(block)} is not [rows, columns]"
        )
    rows, cols = (_int({"weight_block_size": b}, "weight_block_size", where) for b in block)
    return fp8_block(rows, cols)


def _fbgemm_fp8(q: Mapping[str, Any], where: str) -> WeightFormat:
    return FORMATS["fp8"]


def _group(q: Mapping[str, Any], where: str, per_channel: bool) -> int:
    g = q.get("group_size")
    if per_channel and g == PER_CHANNEL:
        return PER_CHANNEL
    return int(_int(q, "group_size", where, DEFAULT_GROUP))


def _awq(q: Mapping[str, Any], where: str) -> WeightFormat:
    bits = _int(q, "bits", where, AWQ_BITS)
    if bits != AWQ_BITS:
        raise ModelConfigError(
            f"{where}: quantization_config.bits = {show(bits)}: AWQ stores {AWQ_BITS}-bit weights"
        )
    g = _group(q, where, per_channel=False)
    zero = _bool(q, "zero_point", where, True)
    name = "awq" if (g, zero) == (DEFAULT_GROUP, True) else f"awq-g{g}" + ("" if zero else "-sym")
    return int_grouped(AWQ_BITS, g, zero_bits=AWQ_BITS if zero else 0, name=name)


def _gptq(q: Mapping[str, Any], where: str) -> WeightFormat:
    bits = _int(q, "bits", where)
    if bits not in GPTQ_BITS:
        raise ModelConfigError(
            f"{where}: quantization_config.bits = {show(bits)}: GPTQ packs {', '.join(map(str, GPTQ_BITS))} bits"
        )
    g = _group(q, where, per_channel=True)
    if g == PER_CHANNEL:
        return WeightFormat(f"gptq-{bits}bit", Fraction(bits), f"int{bits}", "one scale and zero per channel")
    name = "gptq" if (bits, g) == (4, DEFAULT_GROUP) else f"gptq-{bits}bit-g{g}"
    return int_grouped(bits, g, zero_bits=bits, name=name)


def _bitsandbytes(q: Mapping[str, Any], where: str) -> WeightFormat | None:
    """nf4: 4 + 32/64 = 4.5 bits; double-quantized, 4 + 8/64 + 32/(64·256) = 4.127 bits."""
    if _bool(q, "load_in_4bit", where, False):
        if _bool(q, "bnb_4bit_use_double_quant", where, False):
            bits = 4 + Fraction(8, NF4_BLOCK) + Fraction(32, NF4_BLOCK * NF4_DOUBLE_BLOCK)
            return WeightFormat("nf4-dq", bits, "nf4", "an 8-bit absmax per 64, an fp32 per 256 of those")
        return WeightFormat("nf4", 4 + Fraction(32, NF4_BLOCK), "nf4", "an fp32 absmax per 64 weights")
    if _bool(q, "load_in_8bit", where, False):
        return FORMATS["int8"]
    return None


_READERS = {
    "mxfp4": _mxfp4, "fp8": _fp8, "fbgemm_fp8": _fbgemm_fp8, "awq": _awq, "gptq": _gptq,
    "bitsandbytes": _bitsandbytes,
}  # fmt: skip


def _matches(pattern: str, module: str) -> bool:
    """Whether ``pattern``'s dotted components appear, in a run, among ``module``'s (``*`` on
    either side matches a layer number).

    >>> _matches("model.layers.*.self_attn", "model.layers.*.self_attn.q_proj")
    True
    >>> _matches("gate", "model.layers.*.mlp.gate_proj"), _matches("gate", "model.layers.*.mlp.gate")
    (False, True)
    """
    want, have = pattern.split("."), module.split(".")

    def same(p: str, h: str) -> bool:
        return p == h or p == "*" or (h == "*" and p.isdigit())

    return any(
        all(same(p, h) for p, h in zip(want, have[i : i + len(want)], strict=True))
        for i in range(len(have) - len(want) + 1)
    )


def converted(q: Quantization, row: OpInstance) -> bool:
    """Whether the checkpoint stores ``row``'s weights in its format (see the module's text)."""
    if rule(row).matmul is None or row.name in NEVER_CONVERTED:
        return False
    if row.layer_kind == HEAD:
        modules = ("lm_head",)
        if not q.lm_head:
            return False
    else:
        modules = tuple(LAYER_PREFIX + m for m in HF_MODULES.get(row.name, (row.name,)))
    return not any(_matches(p, m) for p in q.not_converted for m in modules)


def stored_formats(q: Quantization | None, rows: Iterable[OpInstance]) -> tuple[OpInstance, ...]:
    """``rows``, each converted one carrying the checkpoint's format."""
    if q is None or q.format is None:
        return tuple(rows)
    return tuple(replace(r, weight_format=q.format) if converted(q, r) else r for r in rows)
