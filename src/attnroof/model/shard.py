"""What one device of a parallel plan holds (:class:`Shard`), and one layer-table row cut for it
(:func:`shard_row`): the layer table's view of a plan. Plans, groups and links are
:mod:`attnroof.model.parallel`'s; how each operator's row is cut is its entry's
(:mod:`attnroof.operators`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from attnroof.errors import InputError
from attnroof.operators import ATTENTION, rule
from attnroof.row import REPLICATED, OpInstance


@dataclass(frozen=True, slots=True)
class Shard:
    """What one device holds: a TP slice of layers ``first`` to ``stop − 1``, 1/ep of the experts;
    under context parallelism (``cp`` > 1) 1/cp of each sequence's tokens."""

    tp: int
    ep: int
    first: int
    stop: int
    sp: bool = False
    cp: int = 1


def shard_row(row: OpInstance, shard: Shard) -> OpInstance:
    """One device's part of a layer-table row: its shape and parameters cut by ``shard.tp`` as its
    operator's entry cuts its split (:mod:`attnroof.operators`), experts spread over ``shard.ep``,
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
    shape, frac = entry.cut(row, shard.tp)  # frac: the share of the row's parameters kept
    if entry.routed and shard.ep > 1:
        shape["ep"] = shard.ep
        frac /= shard.ep
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
