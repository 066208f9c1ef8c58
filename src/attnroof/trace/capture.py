"""Run a module on meta tensors and record every ATen operator it dispatches.

A ``TorchDispatchMode`` sees each operator after autograd, with the tensors it reads and
returns; PyTorch's ``ModuleTracker`` says which module (forward or backward) is running. Each
record keeps, per tensor, its *distinct* bytes (a broadcast dimension, stride 0, counted once)
and its storage (views share their base's), which is what the fusion rule needs to tell the
bytes that cross a kernel boundary from those that stay inside one.

``F.scaled_dot_product_attention`` is caught above the dispatcher (a ``TorchFunctionMode``): on
meta tensors PyTorch would run it as its math decomposition, two batched GEMMs and a softmax. It
is recorded as one attention operator, costed by attnroof's attention formulas (its backward as
one too), the operators of the decomposition left out.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from attnroof.trace import rules

ATTENTION = "attention"


@dataclass(frozen=True, slots=True)
class Tensor:
    """One tensor an operator read or wrote: its storage, its distinct bytes, a parameter or not."""

    storage: int
    bytes: int
    weight: bool = False
    view: tuple = ()
    """Where in the storage: offset, shape and strides (two reads of one view are one read)."""


@dataclass(slots=True)
class Record:
    """One ATen operator as it ran: name, kind, module path, FLOPs, the tensors read and written."""

    name: str
    kind: str
    module: str
    backward: bool
    flops: float
    reads: tuple[Tensor, ...]
    writes: tuple[Tensor, ...]
    shapes: str = ""
    attention: dict[str, Any] = field(default_factory=dict)
    """For an attention record: the shape attnroof's formulas take (b, h, h_kv, s_q, s_kv, d, d_v, causal, itemsize)."""
    gemm: tuple[int, int, int] | None = None
    """For a matrix product of two operands (mm, addmm, bmm, baddbmm): its rows t (a batch's
    rows together), depth k and outputs m, which the forecast's tiles take."""


def distinct_bytes(t: Any) -> int:
    """Bytes of the elements a tensor addresses: a dimension of stride 0 (broadcast) counted once."""
    n = math.prod(size for size, stride in zip(t.shape, t.stride(), strict=True) if stride != 0)
    return int(n) * t.element_size()


def _tensors(value: Any) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def storage_of(t: Any) -> int:
    return int(t.untyped_storage()._cdata)


class Recorder:
    """The records of one run; :meth:`running` installs the modes around a callable."""

    def __init__(self, weights: set[int]) -> None:
        self.records: list[Record] = []
        self.weights = weights
        self.quiet = 0
        self.tracker: Any = None
        self.kept: list[Any] = []
        """Every storage seen, held: a storage freed during the run could otherwise give its
        address (the identity a record keeps) to a later one. Meta storages hold no memory."""

    def tensor(self, t: Any) -> Tensor:
        self.kept.append(t.untyped_storage())
        s = storage_of(t)
        return Tensor(
            s, distinct_bytes(t), s in self.weights, (t.storage_offset(), tuple(t.shape), t.stride())
        )

    def module(self) -> tuple[str, bool]:
        parents = [p for p in self.tracker.parents if p != "Global"]
        return (max(parents, key=lambda p: (p.count("."), len(p))) if parents else "(top)"), bool(
            self.tracker.is_bw
        )

    def add(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        if self.quiet:
            return
        kind = rules.kind_of(func)
        if kind in (rules.VIEW, rules.FREE):
            return
        read = {k: v for k, v in kwargs.items() if k != "out"}  # out= is written, not read
        ins = list(_tensors((args, read)))
        outs = list(_tensors(out))
        module, backward = self.module()
        numel_in = max((t.numel() for t in ins), default=0)
        numel_out = sum(t.numel() for t in outs)
        flops = rules.flops_of(func, kind, args, kwargs, out, numel_in, numel_out)
        reads = _unique(self.tensor(t) for t in ins)
        writes = _unique(self.tensor(t) for t in outs)
        if kind == rules.GATHER and ins:  # the rows gathered, as many as it writes, and the indices
            table = max(reads, key=lambda r: r.bytes)
            rows = Tensor(
                table.storage, min(table.bytes, sum(w.bytes for w in writes)), table.weight, table.view
            )
            reads = tuple(rows if r is table else r for r in reads)
        shapes = " ".join("×".join(map(str, t.shape)) or "scalar" for t in ins[:3])
        targets = {r.storage for r in reads} & {w.storage for w in writes}
        if kind == rules.SCATTER and targets:  # in place: it writes as many bytes as its source has
            source = max((r.bytes for r in reads if r.storage not in targets), default=0)
            reads = tuple(r for r in reads if r.storage not in targets)
            writes = tuple(
                Tensor(w.storage, min(w.bytes, source), w.weight, w.view) if w.storage in targets else w
                for w in writes
            )
        name = str(func.overloadpacket.__name__)
        gemm = _gemm(name, args) if kind == rules.MATMUL else None
        self.records.append(Record(name, kind, module, backward, flops, reads, writes, shapes, gemm=gemm))

    def attention(self, q: Any, k: Any, v: Any, out: Any, causal: bool, mask: Any, backward: bool) -> None:
        b, h, s_q, d = (int(x) for x in (math.prod(q.shape[:-3]), *q.shape[-3:]))
        h_kv, s_kv, d_v = int(k.shape[-3]), int(k.shape[-2]), int(v.shape[-1])
        module, _ = self.module()
        shape = {"batch": b, "heads": h, "kv_heads": h_kv, "s_q": s_q, "s_kv": s_kv, "d": d, "d_v": d_v,
                 "causal": causal, "itemsize": q.element_size(), "mask_bytes": 0 if mask is None else distinct_bytes(mask)}  # fmt: skip
        tensors = [q, k, v, *([] if mask is None else [mask])]
        reads = _unique(self.tensor(t) for t in (*tensors, *([out] if backward else [])))
        writes = _unique(self.tensor(t) for t in ([q, k, v] if backward else [out]))
        name = "attention backward" if backward else "scaled_dot_product_attention"
        shapes = f"q {'×'.join(map(str, q.shape))}, kv {'×'.join(map(str, k.shape))}"
        self.records.append(Record(name, ATTENTION, module, backward, 0.0, reads, writes, shapes, shape))

    @contextlib.contextmanager
    def silent(self) -> Iterator[None]:
        self.quiet += 1
        try:
            yield
        finally:
            self.quiet -= 1

    def running(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` under the modes: every operator it (and its backward) dispatches recorded."""
        import torch
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.module_tracker import ModuleTracker

        rec = self
        sdpa = torch.nn.functional.scaled_dot_product_attention

        class Attention(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, q: Any, k: Any, v: Any, mask: Any, kw: dict) -> Any:
                with rec.silent():
                    out = sdpa(q, k, v, attn_mask=mask, **kw)
                rec.attention(q, k, v, out, bool(kw.get("is_causal")), mask, backward=False)
                ctx.save_for_backward(q, k, v, out)
                ctx.causal, ctx.mask = bool(kw.get("is_causal")), mask
                return out

            @staticmethod
            def backward(ctx: Any, grad: Any) -> Any:
                q, k, v, out = ctx.saved_tensors
                rec.attention(q, k, v, out, ctx.causal, ctx.mask, backward=True)
                with rec.silent():
                    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), None, None

        class Functions(TorchFunctionMode):
            def __torch_function__(
                self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
            ) -> Any:
                kwargs = kwargs or {}
                if func is sdpa:
                    q, k, v, *rest = args
                    mask = kwargs.pop("attn_mask", rest[0] if rest else None)
                    if kwargs.get("enable_gqa") is None and k.shape[-3] != q.shape[-3]:
                        kwargs["enable_gqa"] = True
                    return Attention.apply(q, k, v, mask, kwargs)
                return func(*args, **kwargs)

        class Dispatch(TorchDispatchMode):
            def __torch_dispatch__(
                self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
            ) -> Any:
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                rec.add(func, args, kwargs, out)
                return out

        self.tracker = ModuleTracker()
        with self.tracker, Functions(), Dispatch():
            return fn()


GEMM_OPERANDS = {"mm": (0, 1), "bmm": (0, 1), "addmm": (1, 2), "baddbmm": (1, 2)}
"""Where each product's two operands sit among its arguments."""


def _gemm(name: str, args: tuple) -> tuple[int, int, int] | None:
    """(t, k, m) of a product A·B: A's rows (all its leading dimensions), its depth, B's columns."""
    if name not in GEMM_OPERANDS:
        return None  # a convolution, a fused attention kernel: no GEMM tiles to take
    i, j = GEMM_OPERANDS[name]
    a, b = args[i], args[j]
    return int(math.prod(a.shape[:-1])), int(a.shape[-1]), int(b.shape[-1])


def _unique(tensors: Any) -> tuple[Tensor, ...]:
    """Each view once: an operator reading x twice reads it once."""
    return tuple({(t.storage, t.view): t for t in tensors}.values())
