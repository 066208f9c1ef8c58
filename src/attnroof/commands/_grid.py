"""``model --sweep-context`` (with ``--sweep-batch`` or ``--batch``): one device's prefill or decode
step at every batch × context, costed in one pass on arrays (:mod:`attnroof.model.grid`), refused
before it starts where its arrays would not fit in the memory free."""

from __future__ import annotations

import argparse
from typing import Any

from attnroof.commands._common import emit_json, require
from attnroof.commands._parallel import wants_parallel
from attnroof.model.train_options import TRAIN


def check_grid(args: argparse.Namespace) -> None:
    """The grid is one device's prefill or decode step at every batch × context."""
    require(
        args.context is None, "--context and --sweep-context: give one (the grid's contexts: --sweep-context)"
    )
    other = next(
        (
            flag
            for flag, given in (
                ("--phase train", args.phase == TRAIN),
                ("--calibration", args.calibration is not None),
                ("the parallel flags", wants_parallel(args)),
            )
            if given
        ),
        None,
    )
    require(other is None, f"--sweep-context costs one device's prefill or decode grid: not with {other}")


def run_grid(job: Any) -> int:
    """The grid of ``job`` (the model command's job: model, device, dtypes, flags), as a table or JSON."""
    from attnroof.limits import require_memory
    from attnroof.model.grid import grid, grid_bytes, grid_json

    a = job.args
    batches = a.sweep_batch or [a.batch]
    points = len(batches) * len(a.sweep_context)
    need = grid_bytes(job.model, a.phase, points, job.prec, json=a.json, **job.options)
    require_memory(
        f"a grid of {len(batches):,} batches × {len(a.sweep_context):,} contexts ({points:,} points)",
        need,
        "fewer --sweep-batch or --sweep-context values",
    )
    g = grid(
        job.model, a.phase, batches, a.sweep_context, job.roof, job.prec,
        capacity_bytes=job.device.capacity_bytes, fused=job.fused, **job.options,
    )  # fmt: skip
    if a.json:
        emit_json({**job.json_head(), **grid_json(g)})
        return 0
    from attnroof.text.grid import grid_text

    print(grid_text(job.setting, g))
    return 0
