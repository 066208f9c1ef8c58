"""A case's random inputs: drawn on its device, once per shape, the same on every run."""

from __future__ import annotations

from typing import Any

from attnroof.measure.env import TorchDevice

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
"""The dtypes measured kernels run in: attnroof's name → torch's."""
INPUT_SEED = 0
"""Inputs are drawn from a fixed seed, so that a case's output check and its timing see the same
numbers on every run."""


def randn(dev: TorchDevice, case: Any, tensor: int, *shape: int) -> Any:
    """Normal inputs of ``shape`` for the case's ``tensor``-th input, the same on every run: drawn
    on the device itself, in the case's dtype, by a generator of that device seeded with
    :data:`INPUT_SEED` + ``tensor`` (a CPU draw of the quick CUDA plan was 6.5e10 normals, and a
    decode K of s = 131072 17 GB of float32 before the copy).

    Drawn once per shape: every implementation of the shape (and its causal twin) reads the same
    tensors, kept in ``dev.inputs``; the previous shape's inputs are let go before a new shape
    draws its own, so that only one shape's inputs are ever held."""
    torch = dev.torch
    key = input_key(case)
    held = dev.inputs
    if held.get("shape") != key:
        held.clear()
        held["shape"] = key
    if tensor not in held:
        gen = torch.Generator(device=dev.device).manual_seed(INPUT_SEED + tensor)
        held[tensor] = torch.randn(
            *shape, generator=gen, device=dev.device, dtype=getattr(torch, TORCH_DTYPES[case.dtype])
        )
    return held[tensor]


def input_key(case: Any) -> tuple[Any, ...]:
    """What a case's inputs depend on: its kind, dtype and shape, not its implementation nor
    whether it masks (``causal``)."""
    return (case.kind, case.dtype, *((k, v) for k, v in case.shape.items() if k != "causal"))
