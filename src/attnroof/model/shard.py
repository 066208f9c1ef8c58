"""What one device of a parallel plan holds (:class:`Shard`), and one layer-table row cut for it
(:func:`shard_row`): the layer table's view of a plan. Plans, groups and links are
:mod:`attnroof.model.parallel`'s; how each operator's row is cut is its entry's
(:mod:`attnroof.operators`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from attnroof.errors import InputError
from attnroof.model.spec import ModelConfig
from attnroof.operators import ATTENTION, rule
from attnroof.row import REPLICATED, OpInstance


@dataclass(frozen=True, slots=True)
class Shard:
    """What one device holds: a TP slice of layers ``first`` to ``stop − 1``, 1/ep of the experts
    (each cut over ``etp`` devices; 0: over the TP degree, Megatron-LM's default); under context
    parallelism (``cp`` > 1) 1/cp of each sequence's tokens."""

    tp: int
    ep: int
    first: int
    stop: int
    sp: bool = False
    etp: int = 0
    imbalance: float = 1.0
    """The busiest device's routed tokens over the mean (expert parallelism's slowest device)."""
    more: tuple[tuple[int, int], ...] = ()
    """An interleaved schedule's further model chunks on this device: layer ranges (first, stop)
    after ``first``–``stop``, its first chunk."""
    cp: int = 1

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def pool(self) -> float:
        """Replicas' worth of tokens an expert group pools: etp · ep / tp (Megatron's expert grid
        ETP × EP × EDP folds over the TP × DP devices; each device dispatches its 1/tp of its
        replica's tokens). ep when etp = tp, as when expert parallelism is carved from DP."""
        e, t = self.expert_tp, self.tp
        return self.ep if e == t else e * self.ep / t

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        """Every layer range the device holds, its first chunk first."""
        return ((self.first, self.stop), *self.more)

    @property
    def layers(self) -> int:
        """How many layers the device holds."""
        return sum(stop - first for first, stop in self.ranges)


@functools.lru_cache(maxsize=65536)
def standing_for(model: ModelConfig, shard: Shard) -> Shard:
    """A shard that costs exactly as ``shard`` does, chosen so that equal ones meet in a cache:
    when every layer of the model is of one kind, any n layers cost alike wherever they sit, so
    one range of the device's n layers (its chunks together) at the model's start, at its end,
    or in between (from layer 1) stands for every device holding the embedding, the head or
    neither. Otherwise ``shard`` itself."""
    if len(model.layer_kinds()) != 1:
        return shard
    n, last = shard.layers, model.layers
    start = any(first == 0 for first, _ in shard.ranges)
    end = any(stop == last for _, stop in shard.ranges)
    if start and end and n != last:  # both ends in separate chunks: no one range holds them
        return shard
    first = 0 if start else last - n if end else 1
    return replace(shard, first=first, stop=first + n, more=())


def shard_row(row: OpInstance, shard: Shard) -> OpInstance:
    """One device's part of a layer-table row: its shape and parameters cut by ``shard.tp`` as its
    operator's entry cuts its split (:mod:`attnroof.operators`), experts cut by ``shard.etp`` and
    spread over ``shard.ep`` (the busiest device's routed rows ``shard.imbalance`` × the mean),
    element-wise passes on 1/t of the tokens under sequence parallelism, attention told that its
    keys span ``shard.cp`` devices' tokens (the step itself is the device's share of the
    context); so that the operator table costs exactly what the device runs."""
    entry = rule(row)
    if shard.cp > 1 and entry.kind == ATTENTION:
        if not entry.context_parallel:
            raise entry.lacks(f"rule for context parallelism (row {row.name!r} under --cp {shard.cp})")
        if row.shape.get("window") is not None:
            raise InputError(
                f"--cp {shard.cp}: the ring exchange of K/V does not run sliding-window attention "
                f"(row {row.name!r}, window {row.shape['window']:,}; TransformerEngine's p2p context "
                "parallelism refuses it)",
                param="--cp",
            )
    t = shard.expert_tp if entry.routed else shard.tp  # experts: cut over the expert-TP group
    shape, frac = entry.cut(row, t)  # frac: the share of the row's parameters kept
    if entry.routed and (shard.ep > 1 or t != shard.tp):
        shape["ep"], shape["pool"] = shard.ep, shard.pool
        frac /= shard.ep
    if shard.imbalance != 1 and (entry.routed or "routed" in row.shape):  # the busiest device
        shape["imbalance"] = shard.imbalance
    if shard.sp and entry.sequence_parallel and row.split == REPLICATED and row.per_layer:
        shape["sequence_shards"] = shard.tp
    if shard.cp > 1 and entry.kind == ATTENTION:
        shape["context_shards"] = shard.cp
    return replace(
        row,
        shape=shape,
        params=round(row.params * frac),
        params_read=round(row.params_read * frac),
        active_params=None if row.active_params is None else round(row.active_params * frac),
    )
