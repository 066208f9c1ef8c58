"""The kernels measured, one builder per implementation, each with a float32 reference check.

    attention  eager            Q·Kᵀ, softmax, P·V as three torch ops (the unfused model)
               sdpa-<backend>   torch SDPA pinned to one backend: flash, cudnn, efficient, math
    decode     eager-gqa        one token per query head; q viewed as (batch, kv_heads, group, d)
                                against K, V of (batch, kv_heads, s, d): no K/V copy per head
               sdpa-<backend>   the same view through SDPA (the group plays the query length)
    linear     linear           Y = X·Wᵀ over n tokens

``eager``, ``eager-gqa`` and ``sdpa-math`` write the score matrix to memory, so the model they
are placed against is the unfused one; the other SDPA backends are placed against the fused one.
Causal ``eager`` and ``sdpa-math`` compute every score and then mask them, so their model is the
unfused one with a mask pass and no skipped tiles (``attention(..., mask_pass=True)``).
``sdpa-math`` runs in the input dtype (torch otherwise upcasts it to fp32 since 2.5), so that it
is the bf16/fp16 three-pass kernel the model counts.
The 1/√d scale of the eager kernels is folded into Q before timing, so that the timed kernels
are exactly the three stages the model counts.
"""

from __future__ import annotations

import contextlib
import math
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from attnroof import validate
from attnroof.cost import Cost
from attnroof.dtypes import dtype
from attnroof.errors import InputError
from attnroof.measure.env import TorchDevice
from attnroof.measure.inputs import TORCH_DTYPES, randn
from attnroof.ops import attention, decode, linear

ATTENTION, DECODE, LINEAR = "attention", "decode", "linear"
SDPA_BACKENDS = {
    "sdpa-flash": "FLASH_ATTENTION",
    "sdpa-cudnn": "CUDNN_ATTENTION",
    "sdpa-efficient": "EFFICIENT_ATTENTION",
    "sdpa-math": "MATH",
}
IMPLS = {
    ATTENTION: ("eager", *SDPA_BACKENDS),
    DECODE: ("eager-gqa", *SDPA_BACKENDS),
    LINEAR: ("linear",),
}
UNFUSED = frozenset({"eager", "eager-gqa", "sdpa-math"})
"""Implementations that write S and P to memory: placed against the unfused cost."""
MASKING = frozenset({"eager", "sdpa-math"})
"""Implementations that apply a causal mask to a full score matrix instead of skipping tiles."""
UNAVAILABLE = ("No viable backend", "No available kernel")
"""What torch raises (CPU, CUDA) when a pinned SDPA backend cannot run the inputs."""

TOLERANCE = {"bf16": 2e-2, "fp16": 1e-2, "fp32": 1e-3}
"""Largest relative error (Frobenius norm) of an output against the float32 reference. bf16 keeps
8 bits of mantissa (a rounding step of 2⁻⁸ ≈ 0.4%): a kernel that computes the softmax and its
sums in bf16 (SDPA's math backend, kept in the input dtype) lands near 1e-2 on random inputs, so
bf16 is allowed 2e-2; a wrong kernel is off by far more. fp32 is allowed 1e-3 because a GPU may
multiply it at tf32 precision."""

CHECK_ROWS = 256
"""Query rows (the last ones, which see the most keys) checked against the reference."""

MEMORY_SLACK = 1.25
"""Headroom over the tensors counted, for workspaces and the allocator."""
FP32_BYTES = 4


class Unavailable(Exception):
    """This implementation cannot run here (no such backend, or it refuses these inputs)."""


@dataclass(frozen=True)
class Case:
    """One measurement to make: operator kind, implementation, shape and dtype."""

    kind: str
    impl: str
    shape: Mapping[str, Any] = field(hash=False)
    dtype: str = "bf16"

    @property
    def key(self) -> str:
        """Unique id, e.g. ``attention/eager/bf16/s=512,d=64,batch=1,heads=2,group=1,causal=0``."""
        shape = ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in self.shape.items())
        return f"{self.kind}/{self.impl}/{self.dtype}/{shape}"


def attention_case(
    impl: str, s: int, d: int, *, batch: int = 1, heads: int = 1, causal: bool = False, dt: str = "bf16"
) -> Case:
    return Case(
        ATTENTION, impl, {"s": s, "d": d, "batch": batch, "heads": heads, "group": 1, "causal": causal}, dt
    )


def decode_case(
    impl: str, s: int, d: int, *, batch: int = 1, heads: int = 1, group: int = 1, dt: str = "bf16"
) -> Case:
    validate.kv_heads(heads, group)
    return Case(DECODE, impl, {"s": s, "d": d, "batch": batch, "heads": heads, "group": group}, dt)


def linear_case(n: int, k: int, m: int, *, dt: str = "bf16") -> Case:
    return Case(LINEAR, "linear", {"n": n, "k": k, "m": m}, dt)


def check_dtype(name: str) -> str:
    """The attnroof name of a dtype the kernels can run in (bf16, fp16, fp32)."""
    dt = dtype(name).name
    if dt not in TORCH_DTYPES:
        raise InputError(f"dtype {name}: measured kernels run in {', '.join(TORCH_DTYPES)}", param="dtype")
    return dt


def model_cost(case: Case) -> Cost:
    """The core model's cost of ``case``: unfused for eager and math, fused for the others."""
    sh, item = case.shape, dtype(case.dtype).itemsize
    fused = case.impl not in UNFUSED
    if case.kind == ATTENTION:
        return attention(
            sh["s"],
            sh["d"],
            fused=fused,
            causal=sh["causal"],
            mask_pass=case.impl in MASKING,
            itemsize=item,
            batch=sh["batch"],
            kv_heads=sh["heads"],
        )
    if case.kind == DECODE:
        return decode(
            sh["s"],
            sh["d"],
            fused=fused,
            group=sh["group"],
            itemsize=item,
            batch=sh["batch"],
            kv_heads=sh["heads"] // sh["group"],
        )
    return linear(sh["n"], sh["k"], sh["m"], itemsize=item)


def estimate_bytes(case: Case) -> float:
    """Device memory the case plans to hold at once (bytes): inputs, outputs, scores, reference."""
    sh, item = case.shape, dtype(case.dtype).itemsize
    if case.kind == LINEAR:
        n, k, m = sh["n"], sh["k"], sh["m"]
        return MEMORY_SLACK * ((n * k + k * m + n * m) * item + CHECK_ROWS * m * FP32_BYTES)
    b, h, s, d = sh["batch"], sh["heads"], sh["s"], sh["d"]
    q_rows = s if case.kind == ATTENTION else 1
    tensors = (2 * b * h * q_rows * d + 2 * b * (h // sh.get("group", 1)) * s * d) * item
    scores = b * h * q_rows * s
    if case.impl in ("eager", "eager-gqa"):
        tensors += 2 * scores * item + (s * s if sh.get("causal") else 0)
    elif case.impl == "sdpa-math":
        tensors += 3 * scores * FP32_BYTES
    reference = 3 * min(q_rows * sh.get("group", 1), CHECK_ROWS) * s * FP32_BYTES
    return MEMORY_SLACK * (tensors + reference)


@dataclass
class Prepared:
    """A kernel ready to time: ``run()`` computes the output, ``error(out)`` is its relative
    error against the float32 reference."""

    run: Callable[[], Any]
    error: Callable[[Any], float]


def prepare(case: Case, dev: TorchDevice) -> Prepared:
    """The kernel of ``case`` over its shape's random inputs on ``dev`` (drawn there, once per
    shape: :func:`attnroof.measure.inputs.randn`)."""
    if case.impl not in IMPLS.get(case.kind, ()):
        raise InputError(
            f"no implementation {case.impl!r} for {case.kind}; known: {', '.join(IMPLS.get(case.kind, ()))}"
        )
    return BUILDERS[case.kind](case, dev)


def _rel_error(torch: Any, out: Any, ref: Any) -> float:
    out = out.float()
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


def _reference_attention(torch: Any, q: Any, k: Any, v: Any, rows: Any, causal: bool) -> Any:
    """float32 softmax(q[rows]·kᵀ/√d)·v for one head, masking keys after each query row."""
    scores = (q[rows].float() @ k.float().T) / math.sqrt(q.shape[-1])
    if causal:
        keys = torch.arange(k.shape[0], device=q.device)
        scores = scores.masked_fill(keys[None, :] > rows[:, None], float("-inf"))
    return torch.softmax(scores, dim=-1) @ v.float()


def _sdpa(dev: TorchDevice, impl: str, q: Any, k: Any, v: Any, causal: bool) -> Callable[[], Any]:
    """``run`` for SDPA pinned to one backend; :class:`Unavailable` (with torch's reason) if it
    cannot run these inputs."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, SDPA_BACKENDS[impl], None)
    if backend is None:
        raise Unavailable(f"torch {dev.torch.__version__} has no {SDPA_BACKENDS[impl]} backend")

    in_input_dtype = _math_in_input_dtype(dev.torch) if impl == "sdpa-math" else contextlib.nullcontext

    def run() -> Any:
        with sdpa_kernel(backend), in_input_dtype():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            run()
        except RuntimeError as e:
            if not any(m in str(e) for m in UNAVAILABLE):
                raise
            why = "; ".join(pinned_warnings(impl, [str(w.message) for w in caught]))
            why = why or f"no such kernel on {dev.device.type}"
            raise Unavailable(
                f"{SDPA_BACKENDS[impl]} unavailable for these inputs: {_one_line(why)}"
            ) from None
    return run


BACKEND_WORDS = {
    "sdpa-flash": ("flash",),
    "sdpa-efficient": ("memory efficient", "mem efficient", "mem-efficient", "efficient attention"),
    "sdpa-cudnn": ("cudnn",),
    "sdpa-math": ("math",),
}
"""How torch's warnings name each backend ("Flash attention kernel not used because", "Memory
efficient kernel not used because", "cuDNN attention kernel not used because")."""


def pinned_warnings(impl: str, messages: list[str]) -> list[str]:
    """The warnings about the pinned backend: with one backend pinned, torch warns about every
    other backend first, which is noise about kernels that were not asked for. All of them when
    none names the pinned one.

    >>> pinned_warnings("sdpa-cudnn", ["Memory efficient kernel not used because: x",
    ...                                "cuDNN attention kernel not used because: head dim"])
    ['cuDNN attention kernel not used because: head dim']
    """
    words = BACKEND_WORDS.get(impl, ())
    mine = [m for m in messages if any(w in m.lower() for w in words)]
    if impl == "sdpa-flash":  # "flash" must not catch the others' mentions of it
        mine = [
            m for m in mine if m.lower().lstrip().startswith(("flash", "torch was not compiled with flash"))
        ] or mine
    return mine or messages


def _math_in_input_dtype(torch: Any) -> Callable[[], Any]:
    """A context in which the math SDPA backend keeps bf16/fp16 (no fp32 upcast), where torch has
    the switch; elsewhere a no-op."""
    switch = getattr(torch.backends.cuda, "allow_fp16_bf16_reduction_math_sdp", None)
    query = getattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed", None)
    if switch is None or query is None:
        return contextlib.nullcontext

    @contextlib.contextmanager
    def ctx() -> Any:
        before = query()
        switch(True)
        try:
            yield
        finally:
            switch(before)

    return ctx


def _one_line(text: str, limit: int = 240) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _attention(case: Case, dev: TorchDevice) -> Prepared:
    torch, sh = dev.torch, case.shape
    b, h, s, d, causal = sh["batch"], sh["heads"], sh["s"], sh["d"], sh["causal"]
    q, k, v = (randn(dev, case, i, b, h, s, d) for i in range(3))
    if case.impl == "eager":
        qs = q * (1 / math.sqrt(d))
        mask = torch.ones(s, s, dtype=torch.bool, device=dev.device).triu_(1) if causal else None

        def run() -> Any:
            scores = torch.matmul(qs, k.transpose(-2, -1))
            if mask is not None:
                scores.masked_fill_(mask, float("-inf"))
            return torch.matmul(torch.softmax(scores, dim=-1), v)
    else:
        run = _sdpa(dev, case.impl, q, k, v, causal)
    rows = torch.arange(max(0, s - CHECK_ROWS), s, device=dev.device)

    def error(out: Any) -> float:
        ref = _reference_attention(torch, q[0, 0], k[0, 0], v[0, 0], rows, causal)
        return _rel_error(torch, out[0, 0, rows], ref)

    return Prepared(run, error)


def _decode(case: Case, dev: TorchDevice) -> Prepared:
    torch, sh = dev.torch, case.shape
    b, g, s, d = sh["batch"], sh["group"], sh["s"], sh["d"]
    kv_heads = sh["heads"] // g
    q = randn(dev, case, 0, b, kv_heads, g, d)  # the group's query heads, one token each
    k, v = (randn(dev, case, i, b, kv_heads, s, d) for i in (1, 2))
    if case.impl == "eager-gqa":
        qs = q * (1 / math.sqrt(d))

        def run() -> Any:
            return torch.matmul(torch.softmax(torch.matmul(qs, k.transpose(-2, -1)), dim=-1), v)
    else:
        run = _sdpa(dev, case.impl, q, k, v, False)

    def error(out: Any) -> float:
        rows = torch.arange(g, device=dev.device)
        ref = _reference_attention(torch, q[0, 0], k[0, 0], v[0, 0], rows, False)
        return _rel_error(torch, out[0, 0], ref)

    return Prepared(run, error)


def _linear(case: Case, dev: TorchDevice) -> Prepared:
    torch, sh = dev.torch, case.shape
    n, k, m = sh["n"], sh["k"], sh["m"]
    x, w = randn(dev, case, 0, n, k), randn(dev, case, 1, m, k)

    def run() -> Any:
        return torch.nn.functional.linear(x, w)

    def error(out: Any) -> float:
        rows = slice(max(0, n - CHECK_ROWS), n)
        return _rel_error(torch, out[rows], x[rows].float() @ w.float().T)

    return Prepared(run, error)


BUILDERS: dict[str, Callable[[Case, TorchDevice], Prepared]] = {
    ATTENTION: _attention,
    DECODE: _decode,
    LINEAR: _linear,
}
