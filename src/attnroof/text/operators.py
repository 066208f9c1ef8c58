"""One operator or one question in words: unfused against fused at a shape, a linear layer and
its batching crossover, the intensity sweep, the exact crossover, the score-matrix footprint."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attnroof.analysis import Comparison, softmax_share
from attnroof.devices import Device
from attnroof.escaping import escaped
from attnroof.footprint import Footprint
from attnroof.roofline import Placement, Roof
from attnroof.solve import Crossover
from attnroof.text import render
from attnroof.text.render import table
from attnroof.units import duration

STAGE_HEADERS = ["stage", "FLOPs", "reads", "writes", "bytes"]


def comparison_text(title: str, cmp: Comparison, dev_line: str) -> str:
    u, f = cmp.unfused, cmp.fused
    lines = [
        title,
        dev_line,
        "",
        f"FLOPs {render.flops(cmp.flops)} (softmax {render.pct(softmax_share(u.cost))})",
        "",
        render.placement_table([("unfused", u.placement), ("fused", f.placement)], cmp.roof),
        "",
        f"traffic unfused/fused: {render.num(cmp.traffic_ratio)}×   speedup ceiling from fusion: {render.num(cmp.speedup_ceiling)}×",
        "",
        "unfused stages:",
        table(STAGE_HEADERS, render.stage_rows(u.cost), "lrllr"),
        "",
        "fused stages:",
        table(STAGE_HEADERS, render.stage_rows(f.cost), "lrllr"),
    ]
    return "\n".join(lines)


def chunk_crossover_text(crosses: Mapping[str, Crossover], past: int, q: int, tends: Any) -> str:
    """Where a chunk after ``past`` cached tokens turns compute-bound as it grows, and what its
    fused intensity tends to as the cache grows under a chunk of ``q``."""
    lines = []
    for label, c in crosses.items():
        if c.never or c.s_min is None:
            lines.append(f"{label}: no chunk after {past} cached tokens is compute-bound")
        else:
            lines.append(
                f"{label}: compute-bound from a chunk of q = {c.s_min} after {past} cached tokens "
                f"(threshold {render.exact(c.exact or '', 5)})"
            )
    lines.append(
        f"fused, {q} queries as the cache grows: intensity tends to {render.num(float(tends))} FLOP/byte "
        f"= {tends} (each cached K and V read once for all {q} queries of every head of the group)"
    )
    return "\n".join(lines)


def latent_text(title: str, cmp: Comparison, dev_line: str, crosses: Mapping[str, Crossover]) -> str:
    """Naive (decompressed K and V) against absorbed latent attention: the same attention, the
    up-projections run on the cache or folded into the query and output."""
    naive, absorbed = cmp.unfused, cmp.fused
    lines = [
        title,
        dev_line,
        "",
        render.placement_table([("naive", naive.placement), ("absorbed", absorbed.placement)], cmp.roof),
        "",
        f"traffic naive/absorbed: {render.num(cmp.traffic_ratio)}×   time bound naive/absorbed: "
        f"{render.num(cmp.speedup_ceiling)}×",
    ]
    for label, c in crosses.items():
        if c.never or c.s_min is None:
            lines.append(
                f"{label}: never compute-bound (intensity tends to {render.num(c.limit_intensity)} FLOP/byte)"
            )
        else:
            lines.append(
                f"{label}: compute-bound from s = {c.s_min} (threshold {render.exact(c.exact or '', 5)})"
            )
    lines += [
        "",
        "naive stages:",
        table(STAGE_HEADERS, render.stage_rows(naive.cost), "lrllr"),
        "",
        "absorbed stages:",
        table(STAGE_HEADERS, render.stage_rows(absorbed.cost), "lrllr"),
    ]
    return "\n".join(lines)


ALONE = (
    " (each head timed alone: with the cache counted, one head's operands can fit in it where a "
    "layer's many heads would not, so heads × these is a lower bound; --memory-levels 1 scales exactly)"
)
"""The sweep's caveat on a two-level roof."""


def linear_text(n: int, k: int, m: int, device: Device, roof: Roof, p: Placement, cross: Crossover) -> str:
    lines = [
        f"linear: {render.plural(n, 'token')} through a {k}×{m} weight",
        render.device_line(device, roof),
        "",
        render.placement_table([("linear", p)], roof),
        "",
    ]
    if cross.never or cross.s_min is None:
        lines.append(
            f"no token count reaches the ridge (intensity tends to {render.num(cross.limit_intensity)})"
        )
    else:
        lines.append(
            f"compute-bound from n = {render.plural(cross.s_min, 'token')} "
            f"(n ≥ {render.exact(cross.exact or '', 5)})"
        )
    return "\n".join(lines)


def sweep_text(d: int, causal: bool, device: Device, roof: Roof, rows: Sequence[Mapping[str, Any]]) -> str:
    """The C4 table: intensity, verdict and time of both variants at each s."""
    mask = " causal" if causal else ""
    body = [
        [
            r["s"],
            render.num(r["unfused"]["intensity"]),
            render.num(r["fused"]["intensity"]),
            r["unfused"]["verdict"],
            r["fused"]["verdict"],
            duration(r["unfused"]["time_s"]),
            duration(r["fused"]["time_s"]),
        ]
        for r in rows
    ]
    headers = ["s", "I unfused", "I fused", "unfused", "fused", "time unfused/head", "time fused/head"]
    return "\n".join(
        [
            f"attention{mask} sweep, d={d}: one head of one sequence, so times are per head"
            + (ALONE if roof.levels == 2 else ""),
            render.device_line(device, roof),
            "",
            table(headers, body, "rrrllrr"),
        ]
    )


def crossover_text(d: int, causal: bool, device: Device, roof: Roof, res: Mapping[str, Crossover]) -> str:
    """Each variant's intensity, the inequality it must meet, and where (or that never) it does."""
    mask = " causal" if causal else ""
    lines = [f"where attention{mask} (d={d}) reaches the ridge", render.device_line(device, roof)]
    for label, c in res.items():
        lines.append("")
        limit = render.exact(c.limit_exact) if c.limit_intensity is not None else "∞ (unbounded)"
        lines.append(f"{label}: I(s) = {render.expr(c.intensity_expr)}, limit as s → ∞: {limit}")
        lines.append(
            f"  I(s) ≥ {render.exact(c.ridge_exact)}  ⇔  {render.expr(c.inequality)}  ⇔  {render.exact_in(c.solution)}"
        )
        if c.never:
            lines.append(
                "  never: no positive s reaches the ridge; I stays below its supremum "
                f"{render.num(c.limit_intensity)} FLOP/byte"
            )
        else:
            lines.append(f"  compute-bound from s = {c.s_min} (threshold {render.exact(c.exact or '', 5)})")
    return "\n".join(lines)


def footprint_text(s: int, dtype: str, device: str, fp: Footprint) -> str:
    device = escaped(device)
    lines = [
        f"score matrix ({dtype}) at s={s}: {render.nbytes(fp.bytes_per_head)} per head",
        f"× batch {fp.batch} × heads {fp.heads} × layers {fp.layers} = {render.nbytes(fp.bytes)}",
    ]
    if fp.capacity_bytes is None:
        lines.append(f"{device} has no capacity in the catalog; pass --capacity to compare")
    else:
        verdict = "fits" if fp.fits else "does NOT fit"
        lines.append(
            f"{render.pct(fp.fraction_of_capacity)} of {device}'s {render.nbytes(fp.capacity_bytes)}: {verdict}"
        )
        lines.append(f"largest s whose scores fit: {fp.s_max_fits}")
    return "\n".join(lines)
