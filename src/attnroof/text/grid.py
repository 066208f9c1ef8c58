"""A batch × context grid in words: each cell's bound (tokens/s ≤ at decode, the step ≥ at
prefill), marked where the step is compute-bound or does not fit, and per context the batch where
the step turns compute-bound and the largest that fits."""

from __future__ import annotations

from typing import Any

from attnroof.escaping import escaped
from attnroof.model.grid import Grid, summary
from attnroof.text import render
from attnroof.text.model import Setting, architecture, past_positions_lines
from attnroof.text.render import table
from attnroof.units import duration

MAX_CELLS = (32, 12)
"""The largest grid (batches, contexts) printed cell by cell; a larger one prints its summary
(``--json`` has every cell)."""


def _cell(g: Grid, i: int, j: int, decode: bool) -> str:
    value = render.num(float(g.tokens_per_s[i, j])) if decode else duration(float(g.time_s[i, j]))
    marks = ("c" if g.memory_bound_share[i, j] < 0.5 else "") + (
        "✗" if g.fits is not None and not g.fits[i, j] else ""
    )
    return f"{value} {marks}".rstrip()


def grid_text(s: Setting, g: Grid) -> str:
    decode = s.phase == "decode"
    batches, contexts = [int(b) for b in g.batch[:, 0]], [int(c) for c in g.context[0]]
    cap = s.device.capacity_bytes
    lines = [
        f"{escaped(s.model.name)}: {architecture(s.model)}",
        render.device_line(s.device, s.roof),
        f"{s.phase}, {len(batches)} batches × {len(contexts)} contexts = {len(batches) * len(contexts):,} "
        f"steps; weights {s.wdt.name}, KV cache {s.kdt.name}, activations {s.dt.name}; "
        f"{'fused' if s.fused else 'unfused'} attention",
        *past_positions_lines(s.model, contexts),
        "",
    ]
    what = "tokens/s ≤" if decode else "step ≥ (time to first token)"
    fits = "" if cap is None else f", ✗ does not fit in {render.nbytes(cap)}"
    if len(batches) <= MAX_CELLS[0] and len(contexts) <= MAX_CELLS[1]:
        lines.append(f"{what} per batch (rows) and context (columns); c: compute-bound{fits}:")
        rows = [
            [f"{b:,}", *(_cell(g, i, j, decode) for j in range(len(contexts)))] for i, b in enumerate(batches)
        ]
        lines += [table(["batch", *(f"{c:,}" for c in contexts)], rows, "r" * (len(contexts) + 1)), ""]
    else:
        lines += [f"{len(batches) * len(contexts):,} cells: --json gives each ({what}); per context:", ""]
    lines.append(_summary_table(g, contexts, decode))
    return "\n".join(lines)


def _summary_table(g: Grid, contexts: list[int], decode: bool) -> str:
    sm: dict[str, Any] = summary(g)
    batches = [int(b) for b in g.batch[:, 0]]
    headers = ["context", "compute-bound from batch"]
    if "largest_fitting_batch" in sm:
        headers += ["largest batch that fits", "tokens/s ≤ there" if decode else "step ≥ there"]
    rows = []
    for j, c in enumerate(contexts):
        bound = sm["compute_bound_from_batch"][j]
        row = [f"{c:,}", "none in the grid" if bound is None else f"{bound:,}"]
        if "largest_fitting_batch" in sm:
            largest = sm["largest_fitting_batch"][j]
            if largest is None:
                row += ["none", "—"]
            else:
                i = batches.index(largest)
                there = g.tokens_per_s[i, j] if decode else g.time_s[i, j]
                row += [f"{largest:,}", render.num(float(there)) if decode else duration(float(there))]
        rows.append(row)
    return table(headers, rows)
