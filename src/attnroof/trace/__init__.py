"""Any PyTorch module on the roofline: ``trace`` runs it on meta tensors, records every ATen
operator (:mod:`attnroof.trace.capture`), costs each (:mod:`attnroof.trace.rules`), and groups
them into kernels unfused and fused (:mod:`attnroof.trace.kernels`).

>>> import torch                                                     # doctest: +SKIP
>>> t = trace(torch.nn.Linear(4096, 4096), (torch.empty(8, 4096),))  # doctest: +SKIP
>>> t.flops                                                          # doctest: +SKIP
268435456.0
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from attnroof.trace import rules
from attnroof.trace.capture import ATTENTION, Record, Recorder, _tensors, storage_of
from attnroof.trace.kernels import FUSED, UNFUSED, Kernel, attention_cost, fused, unfused

FORWARD, TRAIN = "forward", "train"
PHASES = (FORWARD, TRAIN)


@dataclass(frozen=True)
class Trace:
    """One run's records, and its kernels both ways."""

    records: tuple[Record, ...]
    kernels: Mapping[str, tuple[Kernel, ...]]
    weights_bytes: float
    phase: str = FORWARD
    uncosted: Mapping[str, int] = field(default_factory=dict)
    """Operators the trace cannot cost, by name, with how often each ran: left out of every total."""

    @property
    def flops(self) -> float:
        return sum(k.stage.flops for k in self.kernels[FUSED])

    def bytes(self, form: str) -> float:
        return sum(k.stage.bytes for k in self.kernels[form])


def trace(
    module: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    phase: str = FORWARD,
) -> Trace:
    """Run ``module(*args, **kwargs)`` on the meta device and record it; ``phase`` ``train`` runs
    the backward of its output too (its ``loss`` where it returns one, else the sum of its first
    tensor). A module runs in eval mode for ``forward`` (no dropout), in train mode for
    ``train``. A module's parameters and buffers are moved to the meta device first, and tensor
    arguments too: nothing is allocated or computed."""
    import torch

    if phase not in PHASES:
        raise ValueError(f"phase {phase!r}; known: {', '.join(PHASES)}")
    if isinstance(module, torch.nn.Module):
        module = module.to("meta")
        with contextlib.suppress(NotImplementedError):  # an exported program keeps its own mode
            module.train(phase == TRAIN)  # a forward is inference's: dropout off
    args = tuple(_meta(a) for a in args)
    kwargs = {k: _meta(v) for k, v in (kwargs or {}).items()}
    weights: set[int] = set()
    held = 0.0
    if isinstance(module, torch.nn.Module):
        for t in (*module.parameters(), *module.buffers()):
            weights.add(storage_of(t))
            held += t.numel() * t.element_size()
    rec = Recorder(weights)

    def run() -> Any:
        out = module(*args, **kwargs)
        if phase == TRAIN:
            _loss(out).backward()
        return out

    with torch.device("meta"):
        out = rec.running(run)
    returned = {storage_of(t) for t in _tensors(out)}
    if phase == TRAIN and isinstance(module, torch.nn.Module):
        returned |= {storage_of(p.grad) for p in module.parameters() if p.grad is not None}
    records = tuple(rec.records)
    uncosted: dict[str, int] = {}
    for r in records:
        if r.kind == rules.UNCOSTED:
            uncosted[r.name] = uncosted.get(r.name, 0) + 1
    kernels = {UNFUSED: tuple(unfused(records)), FUSED: tuple(fused(records, returned))}
    return Trace(records, kernels, held, phase, uncosted)


def _meta(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.device.type != "meta":
        return value.to("meta")
    return value


def _loss(out: Any) -> Any:
    """What the backward starts from: a ``loss`` the output carries, else its first tensor summed."""
    loss = getattr(out, "loss", None)
    if loss is not None:
        return loss
    first = next(_tensors(out.to_tuple() if hasattr(out, "to_tuple") else out), None)
    if first is None:
        raise ValueError("the module returned no tensor to run a backward from")
    return first.float().sum()


__all__ = ["ATTENTION", "FORWARD", "FUSED", "PHASES", "TRAIN", "UNFUSED", "Trace", "attention_cost", "trace"]
