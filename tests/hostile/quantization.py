"""A checkpoint's ``quantization_config`` and ``--weight-dtype``: a field that cannot be right is
refused in one line naming it; what real checkpoints ship (a method attnroof does not read, GPTQ's
per-channel group −1, its 3-bit packing) is answered, with a note where it is counted otherwise."""

from __future__ import annotations

from typing import Any

from hostile import Case
from hostile.configs import _prints, config, model


def quant(**fields: Any) -> dict[str, str]:
    """A tiny Llama whose ``quantization_config`` is ``fields``."""
    return config(quantization_config=fields)


L8 = ("model", "--model", "llama-3.1-8b", "--device", "h100", "--context", "8192")

CASES: list[Case] = [
    Case(
        "AWQ at 3 bits (AutoAWQ and vLLM store 4)",
        model(),
        files=quant(quant_method="awq", bits=3, group_size=128),
        error=("config.json", "quantization_config.bits = 3", "AWQ stores 4-bit"),
    ),
    Case(
        "GPTQ at 5 bits (it packs 2, 3, 4 or 8)",
        model(),
        files=quant(quant_method="gptq", bits=5, group_size=128),
        error=("quantization_config.bits = 5", "2, 3, 4, 8"),
    ),
    Case(
        "a group of 0 weights",
        model(),
        files=quant(quant_method="gptq", bits=4, group_size=0),
        error=("config.json", "quantization_config.group_size = 0", "positive"),
    ),
    Case(
        "a group size that is a string",
        model(),
        files=quant(quant_method="awq", bits=4, group_size="128"),
        error=("quantization_config.group_size = '128'", "not an integer"),
    ),
    Case(
        "quant_method missing",
        model(),
        files=quant(bits=4),
        error=("quantization_config.quant_method = None",),
    ),
    Case(
        "quantization_config that is a list",
        model(),
        files=config(quantization_config=["fp8"]),
        error=("quantization_config = ['fp8'] is not an object",),
    ),
    Case(
        "an fp8 block of one number",
        model(),
        files=quant(quant_method="fp8", weight_block_size=[128]),
        error=("quantization_config.weight_block_size = [128]", "[rows, columns]"),
    ),
    Case(
        "an fp8 block of 0 rows",
        model(),
        files=quant(quant_method="fp8", weight_block_size=[0, 128]),
        error=("quantization_config.weight_block_size = 0",),
    ),
    Case(
        "an fp8 format that is not one",
        model(),
        files=quant(quant_method="fp8", fmt="e3m4"),
        error=("quantization_config.fmt = 'e3m4'", "e4m3, e5m2"),
    ),
    Case(
        "modules_to_not_convert as one string",
        model(),
        files=quant(quant_method="mxfp4", modules_to_not_convert="lm_head"),
        error=("quantization_config.modules_to_not_convert = 'lm_head'", "list of names"),
    ),
    Case(
        "a quant_method attnroof does not read is counted at --dtype, and said",
        model(),
        files=quant(quant_method="compressed-tensors", format="pack-quantized"),
        error=None,
        check=_prints("quant_method 'compressed-tensors' is a layout attnroof does not read"),
    ),
    Case(
        "GPTQ per channel (group_size -1) and 3-bit packing, as checkpoints ship them",
        model(),
        files=quant(quant_method="gptq", bits=3, group_size=-1, desc_act=False, sym=True),
        error=None,
        check=_prints("gptq-3bit", "at 3 bits a weight"),
    ),
    Case(
        "--weight-dtype that names no format",
        (*L8, "--weight-dtype", "int3"),
        error=("--weight-dtype 'int3'", "known:", "mxfp4", "nvfp4", "int4-g128"),
    ),
    Case(
        "--weight-dtype with a group of 0",
        (*L8, "--weight-dtype", "int4-g0"),
        error=("--weight-dtype 'int4-g0'",),
    ),
    Case(
        "--weight-dtype of a serving layout for a training step",
        (*L8, "--weight-dtype", "awq", "--phase", "train"),
        error=("--weight-dtype awq is a serving layout", "training"),
    ),
    Case(
        "linear's backward with a serving layout's weight",
        ("linear", "-n", "64", "-k", "4096", "-m", "4096", "--weight-dtype", "mxfp4", "--pass", "bwd"),
        error=("--weight-dtype mxfp4 is a serving layout", "--pass fwd"),
    ),
]
